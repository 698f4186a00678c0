"""The layout's rules, read from the imports (``ast``, every import in a module, in functions too):

* the product's packages are layered — ``exporter`` (what talks to Slurm, then what serves its snapshot)
  below ``autoscaler``, ``bridge`` and ``dashboards``, all below the composition root ``slurm_keda`` —
  and no module imports a higher layer (nor a sibling package of its own layer);
* inside ``exporter``, the Slurm side (client, versions, model, poller...) never imports the serving side
  (collector, server, listener, web config);
* nothing in the product imports the lab, the test kit or the tests; the lab imports no test code;
* no modules import each other in a circle.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.paths import ROOT

PRODUCT_LAYERS = {"exporter": 0, "autoscaler": 1, "bridge": 1, "dashboards": 1, "slurm_keda": 2}
"""Package → layer: an import may only go to a lower layer, or inside its own package."""
TOOLS = ("lab", "testkit", "tests", "benchmarks")
EXPORTER_SERVING = frozenset(
    {"exporter.aggregate", "exporter.collector", "exporter.server", "exporter.listen", "exporter.webconfig"}
)
"""The modules of ``exporter`` that serve the snapshot; the rest talk to Slurm or are shared helpers."""


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    out = {}
    for top in (*PRODUCT_LAYERS, *TOOLS):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "_proto" not in path.parts:
                out[_module(path)] = path
    return out


SOURCES = _sources()


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in ``body`` and in the blocks inside it (functions, classes, if/try/with/for/match):
    where an import can stand — the expressions around them (most of a module's nodes) are not walked."""
    for node in body:
        yield node
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                yield from _statements(inner)
        for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
            yield from _statements(part.body)


def _imports(module: str, path: Path) -> tuple[tuple[int, str], ...]:
    """(line, imported module) of every import in ``path``, resolved to a module of the checkout where one
    is named (``from pkg import mod`` → ``pkg.mod``), else to the named package or an outside module; each
    file read once per process (the checks share it)."""
    return _imports_among(module, path, frozenset(SOURCES))


@functools.cache
def _imports_among(module: str, path: Path, sources: frozenset[str]) -> tuple[tuple[int, str], ...]:
    found: list[tuple[int, str]] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _statements(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((node.lineno, full if full in sources else base))
    return tuple(found)


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in SOURCES}
    for module, path in SOURCES.items():
        for _, target in _imports(module, path):
            if target in SOURCES and target != module:
                graph[module].add(target)
    return graph


def _top(module: str) -> str:
    return module.split(".")[0]


def test_the_sources_are_found() -> None:
    assert {"slurm_keda.cli", "exporter.poller", "bridge.controller", "lab.control", "testkit.tools"} <= set(
        SOURCES
    )


def test_no_module_imports_a_higher_layer() -> None:
    wrong = []
    for module, path in SOURCES.items():
        top = _top(module)
        for line, target in _imports(module, path):
            other = _top(target)
            where = f"{path.relative_to(ROOT)}:{line}"
            layer = PRODUCT_LAYERS.get(top, -1)
            upward = other in PRODUCT_LAYERS and other != top and PRODUCT_LAYERS[other] >= layer
            if top in PRODUCT_LAYERS and other in TOOLS:
                wrong.append(f"{where}: the product imports {target}")
            elif top in PRODUCT_LAYERS and upward:
                wrong.append(f"{where}: {module} imports {target} (not below)")
            elif top == "lab" and other in ("testkit", "tests", "benchmarks"):
                wrong.append(f"{where}: the lab imports test code {target}")
    assert not wrong, "\n".join(wrong)


def test_the_slurm_side_of_exporter_never_imports_the_serving_side() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in _edges().items()
        if _top(module) == "exporter" and module not in EXPORTER_SERVING
        for target in targets
        if target in EXPORTER_SERVING
    ]
    assert not wrong, wrong


def test_no_import_cycles() -> None:
    graph = _edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_checks_catch_an_upward_import_and_a_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the checker itself, on a made-up checkout: exporter.poller imports the root, lab.a and lab.b import
    # each other
    files = {
        "exporter/__init__.py": "",
        "exporter/poller.py": "from slurm_keda.settings import Settings\n",
        "slurm_keda/__init__.py": "",
        "slurm_keda/settings.py": "from exporter import poller\n",
        "lab/__init__.py": "",
        "lab/a.py": "from lab import b\n",
        "lab/b.py": "def f():\n    from lab.a import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "ROOT", tmp_path)
    monkeypatch.setattr(here, "SOURCES", _sources())
    with pytest.raises(AssertionError, match=r"exporter\.poller imports slurm_keda\.settings"):
        test_no_module_imports_a_higher_layer()
    with pytest.raises(AssertionError, match=r"\['exporter.poller', 'slurm_keda.settings'\]"):
        test_no_import_cycles()
    monkeypatch.setattr(here, "SOURCES", {k: v for k, v in _sources().items() if k.startswith("lab")})
    with pytest.raises(AssertionError, match=r"\['lab.a', 'lab.b'\]"):
        test_no_import_cycles()
