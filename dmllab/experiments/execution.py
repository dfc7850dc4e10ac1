"""Where and how a study executes its artifacts: one :class:`Execution` value, built once by the command line (or
from a notebook's ``execution`` parameter, its text: :meth:`Execution.parse`) and passed down to the plan, the
placement of every run and every notebook. It holds the settings that decide where a run trains and what it reads,
never what the papers specify.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Execution:
    """Where and how a study's runs execute (module docstring).

    Its text (``str``, :meth:`parse`) names the device and every field that differs from its default, ``data_root``
    last: ``device=cuda,fast_dev_run=2,pretrained=false,data_root=/data``, what a notebook's ``execution`` parameter
    holds (``papermill -p execution device=cuda``).

    Args:
        device: ``--device``: "auto" (resolved once where the study places its runs:
            :mod:`dmllab.pipeline.placement`), "cpu", "cuda", "cuda:1", "mps".
        fast_dev_run: ``--fast-dev-run N``: every run a fast dev run of N batches per epoch (``run.fast_dev_run``).
        pretrained: ``--pretrained none``: False, every run from random initialisation (fast dev runs only); None:
            as the presets say.
        check_counts: ``--no-counts``: False, real datasets read without checking their canonical counts.
        threads: torch threads of each run (the placement's; ``run.threads``; None: as its config says).
        data_root: ``--data-root``: the folder holding the real datasets (``D/cub``, ..., or one dataset's folder).
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
        """This execution with its device resolved (``auto``: CUDA where there is one, else the CPU; any other
        name checked, :func:`dmllab.profiles.check_device`)."""
        from dmllab.profiles import check_device, resolve_device

        device = resolve_device(self.device) if self.device == "auto" else check_device(self.device)
        return self if device == self.device else replace(self, device=device)

    def __str__(self) -> str:
        default, out = Execution(), []
        for f in sorted(fields(self), key=lambda f: f.name == "data_root"):  # last: a folder may hold a comma
            value = getattr(self, f.name)
            if f.name == "device" or value != getattr(default, f.name):
                out.append(f"{f.name}={str(value).lower() if isinstance(value, bool) else value}")
        return ",".join(out)

    @classmethod
    def parse(cls, text: str | None) -> Execution:
        """The execution ``text`` names (``str`` of one; None: the default, on ``auto``).

        Raises:
            ValueError: not ``NAME=VALUE,...`` with NAME a field, or a value of another kind.
        """
        if text is None:
            return cls()
        names = [f.name for f in fields(cls)]
        if not isinstance(text, str) or not re.match(rf"\s*({'|'.join(names)})=", text):
            raise ValueError(f"execution {text!r}: not NAME=VALUE,... with NAME one of {', '.join(names)}")
        items = re.split(rf",\s*(?=(?:{'|'.join(names)})=)", text.strip())
        return cls(**{n: _value(n, v.strip(), text) for n, _, v in (i.partition("=") for i in items)})


_KINDS = {"fast_dev_run": int, "threads": int, "pretrained": bool, "check_counts": bool}  # the others: text


def _value(name: str, value: str, text: str) -> Any:
    """The field ``name``'s value written as ``value`` in the execution ``text``."""
    kind = _KINDS.get(name, str)
    if kind is int and value.isdigit():
        return int(value)
    if kind is bool and value in ("true", "false"):
        return value == "true"
    if kind is str:
        return value
    raise ValueError(
        f"execution {text!r}: {name}={value!r} is not {'a count' if kind is int else 'true or false'}"
    )
