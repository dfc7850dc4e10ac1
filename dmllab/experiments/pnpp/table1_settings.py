"""ProxyNCA++ Table 1: the datasets and the hyper-parameters per dataset (no training)."""

from __future__ import annotations

from typing import Any

from dmllab.experiments.artifact import Artifact, Figure
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params
from dmllab.experiments.pnpp import _common as C

ROW = {"cub": "CUB200", "cars": "Cars196", "sop": "Sop", "inshop": "InShop"}
COLUMN = {
    "num_images": "images",
    "num_classes": "classes",
    "images_per_class": "avg",
    "batch_size": "batch size (ours)",
    "lr": "Base lr",
    "proxy_lr": "Proxy lr",
    "cbs_instances": "cbs",
}
# The splits that partition a dataset (every image once).
PARTITION = {
    "cub": ("trainval", "test"),
    "cars": ("trainval", "test"),
    "sop": ("trainval", "test"),
    "inshop": ("trainval", "query", "gallery"),
    "synthetic": ("trainval", "test"),
}


def hyper_parameters(cfg: Any) -> dict[str, float]:
    """Table 1's columns of a config: batch size, base lr, proxy lr (the base lr when proxies are not fast),
    cbs instances (0 = random batches)."""
    o, d = cfg.optim, cfg.data
    return {
        "batch_size": float(d.batch_size),
        "lr": float(o.lr),
        "proxy_lr": float(o.lr_proxies if o.lr_proxies is not None else o.lr),
        "cbs_instances": float(d.per_class or 0),
    }


def dataset_stats(name: str, root: str | None, **kwargs: Any) -> dict[str, float] | None:
    """Images, classes and images per class over the splits that partition the dataset; None when the data are
    not there (paper datasets without ``data_root``)."""
    from dmllab.data import build_dataset

    n_images, classes = 0, set()
    try:
        for split in PARTITION[name]:
            ds = build_dataset(name, root, split, transform=None, **kwargs)
            n_images += len(ds)
            # splits are class-disjoint, except In-Shop's query and gallery (one label space)
            group = "eval" if split in ("query", "gallery") else split
            classes |= {(group, int(c)) for c in ds.labels}
    except Exception:  # noqa: BLE001 - a missing dataset folder is reported as a missing row, not an error
        return None
    return {
        "num_images": float(n_images),
        "num_classes": float(len(classes)),
        "images_per_class": float(round(n_images / max(len(classes), 1))),
    }


def rows(params: Params, lookup: Lookup) -> list[dict[str, Any]]:
    from dmllab.results import tidy

    out: list[dict[str, Any]] = []
    # The paper preset's hyper-parameters for every dataset (no data needed).
    for name in C.PAPER_DATASETS:
        out += tidy(hyper_parameters(C.pnpp(name, "paper")), variant="paper preset", dataset=name, seed=0)
    if params.profile == "paper":
        for name in C.PAPER_DATASETS:
            stats = dataset_stats(name, params.data_root)
            if stats is not None:
                out += tidy(stats, variant="dataset", dataset=name, seed=0)
    else:
        cfg = C.pnpp("synthetic", params.profile)
        out += tidy(hyper_parameters(cfg), variant=f"{params.profile} preset", dataset="synthetic", seed=0)
        stats = dataset_stats("synthetic", None, **cfg.data.dataset.kw)
        if stats is not None:
            out += tidy(stats, variant="dataset", dataset="synthetic", seed=0)
    return out


def reference(rec: Any) -> tuple[str, str, str, str] | None:
    dataset = C.REF_DATASET.get(str(rec.get("dataset")))
    if dataset is None or rec["metric"] not in COLUMN:
        return None
    return "Table 1", ROW[dataset], COLUMN[rec["metric"]], dataset


def _figure(tables: Any) -> Any:
    """Each hyper-parameter and count of the presets/datasets, relative to the paper's Table 1 value (log)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from dmllab.reference import load_reference

    rows_ = tables["rows"]
    ref = load_reference("pnpp")
    ref = ref[ref["artifact"] == "Table 1"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    labels, ratios, colors = [], [], []
    for rec in rows_.to_dict("records"):
        key = reference(rec)
        if key is None:
            continue
        hit = ref[(ref["row"] == key[1]) & (ref["column"] == key[2])]
        if hit.empty or not hit["value"].iloc[0]:
            continue
        labels.append(f"{rec['variant']} {rec['dataset']}: {rec['metric']}")
        ratios.append(float(rec["value"]) / float(hit["value"].iloc[0]) if float(rec["value"]) else np.nan)
        colors.append("tab:green" if np.isclose(ratios[-1], 1.0) else "tab:orange")
    y = np.arange(len(labels))
    ax.barh(y, ratios, color=colors)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_yticks(y, labels, fontsize=6)
    ax.set(xscale="log", xlabel="value / Table 1 value (1 = as printed)")
    ax.set_title("Presets and datasets vs ProxyNCA++ Table 1", fontsize=10)
    fig.tight_layout()
    return fig


ARTIFACT = Artifact(
    id="pnpp_table1_settings",
    paper="pnpp",
    label="Table 1",
    title="Datasets and per-dataset hyper-parameters (batch size, base lr, proxy lr, cbs)",
    description=(
        "ProxyNCA++ Table 1 lists, per dataset, the number of images and classes, the average images per class, "
        "the batch size, the base and proxy learning rates and the class-balanced sampling instances. dmllab "
        "prints the hyper-parameters of its `paper` ProxyNCA++ preset for the four datasets (they must equal "
        "the table) and, on the paper profile, the counts of the dataset folders under `data_root` (the "
        "splits that partition each dataset; a dataset that is not there has no count row). On the quick and "
        "smoke profiles it adds the preset of that profile and the counts of the offline synthetic benchmark "
        "that stands in for CUB (its rows face CUB's cells: the benchmark is far smaller, by design). No "
        "training, no seeds, no claims: a deterministic table."
    ),
    parameters={"smoke": {"seeds": [0]}, "quick": {"seeds": [0]}, "paper": {"seeds": [0]}},
    rows=rows,
    reference=reference,
    figures=(Figure(_figure, caption="Every value divided by Table 1's (green: equal)."),),
    not_reproduced={
        "batch size (MS [32])": "the batch size of another method (MS), quoted by the paper for "
        "comparison; not a ProxyNCA++ setting"
    },
)
