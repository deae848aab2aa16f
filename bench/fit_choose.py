"""Fit the GEMM chooser's cost-model constants on measured times, and report the chooser's regret (no GPU).

Input: survey files written by ``bench/survey.py --shipped --json F`` (every shipped candidate timed on every shape of
a suite half); each option takes several, a shape's times coming from the last file that timed it (:func:`measured`).
``--fit F ...`` fits the constants of :class:`ptxgen.runtime.choose.DeviceModel` on the shapes of ``F``
(only ever the tune half): Nelder-Mead within physical bounds (:data:`BOUNDS`), restarted from its result once, on the logarithms of one tile factor
per unsplit candidate the surveys time (``DeviceModel.tile_factors``; a last-wave candidate takes its base's, another
split-K candidate 1: :func:`with_base_factors`) and of ``l2_tbps``, ``hbm_tbps``,
``store_tbps``, ``one_wg_efficiency``, ``ragged_load_factor`` and ``dram_latency_us``, ``overlap``, minimising the mean over shapes
of a soft regret (:func:`loss`: each candidate's ``log(t / t[best])`` weighted by a softmax of its predicted time,
the regret of the model's pick in the limit) plus a tenth of the mean squared error of the predicted log time
relative to the shape's mean.  ``--eval F`` reports, for the
chooser as shipped (tables first, then the cost model; ``--model-only`` skips the tables), each shape's pick, its
regret (chosen config time / best shipped config time) and the median and worst regret; after a fit the cost
model is the fitted one.

``--fit-split F ...`` fits only the split-K term (``partial_tbps`` and the tile factors of the split-K candidates),
holding every other constant of the shipped model, on the shapes of the survey files (tune-half shapes only) that
timed the split-K configs beside the unsplit ones.  ``--fit-pad F ...`` fits only the terms of rows past M and of the
shared partial traffic (:data:`PAD_FITTED`: ``pad_row_cost``, ``partial_tbps``), every other constant and tile factor
held (shipped: on the tune survey, then the two split-K tune surveys, docs/performance.md, "Chooser padding terms").
``--fit-lastwave F ...`` fits only ``whole_tile_fixup_us`` (the fixup a whole tile of a split-K-of-the-last-wave config
passes predicated off, per split), every other constant and tile factor held: it prints the estimate of each shape that
isolates the whole tiles (:func:`whole_tile_isolates`), then Nelder-Mead on the soft loss from their median, and the
model-only regret without the term, at the isolated value, at the fit and as shipped (shipped: the fit on the last-wave
tune survey, docs/performance.md, "Split-K of the last wave").
``--fit-partial F ...`` fits ``partial_tbps`` and ``whole_tile_fixup_us`` jointly (:data:`PARTIAL_FITTED`), every other
constant and tile factor held, from their shipped values; it prints the soft loss and model-only regret of the shipped
and fitted constants, the shapes whose pick moved or is above 1.02, and the regret of each split-K shape's pick when
it is left out of the fit (:func:`leave_one_out`); a following ``--eval`` uses the fitted constants
(docs/performance.md, "Joint refit of the split-K terms").
``--refit TUNE SK_A SK_B LASTWAVE`` runs that whole method from scratch (:func:`refit_all`: ``--fit`` on ``TUNE``,
``--fit-pad`` on it and the split-K tune surveys, ``--fit-lastwave``, ``--fit-partial`` on all four) with the optional
main-loop terms named by ``--term`` (:data:`TERMS`: ``smem``, the shared-memory bandwidth; ``latency``, the stage
ring's latency; off in the shipped model) fitted in its ``--fit`` step; ``--start NAME=VALUE`` and ``--warm F`` (a
``--model-json`` model) choose its start, ``--held`` takes the ``--warm`` model as fitted; it prints the soft loss and
model-only regret of the shipped and refit models over the four surveys' shapes, and with ``--loo`` the regret of each
shape's pick when it is left out of the fit (:func:`leave_one_out_all`; docs/performance.md, "Main-loop terms:
shared-memory bandwidth and stage latency").
``--fit-main-loop F ...`` fits the main-loop factor of each split-K-of-the-last-wave candidate
(``DeviceModel.main_loop_factors``: its k-loop against its base config's, bounds :data:`MAIN_LOOP_BOUNDS`) jointly with
``partial_tbps`` and ``whole_tile_fixup_us``, every other constant and tile factor held: it prints the factor each
K-sweep in the files gives alone (:func:`k_sweep_estimates`: a last-wave candidate and its base timed at several K of
one M and N), the fit, the model-only regret before and after on its files and on each ``--check`` group of files
(scored, not fitted on), and with ``--loo`` the regret of each shape that timed a last-wave candidate when it is left
out of the fit (shipped: the K-sweep and the off-suite fixup probes, then the four tune surveys; docs/performance.md,
"The pair's last-wave k-loop"); with ``--lastwave-partial`` it fits the last-wave configs' own partial bandwidth
(``DeviceModel.lastwave_partial_tbps``, :data:`LASTWAVE_PARTIAL_FITTED`) in place of ``partial_tbps``, which the plain
split-K configs keep (docs/performance.md, "A partial bandwidth of the last-wave configs' own").
``--fit-ring F ... --ring-pairs P ...`` fits the stage ring (:func:`fit_ring`): ``stage_latency_us`` and ``pad_row_cost``
isolated from the surveys ``P`` that timed a stage variant (:data:`STAGE_VARIANTS`: a bench config that differs from a
shipped one in ``pipeline.stages`` alone) beside its base at M <= :data:`RING_MAX_M`, then the unsplit tile factors
refit on the shapes of ``F`` with those held; it prints the variants' ratio error and the model-only regret of the
shipped, isolated and fitted models, the shapes whose pick moved, and the model-only regret before and after on each
``--check`` group of files (docs/performance.md, "The stage ring at small M"; not shipped).
``--fit-factors F ... --join J ... --factor NAME ...`` fits the tile factors of the configs ``NAME`` alone
(:func:`fit_tile_factors`: the soft loss on a grid of 0.01, one config at a time), every other constant and factor
held, on the shapes of ``F`` (tune surveys) with the times of ``J`` (surveys of the new configs on the same shapes)
joined to their rows (:func:`joined`; ``--join-scaled``: scaled into each row's window by the configs both timed); it
prints the soft loss and model-only regret before and after.
``--fit-device F ... [--join J ... --join-scaled] [--check C ...]`` fits one device's own model (:func:`fit_device`:
:data:`FITTED` and the unsplit tile factors from the H100 model, the HBM bound of :data:`DEVICE_HBM_BOUNDS`) on that
device's surveys; it prints the regret of the H100 model and of the fit on them and on each ``--check`` file, and the
fitted constants (the shipped H200 model: ``--fit-device survey_h200_tune.json survey_h200_fresh_m256.json --join
survey_h200_tune_256x160.json --join-scaled``; docs/performance.md, "The H200's own cost model").
``--table F --table-of T ... [--join J ... --join-scaled]`` writes the tuned table (``choose.table_doc``: per shape the
fastest candidate and every candidate's time) of the shapes of ``T`` with the configs of ``J`` joined, without a fit
(the shipped H200 table: ``--table-of survey_h200_tune.json --join survey_h200_tune_256x160.json
survey_h200_tune_sk64.json --join-scaled``).
``--eval F ...`` (repeatable: one evaluation per option) evaluates the chooser on the shapes of its files; a decision
no file timed is listed as unmeasured.

Usage: PYTHONPATH=$PWD python3 bench/fit_choose.py [--fit survey_tune.json ...] [--fit-split survey_tune_sk.json ...]
       [--fit-pad survey_tune.json survey_tune_sk.json ...] [--fit-lastwave survey_tune_lw.json ...]
       [--fit-partial survey_tune.json survey_tune_sk.json survey_tune_lw.json ...]
       [--fit-main-loop probes.json ... survey_tune.json ... [--check F ...] [--loo] [--lastwave-partial]]
       [--fit-ring survey_tune.json ... --ring-pairs survey_stage_variants.json ... [--check F ...]]
       [--refit tune.json tune_sk_a.json tune_sk_b.json tune_lw.json [--term smem] [--term latency] [--loo]
        [--start NAME=VALUE] [--warm model.json [--held]] [--model-json model.json]]
       [--fit-factors survey_tune.json ... --join survey_new_tune.json ... [--join-scaled] --factor NAME ...]
       [--fit-device survey_tune.json ... [--join J ... --join-scaled] [--check C ...]]
       [--eval survey_report.json ...] [--model-only] [--json F]
       [--table F [--table-of survey_tune.json ... [--join J ... --join-scaled]]]
"""
import argparse
import json
import math
import statistics
from pathlib import Path

