"""The Proxy Synthesis paper's facts shared by its artifacts: the run configs (so tables share their runs), the
paper's row names per loss, and the profile -> datasets mapping.

Every PS run is built from the ``proxy_synthesis`` preset (the released setup on the paper profile, its compressed
analogue on quick/smoke: ``presets.get("proxy_synthesis", ds, profile, base=...)``); "without PS" is the *same*
config without its Proxy Synthesis wrapper (``without_synthesis``), as in the paper
(Table 6 compares a loss with and without PS under one training setup). SoftTriple is the preset's
``base="softtriple"`` (the loss's own defaults, K=10, scale 20, gamma 0.1, margin 0.01, tau 0.2: SoftTriple
paper / PS supplement); Table 5's Virtual Softmax and mixups are ``base="virtual_softmax"`` and the preset's
``regularizer`` / ``mixup_alpha`` options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dmllab.experiments import analogue, kit
from dmllab.experiments.artifact import Run
from dmllab.experiments.figures import tsne
from dmllab.experiments.params import Params

METHOD = "proxy_synthesis"
# base -> (Table 6 row, Table F/H/J/L row, Table 4/G/I/K row); None where the table has no such row.
NAMES: dict[str, tuple[str, str, str | None]] = {
    "softmax": ("Softmax", "Softmax", None),
    "normsoftmax": ("Norm-softmax", "Norm-softmax (Wang et al. 2017)", "Norm-softmax"),
    "sphereface": ("SphereFace", "SphereFace (Liu et al. 2017)", None),
    "cosface": ("CosFace", "Cosface (Wang et al. 2018)", "CosFace"),
    "arcface": ("ArcFace", "Arcface (Deng et al. 2019)", "ArcFace"),
    "proxynca": ("Proxy-NCA", "Proxy-NCA (Movshovitz-Attias et al. 2017)", "Proxy-NCA"),
    "softtriple": ("SoftTriple", "SoftTriple (Qian et al. 2019)", "SoftTriple"),
    "proxy_anchor": ("Proxy-anchor†", "Proxy-anchor (Kim et al. 2020)", "Proxy-anchor"),
}
# Table F/H/J/L spell the PS rows without the citation and with their own capitalisation.
PS_FULL_NAME = {"cosface": "PS + Cosface", "arcface": "PS + Arcface", "proxy_anchor": "PS + Proxy-anchor"}
PAPER_DATASETS = ("cub", "cars", "sop", "inshop")
REF_DATASET = {"cub": "CUB200", "cars": "CARS196", "sop": "SOP", "inshop": "In-Shop"}
FULL_TABLE = {"cub": "Table F", "cars": "Table H", "sop": "Table J", "inshop": "Table L"}
# the R@K columns Tables F, H, J, L print
FULL_KS = {"cub": (1, 2, 4, 8), "cars": (1, 2, 4, 8), "sop": (1, 10, 100, 1000), "inshop": (1, 10, 20, 40)}
MLRC_TABLE = {"cub": "Table G", "cars": "Table I", "sop": "Table K"}


def arm(base: str) -> str:
    """The method label of a base loss (a claim's ``arms``; PS on or off is the arm's switch)."""
    return f"{METHOD}:{base}"


def differs(specific: Any, base: str = "normsoftmax", dataset: str = "cars") -> Any:
    """A Proxy Synthesis claim's ``differs``: ``specific``, the profile's analogue of the PS preset over ``base``,
    and on the paper profile ResNet-50 for BN-Inception (:func:`dmllab.experiments.analogue.differs`)."""
    return analogue.differs(specific, METHOD, dataset, paper=analogue.BN_INCEPTION, base=base)


def label(base: str, ps: bool) -> str:
    """The variant name of a run: the paper's Table 6 row ("PS + Norm-softmax")."""
    name = NAMES[base][0]
    return f"PS + {name}" if ps else name


def base_of(variant: str) -> tuple[str, bool]:
    """Inverse of :func:`label`: (base, with PS)."""
    ps = variant.startswith("PS + ")
    name = variant[5:] if ps else variant
    for base, names in NAMES.items():
        if names[0] == name:
            return base, ps
    raise KeyError(variant)


def datasets(profile: str, paper: Sequence[str] = ("cars",)) -> list[str]:
    """The quick/smoke profiles run the offline benchmark ("synthetic"); the paper profile the real datasets."""
    return list(paper) if profile == "paper" else ["synthetic"]


def config(
    profile: str,
    dataset: str,
    base: str = "normsoftmax",
    *,
    ps: bool = True,
    options: Mapping[str, Any] | None = None,
    **replace: Any,
) -> Any:
    """The profile's PS preset over ``base`` (the released setup on the paper profile; with or without PS), with
    the preset's ``options`` ({"regularizer": "manifold_mixup"}), plus ``replace`` ({"loss.mu": 2.0}, the Proxy
    Synthesis wrapper's own keywords; keys use "__" for "." so they can be keyword arguments: ``loss__mu=2.0``)."""
    from dmllab.training import presets
    from dmllab.training.presets.proxy_synthesis import without_synthesis

    cfg = presets.get(METHOD, dataset, profile, base=base, **(options or {}))
    if not ps:
        cfg = without_synthesis(cfg)
    for key, value in replace.items():
        cfg = cfg.replace(key.replace("__", "."), value)
    return cfg


def loss_runs(
    params: Params, bases: Sequence[str], dataset_list: Sequence[str], *, both: bool = True, **replace: Any
) -> list[Run]:
    """One run per (dataset, base, with/without PS, seed): the shared Table 6 runs."""
    out = []
    for ds in dataset_list:
        for base in bases:
            for ps in (False, True) if both else (True,):
                cfg = config(params.profile, ds, base, ps=ps, **replace)
                out += kit.seeds_runs(cfg, params, label(base, ps), base=base, ps=ps)
    return out


def cell(label: str, row: str, column: str, dataset: str = "cars") -> tuple[str, str, str, str]:
    """A printed cell of ``results/reference/proxy_synthesis.csv`` (Cars unless said: the benchmark faces Cars)."""
    return (label, row, column, dataset)


def stand_in(rec: Mapping[str, Any], default: str = "cars") -> str:
    """The paper dataset a row faces: itself on the paper profile; ``default`` for the offline benchmark."""
    ds = str(rec.get("dataset"))
    return ds if ds in PAPER_DATASETS else default


def tsne_by_class(
    emb: Any, labels: Any, *, classes: int, per_class: int, seed: int
) -> list[tuple[int, float, float]]:
    """``(label, x, y)`` of a t-SNE (:func:`tsne`) of the first ``per_class`` samples of each of the first
    ``classes`` labels (a readable picture)."""
    import numpy as np

    y = np.asarray(labels)
    keep = np.isin(y, np.unique(y)[:classes])
    e, y = np.asarray(emb)[keep], y[keep]
    sel = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in np.unique(y)])
    xy = tsne(e[sel], seed=seed)
    return [(int(y[s]), float(a), float(b)) for s, (a, b) in zip(sel, xy)]
