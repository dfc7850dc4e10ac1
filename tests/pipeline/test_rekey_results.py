"""The one-off re-keying of the committed results rewrites only the run keys (and fills the draw) of the rows
that name a run, byte for byte elsewhere, and refuses what it cannot map."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "rekey_results.py"
_spec = importlib.util.spec_from_file_location("rekey_results", _PATH)
rekey = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rekey)

HEADER = "experiment,variant,seed,metric,value,param_t,device,config_hash,run_id\n"
ROWS = 'a,"v, quoted",0,R@1,45.45090981803639,0.1,cpu,oldhash,oldkey/seed0\na,untrained,0,R@1,12.5,,cpu,,\n'


def _runs(key: str, ch: str, draw: int | None = 0) -> list[dict]:
    return [{"artifact": "a", "index": 0, "run_id": key, "config_hash": ch, "draw": draw}]


def test_only_the_keys_and_the_draw_of_run_rows_change(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(HEADER + ROWS)
    mapping = rekey.key_map(_runs("oldkey/seed0", "oldhash"), _runs("newkey/seed0", "newhash", 3))
    text, count = rekey.rekey_csv(path, mapping)
    assert count == 1
    assert text == (
        "experiment,variant,seed,draw,metric,value,param_t,device,config_hash,run_id\n"
        'a,"v, quoted",0,3,R@1,45.45090981803639,0.1,cpu,newhash,newkey/seed0\n'
        "a,untrained,0,,R@1,12.5,,cpu,,\n"
    )


def test_what_cannot_be_mapped_is_refused(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(HEADER + ROWS)
    with pytest.raises(SystemExit, match="not a run of the old quick plan"):
        rekey.rekey_csv(path, {})
    old = _runs("k/seed0", "h") + [{**_runs("k/seed0", "h")[0], "index": 1}]
    new = _runs("n/seed0", "h2") + [{**_runs("m/seed0", "h2")[0], "index": 1}]
    with pytest.raises(SystemExit, match="is two runs now"):
        rekey.key_map(old, new)
    with pytest.raises(SystemExit, match="plans differ"):
        rekey.key_map(old, new[:1])
