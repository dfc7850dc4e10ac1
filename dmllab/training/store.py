"""The run store: finished runs under ``results/runs/<config_hash>/seed<k>/``, checkpoints outside git.

A stored run is a folder with ``metrics.json`` (test metrics, fractions in [0, 1], plus best epoch and lr
drops), ``history.csv`` (one row per epoch), ``config.json`` (the resolved config) and ``provenance.json``
(git sha, package versions, device, wall time; no host name). The folder is written next to its final
place and renamed into it (``os.replace``), so a reader never sees a partial run. A per-run ``fcntl`` lock
serialises processes asking for the same run: the second waits and then reads the first one's result.

While training, an epoch checkpoint lives at ``checkpoints_dir()/<hash>/seed<k>/last.pt`` (atomic writes);
a restarted run (after SIGINT or SIGKILL) resumes from it. When the run finishes the checkpoint is replaced
by ``final.pt`` (the final model's weights, for ``dmllab evaluate`` and embedding export).

A run that diverges (non-finite loss or embeddings: :class:`NonFiniteLossError`, :class:`NonFiniteEmbeddingError`)
or whose embeddings collapse onto one point (:class:`~dmllab.metrics.CollapsedEmbeddingError`; both embedding
errors are :class:`~dmllab.metrics.DegenerateEmbeddingError`) is an outcome of its config and seed, not a crash: the store never keeps its metrics, but records the divergence
in ``<hash>/seed<k>/diverged.json`` (the error, provenance). Asking for that run again raises
:class:`DivergedRunError` at once instead of training it again (``force=True`` retrains), so a study re-run
with nothing changed does not retrain settings known to diverge, and artifacts show them as ``diverged`` rows.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import platform
import shutil
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.training.config import ExperimentConfig, config_hash, validate
from dmllab.training.protocol import RunResult, run_protocol
from dmllab.training.trainer import NonFiniteLossError

DIVERGED_FILE = "diverged.json"


class DivergedRunError(NonFiniteLossError):
    """The run is recorded in the store as diverged (``diverged.json``); ``record`` holds that record."""

    def __init__(self, message: str, record: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.record = record or {}


def _package_version(name: str) -> str | None:
    """``name.__version__`` without importing the package when it is not imported yet (importing torchvision
    takes about 2 s, which a quick run that never uses it should not pay): the package's ``version.py`` (where
    torch-family wheels keep the full version, e.g. ``0.29.1+cu130``), else the installed distribution's
    version; None when it is not installed."""
    import importlib.metadata
    import importlib.util
    import re
    import sys

    if name in sys.modules:
        return getattr(sys.modules[name], "__version__", None)
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / "version.py"
        found = (
            re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", path.read_text(), re.M)
            if path.exists()
            else None
        )
        if found:
            return found.group(1)
    try:
        return importlib.metadata.version(name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return None


def provenance(device: str | None = None, wall_time_s: float | None = None) -> dict[str, Any]:
    """Git sha, package versions, device, wall time, timestamp (UTC); deliberately no host name."""
    import numpy
    import torch

    import dmllab
    from dmllab.numerics import cpu_kernels

    versions = {
        "dmllab": dmllab.__version__,
        "torch": torch.__version__,
        "torchvision": _package_version("torchvision"),
    }
    versions["numpy"] = numpy.__version__
    pml = _package_version("pytorch_metric_learning")
    if pml is not None:
        versions["pytorch_metric_learning"] = pml
    return {
        "git_sha": paths.git_sha(),
        "versions": versions,
        "python": platform.python_version(),
        "device": device,
        # CPU kernels reduce in a thread-count-dependent order: identical metrics need the same thread count.
        "torch_threads": torch.get_num_threads(),
        **cpu_kernels(),  # cpu_isa, cpu_capability: other CPU kernels give other last bits (dmllab.numerics)
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "gpu": torch.cuda.get_device_name(0) if (device or "").startswith("cuda") else None,
        "wall_time_s": wall_time_s,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n")


def _write_history(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _read_history(path: Path) -> list[dict]:
    def parse(v: str) -> Any:
        if v == "":
            return None
        if v in ("True", "False"):
            return v == "True"
        for tp in (int, float):
            try:
                return tp(v)
            except ValueError:
                pass
        return v

    with path.open(newline="") as fh:
        return [{k: parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def implicit_inputs(cfg: ExperimentConfig) -> dict[str, str]:
    """Versions of inputs a config names but does not contain: the real dataset copy under ``data.root``
    (:func:`dmllab.data.real.fingerprint` of its index files and image list), the synthetic renderer behind
    ``dataset="synthetic"`` and the weights behind ``pretrained=True``
    (:func:`dmllab.models.weights.weights_fingerprint`: the pre-training recipe of the SmallCNN, torchvision's
    weights file of an ImageNet backbone)."""
    from dmllab.models.weights import weights_fingerprint

    extra: dict[str, str] = {}
    if cfg.data.dataset == "synthetic":
        from dmllab.data.synthetic import GENERATOR_VERSION

        extra["synthetic_generator"] = str(GENERATOR_VERSION)
    m = cfg.model
    weights = weights_fingerprint(
        m.backbone,
        pretrained=m.pretrained,
        weights_path=m.weights_path,
        backbone_kwargs=dict(m.backbone_kwargs),
    )
    if weights is not None:
        extra["weights"] = weights
    from dmllab.data.base import DatasetNotFoundError
    from dmllab.data.real import fingerprint, is_real_dataset

    if is_real_dataset(cfg.data.dataset):  # the dataset copy actually read, not its path (data.root)
        try:
            extra["dataset"] = fingerprint(cfg.data.dataset, cfg.data.root)
        except DatasetNotFoundError:
            extra["dataset"] = "missing"  # no run can be trained (nor found) without the data
    return extra


def run_key(cfg: ExperimentConfig) -> str:
    """The store's key of a run: :func:`config_hash` plus :func:`implicit_inputs`, so that a changed
    renderer or pre-training recipe never returns a stale stored result."""
    extra = implicit_inputs(cfg)
    if not extra:
        return config_hash(cfg)
    text = config_hash(cfg) + json.dumps(extra, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class RunStore:
    """Finished runs keyed by config hash and seed (module docstring).

    Args:
        root: the store folder; default ``dmllab.paths.runs_dir()`` (``$DMLLAB_RESULTS/runs``).
    """

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else paths.runs_dir()

    def run_dir(self, cfg: ExperimentConfig, seed: int) -> Path:
        return self.root / run_key(cfg) / f"seed{seed}"

    @staticmethod
    def checkpoint_dir(cfg: ExperimentConfig, seed: int) -> Path:
        return paths.checkpoints_dir() / run_key(cfg) / f"seed{seed}"

    @contextmanager
    def lock(self, cfg: ExperimentConfig, seed: int) -> Iterator[None]:
        """Exclusive per-run lock (blocks while another process trains or writes the same run).

        The lock file is removed when the holder leaves (and its folder, if nothing else is in it), so a
        failed run leaves no folder holding only a lock file. That is safe because a process that acquires
        the lock checks that the file it locked is still the one at the lock path, and starts over if not.
        """
        d = self.root / run_key(cfg)
        path = d / f".seed{seed}.lock"
        while True:
            d.mkdir(parents=True, exist_ok=True)
            try:
                fh = open(path, "a")  # noqa: SIM115  (closed below)
            except FileNotFoundError:  # the folder was removed by the previous holder meanwhile
                continue
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino:
                    break
            except FileNotFoundError:
                pass
            fh.close()  # we locked a file the previous holder had already removed: try again
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while holding the lock (see above)
            try:
                d.rmdir()  # only if empty: a failed first run leaves nothing behind
            except OSError:
                pass
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()

    def load(self, cfg: ExperimentConfig, seed: int) -> RunResult | None:
        """The stored result of (cfg, seed), or None."""
        return load_run_dir(self.run_dir(cfg, seed))

    def diverged(self, cfg: ExperimentConfig, seed: int) -> dict[str, Any] | None:
        """The divergence record of (cfg, seed) (module docstring), or None."""
        path = self.run_dir(cfg, seed) / DIVERGED_FILE
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def save_diverged(
        self, cfg: ExperimentConfig, seed: int, error: BaseException, wall_time_s: float
    ) -> Path:
        """Record that (cfg, seed) diverged with ``error`` (atomic write); returns the record's path."""
        final = self.run_dir(cfg, seed)
        final.mkdir(parents=True, exist_ok=True)
        record = {
            "error": f"{type(error).__name__}: {error}",
            "config_hash": config_hash(cfg),
            "seed": seed,
            "method": cfg.method,
            "dataset": cfg.dataset,
            "profile": cfg.profile,
            "provenance": provenance(cfg.run.device, wall_time_s),
        }
        tmp = final / f".{DIVERGED_FILE}.tmp-{os.getpid()}"
        _write_json(tmp, record)
        os.replace(tmp, final / DIVERGED_FILE)
        return final / DIVERGED_FILE

    def save(self, cfg: ExperimentConfig, seed: int, result: RunResult) -> Path:
        """Write the run folder atomically (temporary folder + rename) and return it."""
        final = self.run_dir(cfg, seed)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self._write_run(tmp, final, cfg, result)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a full disk leaves no temporary folder behind
            raise
        return final

    @staticmethod
    def _write_run(tmp: Path, final: Path, cfg: ExperimentConfig, result: RunResult) -> None:
        tmp.mkdir()
        metrics = {
            "metrics": result.metrics,
            "best_epoch": result.best_epoch,
            "lr_drop_epochs": result.lr_drop_epochs,
            "wall_time_s": result.wall_time_s,
            "config_hash": result.config_hash,
            "seed": result.seed,
            "device": result.device,
            "method": cfg.method,
            "dataset": cfg.dataset,
            "profile": cfg.profile,
        }
        _write_json(tmp / "config.json", cfg.to_dict())
        _write_history(tmp / "history.csv", result.history)
        _write_json(tmp / "provenance.json", provenance(result.device, result.wall_time_s))
        _write_json(tmp / "metrics.json", metrics)
        if final.exists():  # --force: replace the old run
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)


