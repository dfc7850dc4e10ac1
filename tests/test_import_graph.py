"""dmllab is built in floors: a module imports only modules of its own floor or below (:data:`FLOORS`), and no
module imports (directly or through others) a module that imports it. The scripts of ``benchmarks/`` are the top
floor: they import dmllab and each other (by bare name, as scripts run from their folder do), never in a circle.

What counts, read statically from the source (``ast``), not by importing anything:

* every ``import a.b`` and ``from a.b import c`` of a ``dmllab`` module, at module level, *inside functions* (a
  function-level import that climbs or closes a circle still does: it only hides it until the call) and under
  ``if TYPE_CHECKING:`` (an annotation that names a higher floor ties the floors together as much as a call);
* relative imports, resolved against the importing module's package;
* ``from a.b import c`` is an edge to the module ``a.b.c`` when that is a module, else to ``a.b``;
* not counted: the implicit import of a package's ``__init__`` when one of its submodules is imported.

A circle is a strongly connected component of that graph with more than one module, or a module importing itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dmllab

ROOT = Path(dmllab.__file__).resolve().parent
SCRIPTS = "benchmarks"  # the folder beside the package whose scripts import each other by bare name


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    for path in sorted((root.parent / SCRIPTS).glob("*.py")):
        out[f"{SCRIPTS}.{path.stem}"] = path
    return out


#: The floors, bottom up: a module may import its own floor and those below. Keys are module names or packages
#: (a package covers its submodules); :func:`floor_of` finds the longest that matches.
FLOORS: dict[str, int] = {
    # 0: shared helpers that know no component
    **dict.fromkeys(
        [
            "dmllab",
            "dmllab.spec",
            "dmllab.registry",
            "dmllab.rng",
            "dmllab.validation",
            "dmllab.paths",
            "dmllab.fileio",
            "dmllab.numerics",
            "dmllab.profiles",
            "dmllab.results",
            "dmllab.reference",
            "dmllab.errors",
        ],
        0,
    ),
    # 1: the components
    **dict.fromkeys(["dmllab.losses", "dmllab.models", "dmllab.metrics", "dmllab.data"], 1),
    # 2: training (configs, presets, the trainer, the run store)
    "dmllab.training": 2,
    # 3: the toy models and the figures
    **dict.fromkeys(["dmllab.toys", "dmllab.plots"], 3),
    # 4: the paper artifacts
    "dmllab.experiments": 4,
    # 5: the study (plan, executors, notebooks, report, tuning)
    "dmllab.pipeline": 5,
    # 6: the command line
    "dmllab.cli": 6,
    "dmllab.__main__": 6,
    # 7: the benchmark and audit scripts
    SCRIPTS: 7,
}


def floor_of(module: str) -> int:
    """The floor of ``module``: its longest prefix in :data:`FLOORS`."""
    name = module
    while name not in FLOORS:
        name = name.rpartition(".")[0]
        if not name:
            raise KeyError(f"{module} is on no floor: add it (or its package) to FLOORS")
    return FLOORS[name]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``module -> the dmllab modules it imports`` (module docstring)."""
    modules = _modules(root)

    def known(name: str, script: bool = False) -> str | None:
        if script and f"{SCRIPTS}.{name}" in modules:  # a script's bare import of a script beside it
            return f"{SCRIPTS}.{name}"
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        script = module.startswith(f"{SCRIPTS}.")
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name, script) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if script and node.level == 0 and f"{SCRIPTS}.{node.module}" in modules:
                    graph[module].add(f"{SCRIPTS}.{node.module}")
                    continue
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else known(base)
                    for alias in node.names
                ]
            graph[module] |= {t for t in targets if t and t.startswith(("dmllab", f"{SCRIPTS}."))}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
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
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    graph = import_graph()
    found = circles(graph)
    detail = ["; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(c)))}" for m in c) for c in found]
    assert not found, "import circles:\n" + "\n".join(detail)


def test_no_import_climbs_a_floor():
    graph = import_graph()
    climbs = sorted(
        f"{a} (floor {floor_of(a)}) -> {b} (floor {floor_of(b)})"
        for a, targets in graph.items()
        for b in targets
        if floor_of(b) > floor_of(a)
    )
    assert not climbs, "imports that climb to a higher floor:\n" + "\n".join(climbs)


def test_every_module_has_a_floor():
    for module in import_graph():
        floor_of(module)  # raises naming the module


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    graph = {"dmllab.a": {"dmllab.b"}, "dmllab.b": {"dmllab.c"}, "dmllab.c": {"dmllab.a"}, "dmllab.d": set()}
    assert circles(graph) == [["dmllab.a", "dmllab.b", "dmllab.c"]]
    assert circles({"dmllab.a": {"dmllab.a"}}) == [["dmllab.a"]]
    real = import_graph()
    assert "dmllab.models.weights" in real["dmllab.models.backbones"]  # a module-level import
    assert "dmllab.experiments.lookup" in real["dmllab.pipeline.notebook"]
    assert "dmllab.training.store" in real["dmllab.experiments.lookup"]  # imported inside methods only
    assert floor_of("dmllab.training.presets.tuned") == 2 and floor_of("dmllab.cli") == 6
    assert {"benchmarks.audit_kit", "benchmarks.audit_boundaries", "dmllab.cli"} <= real["benchmarks.audit"]
    assert (
        "dmllab.models.smallcnn" in real["dmllab.training.numerics_fingerprint"]
    )  # the pin's check, above models
    # imports under TYPE_CHECKING and inside functions count
    pkg = tmp_path / "dmllab"
    (pkg / "pipeline").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "pipeline" / "__init__.py").write_text("")
    (pkg / "pipeline" / "study.py").write_text("")
    (pkg / "spec.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dmllab.pipeline import study\n"
    )
    (pkg / "rng.py").write_text("def f():\n    from dmllab.pipeline.study import x\n")
    toy = import_graph(pkg)
    assert toy["dmllab.spec"] == {"dmllab.pipeline.study"} and toy["dmllab.rng"] == {"dmllab.pipeline.study"}
