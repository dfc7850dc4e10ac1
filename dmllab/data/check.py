"""``dmllab data check``: verify a dataset folder (canonical counts, every image decodable)."""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dmllab.data.base import DATASETS, DatasetCountError, ImageLoadError, RetrievalDataset
from dmllab.data.real import EmptySplitError, IndexFileError, is_real_dataset


@dataclass
class CheckReport:
    """What :func:`check_dataset` found: per split (images, classes), decoded images and every problem."""

    name: str
    root: str | None
    splits: dict[str, tuple[int, int]] = field(default_factory=dict)
    images_checked: int = 0
    count_error: str | None = None
    index_error: str | None = None
    failures: list[str] = field(default_factory=list)
    split_errors: list[str] = field(default_factory=list)  # empty splits: never ok, --no-counts or not
    cache_problems: list[str] = field(default_factory=list)  # a dmllab data cache against its manifest

    @property
    def ok(self) -> bool:
        problems = (self.failures, self.split_errors, self.cache_problems)
        return self.count_error is None and self.index_error is None and not any(problems)

    def summary(self) -> str:
        lines = [f"dataset {self.name} at {self.root}"]
        if self.index_error:  # nothing else could be checked
            return "\n".join([*lines, f"  INDEX: {self.index_error}", "  PROBLEMS FOUND"])
        lines += [
            f"  {s:<10} {n_img:>8} images {n_cls:>7} classes" for s, (n_img, n_cls) in self.splits.items()
        ]
        lines.append(f"  decoded {self.images_checked - len(self.failures)} / {self.images_checked} images")
        if self.count_error:
            lines.append(f"  COUNTS: {self.count_error}")
        lines += [f"  SPLIT: {e}" for e in self.split_errors]
        lines += [f"  CACHE: {p}" for p in self.cache_problems]
        lines.append(f"  failures: {len(self.failures)}")
        lines += [f"    {f}" for f in self.failures[:20]]
        if len(self.failures) > 20:
            lines.append(f"    ... and {len(self.failures) - 20} more")
        lines.append("  OK" if self.ok else "  PROBLEMS FOUND")
        return "\n".join(lines)


def _build(cls: type, root: str | Path | None, split: str, check_counts: bool) -> RetrievalDataset:
    kwargs = {"check_counts": check_counts} if "check_counts" in inspect.signature(cls).parameters else {}
    return cls(root, split, **kwargs)


def check_dataset(
    name: str, root: str | Path | None, *, check_counts: bool = True, progress: bool = True
) -> CheckReport:
    """Build every split of dataset ``name`` at ``root``, verify the counts and decode every image once.

    A missing root or index file raises (:class:`~dmllab.data.base.DatasetNotFoundError`); a malformed or
    truncated index file (:class:`~dmllab.data.real.IndexFileError`, naming file and line), count mismatches
    and undecodable images are collected in the report instead, so one run lists every problem.
    """
    from tqdm.auto import tqdm

    cls = DATASETS.get(name)
    report = CheckReport(name=name, root=None if root is None else str(root))
    try:
        if check_counts:
            try:
                _build(cls, root, cls.splits[0], check_counts=True)
            except DatasetCountError as err:
                report.count_error = str(err)
        datasets = {}
        for s in cls.splits:
            try:
                datasets[s] = _build(cls, root, s, check_counts=False)
            except EmptySplitError as err:
                report.split_errors.append(str(err))
                report.splits[s] = (0, 0)
    except IndexFileError as err:
        report.index_error = str(err)
        return report
    report.splits.update({s: (len(d), len(set(d.labels))) for s, d in datasets.items()})  # classes present
    if is_real_dataset(name) and root is not None:
        from dmllab.data.cache import DatasetCacheError, check_cache

        try:
            report.cache_problems = check_cache(name, root)
        except DatasetCacheError as err:
            report.cache_problems = [str(err)]

    # every image once: the splits in `check_splits` cover the whole index; de-duplicate by file
    todo: dict[str, tuple[RetrievalDataset, int]] = {}
    for split in getattr(cls, "check_splits", ()) or cls.splits:
        ds = datasets.get(split)
        if ds is None:  # an empty split (reported above)
            continue
        for i in range(len(ds)):
            key = str(ds.image_path(i)) if hasattr(ds, "image_path") else f"{split}[{i}]"
            todo.setdefault(key, (ds, i))
    for key, (ds, i) in tqdm(
        todo.items(), desc=f"decoding {name}", unit="img", disable=not progress, file=sys.stderr
    ):
        try:
            ds._load(i)
        except ImageLoadError as err:
            report.failures.append(str(err))
        except Exception as err:  # noqa: BLE001  (report any decoder failure, do not stop the scan)
            report.failures.append(f"{key}: {type(err).__name__}: {err}")
    report.images_checked = len(todo)
    return report
