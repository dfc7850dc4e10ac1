"""Reliability: config validation, the run key of real datasets, lock and temporary-folder cleanup, corrupt
epoch checkpoints, diverged embeddings never stored, loaders (auto workers, per-sample seeds, sync-free
steps)."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from dmllab.data.feed import SeededSamples, sample_seeds
from dmllab.data.loaders import RunData, resolve_num_workers
from dmllab.metrics import CollapsedEmbeddingError, NonFiniteEmbeddingError
from dmllab.training import RunStore, Trainer, apply_overrides, build, presets, run
from dmllab.training.config import ConfigValueError, check_value, validate
from dmllab.training.evaluation import NonFiniteLossError, check_embeddings
from dmllab.training.protocol import CorruptCheckpointError, _resume_state, load_checkpoint, save_atomic
from dmllab.training.store import run_key

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from data_layouts import make_cub  # noqa: E402


# ------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("schedule.epochs=0", r"schedule.epochs must be a positive integer, got 0"),
        ("schedule.epochs=-3", "schedule.epochs"),
        ("loss.temperature=nan", r"loss: temperature must be a finite number > 0; got nan"),
        ("loss.temperature=0", "loss: temperature"),
        ("loss.temperature=-0.1", "loss: temperature"),
        ("run.seed=-1", r"run.seed must be an integer >= 0, got -1"),
        ("data.num_workers=many", "data.num_workers"),
        ("optim.lr=nan", "optim.lr"),
    ],
)
def test_config_rejects_what_cannot_work(smoke_cfg, override, match):
    """A section's field is checked by the override itself; a component's keyword (the loss's temperature) by
    its constructor, which :func:`dmllab.training.build.check` (and so the trainer) calls at a toy size."""
    with pytest.raises(ConfigValueError, match=match):
        cfg = apply_overrides(smoke_cfg, [override])
        if override.startswith("loss."):
            build.check(cfg)
    assert issubclass(ConfigValueError, ValueError)


def test_validate_is_reusable_and_called_by_the_trainer(smoke_cfg):
    check_value("schedule.epochs", 3)
    check_value("loss.temperature", 0.05)
    assert build.check(smoke_cfg.replace("loss.temperature", 0.05)).loss.get("temperature") == 0.05
    with pytest.raises(ConfigValueError, match="loss: temperature must be a finite number > 0; got inf"):
        build.check(smoke_cfg.replace("loss.temperature", float("inf")))  # the loss constructor's own check
    with pytest.raises(ConfigValueError, match="loss.margin is NaN"):  # a key without a rule of its own
        check_value("loss.margin", float("nan"))
    with pytest.raises(ConfigValueError, match="NaN"):
        check_value("loss.some_weight", float("nan"))
    bad = smoke_cfg.replace("schedule.epochs", 0)  # replace() does not validate; the trainer does
    with pytest.raises(ConfigValueError, match="schedule.epochs"):
        Trainer(bad, progress=False)
    with pytest.raises(ConfigValueError, match="loss: temperature"):  # and builds every component once
        Trainer(smoke_cfg.replace("loss.temperature", float("inf")), progress=False)
    with pytest.raises(ConfigValueError, match="run.seed"):
        Trainer(smoke_cfg, progress=False, seed=-2)
    assert validate(smoke_cfg) is smoke_cfg
    assert apply_overrides(smoke_cfg, ["data.num_workers=auto"]).data.num_workers == "auto"


def test_every_preset_is_valid():
    for m in presets.list_methods():
        for d in presets.list_datasets():
            validate(presets.get(m, d, "paper"))


def test_auto_workers(monkeypatch):
    """ "auto": the cores of the process's affinity minus 2 (the trainer and the pin-memory thread), at least 0."""
    monkeypatch.setattr("dmllab.validation.usable_cores", lambda: 16)
    assert resolve_num_workers("auto") == 14 and resolve_num_workers(3) == 3
    monkeypatch.setattr("dmllab.validation.usable_cores", lambda: 2)
    assert resolve_num_workers("auto") == 0
    monkeypatch.setattr("dmllab.validation.usable_cores", lambda: 1)
    assert resolve_num_workers("auto") == 0


# ------------------------------------------------------------------------------------------------ run key
def test_run_key_follows_the_dataset_copy(tmp_path):
    a = make_cub(tmp_path / "a" / "CUB_200_2011")
    b = tmp_path / "b" / "CUB_200_2011"
    shutil.copytree(a, b)
    cfg = presets.get("proxynca++", "cub", "smoke")
    ka, kb = run_key(cfg.replace("data.root", str(a))), run_key(cfg.replace("data.root", str(b)))
    assert ka == kb  # data.root is not part of the key, the copy is
    next((b / "images").rglob("*.jpg")).unlink()  # a partial copy under the same dataset name
    assert run_key(cfg.replace("data.root", str(b))) != ka
    assert run_key(cfg.replace("data.root", str(tmp_path / "none"))) != ka  # no data: a key all the same


# ------------------------------------------------------------------------------------------------ store
def test_failed_run_leaves_no_lock_only_folder(smoke_cfg, tmp_path, monkeypatch):
    import dmllab.training.store as store_mod

    def boom(*a, **k):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(store_mod, "run_protocol", boom)
    store = RunStore(tmp_path / "runs")
    with pytest.raises(RuntimeError):
        run(smoke_cfg, seed=0, store=store, progress=False)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [".locks"]  # no run folder, only the lock


def test_lock_is_exclusive_and_reacquirable(smoke_cfg, tmp_path):
    from filelock import FileLock, Timeout

    store = RunStore(tmp_path / "runs")
    lock = store.lock_path(smoke_cfg, 0)
    for _ in range(2):
        with store.lock(smoke_cfg, 0):
            assert lock.is_file() and json.loads(lock.read_text())["pid"] == os.getpid()
            with pytest.raises(Timeout):  # another holder cannot take it
                FileLock(str(lock)).acquire(timeout=0)
        free = FileLock(str(lock))
        free.acquire(timeout=0)  # free again after the block
        free.release()


def test_full_disk_leaves_no_temporary_folder(smoke_cfg, tmp_path, monkeypatch):
    import dmllab.training.store as store_mod
    from dmllab.training.protocol import RunResult

    calls = []

    def full(path, obj):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        Path(path).write_text("{}")

    monkeypatch.setattr(store_mod, "_write_json", full)
    monkeypatch.setattr(store_mod, "provenance", lambda *a: {})  # no git / version look-ups: fast
    result = RunResult({"R@1": 0.5}, [], None, [], 1.0, "abc", 0, "cpu")
    store = RunStore(tmp_path / "runs")
    with pytest.raises(OSError, match="No space"):
        store.save(smoke_cfg, 0, result)
    leftovers = [p.name for p in (tmp_path / "runs").rglob("*")]
    assert not any(".tmp-" in n for n in leftovers) and not any(n == "seed0" for n in leftovers)


def test_atomic_checkpoint_write_cleans_up(tmp_path, monkeypatch):
    def failing_save(obj, fh):
        fh.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="last.pt") as info:
        save_atomic({"a": 1}, tmp_path / "last.pt")
    assert info.value.filename == str(tmp_path / "last.pt")  # the full disk names the file being written
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ checkpoints
def test_corrupt_checkpoint_is_named_moved_aside_and_the_run_restarts(tmp_path, capsys):
    ckpt = tmp_path / "last.pt"
    ckpt.write_bytes(b"\x80\x02garbage, not a zip")
    with pytest.raises(CorruptCheckpointError, match="corrupt or truncated"):
        load_checkpoint(ckpt)
    assert _resume_state(ckpt) is None
    err = capsys.readouterr().err
    assert "last.pt is corrupt" in err and "last.pt.corrupt" in err and "from scratch" in err
    assert not ckpt.exists() and (tmp_path / "last.pt.corrupt").is_file()
    assert "weights_only" not in err
    torch.save({"unrelated": 1}, ckpt)
    assert _resume_state(ckpt) is None and "lacks" in capsys.readouterr().err
    (tmp_path / "dir.pt").mkdir()
    with pytest.raises(CorruptCheckpointError, match="is a folder"):
        load_checkpoint(tmp_path / "dir.pt")


