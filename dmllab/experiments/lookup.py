"""Where a run executes and what it left: the one place that places runs and reads the run store for artifacts.

An artifact declares its runs without saying where they run; :func:`place` puts on a run's config what the study
sets for the whole execution. The study places each run once (:func:`planned_runs`) and writes the placed runs to its
manifest; a notebook's :class:`Lookup` reads them from there (:func:`read_manifest`), or, run by hand, places them the
same way, so a notebook reads exactly the runs the study trained, on every profile and machine. A :class:`Lookup`
gives an artifact's ``rows`` what a run left; artifacts never touch the run store's folders.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmllab.experiments.artifact import Artifact, Run
from dmllab.experiments.params import Params

if TYPE_CHECKING:
    import torch

    from dmllab.training.protocol import RunResult
    from dmllab.training.store import RunStore


Declared = tuple[Any, int, int]  # a run as its artifact declared it: its config, seed and draw (placed_run)


class MissingRunError(RuntimeError):
    """A run an artifact needs is not in the run store (and training was not allowed)."""


def dataset_root(data_root: str | os.PathLike | None, dataset: str) -> str | None:
    """The folder of ``dataset`` under the execution's data root ``D`` (``--data-root``), or None.

    ``D`` holds one folder per dataset, named as ``dmllab data fetch NAME D/NAME`` makes them: ``D/cub``,
    ``D/cars``, ``D/sop``, ``D/inshop``; ``D/<name>`` is used when it exists. Otherwise ``D`` itself is used when it
    holds the dataset's index files (a single dataset's folder, e.g. ``--data-root data/CUB_200_2011`` for a study of
    CUB alone), else ``D/<name>``, which the dataset's loader then reports as missing. None for a dataset that is
    not read from a folder (the offline benchmark, digits) and without a data root.
    """
    from dmllab.data.real import is_real_dataset

    if data_root is None or not is_real_dataset(dataset):
        return None
    from dmllab.data import DATASETS

    base = Path(data_root).expanduser()
    own = base / dataset
    if not own.is_dir() and all((base / f).is_file() for f in DATASETS.get(dataset).index_files):
        return str(base)
    return str(own)


def place(run: Run, params: Params) -> Run:
    """``run`` as this execution (``params.execution``, :class:`~dmllab.experiments.execution.Execution`) trains
    it: on its draw of the benchmark (``run.draw`` where given, else :func:`dmllab.experiments.kit.draw_of` its seed;
    the placed run names it), on the execution's device, with its dataset's folder under the execution's data root
    (:func:`dataset_root`), and in a fast dev run with ``run.fast_dev_run`` and, without pre-trained weights
    (``pretrained`` False), from random initialisation; a real dataset without its canonical counts checked where
    the execution says so. The draw, device and fast-dev limit are part of the run key; the data root is not (the
    dataset copy's fingerprint is). Placing a placed run changes nothing."""
    from dmllab.data.real import is_real_dataset
    from dmllab.experiments.kit import on_draw

    ex = params.execution
    draw = _draw(run, params)
    cfg = on_draw(run.config, draw)
    if cfg.run.device != ex.device:
        cfg = cfg.replace("run.device", ex.device)
    if ex.threads is not None and cfg.run.threads != ex.threads:
        cfg = cfg.replace("run.threads", ex.threads)
    name = cfg.data.dataset.name
    root = dataset_root(ex.data_root, name)
    if root is not None and cfg.data.root != root:
        cfg = cfg.replace("data.root", root)
    if not ex.check_counts and cfg.data.dataset.get("check_counts", True) and is_real_dataset(name):
        cfg = cfg.replace("data.dataset.check_counts", False)
    if ex.fast_dev_run and cfg.run.fast_dev_run != ex.fast_dev_run:
        cfg = cfg.replace("run.fast_dev_run", ex.fast_dev_run)
    if ex.pretrained is False and cfg.model.pretrained:
        cfg = cfg.replace("model.pretrained", False)
    if cfg is run.config and draw == run.draw:
        return run
    return Run(cfg, run.seed, run.variant, run.tags, draw)


def _draw(run: Run, params: Params) -> int:
    """The draw of the benchmark ``run`` trains on in this execution (:func:`place`)."""
    from dmllab.experiments.kit import draw_of

    if run.draw is not None:
        return run.draw
    return draw_of(params, run.seed) if run.config.data.dataset.name == "synthetic" else 0


def planned_runs(artifact: Artifact, params: Params, placed: dict[Declared, Run] | None = None) -> list[Run]:
    """The runs ``artifact`` reads with ``params``, each placed once (:func:`placed_run`): what the study trains
    for it."""
    placed = {} if placed is None else placed
    return [placed_run(run, params, placed) for run in artifact.runs(params)]


def placed_run(run: Run, params: Params, placed: dict[Declared, Run]) -> Run:
    """``run`` as this execution trains it: from ``placed`` (the runs placed so far in this execution, or a study's
    manifest, :func:`read_manifest`, by the config, seed and draw of the run as declared) with this run's variant
    and tags, else placed here (:func:`place`) and added to it."""
    declared = (run.config, run.seed, _draw(run, params))
    if declared not in placed:
        placed[declared] = place(run, params)
    first = placed[declared]
    same = (first.variant, first.tags) == (run.variant, run.tags)
    return first if same else Run(first.config, first.seed, run.variant, run.tags, first.draw)


def read_manifest(path: str | os.PathLike) -> dict[Declared, Run]:
    """The placed runs of a study's manifest (:meth:`dmllab.pipeline.plan.Plan.manifest`), by the config, seed and
    draw of each run as its artifacts declared it, for :func:`placed_run` (ValueError: not a manifest)."""
    import json

    from dmllab.training.config import ExperimentConfig

    try:
        out = {}
        for e in json.loads(Path(path).read_text())["runs"]:
            run = Run(ExperimentConfig.from_dict(e["config"]), int(e["seed"]), draw=e["draw"])
            out.update({(ExperimentConfig.from_dict(c), run.seed, int(d)): run for c, d in e["declared"]})
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path} is not a study's manifest ({type(err).__name__}: {err})") from None
    return out


