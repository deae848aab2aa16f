"""First ``ptxgen.gemm`` call in a fresh process, with an empty and with a warm kernel cache.

Usage (repository root, on a GPU machine)::

    PYTHONPATH=$PWD python3 bench/first_call.py [--config NAME] [--shape 4096x4096x4096] [--warm-runs 5]
                                                [--cold-runs 3] [--no-cache-runs N] [--driver-cache] [--profile N]
                                                [--stages N] [--steps N] [--pause S] [--no-bytecode-prefix]
                                                [--json OUT.json]

Each measurement is a new Python process (``subprocess``) that imports and
initialises torch, allocates A, B on the GPU and synchronizes (not timed), then
times ``import ptxgen`` + the first ``ptxgen.gemm(a, b)`` + synchronize (and,
for comparison, a second call); ``built`` says whether the child imported ``ptxgen.build`` (it built a kernel).  The cache directory is a fresh temporary
``PTXGEN_CACHE_DIR``:

* ``first_process``: the machine's first child, reported apart (one-time costs of the machine: files read into
  the page cache, the driver's JIT compiler loaded);
* ``cold``: empty cache, ``--cold-runs`` times, each with a new cache: the image shipped in ``ptxgen/prebuilt``
  when its manifest is fresh, else plan, IR, emit and compile; then stored;
* ``no_cache``: ``PTXGEN_NO_CACHE=1`` (build and compile, nothing stored or taken from the package), alternating
  with ``cold``, ``--no-cache-runs`` times (default: as many as ``cold``);
* ``warm``: a filled cache, ``--warm-runs`` times (load the stored cubin);
* ``warm_stages``: ``--stages`` more warm children that import ``cuda.bindings.driver`` before the timed region
  (``bindings_import_ms``): their total is what ptxgen itself adds when the bindings are already imported;
* ``warm_steps``: ``--steps`` more warm children whose first call runs step by step (:data:`CHILD_STEPS`: the
  bindings' import, ``import ptxgen``, context and device info, the choice, the kernel loaded, the gemm, the
  synchronize, then the cache read and the module load once more), wall and process CPU time after each.

Every child also records torch's version and whether importing torch had imported ``cuda.bindings.driver`` and
``cuda.pathfinder`` (``preloaded``; then a first call does not pay for them), and what the kernel saw of its timed
region: the process's CPU time (``process_cpu_ms``: user and system, every thread), its voluntary and involuntary
context switches, minor page faults, and the CPU it ran on at the region's start and end (``/proc/self/stat``): a
child slower by its CPU time ran slower, one slower by its wall time alone waited.  ``--cold-runs 0`` measures warm
calls only.

Every child runs with ``CUDA_CACHE_DISABLE=1`` unless ``--driver-cache``: the CUDA driver keeps its own JIT
cache of PTX it compiled (``~/.nv/ComputeCache``), so without it every child after the first finds the PTX
already compiled, and ``no_cache`` (measured after ``cold``) looked cheaper than ``cold`` by the driver's JIT
time (H100: 575 vs 1127 ms; docs/performance.md, "First call").

Bytecode as an installed package has it: ``pip install`` byte-compiles every module it installs, and a module
without bytecode is compiled from source in every process that imports it (with bytecode writes off, as on the
device: about 260 ms of a first call for a never-compiled ptxgen source tree, and the 9 Python modules of
``cuda.bindings`` and ``cuda.pathfinder`` that the device image holds without bytecode; docs/performance.md, "First
call").  Before the first child, the packages a first call imports (:data:`BYTECODE_PACKAGES`: ptxgen, emitters,
``cuda``'s, the build's pydantic, PyYAML, Jinja2, filelock) are compiled (``compileall``) into a fresh directory of
the run, and each child points ``sys.pycache_prefix`` (what ``PYTHONPYCACHEPREFIX`` sets) at it once torch is up,
before the timed region, and may write it: every module the timed region imports then has bytecode, the standard
library's modules that torch had not imported compiled once by the machine's first process.  Not the variable
itself: set at start it would hold torch's bytecode too, which torch's installation already has beside its
sources.  ``--no-bytecode-prefix`` takes the environment as it is (ptxgen and emitters compiled beside their
sources, as before).
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

#: the packages whose modules the timed region may import, compiled into the run's bytecode directory
BYTECODE_PACKAGES = ("ptxgen", "emitters", "cuda", "pydantic", "pydantic_core", "annotated_types", "typing_inspection",
                     "yaml", "jinja2", "markupsafe", "filelock", "platformdirs")
#: the child reads its bytecode directory here (set after torch's import; see the module docstring)
PYCACHE_VARIABLE = "FIRST_CALL_PYCACHE_PREFIX"
#: seconds every child waits before it starts (``--pause``): whether a child's speed follows the time since the
#: previous one exited (docs/performance.md, "Where a warm first call's time goes on the device")
pause_s = 0.0

#: every child's untimed start: torch up, A and B on the GPU, the bytecode directory
CHILD_SETUP = r"""
import json, os, sys, time
import torch
m, n, k = map(int, sys.argv[1].split("x"))
config = sys.argv[2] if sys.argv[2] != "auto" else None
torch.cuda.init()
a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
torch.cuda.synchronize()
if os.environ.get("FIRST_CALL_PYCACHE_PREFIX"):  # bytecode of what the timed region imports (module docstring)
    sys.pycache_prefix = os.environ["FIRST_CALL_PYCACHE_PREFIX"]
    sys.dont_write_bytecode = False
