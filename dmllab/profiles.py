"""The three profiles every artifact, preset and notebook knows, and where a run executes.

``smoke`` (seconds, for tests), ``quick`` (the offline benchmark on 2 CPU cores: the embedded default) and
``paper`` (the real datasets and the authors' hyper-parameters, on a GPU). This is the only definition.
"""

from __future__ import annotations

PROFILES: tuple[str, ...] = ("smoke", "quick", "paper")
#: Profiles whose runs need a GPU: a SLURM job of theirs asks for one unless told otherwise (``--gpus-per-job``).
GPU_PROFILES: tuple[str, ...] = ("paper",)


DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda", "mps")

#: Typical wall time of one training run per profile on the CPU: the study plan's estimate for a run when the
#: run store holds no run of that profile yet; None: no basis. quick: the mean run (``run_mean_s`` of
#: ``benchmarks/bench_study.py``) of ``make study`` from empty on a 2-core AMD EPYC Zen 3 (AVX2) machine, 2
#: jobs of one torch thread each; faster CPUs take less (docs/guide/study.md, "What it costs").
TYPICAL_RUN_S: dict[str, float | None] = {"smoke": None, "quick": 25.9, "paper": None}
#: Typical wall time of pre-training one SmallCNN trunk of width 16 (4 epochs, ``dmllab pretrain``) on one idle CPU
#: thread of that machine (40.8 s measured); a wider trunk costs about (width / 16)^2 times as much (its convolutions'
#: FLOPs). The study prepares the trunks one after another before its workers start: the plan adds them to its
#: estimate (:func:`dmllab.pipeline.plan_text.trunks_s`).
TYPICAL_TRUNK_S = 41.0
#: On a GPU the typical run is measured, not declared: ``benchmarks/bench_gpu.py``'s ``quick_run`` rows, read by the
#: study's cost model (:mod:`dmllab.pipeline.cost`).


def check_device(device: str) -> str:
    """``device`` (a name other than "auto"), checked: returned unchanged.

    Raises:
        ValueError: a name that is not one of :data:`DEVICES` (``"cuda:1"`` is accepted), or ``"cuda"`` on a
            machine without CUDA (instead of a later, less clear error from torch).
    """
    import torch

    kind = device.split(":", 1)[0]
    if kind not in DEVICES or kind == "auto":
        raise ValueError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} but CUDA is not available; use auto or cpu")
    return device


def resolve_device(device: str) -> str:
    """``"auto"`` -> cuda if available, else mps, else cpu; any other name is checked (:func:`check_device`) and
    returned unchanged. A study resolves its device once, where it places its runs
    (:func:`dmllab.pipeline.placement.plan_study`); everything after it receives the resolved device.

    Raises ValueError: as :func:`check_device`."""
    import torch

    if device != "auto":
        return check_device(device)
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"