def test_run_with_corrupt_last_pt_completes(smoke_cfg, tmp_path, capsys):
    cfg = smoke_cfg.replace("schedule.epochs", 1).replace("run.two_stage", False)
    store = RunStore(tmp_path / "runs")
    ckpt = store.checkpoint_dir(cfg, 0) / "last.pt"
    # another test may have trained this key in the session cache
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_bytes(b"truncated")
    res = run(cfg, seed=0, store=store, progress=False)
    assert not res.cached and (ckpt.parent / "last.pt.corrupt").is_file()
    assert "restarting the run from scratch" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ embeddings
def test_check_embeddings_refuses_diverged_models():
    check_embeddings(torch.randn(5, 3), "val")
    with pytest.raises(NonFiniteEmbeddingError, match="split 'test' contain NaN"):
        check_embeddings(torch.tensor([[1.0, math.nan]]), "test")
    check_embeddings(torch.tensor([[1e19, 1e19], [0.0, 0.0]]), "test")  # |x|^2 = 2e38: still representable
    with pytest.raises(NonFiniteEmbeddingError, match=r"reach \|x\| = 4.24e\+19.*overflow float32"):
        check_embeddings(torch.tensor([[3e19, 3e19], [0.0, 0.0]]), "test")
    with pytest.raises(CollapsedEmbeddingError, match="split 'val' are collapsed"):
        check_embeddings(torch.full((4, 3), 0.25), "val")
    with pytest.raises(CollapsedEmbeddingError, match="collapsed"):  # nearly: rounding-level differences
        check_embeddings(torch.full((4, 3), 2.0) + 1e-6 * torch.randn(4, 3), "val")
    check_embeddings(
        torch.full((4, 3), 2.0) + 1e-3 * torch.randn(4, 3), "val"
    )  # a bad model, not a failed one