preloaded = {name: name in sys.modules for name in ("cuda.bindings.driver", "cuda.pathfinder")}  # by torch
"""

#: a warm child's timed first call (after :data:`CHILD_SETUP`); prints one JSON line
CHILD_TIMED = r"""
stages = {}
import resource
def cpu_of_process():  # the CPU this process last ran on (/proc/PID/stat field 39), -1 where unreadable
    try:
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1
if len(sys.argv) > 4:  # --stages: cuda.bindings.driver imported (timed) before the timed region
    s0 = time.perf_counter()
    import cuda.bindings.driver
    stages["bindings_import_ms"] = (time.perf_counter() - s0) * 1e3
cpu0, u0 = cpu_of_process(), resource.getrusage(resource.RUSAGE_SELF)
c0 = time.process_time()
t0 = time.perf_counter()
import ptxgen
t1 = time.perf_counter()
if len(sys.argv) > 3 and int(sys.argv[3]):  # --profile: cProfile the first call, top entries by cumulative time
    import cProfile, pstats
    prof = cProfile.Profile()
    out = prof.runcall(ptxgen.gemm, a, b, config=config)
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(int(sys.argv[3]))
else:
    out = ptxgen.gemm(a, b, config=config)
t2 = time.perf_counter()
torch.cuda.synchronize()
t3 = time.perf_counter()
c3, u3, cpu3 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF), cpu_of_process()
ptxgen.gemm(a, b, out=out, config=config)
torch.cuda.synchronize()
t4 = time.perf_counter()
ref = a.float() @ b.float().T
err = ((out.float() - ref).norm() / ref.norm()).item()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "first_call_ms": (t2 - t1) * 1e3, "first_call_synced_ms": (t3 - t1) * 1e3,
                  "total_ms": (t3 - t0) * 1e3, "second_call_synced_ms": (t4 - t3) * 1e3, "rel_err": err,
                  "process_cpu_ms": (c3 - c0) * 1e3, "cpus": [cpu0, cpu3],
                  "context_switches": [u3.ru_nvcsw - u0.ru_nvcsw, u3.ru_nivcsw - u0.ru_nivcsw],
                  "minor_faults": u3.ru_minflt - u0.ru_minflt,
                  "built": "ptxgen.build" in sys.modules, "torch": torch.__version__, "preloaded": preloaded,
                  **stages}))
"""


#: a warm child whose first call is taken apart (``--steps``; after :data:`CHILD_SETUP`): ``perf_counter`` and
#: ``process_time`` after each step of what ``ptxgen.gemm`` does on a warm hit (the bindings imported first, then
#: ``ptxgen.runtime.api.loaded_kernel``'s parts); after the synchronize, the cache read and the module load again
CHILD_STEPS = r"""
marks = [("start", time.perf_counter(), time.process_time())]
def mark(label):
    marks.append((label, time.perf_counter(), time.process_time()))
import cuda.bindings.driver
mark("import cuda.bindings.driver")
import ptxgen
mark("import ptxgen")
from ptxgen import knobs
from ptxgen.runtime import api, driver, loader
driver.ensure_context(0)
info = driver.device_info(0)
mark("runtime modules, cuInit, primary context, device info")
name = api.resolve_config(config, m, n, k, 0)
mark("config chosen")
loaded = api.loaded_kernel(name, 0)
mark("kernel loaded (cache read, cuModuleLoadData, launcher)")
out = ptxgen.gemm(a, b, config=config)
mark("gemm (signature, tensor maps, cuLaunchKernelEx)")
torch.cuda.synchronize()
mark("synchronize")
from ptxgen.runtime.module import Kernel, compiler
settings = knobs.read()
image = loader.load_image(name, driver.driver_version(), info.capability, compiler(settings.jit), settings,
                          prebuilt=api._shipped_image)
