"""The trainer's sync-free path (CUDA without progress bar and step hooks), forced on the CPU: no tensor is read
on the host during a step, a diverging run is recorded diverged, and the loader workers end with their stage."""

from __future__ import annotations

import dataclasses
import multiprocessing
import sys
import traceback
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import dmllab
from dmllab.data.loaders import RunData
from dmllab.spec import Spec
from dmllab.training import (
    DivergedRunError,
    NonFiniteLossError,
    RunStore,
    Trainer,
    apply_overrides,
    presets,
    run,
)
from dmllab.training.protocol import run_protocol, stage_plans

#: The Python ways of reading a tensor's values on the host (on CUDA each waits for the device).
CONVERSIONS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__")
#: Operators whose output shape depends on the values (on CUDA they wait for the device to know it).
DATA_DEPENDENT = (
    "nonzero",
    "_unique2",
    "unique_consecutive",
    "unique_dim",
    "masked_select",
    "repeat_interleave",
)


PACKAGE = str(Path(dmllab.__file__).resolve().parent)


def _site() -> str:
    """The innermost dmllab function on the stack (else the innermost frame), as ``file:function``."""
    frames = traceback.extract_stack()[:-1]
    ours = [f for f in frames if str(Path(f.filename).resolve()).startswith(PACKAGE)]
    f = (ours or frames)[-1]
    return f"{Path(f.filename).name}:{f.name}"


class HostReads(TorchDispatchMode):
    """Within the block: every host read of a tensor (a Python conversion) and every data-dependent-shape
    operator, in ``reads`` as ``"<what> in <file>:<function>"``. ``host_only(t)``: a tensor that lives on the host
    on every device (not recorded)."""

    def __init__(self, host_only) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.host_only = host_only
        self.patch = pytest.MonkeyPatch()

    def __enter__(self):
        for name in CONVERSIONS:
            original = getattr(torch.Tensor, name)

            def read(t, *args, _original=original, _name=name, **kwargs):
                if not self.host_only(t):
                    self.reads.append(f"{_name} in {_site()}")
                return _original(t, *args, **kwargs)

            self.patch.setattr(torch.Tensor, name, read)
        return super().__enter__()

    def __exit__(self, *exc):
        self.patch.undo()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        bool_index = name == "index" and any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1]
        )
        if name in DATA_DEPENDENT or bool_index:
            self.reads.append(f"{name} in {_site()}")
        return func(*args, **(kwargs or {}))


def _trainer(cfg, monkeypatch):
    monkeypatch.setattr(Trainer, "_sync_free_steps", lambda self: True)
    tr = Trainer(cfg, progress=False)
    plan = stage_plans(cfg)[0]
    tr.setup(plan)
    tr.apply_schedule(plan, plan.warmup_epochs + 1)
    return tr, plan


def _smoke(method, *overrides):
    return apply_overrides(presets.get(method, "synthetic", "smoke"), list(overrides))


def _mixup(cfg):
    return dataclasses.replace(cfg, loss=Spec("input_mixup", {"alpha": 0.5}, wraps=cfg.loss))


