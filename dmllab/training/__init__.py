"""Training engine: frozen configs and the papers' presets, one trainer with hooks, the two-stage protocol,
a run store keyed by config hash and seed, tidy result rows and embedding export.

``run(cfg, seed, store)`` is the entry point most code needs: it returns a stored result at once, or trains
(resuming from an epoch checkpoint if one exists), stores and returns it.
"""

# ruff: noqa: F401 - the imports are the package's public names

from __future__ import annotations

from dmllab.training import presets, schedules
from dmllab.training.config import (
    DataConfig,
    ExperimentConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    ScheduleConfig,
    Spec,
    apply_overrides,
    config_hash,
    valid_keys,
)
from dmllab.training.evaluation import NonFiniteLossError
from dmllab.training.export import export_embeddings, load_model, result_rows
from dmllab.training.protocol import RunResult, run_protocol, run_single_stage
from dmllab.training.store import DivergedRunError, RunStore, load_run_dir, run, run_key
from dmllab.training.trainer import StagePlan, Trainer