def test_diverged_run_is_recorded_not_stored_and_not_retrained(smoke_cfg, tmp_path):
    from dmllab.training import DivergedRunError

    cfg = smoke_cfg.replace("schedule.epochs", 1).replace("run.two_stage", False)
    calls = []

    class Diverge:  # after the last epoch the head outputs NaN: the test evaluation must refuse it
        def on_epoch_end(self, trainer, epoch, row):
            calls.append(epoch)
            with torch.no_grad():
                for p in trainer.model.head.parameters():
                    p.fill_(math.nan)

    store = RunStore(tmp_path / "runs")
    with pytest.raises(NonFiniteEmbeddingError):
        run(cfg, seed=0, store=store, hooks=(Diverge(),), progress=False)
    assert store.load(cfg, 0) is None  # no metrics of a diverged model
    files = [p.name for p in (tmp_path / "runs").rglob("*") if p.is_file() and p.suffix != ".lock"]
    # only the record, the curves of the epochs it trained (and the run's lock file): no partial run
    assert sorted(files) == ["curves.jsonl", "diverged.json"]
    record = store.diverged(cfg, 0)
    assert record["error"].startswith("NonFiniteEmbeddingError") and record["seed"] == 0

    n = len(calls)
    with pytest.raises(DivergedRunError, match="recorded as diverged"):
        run(cfg, seed=0, store=store, hooks=(Diverge(),), progress=False)
    assert len(calls) == n  # asked again: raised at once, nothing trained
    assert store.diverged(cfg, 1) is None  # another seed is another run

    result = run(cfg, seed=0, store=store, progress=False, force=True)  # force retrains (here: no NaN hook)
    assert store.load(cfg, 0) is not None and store.diverged(cfg, 0) is None
    assert "R@1" in result.metrics


def test_collapsed_run_is_recorded_like_a_diverged_one(smoke_cfg, tmp_path):
    from dmllab.training import DivergedRunError

    cfg = smoke_cfg.replace("schedule.epochs", 1).replace("run.two_stage", False)

    class Collapse:  # after the last epoch the head maps every image to its bias: one point
        def on_epoch_end(self, trainer, epoch, row):
            with torch.no_grad():
                for name, p in trainer.model.head.named_parameters():
                    p.fill_(0.0 if "weight" in name else 0.5)

    store = RunStore(tmp_path / "runs")
    with pytest.raises(CollapsedEmbeddingError, match="collapsed"):
        run(cfg, seed=0, store=store, hooks=(Collapse(),), progress=False)
    assert store.load(cfg, 0) is None
    assert store.diverged(cfg, 0)["error"].startswith("CollapsedEmbeddingError")
    with pytest.raises(DivergedRunError, match="recorded as diverged"):
        run(cfg, seed=0, store=store, progress=False)


