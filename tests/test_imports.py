"""Import contract of ``ptxgen/`` and ``emitters/``, read from the source with :mod:`ast`.

The module graph has an edge ``a -> b`` for every ``import`` / ``from ... import`` statement in ``a``
(module level or inside a function: lazy imports count) that names a module ``b`` of the two packages:

- ``import ptxgen.ir.ops`` and ``from ptxgen.ir import ops`` (``ops`` a submodule) give ``-> ptxgen.ir.ops``;
- ``from ptxgen.ir import Kernel`` (a name re-exported by the package) gives ``-> ptxgen.ir`` (its
  ``__init__``): a submodule using its package's re-exports depends on that ``__init__``;
- imports under ``if TYPE_CHECKING:`` are not edges (they never run; annotations only);
- the parent packages Python runs implicitly before a submodule (``ptxgen/__init__`` before
  ``ptxgen.ir.ops``) are not edges: otherwise every module would sit in a circle with its package.

Contract checked:

(a) no cycle among modules (the failure names the cycle);
(b) ``emitters`` imports from ptxgen only ``ptxgen.ir*`` and ``ptxgen.errors``, never ``ptxgen`` itself,
    and nothing it reaches (transitively) is ``ptxgen``'s ``__init__``;
(c) ``ptxgen.check*`` and ``emitters*`` reach (transitively) nothing of ``ptxgen.plan`` or ``ptxgen.config``;
(d) the check wing stands beside the compile path: nothing in ``ptxgen.config``, ``ptxgen.plan``,
    ``ptxgen.builders*``, ``ptxgen.ir*``, ``emitters*``, ``ptxgen.assemble`` or ``ptxgen.runtime*`` imports
    ``ptxgen.check*``, and ``ptxgen.check*`` imports from ptxgen only itself, ``ptxgen.ir*``,
    ``ptxgen.descriptors``, ``ptxgen.errors``, ``ptxgen.hw`` and ``ptxgen.formats``;
(e) ``ptxgen.build`` is the one door into the emitters: no other ``ptxgen`` module imports ``emitters*``.

Planted violations in synthetic graphs prove each check fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ptxgen", "emitters")
COMPILE_PATH = ("ptxgen.config", "ptxgen.plan", "ptxgen.builders", "ptxgen.ir", "emitters", "ptxgen.assemble",
                "ptxgen.runtime")
CHECK_MAY_IMPORT = ("ptxgen.check", "ptxgen.ir", "ptxgen.descriptors", "ptxgen.errors", "ptxgen.hw", "ptxgen.formats")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` under the packages (``pkg/__init__.py`` -> ``pkg``)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_package(name: str, files: dict[str, Path]) -> bool:
    return name in files and files[name].name == "__init__.py"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` (their imports never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def imports_of(name: str, source: str, files: dict[str, Path]) -> set[str]:
    """Internal modules that module ``name`` (its text ``source``) imports, by the rules of the module doc."""
    package = name if _is_package(name, files) else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in files:
                    out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in files:
                    out.add(sub)  # a submodule: the package's __init__ is only the implicit parent import
                elif target in files:
                    out.add(target)  # a name from the module (or a package's re-export)
    out.discard(name)
    return out


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the internal modules it imports (every import statement, lazy ones included)."""
    files = module_files(root)
    return {name: imports_of(name, path.read_text(), files) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle ``[m0, m1, ..., m0]`` of ``graph`` (``m0`` its smallest name), or None when acyclic (iterative DFS)."""
    color = {n: 0 for n in graph}  # 0 new, 1 on the stack, 2 done
    for start in sorted(graph):
        if color[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        color[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
                continue
            if color.get(nxt, 2) == 1:
                ring = path[path.index(nxt):]
                first = ring.index(min(ring))  # rotated to start at its smallest name: a stable message
                ring = ring[first:] + ring[:first]
                return ring + [ring[0]]
            if color.get(nxt, 2) == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
    return None


def reach(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Modules reachable from ``start``, each mapped to the module that first imported it (for the message)."""
    seen, todo = {start: ""}, [start]
    while todo:
        node = todo.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt not in seen:
                seen[nxt] = node
                todo.append(nxt)
    return seen


def _chain(parents: dict[str, str], end: str) -> str:
    chain = [end]
    while parents[chain[-1]]:
        chain.append(parents[chain[-1]])
    return " -> ".join(reversed(chain))


def _under(name: str, pkg: str) -> bool:
    return name == pkg or name.startswith(pkg + ".")


def contract_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every breach of rules (a)-(d) of the module doc, as one line each (empty when the contract holds)."""
    out = []
    cycle = find_cycle(graph)
    if cycle:
        out.append("import cycle: " + " -> ".join(cycle))
    for mod in sorted(graph):
        if not _under(mod, "emitters"):
            continue
        for dep in sorted(graph[mod]):
            if _under(dep, "ptxgen") and not (_under(dep, "ptxgen.ir") or dep == "ptxgen.errors"):
                out.append(f"{mod} imports {dep}: emitters may import only ptxgen.ir* and ptxgen.errors")
        parents = reach(graph, mod)
        if "ptxgen" in parents:
            out.append(f"{mod} reaches ptxgen/__init__: {_chain(parents, 'ptxgen')}")
    for mod in sorted(graph):
        if not (_under(mod, "emitters") or _under(mod, "ptxgen.check")):
            continue
        parents = reach(graph, mod)
        for dep in sorted(parents):
            if _under(dep, "ptxgen.plan") or _under(dep, "ptxgen.config"):
                out.append(f"{mod} reaches {dep}: {_chain(parents, dep)}")
    for mod in sorted(graph):
        for dep in sorted(graph[mod]):
            if any(_under(mod, p) for p in COMPILE_PATH) and _under(dep, "ptxgen.check"):
                out.append(f"{mod} imports {dep}: the compile path never imports the check wing")
            if _under(mod, "ptxgen.check") and _under(dep, "ptxgen") and not any(_under(dep, p) for p in CHECK_MAY_IMPORT):
                out.append(f"{mod} imports {dep}: the check wing may import only {', '.join(CHECK_MAY_IMPORT)}")
            if _under(mod, "ptxgen") and mod != "ptxgen.build" and _under(dep, "emitters"):
                out.append(f"{mod} imports {dep}: only ptxgen.build calls the emitters")
    return out


# ---------------------------------------------------------------- the real tree


def test_graph_sees_the_packages():
    """The graph is built from the real tree (guards against a checker that reads nothing)."""
    graph = module_graph()
    assert {"ptxgen", "ptxgen.ir", "ptxgen.ir.ops", "emitters", "emitters.core", "ptxgen.check.walker"} <= set(graph)
    assert "ptxgen.ir.ops" in graph["emitters.core"]
    assert "ptxgen.runtime.api" in graph["ptxgen"]  # the package __init__'s re-export is an edge
    # function-level (lazy) imports count: ptxgen/__init__'s dual_gemm_nvfp4 imports runtime.nvfp4 inside
    assert "ptxgen.runtime.nvfp4" in graph["ptxgen"]


def test_import_contract_holds():
    assert contract_violations(module_graph()) == []


# ---------------------------------------------------------------- planted violations


_CLEAN = {
    "ptxgen": {"ptxgen.runtime"},
    "ptxgen.runtime": {"ptxgen.build"},
    "ptxgen.build": {"emitters", "ptxgen.plan"},
    "ptxgen.plan": {"ptxgen.config", "ptxgen.ir"},
    "ptxgen.config": set(),
    "ptxgen.errors": set(),
    "ptxgen.ir": {"ptxgen.ir.ops"},
    "ptxgen.ir.ops": set(),
    "ptxgen.check.sim": {"ptxgen.check.walker"},
    "ptxgen.check.walker": {"ptxgen.ir.ops", "ptxgen.errors"},
    "emitters": {"emitters.core"},
    "emitters.core": {"ptxgen.ir", "ptxgen.errors"},
}


def _plant(**extra: set[str]) -> dict[str, set[str]]:
    graph = {k: set(v) for k, v in _CLEAN.items()}
    for mod, deps in extra.items():
        graph[mod.replace("__", ".")] |= deps
    return graph


def test_synthetic_clean_graph_passes():
    assert contract_violations(_plant()) == []


@pytest.mark.parametrize("extra, expected", [
    # a circle through the package: emitters -> ptxgen/__init__ -> runtime -> build -> emitters
    ({"emitters": {"ptxgen"}}, "import cycle: emitters -> ptxgen -> ptxgen.runtime -> ptxgen.build -> emitters"),
    ({"ptxgen__config": {"ptxgen.plan"}}, "import cycle: ptxgen.config -> ptxgen.plan -> ptxgen.config"),
    ({"ptxgen__ir__ops": {"ptxgen.ir"}}, "import cycle: ptxgen.ir -> ptxgen.ir.ops -> ptxgen.ir"),
    ({"emitters__core": {"ptxgen.runtime"}}, "emitters.core imports ptxgen.runtime: emitters may import only"),
    ({"emitters__core": {"ptxgen.plan"}}, "emitters.core imports ptxgen.plan"),
    ({"ptxgen__check__walker": {"ptxgen.config"}}, "ptxgen.check.walker reaches ptxgen.config"),
    # the check wing beside the compile path: neither side imports across in the wrong direction
    ({"ptxgen__runtime": {"ptxgen.check.sim"}}, "ptxgen.runtime imports ptxgen.check.sim: the compile path never"),
    ({"ptxgen__check__walker": {"ptxgen.runtime"}}, "ptxgen.check.walker imports ptxgen.runtime: the check wing may"),
    # transitive: the IR (allowed for emitters) pulling in the plan still breaks (c)
    ({"ptxgen__ir__ops": {"ptxgen.plan"}}, "emitters.core reaches ptxgen.plan: emitters.core -> ptxgen.ir"),
    # a second door into the emitters (the runtime emitting a kernel itself instead of through ptxgen.build)
    ({"ptxgen__runtime": {"emitters"}},
     "ptxgen.runtime imports emitters: only ptxgen.build calls the emitters"),
])
def test_planted_violation_is_caught(extra, expected):
    violations = contract_violations(_plant(**extra))
    assert any(v.startswith(expected) for v in violations), violations


def test_lazy_and_relative_imports_are_edges(tmp_path):
    """The parser itself: function-level, relative and re-export imports all become edges; parents do not."""
    (tmp_path / "ptxgen" / "ir").mkdir(parents=True)
    (tmp_path / "emitters").mkdir()
    (tmp_path / "ptxgen" / "__init__.py").write_text("def f():\n    from .plan import X\n")
    (tmp_path / "ptxgen" / "plan.py").write_text("from ptxgen.ir import ops\nif TYPE_CHECKING:\n    from . import emitless\n")
    (tmp_path / "ptxgen" / "emitless.py").write_text("")
    (tmp_path / "ptxgen" / "ir" / "__init__.py").write_text("from .ops import *\n")
    (tmp_path / "ptxgen" / "ir" / "ops.py").write_text("import os\nfrom .. import plan\n")
    (tmp_path / "emitters" / "__init__.py").write_text("import ptxgen.ir.ops\nfrom ptxgen.ir import Kernel\n")
    graph = module_graph(tmp_path)
    assert graph == {"ptxgen": {"ptxgen.plan"}, "ptxgen.plan": {"ptxgen.ir.ops"},
                     "ptxgen.ir": {"ptxgen.ir.ops"}, "ptxgen.ir.ops": {"ptxgen.plan"},
                     "emitters": {"ptxgen.ir", "ptxgen.ir.ops"}, "ptxgen.emitless": set()}
    assert find_cycle(graph) == ["ptxgen.ir.ops", "ptxgen.plan", "ptxgen.ir.ops"]
    assert any("emitters reaches ptxgen.plan" in v for v in contract_violations(graph))
