"""docs/preregistration.md against the code: every constant its tables name holds the value written there."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "preregistration.md"
ROW = re.compile(r"^\|\s*`(?P<name>[\w.]+)(?:\[\"(?P<key>\w+)\"\])?`\s*\|\s*(?P<value>[^|]+?)\s*\|")


def documented() -> list[tuple[str, str | None, str]]:
    """``(dotted name, subscript or None, value as written)`` of every table row that names a constant."""
    out = []
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            out.append((match["name"], match["key"], match["value"]))
    return out


def code_value(name: str, key: str | None) -> object:
    module, _, attribute = name.rpartition(".")
    value = getattr(importlib.import_module(module), attribute)
    return value[key] if key is not None else value


def as_written(value: object) -> str:
    """A constant as the document writes it: a sequence as its items joined by ", "."""
    if isinstance(value, (tuple, list)):
        return ", ".join(str(v) for v in value)
    return str(value)


def test_the_document_is_dated_and_names_constants():
    text = DOC.read_text()
    assert re.search(r"Dated \*\*\d{4}-\d{2}-\d{2}\*\*", text)
    names = {name for name, _, _ in documented()}
    assert {"dmllab.experiments.gate.THRESHOLD", "dmllab.experiments.stats.ALPHA_PER_SIDE"} <= names
    assert len(names) >= 10


@pytest.mark.parametrize(("name", "key", "value"), documented(), ids=lambda v: str(v))
def test_the_code_holds_the_documented_value(name, key, value):
    code = code_value(name, key)
    if isinstance(code, float):
        assert code == pytest.approx(float(value)), f"{name} is {code} in the code, {value} in {DOC.name}"
    else:
        assert as_written(code) == value, f"{name} is {code!r} in the code, {value!r} in {DOC.name}"


def test_a_changed_constant_is_caught(monkeypatch):
    """The comparison itself fails on a drift (a naive reference: the gate's bar set back to the old 10)."""
    from dmllab.experiments import gate

    monkeypatch.setattr(gate, "THRESHOLD", 10.0)
    row = next(r for r in documented() if r[0] == "dmllab.experiments.gate.THRESHOLD")
    assert code_value(row[0], row[1]) != pytest.approx(float(row[2]))