CASES = {
    "proxynca++": lambda: _smoke("proxynca++"),
    "proxy_anchor": lambda: _smoke("proxy_anchor"),
    "proxy_synthesis": lambda: _smoke("proxy_synthesis"),
    "proxy_synthesis random pairs": lambda: _smoke("proxy_synthesis", "loss.pairing=random"),
    "heated_softmax learned alpha": lambda: _smoke("heated_softmax", "loss.learn_alpha=true"),
    "input mixup": lambda: _mixup(_smoke("proxynca++")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_sync_free_step_reads_nothing_on_the_host(case, monkeypatch):
    """The steps of an epoch read no tensor on the host: the epoch's reads do not grow with its steps, and the
    only one is the end-of-epoch read of the loss sum and the check flags (EpochLoss.mean). Left out: the
    optimiser's step counters and the loss's draws from its CPU generator (lambda of Proxy Synthesis and mixup),
    which are host tensors on CUDA too."""
    tr, plan = _trainer(CASES[case](), monkeypatch)
    batches = list(tr.data.train_batches(plan.name, plan.train_split, 1, tr.batch_shape(plan.train_split)))
    batches = (batches * 4)[:4]
    tr.train_batches(plan, 1, batches[:1])  # optimiser state created

    def host_only(t) -> bool:
        steps = [s.get("step") for s in tr.optimizer.state.values()]
        return any(t is s for s in steps) or _site().endswith("synthesis.py:_log_gamma_sample")

    reads = {}
    for n in (2, 4):
        with HostReads(host_only) as mode:
            tr.train_batches(plan, 2, batches[:n])
        reads[n] = mode.reads
    assert reads[2] == reads[4] == ["tolist in evaluation.py:mean"], reads


def test_the_eager_path_still_reads_the_checks(monkeypatch):
    """The same counter sees the per-step reads of the eager path (the counter can fail)."""
    cfg = presets.get("proxynca++", "synthetic", "smoke")
    tr, plan = _trainer(cfg, monkeypatch)
    monkeypatch.setattr(Trainer, "_sync_free_steps", lambda self: False)
    batches = list(tr.data.train_batches(plan.name, plan.train_split, 1, tr.batch_shape(plan.train_split)))[
        :2
    ]
    with HostReads(lambda t: False) as mode:
        tr.train_batches(plan, 1, batches)
    assert sum("check_embeddings" in r for r in mode.reads) == 2
    assert sum("check_labels" in r for r in mode.reads) == 4  # min and max per step


def _diverging(smoke_cfg):
    """A run whose lr makes its embeddings NaN in the first epoch."""
    return apply_overrides(smoke_cfg, ["optim.lr=1e30", "run.two_stage=false", "schedule.epochs=2"])


def test_a_diverging_run_on_the_sync_free_path_is_recorded_diverged(smoke_cfg, tmp_path, monkeypatch):
    """Inside the sync-free steps the losses' input checks are flags: the NaN embeddings of a diverged network
    reach the end of the epoch, which raises NonFiniteLossError, and the store records the run as diverged
    (asking again raises DivergedRunError without training)."""
    cfg = _diverging(smoke_cfg)
    monkeypatch.setattr(Trainer, "_sync_free_steps", lambda self: True)
    store = RunStore(tmp_path / "runs")
    with pytest.raises(NonFiniteLossError, match="non-finite loss or embeddings in stage single, epoch 1"):
        run(cfg, seed=0, store=store, progress=False)
    assert store.diverged(cfg, 0)["error"].startswith("NonFiniteLossError")
    with pytest.raises(DivergedRunError, match="recorded as diverged"):
        run(cfg, seed=0, store=store, progress=False)


def test_the_diverging_config_diverges_on_the_eager_path_too(smoke_cfg, tmp_path):
    with pytest.raises(NonFiniteLossError, match="epoch 1"):
        run(_diverging(smoke_cfg), seed=0, store=RunStore(tmp_path / "runs"), progress=False)


def test_loader_workers_end_with_their_stage(smoke_cfg, monkeypatch):
    """A stage's DataLoader workers (an iterator kept across epochs, as on CUDA) are gone when fit returns, and
    when the stage fails."""
    if not sys.platform.startswith("linux"):
        pytest.skip("forked loader workers")
    monkeypatch.setattr(RunData, "_persistent_workers", lambda self: self.workers > 0)
    cfg = apply_overrides(smoke_cfg, ["data.num_workers=1", "run.two_stage=false", "schedule.epochs=2"])
    before = set(multiprocessing.active_children())
    alive = []

    class Count:
        def on_epoch_end(self, trainer, epoch, row):
            alive.append(len(set(multiprocessing.active_children()) - before))

    tr = Trainer(cfg, hooks=(Count(),), progress=False)
    tr.setup(stage_plans(cfg)[0])
    tr.fit()
    assert alive and all(n >= 1 for n in alive)  # the workers lived through the epochs
    assert set(multiprocessing.active_children()) - before == set()

    class Fail:
        def on_epoch_end(self, trainer, epoch, row):
            raise KeyboardInterrupt("stop")

    tr = Trainer(cfg, hooks=(Fail(),), progress=False)
    tr.setup(stage_plans(cfg)[0])
    with pytest.raises(KeyboardInterrupt):
        tr.fit()
    assert set(multiprocessing.active_children()) - before == set()
    import dmllab.training.protocol as protocol

    at_result = []
    result = protocol.RunResult

    def record(*args, **kwargs):  # the run's result is built while its trainer still exists
        at_result.append(set(multiprocessing.active_children()) - before)
        return result(*args, **kwargs)

    monkeypatch.setattr(protocol, "RunResult", record)
    run_protocol(cfg, progress=False)  # the test evaluation's loader workers end before the run returns
    assert at_result == [set()]