from ptxgen.runtime import choose

FITTED = ("l2_tbps", "hbm_tbps", "store_tbps", "one_wg_efficiency", "ragged_load_factor", "dram_latency_us", "overlap")
#: the physical range each fitted constant is held in (a fit free of them drifts to values no device has, e.g. a one-
#: warpgroup tile faster than the tensor-core peak, that rank the fitted shapes well and others badly)
BOUNDS = {"l2_tbps": (5.0, 30.0), "hbm_tbps": (2.5, 4.0), "store_tbps": (0.5, 5.0), "one_wg_efficiency": (0.4, 1.0),
          "ragged_load_factor": (1.0, 4.0), "dram_latency_us": (0.5, 5.0), "overlap": (1.0, 20.0)}
TILE_FACTOR_BOUNDS = (0.8, 1.25)
#: ``--fit-device``: the HBM bound of a device whose HBM is faster than an H100's (H200: HBM3e, 4.8 TB/s nominal)
DEVICE_HBM_BOUNDS = {"H200": (2.5, 5.5)}
SMS = 132


#: surveys timed before the shipped split-K fixup (last arriver reduces): their split-K sides time the earlier
#: protocol (the last split waited for the others) and are left out; the split-K surveys re-timed every candidate,
#: the shipped split-K configs included, on the small-M shapes of both halves
EARLIER_SPLIT_K = ("configs_gemm_h100_tune.json", "configs_gemm_h100_report.json")


def measured(paths: list[str], names: set[str],
             split: set[str] = frozenset()) -> list[tuple[tuple[int, int, int], dict[str, float]]]:
    """``[((m, n, k), {config: ms})]`` of the shipped candidates (``names``) timed in survey files, in the first
    file's shape order; a shape timed by several files takes the last file's row (each survey times every candidate
    it has on a shape), and a survey of :data:`EARLIER_SPLIT_K` gives no time to a split-K config (``split``)."""
    rows: dict[tuple[int, int, int], dict[str, float]] = {}
    for path in paths:
        drop = split if Path(path).name in EARLIER_SPLIT_K else frozenset()
        for r in json.load(open(path))["rows"]:
            rows[(r["m"], r["n"], r["k"])] = {s: v["ms"] for s, v in r["sides"].items() if s in names and s not in drop}
    return list(rows.items())


def model_pick(model: choose.DeviceModel, cands, mnk, times: dict[str, float]) -> str:
    timed = tuple(c for c in cands if c.name in times)
    return choose.rank(timed, *mnk, SMS, choose.DEFAULT_SM90, model)[0][1]


def loss(model: choose.DeviceModel, cands, rows, tau: float = 0.03) -> float:
    """Mean over shapes of the soft regret (each candidate's log regret weighted by the softmax of its negative
    predicted log time over ``tau``: the hard pick's regret as ``tau`` -> 0, smooth in the constants) plus a tenth
    of the mean squared error of the predicted log times about the shape's mean."""
    regret, err = [], []
    for mnk, times in rows:
        best = min(times.values())
        logs = {c.name: math.log(choose.predict(c, *mnk, SMS, model)["us"]) for c in cands if c.name in times}
        low = min(logs.values())
        w = {name: math.exp(-(v - low) / tau) for name, v in logs.items()}
        regret.append(sum(w[name] * math.log(times[name] / best) for name in w) / sum(w.values()))
        dev = {name: v - math.log(times[name]) for name, v in logs.items()}
        mean = statistics.fmean(dev.values())
        err.append(statistics.fmean((v - mean) ** 2 for v in dev.values()))
    return statistics.fmean(regret) + 0.1 * statistics.fmean(err)


def hard_regret(model: choose.DeviceModel, cands, rows) -> tuple[float, float]:
    """Median and worst regret of the model's pick over ``rows``."""
    r = [times[model_pick(model, cands, mnk, times)] / min(times.values()) for mnk, times in rows]
    return statistics.median(r), max(r)


#: ``--term``: the optional main-loop terms of :func:`ptxgen.runtime.choose.predict` (off in the shipped model), each
#: its constant, physical bounds and start.  The shared-memory bandwidth of an SM, in bytes per clock of the model's
#: peak (989 TFLOP/s = 132 SMs x 4096 FLOP x 1.83 GHz): at most 128 B/clk at the 1.98 GHz boost clock, 138 in these
#: clocks; at least what the tune half's fastest tile moved, ``h100_128x128_c2`` at 723 TFLOP/s on 1024x16384x16384
#: (160 B per 4096 FLOP: 117 B/clk).  The latency of one stage of a tile's ring (TMA issue to data in shared memory,
#: µs): an L2 hit under load to a loaded DRAM access.
TERMS = {"smem": ("smem_bytes_per_clk", (117.0, 138.0), 125.0), "latency": ("stage_latency_us", (0.1, 2.5), 0.5)}


def fitted_names(terms=()) -> tuple[str, ...]:
    """The constants :func:`fit` fits: :data:`FITTED` and the constants of the :data:`TERMS` named in ``terms``."""
    return FITTED + tuple(TERMS[t][0] for t in terms)


def with_base_factors(model: choose.DeviceModel, cands) -> choose.DeviceModel:
    """``model`` with each split-K-of-the-last-wave candidate's tile factor its base config's (whole tiles are the
    same kernel) and each other split-K candidate's 1 (none of the :func:`fit` surveys times them)."""
    own = dict(model.tile_factors)
    factors = [(c.name, own.get(base_of(c.name), 1.0) if c.split_tiles == "last_wave" else 1.0 if c.split_k > 1
                else own.get(c.name, 1.0)) for c in cands]
    return model._replace(tile_factors=tuple(factors))