def load_run_dir(run_dir: str | os.PathLike) -> RunResult | None:
    """Read a stored run folder; None if it does not hold a finished run."""
    d = Path(run_dir)
    if not (d / "metrics.json").is_file():
        return None
    m = json.loads((d / "metrics.json").read_text())
    history = _read_history(d / "history.csv") if (d / "history.csv").is_file() else []
    return RunResult(
        metrics=m["metrics"],
        history=history,
        best_epoch=m["best_epoch"],
        lr_drop_epochs=m["lr_drop_epochs"],
        wall_time_s=m["wall_time_s"],
        config_hash=m["config_hash"],
        seed=m["seed"],
        device=m["device"],
        run_dir=str(d),
        cached=True,
    )


def run(
    cfg: ExperimentConfig,
    seed: int = 0,
    store: RunStore | None = None,
    *,
    hooks: tuple = (),
    progress: bool = True,
    force: bool = False,
) -> RunResult:
    """The result of ``cfg`` with ``seed``: from the store at once if present, else trained (resuming from a
    checkpoint if one exists), stored and returned. ``force`` retrains from scratch and replaces the stored run.

    Hooks only see epochs that are actually trained (a stored or resumed run skips finished ones).

    Raises:
        DivergedRunError: the store records this run as diverged (without ``force``: nothing is trained).
        NonFiniteLossError, DegenerateEmbeddingError: the run diverged (or collapsed) now; the store records it
            (module docstring).
    """
    from dmllab.metrics import DegenerateEmbeddingError
    from dmllab.numerics import late_pin_message, stale_cache_message

    store = store or RunStore()
    cfg = validate(cfg.replace("run.seed", seed))  # reject what cannot work before any folder is made
    late = late_pin_message() if not str(cfg.run.device).startswith("cuda") else None
    for message in (late, stale_cache_message(paths.cache_dir(), store.root)):
        if message:
            warnings.warn(message, RuntimeWarning, stacklevel=2)
    with store.lock(cfg, seed):
        if not force:
            stored = store.load(cfg, seed)
            if stored is not None:
                return stored
            record = store.diverged(cfg, seed)
            if record is not None:
                raise DivergedRunError(
                    f"run {run_key(cfg)}/seed{seed} is recorded as diverged ({record.get('error', '?')}); "
                    "force=True (`--force`) trains it again",
                    record,
                )
        ckpt_dir = store.checkpoint_dir(cfg, seed)
        if force:
            (ckpt_dir / "last.pt").unlink(missing_ok=True)
            (store.run_dir(cfg, seed) / DIVERGED_FILE).unlink(missing_ok=True)
        start = time.perf_counter()
        try:
            result = run_protocol(
                cfg,
                seed=seed,
                hooks=hooks,
                progress=progress,
                checkpoint=ckpt_dir / "last.pt",
                final_model=ckpt_dir / "final.pt",
            )
        except (NonFiniteLossError, DegenerateEmbeddingError) as err:
            store.save_diverged(cfg, seed, err, time.perf_counter() - start)  # last good checkpoint kept
            raise
        result.run_dir = str(store.save(cfg, seed, result))
        (ckpt_dir / "last.pt").unlink(missing_ok=True)
    return result
