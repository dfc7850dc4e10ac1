"""The run store: finished runs under ``results/runs/<config_hash>/seed<k>/``, checkpoints outside git.

A stored run is a folder with ``metrics.json`` (test metrics as fractions, best epoch, lr drops), ``history.csv``
(one row per epoch), ``config.json`` (the resolved config), ``provenance.json`` (git sha, versions, device, wall
time; no host name), ``checksums.json`` (its record: key, seed, config hash and the sha256 of every other file and of
``final.pt``) and the live curves (``curves.jsonl``, ``tensorboard/``, :mod:`dmllab.training.curves`; not in the
record). It is written next to its final place and renamed into it, so a reader never sees a partial run and needs
no lock. A per-run lock (:mod:`dmllab.locks`, ``<store>/.locks/``) serialises processes training the same run: the
second says whom it waits for, then reads the first one's result; a dead holder's lock is taken over.

Everything read is verified (:func:`verify_run_dir`): files against their checksums, ``config.json`` against the
hash and key, the folder against the run asked for. A failing entry (including one without a complete
``checksums.json``, or a divergence record that does not name its run) is named on stderr, moved aside to
``<key>/corrupt-seed<k>-<time>`` (never deleted) and treated as missing, so a study trains that run again.

While training, the epoch checkpoint ``checkpoints_dir()/<hash>/seed<k>/last.pt`` (atomic writes) lets a restarted
run resume; at the end it is replaced by ``final.pt`` (the final weights, for ``dmllab evaluate`` and export).

A fine-tune (``finetune.epochs > 0``) is its own run, keyed on its parent's key too (:func:`run_key`); :func:`run`
first trains or loads the parent through :func:`run` under the parent's lock (never trained twice) and starts from
its ``final.pt``.

A run that diverges (:class:`NonFiniteLossError`, :class:`NonFiniteEmbeddingError`) or collapses
(:class:`~dmllab.metrics.CollapsedEmbeddingError`; both are :class:`~dmllab.metrics.DegenerateEmbeddingError`) is
an outcome of its config and seed, not a crash: no metrics are kept, ``<hash>/seed<k>/diverged.json`` records the
error, and asking again raises :class:`DivergedRunError` at once (``force=True`` retrains), so artifacts show it
as a ``diverged`` row.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.fileio import (
    CorruptFileError,
    atomic_open,
    naming,
    set_aside,
    sha256_file,
    sidecar,
    write_text_atomic,
)
from dmllab.locks import exclusive
from dmllab.training.build import check
from dmllab.training.config import (
    ExperimentConfig,
    complete,
    config_hash,
    parent_config,
    run_threads,
    threads_matter,
)
from dmllab.training.curves import LIVE_FILES, curve_callbacks
from dmllab.training.evaluation import NonFiniteLossError
from dmllab.training.pretrain import prepare
from dmllab.training.protocol import RunResult, run_protocol

DIVERGED_FILE = "diverged.json"
RECORD_FILE = "checksums.json"
PROVENANCE_FILE = "provenance.json"
_RUN_FILES = ("metrics.json", "config.json", "history.csv", PROVENANCE_FILE)
_METRICS_KEYS = ("metrics", "best_epoch", "lr_drop_epochs", "wall_time_s", "config_hash", "seed", "device")


class CorruptRunError(CorruptFileError):
    """A stored run's files do not hold what was written (bad JSON, checksum, config or key mismatch, a missing
    file); the message names the file."""


class DivergedRunError(NonFiniteLossError):
    """The run is recorded in the store as diverged (``diverged.json``); ``record`` holds that record."""

    def __init__(self, message: str, record: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.record = record or {}


def provenance(
    device: str | None = None,
    wall_time_s: float | None = None,
    precision: str | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Git sha, package versions, device, the precision the run trained in (``Trainer.precision``), the torch
    threads it trained on (``threads``; default: this process's now), wall time, timestamp (UTC); deliberately no
    host name."""
    import torch

    from dmllab.numerics import cpu_kernels
    from dmllab.results import package_versions

    return {
        "git_sha": paths.git_sha(),
        "versions": package_versions(),  # the one reader of versions, as the CSV columns
        "python": platform.python_version(),
        "device": device,
        "precision": precision,
        # CPU kernels reduce in a thread-count-dependent order: identical metrics need the same thread count.
        "torch_threads": torch.get_num_threads() if threads is None else threads,
        **cpu_kernels(),  # cpu_isa, cpu_capability: other CPU kernels give other last bits (dmllab.numerics)
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "gpu": torch.cuda.get_device_name(0) if (device or "").startswith("cuda") else None,
        "wall_time_s": wall_time_s,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _write_json(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n")


def _write_history(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with atomic_open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _read_json(path: Path, what: str) -> Any:
    """The JSON in ``path``; CorruptRunError naming it when it is not valid JSON."""
    try:
        with naming(path, "reading"):
            return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise CorruptRunError(f"{what} {path} is not valid JSON ({err})") from None


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
    """What a run reads beyond its config, each component saying its own part: the dataset's
    (:func:`dmllab.data.input_fingerprint`: the synthetic renderer's version, a real copy's index files and image
    list, never its path) and the weights behind ``pretrained=True`` (:func:`dmllab.models.weights.weights_fingerprint`:
    the pre-training recipe of the SmallCNN, torchvision's weights file of an ImageNet backbone)."""
    from dmllab.data import input_fingerprint
    from dmllab.models.weights import weights_fingerprint

    extra: dict[str, str] = {}
    dataset = input_fingerprint(cfg.data.dataset, cfg.data.root)
    if dataset is not None:
        extra["dataset"] = dataset
    m = cfg.model
    weights = weights_fingerprint(
        m.backbone.name, pretrained=m.pretrained, weights_path=m.weights_path, backbone_kwargs=m.backbone.kw
    )
    if weights is not None:
        extra["weights"] = weights
    return extra


def run_key(cfg: ExperimentConfig) -> str:
    """The store's key of a run: the sha256 of :func:`config_hash` and :func:`implicit_inputs` (and a fine-tune's
    parent's key), so that a changed renderer, pre-training recipe, dataset copy or parent never returns a stale
    stored result. A :class:`RunStore` computes it once per config (:meth:`RunStore.key`)."""
    extra = implicit_inputs(cfg)
    parent = parent_config(cfg)
    if parent is not None:
        extra["parent"] = run_key(parent)
    text = config_hash(cfg) + json.dumps(extra, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class RunStore:
    """Finished runs keyed by config hash and seed (module docstring).

    Args:
        root: the store folder; default ``dmllab.paths.runs_dir()`` (``$DMLLAB_RESULTS/runs``).
    """

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else paths.runs_dir()
        self._keys: dict[ExperimentConfig, str] = {}

    def key(self, cfg: ExperimentConfig) -> str:
        """:func:`run_key` of ``cfg``, computed once per config by this store."""
        if cfg not in self._keys:
            self._keys[cfg] = run_key(cfg)
        return self._keys[cfg]

    def run_dir(self, cfg: ExperimentConfig, seed: int) -> Path:
        return self.root / self.key(cfg) / f"seed{seed}"

    def checkpoint_dir(self, cfg: ExperimentConfig, seed: int) -> Path:
        return paths.checkpoints_dir() / self.key(cfg) / f"seed{seed}"

    def lock_path(self, cfg: ExperimentConfig, seed: int) -> Path:
        """The lock file of run (cfg, seed): ``<store>/.locks/<key>.seed<k>.lock`` (apart from the run folders, so
        a failed run leaves no folder behind)."""
        return self.root / ".locks" / f"{self.key(cfg)}.seed{seed}.lock"

    @contextmanager
    def lock(self, cfg: ExperimentConfig, seed: int) -> Iterator[None]:
        """Exclusive per-run lock (waits while another process trains or writes the same run;
        :func:`dmllab.locks.exclusive`): a process that finds it taken says so at once on stderr, naming the
        holder, then waits; a lock whose recorded holder no longer runs is taken over."""
        name = f"{self.key(cfg)}/seed{seed}"
        with exclusive(
            self.lock_path(cfg, seed),
            waiting=lambda holder: (
                f"run {name} is being trained by another process ({holder}; lock "
                f"{self.lock_path(cfg, seed)}): waiting for it, then reading its result"
            ),
        ):
            yield

    def load(self, cfg: ExperimentConfig, seed: int) -> RunResult | None:
        """The stored result of (cfg, seed), or None; a damaged entry is set aside (module docstring) and gives
        None. Needs no lock."""
        d = self.run_dir(cfg, seed)
        try:
            return load_run_dir(d, key=d.parent.name, cfg_hash=config_hash(cfg), seed=seed)
        except CorruptRunError as err:
            set_aside(d, str(err), then="the run will be trained again")
            return None

    def diverged(self, cfg: ExperimentConfig, seed: int) -> dict[str, Any] | None:
        """The divergence record of (cfg, seed) (module docstring), or None; a damaged record is set aside."""
        path = self.run_dir(cfg, seed) / DIVERGED_FILE
        if not path.is_file():
            return None
        try:
            record = _read_json(path, "divergence record")
            check_divergence_record(record, path, key=self.key(cfg), cfg_hash=config_hash(cfg), seed=seed)
        except (CorruptRunError, OSError) as err:
            set_aside(path, str(err), then="the run will be trained again")
            return None
        return record

    def final_model(self, cfg: ExperimentConfig, seed: int) -> Path:
        """The final model (``final.pt``) of the stored run (cfg, seed), checked against the run's record.

        Raises:
            FileNotFoundError: no final model (the checkpoint cache was cleared). CorruptRunError: the file is
            not the one the run wrote (the run is set aside, to be trained again).
        """
        path = self.checkpoint_dir(cfg, seed) / "final.pt"
        if not path.is_file():
            raise FileNotFoundError(f"no final model of run {self.run_dir(cfg, seed)} at {path}")
        try:
            verify_final_model(self.run_dir(cfg, seed), path)
        except CorruptRunError as err:
            set_aside(self.run_dir(cfg, seed), str(err), then="the run will be trained again")
            raise
        return path

    def save_diverged(
        self, cfg: ExperimentConfig, seed: int, error: BaseException, wall_time_s: float
    ) -> Path:
        """Record that (cfg, seed) diverged with ``error`` (atomic write); returns the record's path."""
        final = self.run_dir(cfg, seed)
        final.mkdir(parents=True, exist_ok=True)
        record = {
            "error": f"{type(error).__name__}: {error}",
            "run_key": final.parent.name,
            "config_hash": config_hash(cfg),
            "seed": seed,
            "method": cfg.method,
            "dataset": cfg.dataset,
            "profile": cfg.profile,
            "provenance": provenance(cfg.run.device, wall_time_s),
        }
        _write_json(final / DIVERGED_FILE, record)
        return final / DIVERGED_FILE

    def save(self, cfg: ExperimentConfig, seed: int, result: RunResult) -> Path:
        """Write the run folder atomically (temporary folder + rename) and return it."""
        final = self.run_dir(cfg, seed)
        final.parent.mkdir(parents=True, exist_ok=True)
        # a new folder of a random name: never one a link was planted at
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; the store is shared like any other folder
        try:
            self._write_run(tmp, final, cfg, result)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a full disk leaves no temporary folder behind
            raise
        return final

    def _write_run(self, tmp: Path, final: Path, cfg: ExperimentConfig, result: RunResult) -> None:
        metrics = {
            "metrics": result.metrics,
            "best_epoch": result.best_epoch,
            "lr_drop_epochs": result.lr_drop_epochs,
            "wall_time_s": result.wall_time_s,
            "config_hash": result.config_hash,
            "seed": result.seed,
            "device": result.device,
            "precision": result.precision,
            "train_metrics": result.train_metrics,
            "method": cfg.method,
            "dataset": cfg.dataset,
            "profile": cfg.profile,
        }
        _write_json(tmp / "config.json", complete(cfg).to_dict())  # every keyword as the run was built
        _write_history(tmp / "history.csv", result.history)
        threads = result.extra.get("torch_threads", cfg.run.threads)  # a result made elsewhere: its config's
        _write_json(
            tmp / PROVENANCE_FILE, provenance(result.device, result.wall_time_s, result.precision, threads)
        )
        _write_json(tmp / "metrics.json", metrics)
        model = self.checkpoint_dir(cfg, result.seed) / "final.pt"
        record = {
            "run_key": final.parent.name,
            "seed": result.seed,
            "config_hash": result.config_hash,
            "files": {name: sha256_file(tmp / name) for name in _RUN_FILES},
            "final_model": _model_digest(model) if model.is_file() else None,
        }
        _write_json(tmp / RECORD_FILE, record)
        for name in LIVE_FILES:  # the live curves of the training (not part of the record: history.csv is)
            if (final / name).exists():
                os.replace(final / name, tmp / name)
        if final.exists():  # --force: replace the old run
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)


def _model_digest(path: Path) -> str:
    """sha256 of a model file: its checksum sidecar when it has one (written with it), else its bytes."""
    try:
        return sidecar(path).read_text().strip()
    except FileNotFoundError:
        return sha256_file(path)


def verify_run_dir(
    run_dir: str | os.PathLike,
    *,
    key: str | None = None,
    cfg_hash: str | None = None,
    seed: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Check a stored run folder and return its (metrics.json, config.json, checksums.json) contents.

    Checks every file against ``checksums.json`` (a record without an entry for one of the files, the key, seed,
    config hash or final model is refused), ``config.json`` against the hash in ``metrics.json``, and, where given,
    the run ``key`` (the folder's parent), ``cfg_hash`` and ``seed`` asked for.

    Raises CorruptRunError: naming the file that fails and how."""
    d = Path(run_dir)
    if not (d / RECORD_FILE).is_file():
        raise CorruptRunError(
            f"stored run {d} has no checksum record ({RECORD_FILE}): nothing in it is verified"
        )
    record = _read_json(d / RECORD_FILE, "run record")
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        raise CorruptRunError(f"run record {d / RECORD_FILE} does not list the run's files")
    unlisted = [name for name in _RUN_FILES if name not in record["files"]] + [
        k for k in ("run_key", "seed", "config_hash", "final_model") if k not in record
    ]
    if unlisted:
        raise CorruptRunError(
            f"run record {d / RECORD_FILE} is incomplete (no entry for {', '.join(unlisted)}): its run is not "
            "verified"
        )
    for name, digest in record["files"].items():
        f = d / name
        if not f.is_file():
            raise CorruptRunError(f"{f} is missing from the stored run")
        if sha256_file(f) != digest:
            raise CorruptRunError(f"{f} does not match its checksum in {d / RECORD_FILE} (edited or damaged)")
    if record.get("run_key") != d.parent.name or record.get("seed") != _seed_of(d):
        raise CorruptRunError(
            f"{d / RECORD_FILE} records run {record.get('run_key')}/seed{record.get('seed')}, but the folder is "
            f"{d.parent.name}/{d.name} (moved or copied by hand?)"
        )
    metrics = _read_json(d / "metrics.json", "metrics file")
    if not isinstance(metrics, dict):
        raise CorruptRunError(
            f"metrics file {d / 'metrics.json'} holds a {type(metrics).__name__}, not a run's metrics"
        )
    missing = [k for k in _METRICS_KEYS if k not in metrics]
    if missing:
        raise CorruptRunError(f"metrics file {d / 'metrics.json'} lacks {missing}")
    config = _read_json(d / "config.json", "config file")
    try:
        stored_hash = config_hash(ExperimentConfig.from_dict(config))
    except (TypeError, ValueError, AttributeError) as err:
        raise CorruptRunError(f"config file {d / 'config.json'} is not a dmllab config ({err})") from None
    if stored_hash != metrics["config_hash"]:
        raise CorruptRunError(
            f"config file {d / 'config.json'} does not match the run: its config hash is {stored_hash}, the run's "
            f"metrics.json records {metrics['config_hash']} (edited by hand?)"
        )
    _check_threads(d, ExperimentConfig.from_dict(config))
    if record.get("config_hash") != metrics["config_hash"]:
        raise CorruptRunError(f"{d / 'metrics.json'} and {d / RECORD_FILE} record different config hashes")
    if key is not None and d.parent.name != key:
        raise CorruptRunError(f"{d} is not a folder of run {key}")
    if cfg_hash is not None and metrics["config_hash"] != cfg_hash:
        raise CorruptRunError(
            f"{d / 'metrics.json'} records config hash {metrics['config_hash']}, but the run asked for has "
            f"{cfg_hash} (a folder copied under another key?)"
        )
    if seed is not None and (metrics["seed"] != seed or d.name != f"seed{seed}"):
        raise CorruptRunError(f"{d / 'metrics.json'} records seed {metrics['seed']}, not seed {seed}")
    return metrics, config, record


def _check_threads(d: Path, cfg: ExperimentConfig) -> None:
    """Refuse a stored run trained on another torch thread count than its config (and so its key) says, where the
    count changes its numbers (:func:`~dmllab.training.config.threads_matter`); a run whose provenance records no
    count is not checked."""
    prov = _read_json(d / PROVENANCE_FILE, "provenance file") if (d / PROVENANCE_FILE).is_file() else {}
    trained = prov.get("torch_threads") if isinstance(prov, dict) else None
    if trained is not None and threads_matter(cfg) and trained != cfg.run.threads:
        raise CorruptRunError(
            f"{d / PROVENANCE_FILE} records {trained} torch threads, but the run's config (and key) says "
            f"run.threads={cfg.run.threads}: not served as that run"
        )


def check_divergence_record(record: Any, path: Path, *, key: str, cfg_hash: str, seed: int) -> None:
    """Raise CorruptRunError naming ``path`` unless the divergence record names the run it lies in: its run key,
    config hash and seed (a record copied from another run, or one without them, is not believed)."""
    if not isinstance(record, dict):
        raise CorruptRunError(f"divergence record {path} holds a {type(record).__name__}, not a record")
    named = (record.get("run_key"), record.get("config_hash"), record.get("seed"))
    if named != (key, cfg_hash, seed):
        raise CorruptRunError(
            f"divergence record {path} names run {named[0]}/seed{named[2]} (config {named[1]}), not "
            f"{key}/seed{seed} (config {cfg_hash}): copied from another run"
        )


def _seed_of(d: Path) -> int | None:
    return int(d.name[4:]) if d.name.startswith("seed") and d.name[4:].isdigit() else None


def verify_final_model(run_dir: str | os.PathLike, model: str | os.PathLike) -> None:
    """Check ``model`` (a run's ``final.pt``) against the digest in the run's ``checksums.json``; a run without a
    record, or whose record lists no final model, vouches for none.

    Raises CorruptRunError: the file is not the one the run wrote, naming both."""
    record_file = Path(run_dir) / RECORD_FILE
    if not record_file.is_file():
        raise CorruptRunError(
            f"run {run_dir} has no checksum record ({record_file}): its final model is not verified"
        )
    expected = _read_json(record_file, "run record").get("final_model")
    if not expected:
        raise CorruptRunError(
            f"final model {model} is not listed in {record_file} (the run recorded none): not served as this run's"
        )
    if sha256_file(model) != expected:
        raise CorruptRunError(
            f"final model {model} is not the one run {Path(run_dir).parent.name}/{Path(run_dir).name} wrote "
            f"(its sha256 differs from {record_file}): damaged or replaced"
        )


def load_run_dir(
    run_dir: str | os.PathLike,
    *,
    key: str | None = None,
    cfg_hash: str | None = None,
    seed: int | None = None,
) -> RunResult | None:
    """Read a stored run folder; None if it does not hold a finished run. Verified by :func:`verify_run_dir`
    (``key``, ``cfg_hash``, ``seed``: what the run must be).

    Raises CorruptRunError: the folder holds a damaged run (naming the file)."""
    d = Path(run_dir)
    if not (d / "metrics.json").is_file() and not (d / RECORD_FILE).is_file():
        return None
    m, _, _ = verify_run_dir(d, key=key, cfg_hash=cfg_hash, seed=seed)
    try:
        history = _read_history(d / "history.csv") if (d / "history.csv").is_file() else []
    except (ValueError, UnicodeDecodeError, csv.Error) as err:
        raise CorruptRunError(f"history file {d / 'history.csv'} cannot be read ({err})") from None
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
        precision=m.get("precision"),
        train_metrics=m.get("train_metrics") or {},
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
    cfg = check(cfg.replace("run.seed", seed))  # reject what cannot work before any folder or key is made
    late = late_pin_message() if not str(cfg.run.device).startswith("cuda") else None
    for message in (late, stale_cache_message(paths.cache_dir(), store.root)):
        if message:
            warnings.warn(message, RuntimeWarning, stacklevel=2)

    def stored_outcome() -> RunResult | None:
        stored = store.load(cfg, seed)
        if stored is not None:
            return stored
        record = store.diverged(cfg, seed)
        if record is not None:
            raise DivergedRunError(
                f"run {store.key(cfg)}/seed{seed} is recorded as diverged ({record.get('error', '?')}); "
                "force=True (`--force`) trains it again",
                record,
            )
        return None

    if not force:  # a stored run is read without the lock: a read-only store can be read
        stored = stored_outcome()
        if stored is not None:
            return stored
    with store.lock(cfg, seed), run_threads(cfg):  # on the threads its key says (RunConfig.threads)
        if not force:  # stored meanwhile by the process that held the lock?
            stored = stored_outcome()
            if stored is not None:
                return stored
        parent_model = _parent_model(cfg, seed, store, progress) if parent_config(cfg) is not None else None
        prepare(cfg, progress=progress)  # what it starts from (a pre-trained trunk), announced and cached
        ckpt_dir = store.checkpoint_dir(cfg, seed)
        if force:
            (ckpt_dir / "last.pt").unlink(missing_ok=True)
            (store.run_dir(cfg, seed) / DIVERGED_FILE).unlink(missing_ok=True)
        start = time.perf_counter()
        identity = {"method": cfg.method, "dataset": cfg.dataset, "profile": cfg.profile}
        curves = tuple(curve_callbacks(store.run_dir(cfg, seed), identity))
        try:
            result = run_protocol(
                cfg,
                seed=seed,
                hooks=(*curves, *hooks),
                progress=progress,
                checkpoint=ckpt_dir / "last.pt",
                final_model=ckpt_dir / "final.pt",
                init_from=parent_model,
            )
        except (NonFiniteLossError, DegenerateEmbeddingError) as err:
            store.save_diverged(cfg, seed, err, time.perf_counter() - start)  # last good checkpoint kept
            raise
        result.run_dir = str(store.save(cfg, seed, result))
        (ckpt_dir / "last.pt").unlink(missing_ok=True)
    return result


def _parent_model(cfg: ExperimentConfig, seed: int, store: RunStore, progress: bool) -> Path:
    """The final model file of ``cfg``'s parent run (same seed), trained or loaded through :func:`run` first.

    A stored parent whose ``final.pt`` is gone (the checkpoints live in the cache folder, the results elsewhere)
    is trained again, with a warning, to recover the weights the fine-tune starts from.
    """
    parent = parent_config(cfg)
    run(parent, seed, store, progress=progress)
    path = store.checkpoint_dir(parent, seed) / "final.pt"
    if path.is_file():
        try:
            return store.final_model(parent, seed)  # checked against the parent's record
        except CorruptRunError:  # set aside (said on stderr): the parent is trained again
            run(parent, seed, store, progress=progress)
            return path
    warnings.warn(
        f"the parent run {store.key(parent)}/seed{seed} of this fine-tune is stored but its final model {path} "
        "is missing: training the parent again to recover it",
        RuntimeWarning,
        stacklevel=3,
    )
    run(parent, seed, store, progress=progress, force=True)
    return path
