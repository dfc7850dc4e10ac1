"""No function of dmllab/ runs over 100 lines (decorators and docstrings included): a longer one is split into
steps that each have a name. Read statically from the source (``ast``), nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

import dmllab

ROOT = Path(dmllab.__file__).resolve().parent
MAX_LINES = 100


def long_functions(root: Path = ROOT, limit: int = MAX_LINES) -> list[tuple[str, str, int]]:
    """``(file, function, lines)`` of every function or method of ``root`` longer than ``limit`` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - start + 1
                if lines > limit:
                    found.append((rel, node.name, lines))
    return found


def test_no_function_runs_over_100_lines():
    long = [f"{f}:{name} ({n} lines)" for f, name, n in long_functions()]
    assert not long, "split these into named steps:\n" + "\n".join(long)


def test_the_measure_counts_every_line_of_a_function(tmp_path):
    pkg = tmp_path / "dmllab"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(99))
    (pkg / "m.py").write_text(f"def short():\n{body}\n\n\n@staticmethod\ndef long():\n{body}\n    return 0\n")
    assert long_functions(pkg) == [("dmllab/m.py", "long", 102)]  # decorator, def, 99 + 1 lines
