"""Where and how a study executes its artifacts: one :class:`Execution` value, built once by the command line (or
from a notebook's parameters) and passed down to the plan, the placement of every run and every notebook.

It holds the settings that decide where a run trains and what it reads, never what the papers specify: the device
(``--device``, resolved once where the study places its runs, :mod:`dmllab.pipeline.placement`), the datasets'
folder (``--data-root``), a fast dev run (``--fast-dev-run N``), training without pre-trained weights (``--pretrained
none``, fast dev runs only), reading real datasets without their canonical counts (``--no-counts``) and the torch
threads of each run (the placement's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

#: The notebook parameters an execution sets (``Execution.parameters``), beside ``profile`` and the seeds.
EXECUTION_FIELDS: tuple[str, ...] = ("device", "data_root", "fast_dev_run", "pretrained", "check_counts")


@dataclass(frozen=True)
class Execution:
    """Where and how a study's runs execute (module docstring).

    Args:
        device: "auto" (the study's placement chooses), "cpu", "cuda", "cuda:1", "mps".
        data_root: the folder holding the real datasets (``D/cub``, ..., or one dataset's folder).
        fast_dev_run: N > 0: every run is a fast dev run of N batches per epoch (``run.fast_dev_run``).
        pretrained: False: every run from random initialisation (fast dev runs only); None: as the presets say.
        check_counts: False: real datasets read without checking their canonical counts (a partial copy).
        threads: torch threads of each run (``run.threads``; None: as its config says, one on the CPU).
    """

    device: str = "auto"
    data_root: str | None = None
    fast_dev_run: int = 0
    pretrained: bool | None = None
    check_counts: bool = True
    threads: int | None = None

    def __post_init__(self) -> None:
        n = self.fast_dev_run
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"--fast-dev-run takes a number of batches >= 1, got {n!r}")
        if self.pretrained is False and not n:
            raise ValueError(
                "--pretrained none is for checking a study: add --fast-dev-run (a real study trains with the "
                "papers' pre-trained weights)"
            )
        if self.data_root is not None:
            object.__setattr__(self, "data_root", str(self.data_root))

    def on(self, device: str, threads: int | None = None) -> Execution:
        """This execution on ``device`` (resolved) with ``threads`` per run: where the placement put it."""
        return replace(self, device=device, threads=threads)

    def resolved(self) -> Execution:
        """This execution with its device resolved (``auto``: CUDA where there is one, else the CPU)."""
        from dmllab.profiles import resolve_device

        return replace(self, device=resolve_device(self.device))

    def parameters(self) -> dict[str, Any]:
        """The notebook parameters of this execution: the device, and every other field that differs from a real
        study's default."""
        out: dict[str, Any] = {"device": self.device}
        if self.data_root is not None:
            out["data_root"] = self.data_root
        if self.fast_dev_run:
            out["fast_dev_run"] = int(self.fast_dev_run)
        if self.pretrained is False:
            out["pretrained"] = False
        if not self.check_counts:
            out["check_counts"] = False
        return out

    @classmethod
    def from_parameters(cls, values: Any) -> Execution:
        """The execution a notebook's resolved parameters (a mapping with ``device`` ... ``check_counts``) name."""
        return cls(
            device=values.get("device") or "auto",
            data_root=values.get("data_root"),
            fast_dev_run=int(values.get("fast_dev_run") or 0),
            pretrained=values.get("pretrained"),
            check_counts=values.get("check_counts", True) is not False,
        )