# ------------------------------------------------------------------------------------------------ loaders
def test_seeded_samples_do_not_depend_on_order():
    class Noisy(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return i, torch.rand(()).item()

    items = [it for batch in sample_seeds([[0, 1], [2, 3]], seed=7) for it in batch]
    assert len({s for _, s in items}) == 4
    ds = SeededSamples(Noisy())
    forward = [ds[it] for it in items]
    backward = [ds[it] for it in reversed(items)][::-1]
    assert forward == backward
    assert [ds[it] for b in sample_seeds([[0, 1], [2, 3]], seed=8) for it in b] != forward


def _epoch(tr, epoch):
    """The images and labels of the trainer's training batches of ``epoch``, and the iterator serving them."""
    plan = tr.state.plan
    batches = tr.data.train_batches(plan.name, plan.train_split, epoch, tr.batch_shape(plan.train_split))
    out = [(x.clone(), y.clone()) for x, y in batches]
    return out, tr.data._streams[(plan.name, plan.train_split)]


def _persistent_trainer(cfg, monkeypatch):
    """A trainer whose DataLoader path keeps its iterator across epochs, as on CUDA with workers."""
    monkeypatch.setattr(RunData, "_persistent_workers", lambda self: self.workers > 0)
    tr = Trainer(cfg.replace("data.num_workers", 1), progress=False)
    tr.setup(presets_stage(cfg))
    return tr


def test_one_loader_iterator_spans_the_epochs_and_draws_what_a_fresh_one_draws(smoke_cfg, monkeypatch):
    """Epoch 2 read from the iterator that served epoch 1 (its workers decoding across the boundary) has the
    batches of an iterator started at epoch 2 (a resumed run): every sample is seeded by its epoch and position."""
    tr = _persistent_trainer(smoke_cfg, monkeypatch)
    try:
        first, a = _epoch(tr, 1)
        second, b = _epoch(tr, 2)
        assert a is b and a.next_epoch == 3
        assert not all(torch.equal(x, y) for (x, _), (y, _) in zip(first, second))
    finally:
        tr.data.close()
    fresh = _persistent_trainer(smoke_cfg, monkeypatch)
    try:
        resumed, c = _epoch(fresh, 2)
        assert c is not a and len(resumed) == len(second)
        assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(second, resumed))
        again, d = _epoch(fresh, 2)  # not the epoch that follows: a new iterator, the same batches
        assert d is not c and all(torch.equal(x, u) for (x, _), (u, _) in zip(again, resumed))
    finally:
        fresh.data.close()


def test_evaluation_split_is_decoded_once(smoke_cfg, monkeypatch):
    tr = _persistent_trainer(smoke_cfg, monkeypatch)
    try:
        first = [(x.clone(), y.clone()) for x, y in tr.data.eval_batches("val")]
        assert "val" in tr.data._eval_cache
        monkeypatch.setattr(
            RunData, "dataset", lambda *a, **k: pytest.fail("the cached split was decoded again")
        )
        again = list(tr.data.eval_batches("val"))
        assert len(again) == len(first)
        assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(first, again))
    finally:
        tr.data.close()


def test_loader_workers_fork_on_linux_even_in_a_spawned_study_worker(smoke_cfg, monkeypatch):
    """A study's training worker is a spawned process whose default start method is spawn; the trainer's
    DataLoader workers are forked on Linux all the same (as under `dmllab train`), and without workers the
    platform's default stays."""
    import multiprocessing
    import sys

    from dmllab.data.loaders import loader_context

    assert loader_context(0) is None
    if not sys.platform.startswith("linux"):
        assert loader_context(2) is None
        return
    assert loader_context(2).get_start_method() == "fork"
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)  # as in a study worker
    try:
        tr = _persistent_trainer(smoke_cfg, monkeypatch)
        try:
            _, stream = _epoch(tr, 1)
            list(tr.data.eval_batches("val"))
            loaders = [stream.loader, tr.data._persistent[("eval", "val")]]
            assert all(x.multiprocessing_context.get_start_method() == "fork" for x in loaders)
        finally:
            tr.data.close()
    finally:
        multiprocessing.set_start_method(before, force=True)


def presets_stage(cfg):
    from dmllab.training.protocol import stage_plans

    return stage_plans(cfg)[0]


def test_sync_free_steps_give_the_same_losses(smoke_cfg, monkeypatch):
    cfg = smoke_cfg.replace("schedule.epochs", 1).replace("run.two_stage", False)

    def mean_loss():
        tr = Trainer(cfg, progress=False)
        tr.setup(presets_stage(cfg))
        return tr.train_epoch(tr.state.plan, 1)

    plain = mean_loss()
    monkeypatch.setattr(Trainer, "_sync_free_steps", lambda self: True)
    assert mean_loss() == pytest.approx(plain, rel=1e-12)
    monkeypatch.setattr(build, "build_loss", _nan_loss)  # the trainer builds its loss through build
    with pytest.raises(NonFiniteLossError, match="epoch 1"):
        mean_loss()


def _nan_loss(cfg, num_classes):
    class NaNLoss(torch.nn.Module):
        def forward(self, emb, labels):
            return emb.sum() * math.nan

    return NaNLoss()
