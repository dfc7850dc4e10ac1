"""No import circle among dmllab's modules: the package is built in floors, and a module never imports (directly
or through others) a module that imports it.

What counts, read statically from the source (``ast``), not by importing anything:

* every ``import a.b`` and ``from a.b import c`` of a ``dmllab`` module, at module level *and* inside functions
  (a function-level import that closes a circle is still a circle: it only hides it until the call);
* relative imports, resolved against the importing module's package;
* ``from a.b import c`` is an edge to the module ``a.b.c`` when that is a module, else to ``a.b``;
* not counted: imports under ``if TYPE_CHECKING:`` (never executed; annotations only), and the implicit import of
  a package's ``__init__`` when one of its submodules is imported.

A circle is a strongly connected component of that graph with more than one module, or a module importing itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dmllab

ROOT = Path(dmllab.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def import_graph() -> dict[str, set[str]]:
    """``module -> the dmllab modules it imports`` (module docstring)."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_blocks(tree)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else known(base)
                    for alias in node.names
                ]
            graph[module] |= {t for t in targets if t and t.startswith("dmllab")}
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


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    graph = {"dmllab.a": {"dmllab.b"}, "dmllab.b": {"dmllab.c"}, "dmllab.c": {"dmllab.a"}, "dmllab.d": set()}
    assert circles(graph) == [["dmllab.a", "dmllab.b", "dmllab.c"]]
    assert circles({"dmllab.a": {"dmllab.a"}}) == [["dmllab.a"]]
    real = import_graph()
    assert "dmllab.models.weights" in real["dmllab.models.backbones"]  # a module-level import
    assert "dmllab.experiments.lookup" in real["dmllab.pipeline.notebook"]
    assert "dmllab.training.store" in real["dmllab.experiments.lookup"]  # imported inside methods only
