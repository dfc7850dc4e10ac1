"""Submit long smoke runs to SLURM as a study does (:func:`~dmllab.pipeline.jobs.stop_on_signals` around
:meth:`~dmllab.pipeline.slurm.SlurmExecutor.submit`), with short status, warning and vanishing times, and print each
status line and then one ``RESULT {json}`` line per run (``INTERRUPTED`` on Ctrl-C).

    python tests/slurm/long_runs.py EPOCHS,EPOCHS,... PARALLEL [WAIT_S]  # one run (seed 0, 1, ...) per EPOCHS

``WAIT_S``: how long a signalled job waits for its epoch's end to checkpoint (0: it requeues at once).
"""

from __future__ import annotations

import dataclasses
import json
import sys

import dmllab  # noqa: F401  (pins the CPU kernels first, as the CLI does)
from dmllab.experiments import Run
from dmllab.pipeline.jobs import Interrupted, stop_on_signals
from dmllab.pipeline.slurm import SlurmExecutor, SlurmOptions
from dmllab.training import presets

#: The wait's times in this driver (seconds): status lines, the PENDING warning, a vanished job's failure.
STATUS_EVERY_S, PENDING_WARN_S, VANISHED_S = 5.0, 4.0, 15.0


def long_runs(epochs: list[int]) -> list[Run]:
    """Smoke runs of the given numbers of epochs, seeds 0, 1, ..."""
    smoke = presets.get("proxynca++", "synthetic", "smoke")
    return [Run(smoke.replace("schedule.epochs", n), seed) for seed, n in enumerate(epochs)]


def main(argv: list[str]) -> int:
    epochs, parallel = [int(n) for n in argv[0].split(",")], int(argv[1])
    wait_s = float(argv[2]) if len(argv) > 2 else SlurmOptions.checkpoint_wait_s
    options = SlurmOptions(
        partition="debug",
        time_min=20,
        array_parallelism=parallel,
        checkpoint_wait_s=wait_s,
        status_every_s=STATUS_EVERY_S,
        pending_warn_s=PENDING_WARN_S,
        vanished_s=VANISHED_S,
    )
    executor = SlurmExecutor(options, progress=False, say=lambda line: print(line, flush=True))
    with stop_on_signals():
        try:
            results = executor.submit(long_runs(epochs))
        except Interrupted as stop:
            print(f"INTERRUPTED {len(stop.finished)}", flush=True)
            return 130
    for res in results:
        print("RESULT " + json.dumps(dataclasses.asdict(res)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
