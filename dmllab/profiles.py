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
#: The same on a GPU (one run per GPU, ``--jobs auto``). quick: the mean ``wall_time_s`` of the two warm quick
#: ProxyNCA++ runs (18.4 s, 20.0 s) that ``benchmarks/bench_gpu.py`` trained on an NVIDIA H100
#: (``results/benchmarks/gpu.csv``, ``quick_run``): the small CNN gains little from a GPU. paper: no basis (no
#: paper run has been timed on a GPU): a GPU plan on an empty run store then says its estimate is unknown instead
#: of guessing from CPU times.
TYPICAL_GPU_RUN_S: dict[str, float | None] = {"smoke": None, "quick": 19.2, "paper": None}


def typical_run_s(profile: str, device: str) -> float | None:
    """The typical run of ``profile`` on ``device`` (:data:`TYPICAL_RUN_S` on the CPU,
    :data:`TYPICAL_GPU_RUN_S` on an accelerator); None: no basis."""
    table = TYPICAL_RUN_S if str(device).split(":", 1)[0] == "cpu" else TYPICAL_GPU_RUN_S
    return table.get(profile)


def resolve_device(device: str) -> str:
    """``"auto"`` -> cuda if available, else mps, else cpu; any other name is returned unchanged.

    Raises:
        ValueError: a name that is not one of :data:`DEVICES` (``"cuda:1"`` is accepted), or ``"cuda"`` on a
            machine without CUDA (instead of a later, less clear error from torch).
    """
    import torch

    if device != "auto":
        kind = device.split(":", 1)[0]
        if kind not in DEVICES or kind == "auto":
            raise ValueError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} but CUDA is not available; use auto or cpu")
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"