def fit(cands, rows, start: choose.DeviceModel, terms=(), quiet: bool = False, maxiter: int = 3000,
        rounds: int = 2, bounds: dict | None = None) -> choose.DeviceModel:
    """Nelder-Mead on the log of :func:`fitted_names` and of one tile factor per unsplit candidate that ``rows``
    time (from ``start``'s values; a split-K candidate keeps what :func:`with_base_factors` gives it); ``bounds``:
    :data:`BOUNDS` with these entries in place of its own."""
    consts = fitted_names(terms)
    timed = {name for _, times in rows for name in times}
    names = [c.name for c in cands if c.split_k == 1 and c.name in timed]
    own = dict(start.tile_factors)

    def model_of(x):
        v = [math.exp(min(max(t, -20.0), 20.0)) for t in x]
        tf = {**own, **{n: round(f, 4) for n, f in zip(names, v[len(consts):])}}
        return with_base_factors(start._replace(**dict(zip(consts, v)), tile_factors=tuple(tf.items())),
                                 cands)

    x = [math.log(max(getattr(start, f), 1e-3)) for f in consts] + [math.log(own.get(n, 1.0)) for n in names]
    held = {**BOUNDS, **(bounds or {})}
    limits = [(math.log(held[f][0]), math.log(held[f][1])) for f in FITTED]
    limits += [(math.log(TERMS[t][1][0]), math.log(TERMS[t][1][1])) for t in terms]
    limits += [(math.log(TILE_FACTOR_BOUNDS[0]), math.log(TILE_FACTOR_BOUNDS[1]))] * len(names)
    return _minimize(model_of, x, limits, cands, rows, quiet, maxiter, rounds)


def _minimize(model_of, x, bounds, cands, rows, quiet: bool = False, maxiter: int = 3000,
              rounds: int = 2) -> choose.DeviceModel:
    """``rounds`` rounds of bounded Nelder-Mead on the soft loss from ``x``, each reporting the hard regret unless
    ``quiet``; the model."""
    from scipy.optimize import minimize

    for rnd in range(rounds):
        res = minimize(lambda x: loss(model_of(x), cands, rows), x, method="Nelder-Mead", bounds=bounds,
                       options={"maxiter": maxiter, "xatol": 1e-3, "fatol": 1e-7, "adaptive": True})
        x = res.x
        if not quiet:
            score = hard_regret(model_of(x), cands, rows)
            print(f"  round {rnd}: soft loss {res.fun:.4f}, regret median {score[0]:.3f}, worst {score[1]:.3f}")
    return model_of(x)


PARTIAL_BOUNDS = (0.5, 20.0)  # TB/s: from below HBM to above the L2's bandwidth


def fit_split(cands, rows, start: choose.DeviceModel) -> choose.DeviceModel:
    """Nelder-Mead on the log of ``partial_tbps`` and of the split-K candidates' tile factors (others held)."""
    split = [c.name for c in cands if c.split_k > 1]
    held = tuple((n, f) for n, f in start.tile_factors if n not in split)

    def model_of(x):
        v = [math.exp(min(max(t, -20.0), 20.0)) for t in x]
        return start._replace(partial_tbps=v[0],
                                   tile_factors=held + tuple((n, round(f, 4)) for n, f in zip(split, v[1:])))

    x = [math.log(start.partial_tbps)] + [0.0] * len(split)
    bounds = [(math.log(PARTIAL_BOUNDS[0]), math.log(PARTIAL_BOUNDS[1]))]
    bounds += [(math.log(TILE_FACTOR_BOUNDS[0]), math.log(TILE_FACTOR_BOUNDS[1]))] * len(split)
    return _minimize(model_of, x, bounds, cands, rows)


#: what ``--fit-pad`` fits, every other constant of the shipped model held, with its bounds and start: the load cost
#: of a zero-filled A row in loaded rows (0: free, 1: as a loaded row; above 1 the stage slots it holds without a
#: memory request), and the split-K partial bandwidth that the units of a wave share, TB/s
PAD_FITTED = {"pad_row_cost": ((0.01, 4.0), 2.0), "partial_tbps": (PARTIAL_BOUNDS, None)}


def fit_pad(cands, rows, start: choose.DeviceModel, quiet: bool = False) -> choose.DeviceModel:
    """Nelder-Mead on the log of the :data:`PAD_FITTED` constants (from their start, or the shipped value where it
    is None), every other constant and every tile factor held."""
    names = list(PAD_FITTED)

    def model_of(x):
        return start._replace(**{n: round(math.exp(min(max(t, -20.0), 20.0)), 4) for n, t in zip(names, x)})

    x = [math.log(first if first is not None else getattr(start, n)) for n, (_, first) in PAD_FITTED.items()]
    bounds = [(math.log(lo), math.log(hi)) for (lo, hi), _ in PAD_FITTED.values()]
    return _minimize(model_of, x, bounds, cands, rows, quiet)


#: ``--fit-lastwave``: the bounds of ``whole_tile_fixup_us`` (microseconds a whole tile spends per split in the
#: fixup it passes predicated off) and the start of its soft-loss fit
WHOLE_TILE_FIXUP_BOUNDS, WHOLE_TILE_FIXUP_START = (0.01, 5.0), 0.3
#: a shape isolates the whole-tile fixup of a last-wave candidate when at least this many whole waves run and at most
#: this fraction of its tiles is split (the rest of the difference from its base config is then the fixup)
ISOLATE_WAVES, ISOLATE_TAIL = 32, 0.01


def base_of(name: str) -> str:
    """The config a split-K-of-the-last-wave candidate is the base config plus ``_lw<S>`` of."""
    return name.rsplit("_lw", 1)[0]


