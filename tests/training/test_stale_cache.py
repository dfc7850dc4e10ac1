"""A run on a cache that a dmllab older than the CPU pin built warns (dmllab.numerics)."""

from __future__ import annotations

import platform

import pytest

from dmllab import numerics
from dmllab.training.store import RunStore, run


def test_a_run_on_an_old_cache_warns(smoke_cfg, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(numerics.CPU_ISA_VAR, raising=False)
    (tmp_path / "cache" / "synthetic").mkdir(parents=True)  # content but no stamp: an older dmllab's cache
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    store = RunStore(tmp_path / "runs")
    with pytest.warns(RuntimeWarning, match=r"no numerics\.json: an older dmllab built it") as caught:
        res = run(smoke_cfg, seed=0, store=store, progress=False)
    assert res.metrics and str(tmp_path / "runs") in str(caught[0].message)