mark("again: cache read (loader.load_image)")
Kernel.from_cubin(image.cubin, image.spec, 0)
mark("again: cuModuleLoadData, function attributes")
steps = [(label, (t - t0) * 1e3, (c - c0) * 1e3) for (_, t0, c0), (label, t, c) in zip(marks, marks[1:])]
print(json.dumps({"steps": steps, "config": name, "torch": torch.__version__, "preloaded": preloaded}))
"""

CHILD = CHILD_SETUP + CHILD_TIMED


def run_steps(shape: str, config: str, env: dict[str, str]) -> dict:
    """One fresh warm process taken apart (:data:`CHILD_STEPS`): its JSON line, ``steps`` as ``[label, wall ms,
    process CPU ms]``."""
    time.sleep(pause_s)
    proc = subprocess.run([sys.executable, "-c", CHILD_SETUP + CHILD_STEPS, shape, config],
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode:  # a diagnostic: the run's other measurements stand without it
        print(f"steps child failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        return {"steps": [], "failed": proc.returncode}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_child(shape: str, config: str, env: dict[str, str], profile: int = 0, stages: bool = False) -> dict:
    """One fresh process; its JSON line (with ``profile`` > 0, its cProfile top entries go to our stderr; with
    ``stages``, ``cuda.bindings.driver`` is imported and timed before the timed region: ``bindings_import_ms``)."""
    extra = [str(profile), "stages"] if stages else [str(profile)] if profile else []
    time.sleep(pause_s)
    proc = subprocess.run([sys.executable, "-c", CHILD, shape, config, *extra],
                          env=env, capture_output=True, text=True, timeout=300)
    if profile:
        print(proc.stderr, file=sys.stderr)
    if proc.returncode:
        raise SystemExit(f"child failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"child: total {result['total_ms']:.1f} ms", file=sys.stderr, flush=True)  # progress of a long run
    return result


def diagnostics(r: dict) -> str:
    """A child's timed region as the kernel saw it: process CPU time (user + system, every thread), voluntary and
    involuntary context switches, minor page faults, the CPU it ran on at the region's start and end."""
    if "process_cpu_ms" not in r:
        return ""
    (vol, invol), (c0, c1) = r["context_switches"], r["cpus"]
    return (f"\n  {'':<28} process CPU {r['process_cpu_ms']:6.1f} ms, switches {vol}+{invol} involuntary, "
            f"minor faults {r['minor_faults']}, CPU {c0} -> {c1}")


