"""Discovery of artifacts: every module under ``dmllab/experiments/<package>/`` (one package per paper,
:data:`PACKAGES`) that defines ``ARTIFACT`` (or ``ARTIFACTS``, a tuple) contributes it. Adding an artifact is adding
one file; nothing else lists them."""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
import re
from functools import lru_cache

from dmllab.experiments.artifact import PAPERS, TIERS, Artifact
from dmllab.reference import PAPER_TABLE

# The package under dmllab/experiments/ that holds each paper's artifacts (dmllab.reference.PAPER_TABLE).
PACKAGES: dict[str, str] = {p.key: p.package for p in PAPER_TABLE}


@lru_cache(maxsize=1)
def _discover() -> dict[str, Artifact]:
    return {aid: artifact for aid, (artifact, _) in _modules().items()}


@lru_cache(maxsize=1)
def _modules() -> dict[str, tuple[Artifact, str]]:
    found: dict[str, tuple[Artifact, str]] = {}
    for paper in PAPERS:
        package = importlib.import_module(f"dmllab.experiments.{PACKAGES[paper]}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            declared = getattr(module, "ARTIFACTS", None) or (
                (module.ARTIFACT,) if hasattr(module, "ARTIFACT") else ()
            )
            if not declared:
                raise ValueError(f"{module.__name__} declares no ARTIFACT (or ARTIFACTS)")
            for artifact in declared:
                if artifact.paper != paper:
                    raise ValueError(
                        f"{module.__name__}: artifact {artifact.id!r} says paper {artifact.paper!r} but lives "
                        f"under dmllab/experiments/{PACKAGES[paper]}/"
                    )
                if artifact.id in found:
                    raise ValueError(f"duplicate artifact id {artifact.id!r} ({module.__name__})")
                found[artifact.id] = (artifact, module.__name__)
    return found


def label_key(label: str) -> tuple:
    """The paper's order of an artifact label: tables, then figures, sections, appendices; by number, the
    supplement's lettered ones (Table A, Fig. D) after the numbered ones."""
    kinds = (("table", 0), ("fig", 1), ("sec", 2), ("app", 3))
    rank = next((r for word, r in kinds if label.lower().startswith(word)), 4)
    number = re.search(r"\d+", label)
    return (rank, (0, int(number.group()), label) if number else (1, 0, label))


def module_path(artifact_id: str) -> str:
    """The file that declares ``artifact_id``, relative to the repository root
    (``dmllab/experiments/pnpp/table3_6_sota.py``)."""
    get(artifact_id)
    return _modules()[artifact_id][1].replace(".", "/") + ".py"


def all_artifacts() -> list[Artifact]:
    """Every artifact in report order: by paper (:data:`PAPERS`), then in the paper's order (:func:`label_key`),
    then by id."""
    return sorted(_discover().values(), key=_report_order)


def _report_order(a: Artifact) -> tuple:
    return (PAPERS.index(a.paper), label_key(a.label), a.id)


def by_importance(artifacts: list[Artifact]) -> list[Artifact]:
    """``artifacts`` in the papers' order of importance: by tier (:data:`~dmllab.experiments.artifact.TIERS`:
    the headline tables first), then in report order (paper, the paper's order, id)."""
    return sorted(artifacts, key=lambda a: (TIERS.index(a.tier), *_report_order(a)))


def names() -> list[str]:
    return [a.id for a in all_artifacts()]


def get(artifact_id: str) -> Artifact:
    """The artifact ``artifact_id``; an unknown id raises a KeyError listing the valid ones."""
    found = _discover()
    if artifact_id not in found:
        raise KeyError(f"unknown artifact {artifact_id!r}; valid artifacts: {', '.join(sorted(found))}")
    return found[artifact_id]


def select(only: str | None) -> list[Artifact]:
    """Artifacts whose id matches ``only``: comma-separated ids, substrings or glob patterns (all if None).

    Raises:
        ValueError: a pattern that matches nothing (listing the valid ids), or ``only`` with no pattern at all
            (``""``, ``","``).
    """
    arts = all_artifacts()
    if only is None:
        return arts
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    if not patterns:
        raise ValueError(
            f"--only {only!r} names no artifact; give ids, substrings or globs, comma-separated (artifacts: "
            f"{', '.join(a.id for a in arts)})"
        )
    chosen: list[Artifact] = []
    for pattern in patterns:
        glob = any(c in pattern for c in "*?[")
        hit = [a for a in arts if fnmatch.fnmatch(a.id, pattern) or (not glob and pattern in a.id)]
        if not hit:
            raise ValueError(
                f"--only {pattern!r} matches no artifact; artifacts: {', '.join(a.id for a in arts)}"
            )
        chosen += [a for a in hit if a not in chosen]
    return [a for a in arts if a in chosen]