def whole_tile_isolates(cands, rows, model: choose.DeviceModel) -> list[tuple[str, tuple[int, int, int], float]]:
    """``[(candidate, shape, us)]``: per last-wave candidate timed beside its base on a shape that isolates the whole
    tiles (:data:`ISOLATE_WAVES`, :data:`ISOLATE_TAIL`), the measured time over the base's, less what ``model``
    (without the fixup term) predicts of it, times the base's predicted time: per whole wave and per split, in the
    model's microseconds."""
    free = model._replace(whole_tile_fixup_us=0.0)
    by_name = {c.name: c for c in cands}
    out = []
    for mnk, times in rows:
        for c in cands:
            base = by_name.get(base_of(c.name))
            if c.split_tiles != "last_wave" or base is None or c.name not in times or base.name not in times:
                continue
            p, pb = choose.predict(c, *mnk, SMS, free), choose.predict(base, *mnk, SMS, free)
            slots = max(c.cluster, SMS // c.cluster * c.cluster)
            dp_waves, tail = p["tiles"] // slots, p["tiles"] % slots
            if dp_waves >= ISOLATE_WAVES and tail <= ISOLATE_TAIL * p["tiles"]:
                # the measured ratio over the predicted one, in the model's microseconds (it ranks by ratios; its
                # absolute times are not the measured ones)
                excess_us = (times[c.name] / times[base.name] - p["us"] / pb["us"]) * pb["us"]
                out.append((c.name, mnk, excess_us / (dp_waves * c.split_k)))
    return out


def fit_lastwave(cands, rows, start: choose.DeviceModel,
                 quiet: bool = False) -> tuple[choose.DeviceModel, choose.DeviceModel]:
    """``whole_tile_fixup_us``, every other constant and tile factor held: (the median of the isolated estimates,
    :func:`whole_tile_isolates`; Nelder-Mead on the soft loss over every shape from the isolated value)."""
    isolates = whole_tile_isolates(cands, rows, start)
    for name, mnk, us in isolates if not quiet else ():
        print(f"  isolated: {name} on {mnk[0]}x{mnk[1]}x{mnk[2]}: {us:.3f} us per whole tile and split")
    isolated = start._replace(whole_tile_fixup_us=round(statistics.median(us for *_, us in isolates), 3))

    def model_of(x):
        return start._replace(whole_tile_fixup_us=round(math.exp(min(max(x[0], -20.0), 20.0)), 4))

    bounds = [(math.log(WHOLE_TILE_FIXUP_BOUNDS[0]), math.log(WHOLE_TILE_FIXUP_BOUNDS[1]))]
    return isolated, _minimize(model_of, [math.log(isolated.whole_tile_fixup_us)], bounds, cands, rows, quiet)


#: what ``--fit-partial`` fits jointly, every other constant and every tile factor held, with its bounds: the partial
#: bandwidth the units of a wave share (TB/s) and the fixup a whole tile of a last-wave config passes, per split (us)
PARTIAL_FITTED = {"partial_tbps": PARTIAL_BOUNDS, "whole_tile_fixup_us": WHOLE_TILE_FIXUP_BOUNDS}


def fit_partial(cands, rows, start: choose.DeviceModel, quiet: bool = False) -> choose.DeviceModel:
    """Nelder-Mead on the log of the :data:`PARTIAL_FITTED` constants from their shipped values, every other constant
    and tile factor held (``quiet``: no per-round report)."""
    names = list(PARTIAL_FITTED)

    def model_of(x):
        return start._replace(**{n: round(math.exp(min(max(t, -20.0), 20.0)), 4) for n, t in zip(names, x)})

    return _minimize(model_of, [math.log(getattr(start, n)) for n in names],
                     [(math.log(lo), math.log(hi)) for lo, hi in PARTIAL_FITTED.values()], cands, rows, quiet)


#: ``--fit-main-loop``: the bounds of a last-wave config's main-loop factor (``DeviceModel.main_loop_factors``): its
#: k-loop against its base config's, which it runs with the fixup's predicated code beside it, so never faster (1)
MAIN_LOOP_BOUNDS = (1.0, 1.5)


def last_wave_names(cands) -> list[str]:
    """The split-K-of-the-last-wave candidates, the configs ``--fit-main-loop`` gives a main-loop factor."""
    return [c.name for c in cands if c.split_tiles == "last_wave"]


#: ``--fit-main-loop --lastwave-partial``: the partial constants fitted with the main-loop factors, the last-wave
#: configs' own partial bandwidth in place of ``partial_tbps`` (held: the plain split-K configs' ranking is not moved)
LASTWAVE_PARTIAL_FITTED = {"lastwave_partial_tbps": PARTIAL_BOUNDS, "whole_tile_fixup_us": WHOLE_TILE_FIXUP_BOUNDS}


def fit_main_loop(cands, rows, start: choose.DeviceModel, quiet: bool = False,
                  own_partial: bool = False) -> choose.DeviceModel:
    """Nelder-Mead on the log of each last-wave candidate's main-loop factor (:data:`MAIN_LOOP_BOUNDS`, from 1) and
    of the :data:`PARTIAL_FITTED` constants (from ``start``'s values; ``own_partial``: of the
    :data:`LASTWAVE_PARTIAL_FITTED` ones, ``lastwave_partial_tbps`` from ``partial_tbps`` where ``start`` has none),
    every other constant and tile factor held."""
    lw = last_wave_names(cands)
    names = list(LASTWAVE_PARTIAL_FITTED if own_partial else PARTIAL_FITTED)
    if own_partial and start.lastwave_partial_tbps is None:
        start = start._replace(lastwave_partial_tbps=start.partial_tbps)

    def model_of(x):
        v = [round(math.exp(min(max(t, -20.0), 20.0)), 4) for t in x]
        return start._replace(main_loop_factors=tuple(zip(lw, v[:len(lw)])), **dict(zip(names, v[len(lw):])))

    own = dict(start.main_loop_factors)
    x = [math.log(own.get(n, 1.0)) for n in lw] + [math.log(getattr(start, n)) for n in names]
    bounds = [(math.log(MAIN_LOOP_BOUNDS[0]), math.log(MAIN_LOOP_BOUNDS[1]))] * len(lw)
    bounds += [(math.log(lo), math.log(hi)) for lo, hi in (LASTWAVE_PARTIAL_FITTED if own_partial
                                                            else PARTIAL_FITTED).values()]
    return _minimize(model_of, x, bounds, cands, rows, quiet)


#: ``--fit-ring``: bench variants of a shipped config that differ from it in ``pipeline.stages`` alone (the same
#: kernel, so the same tile factor): a variant's time over its base's on one shape measures the stage ring, every other
#: term of the model cancelling or moving with the stage count only (docs/performance.md, "The stage ring at small M")
STAGE_VARIANTS = {"h100_128x128_s6": "h100_128x128"}
#: the largest M whose variant pairs enter the ring fit: at small M the ring is what the extra stages buy (2-18 %), at
#: large M the 6-stage tile loses up to 36 % for a reason a latency bound cannot give (more stages never wait longer)
RING_MAX_M = 256
#: what ``--fit-ring`` estimates from the stage variants, every other constant held: the latency of one stage of a
#: tile's ring (µs: an L2 hit under load to a loaded DRAM access), and the operand cost of a zero-filled row (which
#: carried the ring's effect at small M while the ring had no term of its own: docs/performance.md, "Chooser padding
#: terms")
RING_FITTED = ("stage_latency_us", "pad_row_cost")
#: the grid of the isolated estimate (:func:`ring_isolates`): stage latency and zero-filled row cost
RING_GRID = ([x / 20 for x in range(10, 81)], [x / 20 for x in range(10, 41)])


def stage_variants() -> tuple:
    """The :data:`STAGE_VARIANTS` as candidates: the base's :class:`ptxgen.runtime.choose.Candidate` with the
    variant's name and stage count (bench/configs YAML); raises ValueError when a variant differs from its base in
    more than ``pipeline.stages``."""
    import yaml

    out = []
    for name, base in STAGE_VARIANTS.items():
        raw = yaml.safe_load((Path(__file__).parent / "configs" / f"{name}.yaml").read_text(encoding="utf-8"))
        c = choose.shipped_candidate(base)
        same = (raw["tile"]["block_m"], raw["tile"]["block_n"], raw["tile"]["block_k"], raw.get("mma", {}).get("warpgroups", 1),
                raw.get("cluster", {}).get("size", 1)) == (c.block_m, c.block_n, c.block_k, c.warpgroups, c.cluster)
        if not same:
            raise ValueError(f"stage variant {name}: differs from {base} in more than pipeline.stages")
        out.append(c._replace(name=name, stages=raw["pipeline"]["stages"]))
    return tuple(out)


def with_variant_factors(model: choose.DeviceModel) -> choose.DeviceModel:
    """``model`` with each :data:`STAGE_VARIANTS` entry's tile factor its base's (the same kernel)."""
    own = dict(model.tile_factors)
    return model._replace(tile_factors=tuple({**own, **{v: own.get(b, 1.0) for v, b in
                                                                    STAGE_VARIANTS.items()}}.items()))


def variant_rows(paths: list[str]) -> list[tuple[tuple[int, int, int], dict[str, float]]]:
    """``[((m, n, k), {base: ms, variant: ms})]``: every shape of the survey files with M <= :data:`RING_MAX_M` that timed
    a :data:`STAGE_VARIANTS` entry beside its base (one row per file and shape: the pairs are the measurement)."""
    out = []
    for path in paths:
        for r in json.load(open(path))["rows"]:
            for variant, base in STAGE_VARIANTS.items():
                if r["m"] <= RING_MAX_M and variant in r["sides"] and base in r["sides"]:
                    out.append(((r["m"], r["n"], r["k"]), {s: r["sides"][s]["ms"] for s in (base, variant)}))
    return out


def ring_error(model: choose.DeviceModel, variants, pairs) -> float:
    """Mean squared error of the predicted log time of each stage variant over its base's on ``pairs``."""
    by_name = {c.name: c for c in choose.candidates("sm_90a") + tuple(variants)}
    model = with_variant_factors(model)
    err = []
    for mnk, times in pairs:
        variant = next(n for n in times if n in STAGE_VARIANTS)
        p = [choose.predict(by_name[n], *mnk, SMS, model)["us"] for n in (variant, STAGE_VARIANTS[variant])]
        err.append((math.log(p[0] / p[1]) - math.log(times[variant] / times[STAGE_VARIANTS[variant]])) ** 2)
    return statistics.fmean(err)


def ring_isolates(variants, pairs, start: choose.DeviceModel) -> choose.DeviceModel:
    """``start`` with the :data:`RING_FITTED` constants that best predict the stage variants' times over their bases'
    (:func:`ring_error` over the :data:`RING_GRID`; the tile factor cancels in the ratio)."""
    grid = [start._replace(stage_latency_us=lat, pad_row_cost=pad) for lat in RING_GRID[0]
            for pad in RING_GRID[1]]
    return min(grid, key=lambda m: ring_error(m, variants, pairs))


def fit_ring(cands, rows, pairs, start: choose.DeviceModel,
             quiet: bool = False) -> tuple[choose.DeviceModel, choose.DeviceModel]:
    """(``start`` with the :data:`RING_FITTED` constants of the stage variants' ``pairs``, :func:`ring_isolates`; that
    model with the tile factors of the unsplit, unswapped candidates refit by Nelder-Mead on the soft loss over
    ``rows``): a last-wave candidate takes its base's factor, the other split-K and the swap-AB candidates keep theirs.
    The ring constants are held in the second step: a variant and its base share the tile factor, so their pairs
    decide the ring and nothing else, and a soft-loss fit of them (which ranks, it does not fit the ratio) overshoots
    the ratio the pairs measure (docs/performance.md, "The stage ring at small M")."""
    isolated = ring_isolates(stage_variants(), pairs, start)
    names = [c.name for c in cands if c.split_k == 1 and not c.swap_ab]
    own = dict(isolated.tile_factors)
    lw = {c.name: base_of(c.name) for c in cands if c.split_tiles == "last_wave"}

    def model_of(x):
        tf = {**own, **{n: round(math.exp(min(max(t, -20.0), 20.0)), 4) for n, t in zip(names, x)}}
        tf.update({n: tf.get(b, 1.0) for n, b in lw.items()})
        return isolated._replace(tile_factors=tuple(tf.items()))

    bounds = [(math.log(TILE_FACTOR_BOUNDS[0]), math.log(TILE_FACTOR_BOUNDS[1]))] * len(names)
    return isolated, _minimize(model_of, [math.log(own.get(n, 1.0)) for n in names], bounds, cands, rows, quiet)


def k_sweep_estimates(cands, rows, model: choose.DeviceModel) -> list[tuple[str, tuple[int, int], float]]:
    """``[(candidate, (m, n), factor)]``: per last-wave candidate timed beside its base on at least two K of one
    ``(m, n)``, the measured growth of its time with K over its base's (least-squares slopes), divided by what
    ``model`` (without main-loop factors) predicts of that ratio: the main-loop factor the K-sweep alone gives."""
    free = model._replace(main_loop_factors=())
    by_name = {c.name: c for c in cands}
    sweeps: dict[tuple[int, int], list] = {}
    for (m, n, k), times in rows:
        sweeps.setdefault((m, n), []).append((k, times))

    def slope(points):
        mk = statistics.fmean(k for k, _ in points)
        mt = statistics.fmean(t for _, t in points)
        return sum((k - mk) * (t - mt) for k, t in points) / sum((k - mk) ** 2 for k, _ in points)

    out = []
    for (m, n), sweep in sweeps.items():
        for name in last_wave_names(cands):
            base = base_of(name)
            pts = [(k, t) for k, t in sweep if name in t and base in t]
            if len(pts) < 2:
                continue
            measured_ratio = slope([(k, t[name]) for k, t in pts]) / slope([(k, t[base]) for k, t in pts])
            predicted = [slope([(k, choose.predict(by_name[c], m, n, k, SMS, free)["us"]) for k, _ in pts])
                         for c in (name, base)]
            out.append((name, (m, n), measured_ratio / (predicted[0] / predicted[1])))
    return out


def leave_one_out_main_loop(cands, rows, start: choose.DeviceModel,
                            own_partial: bool = False) -> list[tuple[tuple[int, int, int], float]]:
    """``[(shape, regret)]``: for each shape of ``rows`` that timed a last-wave candidate, the regret of the pick of
    :func:`fit_main_loop` (``own_partial`` as there) fitted on every other shape of ``rows``."""
    lw = set(last_wave_names(cands))
    out = []
    for i, (mnk, times) in enumerate(rows):
        if not lw & set(times):
            continue
        model = fit_main_loop(cands, rows[:i] + rows[i + 1:], start, quiet=True, own_partial=own_partial)
        out.append((mnk, times[model_pick(model, cands, mnk, times)] / min(times.values())))
    return out


def leave_one_out(cands, rows, start: choose.DeviceModel) -> list[tuple[tuple[int, int, int], float]]:
    """``[(shape, regret)]``: for each shape of ``rows`` that timed a split-K candidate (the only shapes the
    :data:`PARTIAL_FITTED` constants rank on), the regret of the pick of :func:`fit_partial` fitted on the others."""
    split = [i for i, (_, times) in enumerate(rows) if any(c.split_k > 1 and c.name in times for c in cands)]
    out = []
    for i in split:
        model = fit_partial(cands, [rows[j] for j in split if j != i], start, quiet=True)
        mnk, times = rows[i]
        out.append((mnk, times[model_pick(model, cands, mnk, times)] / min(times.values())))
    return out


def fit_device(cands, rows, device: str, start: choose.DeviceModel = choose.SM90_GEMM_MODEL) -> choose.DeviceModel:
    """A device's own model (``--fit-device``): :func:`fit` of :data:`FITTED` and the unsplit tile factors from
    ``start`` on ``rows`` (that device's surveys), the HBM bound the device's (:data:`DEVICE_HBM_BOUNDS`), the split-K,
    padding and last-wave constants held (the shipped H200 model: docs/performance.md, "The H200's own cost model")."""
    hbm = DEVICE_HBM_BOUNDS.get(device)
    return fit(cands, rows, start, quiet=True, bounds={"hbm_tbps": hbm} if hbm else None)


def refit_all(cands, tune: str, split_k: list[str], lastwave: str, terms=(), quiet: bool = True,
              first: dict | None = None, warm: choose.DeviceModel | None = None) -> choose.DeviceModel:
    """The whole shipped method, from scratch, with the :data:`TERMS` named in ``terms`` on: ``--fit`` on the tune
    survey ``tune`` (the terms' constants fitted with the others), ``--fit-pad`` on it and the split-K tune surveys
    ``split_k``, ``--fit-lastwave`` on ``lastwave`` (its soft-loss fit) and ``--fit-partial`` on all of them;
    ``first``: start values of the :func:`fitted_names` constants in place of the shipped method's; ``warm``: a model
    (another fit's) to start every constant and tile factor from, the terms not named off (Nelder-Mead is local: the
    forms are compared at the best of several starts)."""
    names = {c.name for c in cands}
    split = {c.name for c in cands if c.split_k > 1}
    start = choose.SM90_MODEL._replace(multicast=True, one_wg_efficiency=0.8, ragged_load_factor=1.5,
                                dram_latency_us=2.0, overlap=4.0, **{TERMS[t][0]: TERMS[t][2] for t in terms})
    if warm is not None:
        start = warm._replace(**{name: (getattr(warm, name) or first_value) if t in terms else 0.0
                                             for t, (name, _, first_value) in TERMS.items()})
    start = start._replace(**(first or {}))
    model = fit(cands, measured([tune], names, split), start, terms, quiet)
    model = fit_pad(cands, measured([tune, *split_k], names, split), model, quiet)
    model = fit_lastwave(cands, measured([lastwave], names, split), model, quiet)[1]
    return fit_partial(cands, measured([tune, *split_k, lastwave], names, split), model, quiet)


def leave_one_out_all(cands, rows, model: choose.DeviceModel, terms=(), maxiter: int = 1500):
    """``[(shape, regret)]``: for every shape of ``rows``, the regret of the pick of ``model`` refit without it: the
    :func:`fitted_names` constants and the tile factors, one round of Nelder-Mead from ``model`` on the other shapes
    (the padding and split-K constants held)."""
    out = []
    for i, (mnk, times) in enumerate(rows):
        left = fit(cands, rows[:i] + rows[i + 1:], model, terms, quiet=True, maxiter=maxiter, rounds=1)
        out.append((mnk, times[model_pick(left, cands, mnk, times)] / min(times.values())))
    return out


def joined(paths: list[str], extra: list[str], names: set[str], split: set[str] = frozenset(),
           scaled: bool = False) -> list[tuple[tuple[int, int, int], dict[str, float]]]:
    """:func:`measured` of ``paths`` with the times of the surveys ``extra`` (each timing a few candidates on the same
    shapes, e.g. ``bench/survey.py --suite gemm --half tune --config NEW``) added to each shape's row, in order (a
    config timed by several of them takes the last one's time).  ``scaled``: each extra survey's times of a shape are
    first multiplied by the geometric mean, over the configs both timed there, of the row's time over the survey's
    (a device call's clock window moves every kernel by a few percent: the controls carry the new times into the
    row's window), and the shared configs keep the row's own times; a shape with no shared config keeps its times."""
    rows = measured(paths, names, split)
    base = dict(rows)
    more: dict[tuple[int, int, int], dict[str, float]] = {}
    for path in extra:
        for mnk, times in measured([path], names, split):
            shared = [c for c in times if c in base.get(mnk, {})]
            if scaled and shared:
                f = math.exp(statistics.fmean(math.log(base[mnk][c] / times[c]) for c in shared))
                times = {c: t * f for c, t in times.items() if c not in shared}
            more.setdefault(mnk, {}).update(times)
    return [(mnk, {**times, **more.get(mnk, {})}) for mnk, times in rows]


def fit_tile_factors(cands, rows, start: choose.DeviceModel, fitted: list[str], lo: float = 0.7, hi: float = 1.6,
                     step: float = 0.01, rounds: int = 2) -> choose.DeviceModel:
    """The tile factors of the configs ``fitted`` by the soft :func:`loss` on a grid of ``step`` in ``[lo, hi]``, one
    config at a time (``rounds`` passes), every other constant and factor held at ``start``'s."""
    model = start
    grid = [round(lo + i * step, 4) for i in range(int(round((hi - lo) / step)) + 1)]

    def with_factor(m: choose.DeviceModel, name: str, f: float) -> choose.DeviceModel:
        return m._replace(tile_factors=tuple((n, v) for n, v in m.tile_factors if n != name) + ((name, f),))
    for _ in range(rounds):
        for name in fitted:
            model = min((with_factor(model, name, f) for f in grid), key=lambda m: loss(m, cands, rows))
    return model


def regret_summary(model: choose.DeviceModel, cands, rows) -> str:
    """Soft loss and the model-only regret of the pick over ``rows``: median, mean, worst, count above 1.02."""
    r = [times[model_pick(model, cands, mnk, times)] / min(times.values()) for mnk, times in rows]
    return (f"loss {loss(model, cands, rows):.4f}, regret median {statistics.median(r):.4f}, mean "
            f"{statistics.fmean(r):.4f}, worst {max(r):.4f}, {sum(x > 1.02 for x in r)} above 1.02")


def evaluate(paths: list[str], cands, model_only: bool, model: choose.DeviceModel | None = None) -> dict:
    """Each shape's decision (``model_only``: the cost model's among the timed candidates; else the chooser's, tables
    first, its cost model ``model``, among every candidate) and its regret; a decision the surveys did not time has
    regret None and stays out of the median and worst (``unmeasured`` lists it).  The chooser is the one of the first
    survey's device (``choose.device_key``: its tuned table, and its shipped cost model ``choose.gemm_model`` where
    ``model`` is None)."""
    names = {c.name for c in cands}
    split = {c.name for c in cands if c.split_k > 1}
    device = choose.device_key(json.load(open(paths[0])).get("device", ""))
    model = model or choose.gemm_model(device)
    out = []
    shipped = (choose.SM90_GEMM_MODEL, choose.SM90_H200_GEMM_MODEL)
    choose.SM90_GEMM_MODEL = choose.SM90_H200_GEMM_MODEL = model
    try:
        for mnk, times in measured(paths, names, split):
            if model_only:
                pick, why = model_pick(model, cands, mnk, times), "cost model"
            else:
                choose.choose_cached.cache_clear()
                pick, why = choose.choose_cached(*mnk, (9, 0), SMS, device=device)
            best = min(times, key=times.get)
            out.append({"m": mnk[0], "n": mnk[1], "k": mnk[2], "chosen": pick, "why": why, "best": best,
                        "regret": round(times[pick] / times[best], 4) if pick in times else None})
    finally:
        choose.SM90_GEMM_MODEL, choose.SM90_H200_GEMM_MODEL = shipped
        choose.choose_cached.cache_clear()
    regrets = [r["regret"] for r in out if r["regret"] is not None]
    return {"survey": " + ".join(Path(p).name for p in paths), "median_regret": statistics.median(regrets),
            "worst_regret": max(regrets), "unmeasured": [f"{r['m']}x{r['n']}x{r['k']}: {r['chosen']}"
                                                         for r in out if r["regret"] is None], "shapes": out}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fit", nargs="+", default=[])
    p.add_argument("--fit-split", nargs="+", default=[])
    p.add_argument("--fit-pad", nargs="+", default=[])
    p.add_argument("--fit-lastwave", nargs="+", default=[])
    p.add_argument("--fit-partial", nargs="+", default=[])
    p.add_argument("--fit-main-loop", nargs="+", default=[])
    p.add_argument("--check", nargs="+", action="append", default=[],
                   help="with --fit-main-loop, --fit-ring or --fit-device: survey files scored before and after, "
                        "not fitted on")
    p.add_argument("--lastwave-partial", action="store_true",
                   help="with --fit-main-loop: fit the last-wave configs' own partial bandwidth "
                        "(lastwave_partial_tbps) in place of partial_tbps, which stays as it is")
    p.add_argument("--fit-ring", nargs="+", default=[])
    p.add_argument("--ring-pairs", nargs="+", default=[],
                   help="with --fit-ring: surveys that timed a stage variant (STAGE_VARIANTS) beside its base")
    p.add_argument("--refit", nargs=4, metavar=("TUNE", "SK_A", "SK_B", "LASTWAVE"))
    p.add_argument("--term", action="append", choices=sorted(TERMS), default=[])
    p.add_argument("--loo", action="store_true",
                   help="with --refit: leave-one-out over every tune shape; with --fit-main-loop: over its shapes "
                        "that timed a last-wave candidate")
    p.add_argument("--start", action="append", default=[], metavar="NAME=VALUE",
                   help="with --refit: the start of a fitted constant")
    p.add_argument("--warm", help="with --refit: start from this --model-json model")
    p.add_argument("--held", action="store_true", help="with --refit and --warm: no refit, the --warm model as fitted")
    p.add_argument("--model-json", help="with --refit: write the refit model's constants here")
    p.add_argument("--eval", nargs="+", action="append", default=[])
    p.add_argument("--model-only", action="store_true")
    p.add_argument("--fit-device", nargs="+", default=[], metavar="F",
                   help="one device's surveys (joined with --join): that device's own model (fit_device)")
    p.add_argument("--fit-factors", nargs="+", default=[], metavar="F",
                   help="tune surveys: fit the tile factors of --factor alone on them joined with --join")
    p.add_argument("--join", nargs="+", default=[], metavar="F", help="with --fit-factors: surveys of the new configs")
    p.add_argument("--join-scaled", action="store_true",
                   help="with --join: carry each joined survey's times into the row's window by the configs both timed")
    p.add_argument("--factor", action="append", default=[], metavar="NAME", help="with --fit-factors: a config to fit")
    p.add_argument("--json")
    p.add_argument("--table", help="write the shipped-table document of the --fit (or --table-of) survey's shapes here")
    p.add_argument("--table-of", nargs="+", default=[], metavar="F",
                   help="with --table: the tune surveys whose shapes the table holds, joined with --join (no fit)")
    args = p.parse_args()
    cands = choose.candidates("sm_90a")
    names = {c.name for c in cands}
    split = {c.name for c in cands if c.split_k > 1}
    model = choose.SM90_GEMM_MODEL
    if args.fit:
        rows = measured(args.fit, names, split)
        start = choose.SM90_MODEL._replace(multicast=True, one_wg_efficiency=0.8, ragged_load_factor=1.5,
                                    dram_latency_us=2.0, overlap=4.0)
        for label, model in (("start", start), ("shipped", choose.SM90_GEMM_MODEL)):
            print(f"{label}: loss {loss(model, cands, rows):.4f}")
        model = fit(cands, rows, start)
        print(f"fitted: loss {loss(model, cands, rows):.4f}")
        print("DeviceModel(" + ", ".join(f"{f}={getattr(model, f):.4g}" for f in FITTED) + ", multicast=True, "
              f"tile_factors={model.tile_factors})")
    if args.fit_split:
        rows = measured(args.fit_split, names, split)
        unsplit = tuple(c for c in cands if c.split_k == 1)
        for label, m in (("shipped", model), ("shipped, unsplit candidates", None)):
            picks = hard_regret(model, unsplit if m is None else cands, rows)
            print(f"{label}: regret median {picks[0]:.3f}, worst {picks[1]:.3f}")
        model = fit_split(cands, rows, model)
        print(f"fitted: partial_tbps={model.partial_tbps:.4g}, split tile factors "
              f"{[tf for tf in model.tile_factors if tf[0] in {c.name for c in cands if c.split_k > 1}]}")
        for mnk, times in rows:
            pick = model_pick(model, cands, mnk, times)
            print(f"  {mnk}: pick {pick} {times[pick]:.4f} ms, best {min(times, key=times.get)} "
                  f"{min(times.values()):.4f} ms")
    if args.fit_pad:
        rows = measured(args.fit_pad, names, split)
        print(f"shipped: loss {loss(model, cands, rows):.4f}")
        model = fit_pad(cands, rows, model)
        print(f"fitted: loss {loss(model, cands, rows):.4f}, " + ", ".join(f"{n}={getattr(model, n):.4g}" for n in PAD_FITTED))
    if args.fit_lastwave:
        rows = measured(args.fit_lastwave, names, split)
        free = model._replace(whole_tile_fixup_us=0.0)
        isolated, soft = fit_lastwave(cands, rows, free)
        for label, m in (("without the term", free), ("isolated", isolated), ("soft-loss fit", soft), ("shipped", model)):
            r = [times[model_pick(m, cands, mnk, times)] / min(times.values()) for mnk, times in rows]
            print(f"{label}: whole_tile_fixup_us={m.whole_tile_fixup_us:.4g}, loss {loss(m, cands, rows):.4f}, "
                  f"regret median {statistics.median(r):.4f}, mean {statistics.fmean(r):.4f}, worst {max(r):.4f}")
            for mnk, times in rows:
                pick = model_pick(m, cands, mnk, times)
                if times[pick] > 1.01 * min(times.values()):
                    print(f"  {mnk[0]}x{mnk[1]}x{mnk[2]}: {pick} vs {min(times, key=times.get)}: "
                          f"{times[pick] / min(times.values()):.4f}")
    if args.fit_partial:
        rows = measured(args.fit_partial, names, split)
        print(f"shipped: {regret_summary(model, cands, rows)}")
        fitted = fit_partial(cands, rows, model)
        print(f"fitted: {regret_summary(fitted, cands, rows)}, "
              + ", ".join(f"{n}={getattr(fitted, n):.4g}" for n in PARTIAL_FITTED))
        for mnk, times in rows:
            picks = [model_pick(m, cands, mnk, times) for m in (model, fitted)]
            if picks[0] != picks[1] or max(times[p] for p in picks) > 1.02 * min(times.values()):
                print(f"  {mnk[0]}x{mnk[1]}x{mnk[2]}: {picks[0]} {times[picks[0]] / min(times.values()):.4f} -> "
                      f"{picks[1]} {times[picks[1]] / min(times.values()):.4f} (best {min(times, key=times.get)})")
        loo = leave_one_out(cands, rows, model)
        r = [x for _, x in loo]
        print(f"leave one out ({len(r)} shapes with split-K candidates timed): regret median {statistics.median(r):.4f}, "
              f"mean {statistics.fmean(r):.4f}, worst {max(r):.4f}, {sum(x > 1.02 for x in r)} above 1.02")
        model = fitted
    if args.fit_main_loop:
        rows = measured(args.fit_main_loop, names, split)
        for name, (m, n), factor in k_sweep_estimates(cands, rows, model):
            print(f"  K-sweep at {m}x{n}: {name} main loop {factor:.3f}x its base's, beyond the model's")
        fitted = fit_main_loop(cands, rows, model, own_partial=args.lastwave_partial)
        print("fitted: main_loop_factors=" + str(fitted.main_loop_factors) + ", "
              + ", ".join(f"{n}={getattr(fitted, n):.4g}" for n in {**PARTIAL_FITTED, **(
                  LASTWAVE_PARTIAL_FITTED if args.lastwave_partial else {})}))
        for paths in [args.fit_main_loop, *args.check]:
            check = measured(paths, names, split)
            print(" + ".join(Path(p).name for p in paths) + ":")
            for label, m in (("  shipped", model), ("  fitted", fitted)):
                print(f"{label}: {regret_summary(m, cands, check)}")
            for mnk, times in check:
                picks = [model_pick(m, cands, mnk, times) for m in (model, fitted)]
                if picks[0] != picks[1]:
                    print(f"    {mnk[0]}x{mnk[1]}x{mnk[2]}: {picks[0]} {times[picks[0]] / min(times.values()):.4f} -> "
                          f"{picks[1]} {times[picks[1]] / min(times.values()):.4f} (best {min(times, key=times.get)})")
        if args.loo:
            loo = leave_one_out_main_loop(cands, rows, model, own_partial=args.lastwave_partial)
            r = [x for _, x in loo]
            print(f"leave one out ({len(r)} shapes with a last-wave candidate timed): regret median "
                  f"{statistics.median(r):.4f}, mean {statistics.fmean(r):.4f}, worst {max(r):.4f} "
                  f"({'x'.join(map(str, max(loo, key=lambda t: t[1])[0]))}), {sum(x > 1.02 for x in r)} above 1.02")
        model = fitted
    if args.fit_ring:
        rows = measured(args.fit_ring, names, split)
        pairs = variant_rows(args.ring_pairs)
        variants = stage_variants()
        isolated, fitted = fit_ring(cands, rows, pairs, model)
        print(f"{len(pairs)} stage-variant pairs at M <= {RING_MAX_M}: ring error (mean squared log ratio) shipped "
              f"{ring_error(model, variants, pairs):.4f}, isolated {ring_error(isolated, variants, pairs):.4f} "
              f"({', '.join(f'{n}={getattr(isolated, n):.4g}' for n in RING_FITTED)}), fitted "
              f"{ring_error(fitted, variants, pairs):.4f}")
        print("fitted: " + ", ".join(f"{n}={getattr(fitted, n):.4g}" for n in RING_FITTED) +
              f", tile_factors={fitted.tile_factors}")
        for label, m in (("shipped", model), ("isolated", isolated), ("fitted", fitted)):
            print(f"{label}: {regret_summary(m, cands, rows)}; pairs with the variants: "
                  f"{regret_summary(with_variant_factors(m), cands + variants, pairs)}")
        for mnk, times in rows:
            picks = [model_pick(m, cands, mnk, times) for m in (model, fitted)]
            if picks[0] != picks[1]:
                print(f"  {mnk[0]}x{mnk[1]}x{mnk[2]}: {picks[0]} {times[picks[0]] / min(times.values()):.4f} -> "
                      f"{picks[1]} {times[picks[1]] / min(times.values()):.4f} (best {min(times, key=times.get)})")
        for paths in args.check:
            check = measured(paths, names, split)
            print(" + ".join(Path(p).name for p in paths) + ":")
            for label, m in (("  shipped", model), ("  fitted", fitted)):
                print(f"{label}: {regret_summary(m, cands, check)}")
        model = fitted
    if args.refit:
        rows = measured(args.refit, names, split)
        first = {name: float(v) for name, v in (a.split("=", 1) for a in args.start)}
        warm = None
        if args.warm:
            doc = json.load(open(args.warm))
            warm = choose.DeviceModel(**{**doc, "tile_factors": tuple(map(tuple, doc["tile_factors"]))})
        fitted = warm if args.held else refit_all(cands, args.refit[0], list(args.refit[1:3]), args.refit[3],
                                                  tuple(args.term), first=first, warm=warm)
        terms = "+".join(args.term) or "none"
        for label, m in (("shipped", model), (f"refit, terms {terms}", fitted)):
            print(f"{label}: {regret_summary(m, cands, rows)}")
        for mnk, times in rows:
            picks = [model_pick(m, cands, mnk, times) for m in (model, fitted)]
            if picks[0] != picks[1] or max(times[p] for p in picks) > 1.02 * min(times.values()):
                print(f"  {mnk[0]}x{mnk[1]}x{mnk[2]}: {picks[0]} {times[picks[0]] / min(times.values()):.4f} -> "
                      f"{picks[1]} {times[picks[1]] / min(times.values()):.4f} (best {min(times, key=times.get)})")
        print("DeviceModel(" + ", ".join(f"{f}={getattr(fitted, f):.4g}" for f in fitted_names(args.term)
                                         + tuple(PAD_FITTED) + ("whole_tile_fixup_us",)) +
              f", tile_factors={fitted.tile_factors})")
        if args.loo:
            loo = leave_one_out_all(cands, rows, fitted, tuple(args.term))
            r = [x for _, x in loo]
            print(f"leave one out ({len(r)} tune shapes): regret median {statistics.median(r):.4f}, "
                  f"mean {statistics.fmean(r):.4f}, worst {max(r):.4f} "
                  f"({'x'.join(map(str, max(loo, key=lambda t: t[1])[0]))}), {sum(x > 1.02 for x in r)} above 1.02")
        if args.model_json:
            Path(args.model_json).write_text(json.dumps(fitted._asdict()) + "\n")
        model = fitted
    if args.fit_device:
        rows = joined(args.fit_device, args.join, names, split, scaled=args.join_scaled)
        device = choose.device_key(json.load(open(args.fit_device[0]))["device"])
        fitted = fit_device(cands, rows, device)
        for label, m in (("the H100's", choose.SM90_GEMM_MODEL), (f"fitted ({device})", fitted)):
            print(f"{label}: {regret_summary(m, cands, rows)}")
            for path in (path for group in args.check for path in group):
                print(f"  {Path(path).name}: {regret_summary(m, cands, measured([path], names, split))}")
        print("DeviceModel(" + ", ".join(f"{f}={getattr(fitted, f):.4g}" for f in FITTED) +
              f", tile_factors={tuple((n, round(f, 4)) for n, f in fitted.tile_factors)})")
    if args.fit_factors:
        rows = joined(args.fit_factors, args.join, names, split, scaled=args.join_scaled)
        print("shipped: " + regret_summary(model, cands, rows))
        model = fit_tile_factors(cands, rows, model, args.factor)
        print("fitted: " + regret_summary(model, cands, rows) + "; "
              + ", ".join(f"{n}={dict(model.tile_factors)[n]:.2f}" for n in args.factor))
    if args.table and (args.fit or args.table_of):
        surveys = args.fit or args.table_of
        device = json.load(open(surveys[0]))["device"]
        rows = measured(args.fit, names, split) if args.fit else joined(args.table_of, args.join, names, split,
                                                                         scaled=args.join_scaled)
        entries = [{"m": mnk[0], "n": mnk[1], "k": mnk[2], "config": min(t, key=t.get), "ms": round(min(t.values()), 4),
                    "all_ms": {c: round(v, 4) for c, v in sorted(t.items())}} for mnk, t in rows]
        source = ("bench/survey.py --suite gemm --half tune --shipped (prepared launches alternating call by call, median "
                  "of 5 runs of 20 calls, L2-rotated inputs), fastest shipped config per shape; tune half only")
        if args.table_of and args.join:
            source += ("; the configs of " + ", ".join(Path(j).name for j in args.join) + " from later surveys of the "
                       "same half (bench/survey.py --config)" + (", scaled into this survey's window by the configs "
                       "both timed (bench/fit_choose.py joined, scaled)" if args.join_scaled else ""))
        choose.write_table(Path(args.table), choose.table_doc("sm_90a", device, entries, source))
    # a model fitted above is evaluated; else each survey's device's shipped model (evaluate's None)
    docs = [evaluate(path, cands, args.model_only, None if model is choose.SM90_GEMM_MODEL else model)
            for path in args.eval]
    for doc in docs:
        print(f"{doc['survey']}: regret median {doc['median_regret']:.3f}, worst {doc['worst_regret']:.3f}")
        for r in doc["shapes"]:
            if r["regret"] is None or r["regret"] > 1.02:
                print(f"  {r['m']}x{r['n']}x{r['k']}: {r['chosen']} ({r['why']}) vs {r['best']}: {r['regret']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(docs, f, indent=1)


if __name__ == "__main__":
    main()