def fill_bytecode(prefix: str | None) -> int:
    """Byte-compile :data:`BYTECODE_PACKAGES` (those installed) into ``prefix`` (None: ptxgen and emitters beside
    their sources); returns how many package folders were compiled."""
    folders = []
    for name in BYTECODE_PACKAGES if prefix else ("ptxgen", "emitters"):
        spec = importlib.util.find_spec(name)  # the package's folders, without importing it (cuda: a namespace)
        folders += list(spec.submodule_search_locations or ()) if spec is not None else []
    saved = sys.pycache_prefix
    sys.pycache_prefix = prefix or saved
    try:
        for folder in folders:
            compileall.compile_dir(folder, quiet=1, workers=0)
    finally:
        sys.pycache_prefix = saved
    return len(folders)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="auto", help="config name, or auto (config=None; default)")
    ap.add_argument("--shape", default="4096x4096x4096")
    ap.add_argument("--warm-runs", type=int, default=5)
    ap.add_argument("--cold-runs", type=int, default=3, help="cold and no-cache children, alternating")
    ap.add_argument("--no-cache-runs", type=int, default=None, metavar="N",
                    help="no-cache children among the cold ones (default: --cold-runs)")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--driver-cache", action="store_true",
                    help="leave the CUDA driver's own JIT cache on (default: CUDA_CACHE_DISABLE=1 in every child)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also profile one cold and one warm first call (cProfile, top N by cumulative time)")
    ap.add_argument("--stages", type=int, default=0, metavar="N",
                    help="N more warm children that import cuda.bindings.driver (timed: bindings_import_ms) before "
                         "the timed region, so that their total is ptxgen's own share")
    ap.add_argument("--steps", type=int, default=0, metavar="N",
                    help="N more warm children whose first call is timed step by step (the bindings' import, "
                         "import ptxgen, context, choice, kernel load, gemm, synchronize)")
    ap.add_argument("--pause", type=float, default=0.0, metavar="S",
                    help="seconds to wait before every child (default 0: each starts when the previous one exited)")
    ap.add_argument("--no-bytecode-prefix", action="store_true",
                    help="take the environment's bytecode as it is (ptxgen and emitters compiled beside their sources) "
                         "instead of compiling every package a first call imports into a directory of the run")
    args = ap.parse_args()
    global pause_s
    pause_s = args.pause

    pycache_dir = None if args.no_bytecode_prefix else tempfile.TemporaryDirectory(prefix="ptxgen-first-call-pycache-")
    pycache = pycache_dir.name if pycache_dir else None
    folders = fill_bytecode(pycache)
    env = {**os.environ}
    if pycache:
        env[PYCACHE_VARIABLE] = pycache
    env.pop("PTXGEN_NO_CACHE", None)
    if not args.driver_cache:
        env["CUDA_CACHE_DISABLE"] = "1"
    # the machine's first process pays one-time costs (files into the page cache, the driver's JIT compiler
    # library loaded): measured apart, then cold and no-cache alternate with a fresh empty cache each time
    with tempfile.TemporaryDirectory(prefix="ptxgen-first-call-") as cache:
        first = run_child(args.shape, args.config, {**env, "PTXGEN_CACHE_DIR": cache})
    cold, no_cache = [], []
    no_cache_runs = args.cold_runs if args.no_cache_runs is None else args.no_cache_runs
    for i in range(max(args.cold_runs, no_cache_runs)):
        with tempfile.TemporaryDirectory(prefix="ptxgen-first-call-") as cache:
            if i < args.cold_runs:
                cold.append(run_child(args.shape, args.config, {**env, "PTXGEN_CACHE_DIR": cache}))
            if i < no_cache_runs:
                no_cache.append(run_child(args.shape, args.config, {**env, "PTXGEN_CACHE_DIR": cache, "PTXGEN_NO_CACHE": "1"}))
    with tempfile.TemporaryDirectory(prefix="ptxgen-first-call-") as cache:
        env["PTXGEN_CACHE_DIR"] = cache
        run_child(args.shape, args.config, env)  # fills the cache
        warm = [run_child(args.shape, args.config, env) for _ in range(args.warm_runs)]
        staged = [run_child(args.shape, args.config, env, stages=True) for _ in range(args.stages)]
        steps = [r for r in (run_steps(args.shape, args.config, env) for _ in range(args.steps)) if r["steps"]]
        if args.profile:
            print("==== profile: warm first call", file=sys.stderr)
            run_child(args.shape, args.config, env, args.profile)
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="ptxgen-first-call-") as cache:
            print("==== profile: cold first call", file=sys.stderr)
            run_child(args.shape, args.config, {**env, "PTXGEN_CACHE_DIR": cache}, args.profile)
    median = lambda runs: statistics.median(r["total_ms"] for r in runs) if runs else float("nan")  # noqa: E731
    bytecode = (f"compiled into a directory of the run ({folders} package folders), sys.pycache_prefix in every child"
                if pycache else "as the environment has it; ptxgen and emitters compiled beside their sources")
    doc = {"shape": args.shape, "config": args.config, "driver_jit_cache": args.driver_cache, "bytecode": bytecode,
           "pause_s": pause_s,
           "first_process": first, "cold": cold, "warm": warm, "no_cache": no_cache, "warm_stages": staged,
           "warm_steps": steps,
           "cold_median_total_ms": median(cold), "warm_median_total_ms": median(warm),
           "no_cache_median_total_ms": median(no_cache)}
    print(f"first call, {args.shape}, config {args.config} (import ptxgen + gemm + synchronize; torch already up)")
    print(f"  bytecode: {bytecode}")
    rows = [("machine's first process", first), *((f"cold #{i + 1}", r) for i, r in enumerate(cold)),
            *((f"no cache #{i + 1}", r) for i, r in enumerate(no_cache)), *((f"warm #{i + 1}", w) for i, w in enumerate(warm)),
            *((f"warm, bindings apart #{i + 1}", w) for i, w in enumerate(staged))]
    for label, r in rows:
        bindings = f"cuda.bindings.driver {r['bindings_import_ms']:5.1f} ms before; " if "bindings_import_ms" in r else ""
        print(f"  {label:<28} total {r['total_ms']:8.1f} ms  ({bindings}import {r['import_ms']:6.1f}, first call "
              f"{r['first_call_synced_ms']:8.1f}; second call {r['second_call_synced_ms']:6.2f} ms; "
              f"rel err {r['rel_err']:.1e}{'; built' if r.get('built') else ''}){diagnostics(r)}")
    print(f"  torch {first['torch']}; imported by torch before ptxgen: "
          f"{', '.join(m for m, v in first['preloaded'].items() if v) or 'neither cuda.bindings.driver nor cuda.pathfinder'}")
    print(f"  medians: cold {doc['cold_median_total_ms']:.1f} ms, PTXGEN_NO_CACHE=1 {doc['no_cache_median_total_ms']:.1f} ms, "
          f"warm {doc['warm_median_total_ms']:.1f} ms")
    if steps:
        print(f"  warm first call by step ({len(steps)} children; ms wall / process CPU, median, min-max of wall):")
        for i, (label, _, _) in enumerate(steps[0]["steps"]):
            wall, cpu = [s["steps"][i][1] for s in steps], [s["steps"][i][2] for s in steps]
            print(f"    {label:<56} {statistics.median(wall):7.2f} / {statistics.median(cpu):7.2f}  "
                  f"({min(wall):.2f}-{max(wall):.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    if pycache_dir:
        pycache_dir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