def _trained_with(result: RunResult) -> dict[str, str]:
    """The provenance columns of a stored run's rows: its git commit, package versions and time as the run store
    recorded them when the run was trained (:func:`dmllab.results.run_provenance`); {} without a record."""
    import json

    from dmllab.results import run_provenance
    from dmllab.training.store import PROVENANCE_FILE

    if not result.run_dir:
        return {}
    try:
        record = json.loads((Path(result.run_dir) / PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return run_provenance(record) if isinstance(record, dict) else {}


class Lookup:
    """What an artifact's ``rows`` receives: every run it asks about placed once (:func:`placed_run`: read from the
    study's manifest where the study gave one, else placed here), then read from the run store (trained first where
    missing, when ``train_missing``).

    Args:
        params: the resolved parameters of the execution (device, data root).
        placed: the runs placed so far by the config, seed and draw of the run as declared (a study's manifest,
            :func:`read_manifest`); None: none yet.
        train_missing: train a run that is not stored instead of raising :class:`MissingRunError`.
        progress: progress bars while training here.
        store: the run store (default: ``dmllab.paths.runs_dir()``).
    """

    def __init__(
        self,
        params: Params,
        *,
        placed: dict[Declared, Run] | None = None,
        train_missing: bool = False,
        progress: bool = False,
        store: RunStore | None = None,
    ) -> None:
        self.params = params
        self.placed = {} if placed is None else placed
        self.train_missing = train_missing
        self.progress = progress
        self._store = store
        self._given: set[Run] = set()  # the placed runs this lookup gave: placing one again changes nothing

    @property
    def store(self) -> RunStore:
        from dmllab.training.store import RunStore

        if self._store is None:
            self._store = RunStore()
        return self._store

    def place(self, run: Run) -> Run:
        """``run`` where this execution runs it (:func:`placed_run`); a run this lookup placed, as it is."""
        if run in self._given:
            return run
        out = placed_run(run, self.params, self.placed)
        self._given.add(out)
        return out

    def result(self, run: Run) -> RunResult:
        """The stored :class:`RunResult` of ``run``; trains it when missing and allowed.

        Raises:
            MissingRunError: not stored and ``train_missing`` is False.
            dmllab.training.DivergedRunError: the store records the run as diverged.
        """
        from dmllab.training.store import DivergedRunError
        from dmllab.training.store import run as train

        run = self.place(run)
        stored = self.store.load(run.config, run.seed)
        if stored is not None:
            return stored
        record = self.store.diverged(run.config, run.seed)
        if record is not None:
            raise DivergedRunError(
                f"run {run.key} ({run.variant or 'no variant'}) diverged: {record.get('error')}", record
            )
        if not self.train_missing:
            raise MissingRunError(
                f"run {run.key} ({run.config.method} on {run.config.dataset}, {run.variant or 'no variant'}) "
                "is not stored; train the artifact's runs first with `dmllab study --only <artifact>`"
            )
        return train(run.config, seed=run.seed, store=self.store, progress=self.progress)

    def rows(self, runs: Iterable[Run], **columns: Any) -> list[dict[str, Any]]:
        """Tidy rows of the test metrics of every run (percent), its final model's R@1 on its training split
        (``train_R@1``) and its wall time, labelled by its variant, tags and provenance (the run's own, recorded when
        it was trained: :func:`_trained_with`).

        A run the store records as diverged (a setting whose loss or embeddings became non-finite) gives one row
        with metric ``diverged`` = 1 and no other metric, so the CSV says so and the claims that need its metrics
        cannot decide. A run that is simply not stored raises :class:`MissingRunError`."""
        from dmllab.results import tidy
        from dmllab.training.store import DivergedRunError

        out: list[dict[str, Any]] = []
        for run in map(self.place, runs):
            labels = {**run.labels, "draw": run.draw}
            try:
                result = self.result(run)
            except DivergedRunError:
                out += tidy({"diverged": 1.0}, percent=False, **labels, run_id=run.key, **run.tag, **columns)
                continue
            metrics = dict(result.metrics)
            metrics.update({f"train_{k}": v for k, v in result.train_metrics.items()})  # train_R@1
            if result.wall_time_s is not None:
                metrics["wall_time_s"] = float(result.wall_time_s)
            provenance = {"config_hash": result.config_hash, "run_id": run.key, "device": result.device}
            out += tidy(metrics, **labels, **provenance, **_trained_with(result), **run.tag, **columns)
        return out

    def _final(self, run: Run) -> Any:
        """The path of the placed run's ``final.pt`` (stored, or trained here where allowed)."""
        run = self.place(run)
        self.result(run)
        path = self.store.checkpoint_dir(run.config, run.seed) / "final.pt"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: the final weights of run {run.key} are not stored (the checkpoint cache was cleared?); "
                "retrain the run with `dmllab train --force` or delete its folder "
                f"{self.store.run_dir(run.config, run.seed)} and run the study again"
            )
        return path

    def model(self, run: Run) -> torch.nn.Module:
        """The trained network of ``run`` (its ``final.pt``), in eval mode on the CPU."""
        from dmllab.training import export

        return export.load_model(self.place(run).config, self._final(run))

    def loss_state(self, run: Run) -> Mapping[str, Any] | None:
        """The trained loss's state dict saved with ``run``'s final model (its proxies, a learned scale), or None
        where the run's protocol did not save it."""
        import torch

        state = torch.load(self._final(run), map_location="cpu", weights_only=True)
        return state.get("loss") if isinstance(state, dict) else None

    def embed(self, run: Run, split: str | None = None) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Embeddings (N, D), labels (N,) and the dataset of ``split`` (default: the test split) under the
        trained network of ``run``, with the config's test transform, on the execution's device."""
        from dmllab.training import export

        cfg = self.place(run).config
        return export.embed_split(self.model(run), cfg, split or cfg.data.test_split, device=cfg.run.device)
