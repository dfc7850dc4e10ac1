"""Proxy Synthesis Table 4 (+ Tables G, I, K): the MLRC protocol for six losses with and without PS."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue, kit
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run, printed
from dmllab.experiments.compare import paired
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params
from dmllab.experiments.proxy_synthesis import _common as C

BASES = ("normsoftmax", "cosface", "arcface", "softtriple", "proxynca", "proxy_anchor")
METRICS = ("P@1", "RP", "MAP@R")


def variant(base: str, ps: bool) -> str:
    name = C.NAMES[base][2]
    return f"PS + {name}" if ps else name


def _settings(folds: int, repetitions: int, run_folds: list[int] | None = None) -> Any:
    from dmllab.training.mlrc import MLRCSettings

    return MLRCSettings(
        folds=max(folds, 2),
        repetitions=max(repetitions, 1),
        run_folds=None if run_folds is None else tuple(run_folds),
    )


def _single_runs(params: Params) -> list[Run]:
    """Single 128-d models under the MLRC architecture and optimiser (``mlrc_config``: 128-d, batch 32 = 8 x 4,
    RMSprop, one stage, P@1/RP/MAP@R), trained on all training classes."""
    from dmllab.training.mlrc import mlrc_config

    out = []
    for ds in C.datasets(params.profile, params["datasets"]):
        for base in params["bases"]:
            for ps in (False, True):
                cfg = mlrc_config(C.config(params.profile, ds, base, ps=ps), _settings(4, 1))
                out += [
                    Run(
                        cfg,
                        seed,
                        variant=variant(base, ps),
                        tags=(("base", base), ("ps", ps), ("protocol", "single model")),
                    )
                    for seed in params.seeds
                ]
    return out


def _fold_groups(params: Params) -> list[tuple[str, str, bool, int, list[tuple[int, int, Run]]]]:
    """``(dataset, base, ps, seed, [(repetition, fold, fold run)])`` of the MLRC fold protocol (none when
    ``mlrc_folds`` is 0): every fold model is a store run (``dmllab.training.mlrc.fold_runs``), repetition r of
    seed s trained with seed s + r, all on seed s's draw of the benchmark."""
    from dmllab.training.mlrc import fold_runs

    if params["mlrc_folds"] <= 0:
        return []
    settings = _settings(params["mlrc_folds"], params["mlrc_repetitions"], params["mlrc_run_folds"])
    out = []
    for ds in C.datasets(params.profile, params["datasets"]):
        for base in params["bases"]:
            for ps in (False, True):
                cfg = C.config(params.profile, ds, base, ps=ps)
                for seed in params.seeds:
                    folds = [
                        (
                            r,
                            f,
                            Run(
                                fcfg,
                                s,
                                variant=variant(base, ps),
                                tags=(("base", base), ("ps", ps), ("protocol", "mlrc fold"), ("fold", f)),
                                draw=kit.draw_of(params, seed),
                            ),
                        )
                        for r, f, fcfg, s in fold_runs(cfg, settings, seed)
                    ]
                    out.append((ds, base, ps, seed, folds))
    return out


def runs(params: Params) -> list[Run]:
    """The single-model runs and (``mlrc_folds`` > 0) every fold model of the MLRC protocol."""
    return _single_runs(params) + [run for *_, folds in _fold_groups(params) for _, _, run in folds]


def rows(params: Params, lookup: Lookup) -> list[dict[str, Any]]:
    """The single models' stored metrics ("separated (one 128-d model)"), and per (loss, PS, seed) the MLRC fold
    protocol's concatenated and separated P@1/RP/MAP@R from the stored fold runs
    (``dmllab.training.mlrc.aggregate``: each fold's final model embeds the test split)."""
    from dmllab.results import tidy
    from dmllab.training.mlrc import aggregate

    out = lookup.rows(_single_runs(params), embedding="separated (one 128-d model)")
    settings = _settings(params["mlrc_folds"], params["mlrc_repetitions"], params["mlrc_run_folds"])

    def embed(cfg: Any, seed: int) -> tuple[Any, Any]:  # a fold model's test embeddings and labels
        emb, labels, _ = lookup.embed(Run(cfg, seed, draw=kit.draw_in(cfg)), cfg.data.test_split)
        return emb, labels

    for ds, base, ps, seed, folds in _fold_groups(params):
        folds = [(r, f, lookup.place(run)) for r, f, run in folds]
        done = [(r, f, run.config, run.seed, lookup.result(run)) for r, f, run in folds]
        res = aggregate(settings, seed, done, embeddings=embed)
        for emb, prefix in (("concatenated", "concat_"), ("separated", "sep_")):
            m = {k: res.metrics[prefix + k] for k in METRICS}
            out += tidy(
                m,
                variant=variant(base, ps),
                dataset=ds,
                seed=seed,
                base=base,
                ps=ps,
                protocol="mlrc folds",
                embedding=emb,
                folds=len(res.folds_trained),
            )
    return out


def reference(rec: Any) -> tuple[str, ...] | None:
    metric = str(rec["metric"])
    if metric not in METRICS:
        return None
    ds = str(rec.get("dataset"))
    ds = ds if ds in C.MLRC_TABLE else "cub"  # the offline benchmark faces the CUB columns
    row = str(rec["variant"])
    if rec.get("param_protocol") == "mlrc folds" and rec.get("param_embedding") == "concatenated":
        return ("Table 4", row, f"{C.REF_DATASET[ds]} {metric}", ds)
    return (C.MLRC_TABLE[ds], row, f"Separated (128-dim) {metric}", ds)


def _gain(base: str, metric: str = "MAP@R", protocol: str = "single model", embedding: str | None = None):
    def effect(df: Any) -> Any:
        d = df[df["param_protocol"] == protocol] if "param_protocol" in df.columns else df.iloc[0:0]
        if embedding is not None:
            d = d[d["param_embedding"] == embedding]
        return paired(d, metric, {"variant": variant(base, True)}, {"variant": variant(base, False)})

    return effect


def _ti(column: str) -> Any:
    """Table I (Cars, the MLRC protocol): PS + Norm-softmax minus Norm-softmax in ``column``."""
    return printed(C.cell("Table I", "PS + Norm-softmax", column), C.cell("Table I", "Norm-softmax", column))


def _plot(tables: Any) -> Any:
    import matplotlib.pyplot as plt
    import seaborn as sns

    df = tables["rows"]
    df = df[df["metric"].isin(METRICS)].copy()
    df["panel"] = df["param_protocol"].astype(str) + ", " + df["param_embedding"].astype(str)
    panels = list(dict.fromkeys(df["panel"]))
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6 * max(1, len(panels)), 3.8), squeeze=False)
    for ax, p in zip(axes[0], panels):
        sub = df[df["panel"] == p]
        sns.barplot(
            data=sub,
            x="metric",
            y="value",
            hue="variant",
            errorbar="sd",
            capsize=0.05,
            ax=ax,
            order=list(METRICS),
        )
        ax.set(title=p, xlabel="", ylabel="%, mean +- std over seeds")
        ax.legend(fontsize=7)
    fig.suptitle("PS Table 4: MLRC metrics with and without PS")
    fig.tight_layout()
    return fig


_ARMS = (C.arm("normsoftmax"),)
_NO_SEARCH = (
    "the paper's 50-trial hyper-parameter search is not run; the config's lr (PS's 1e-6 is for BN-Inception)"
)
_MLRC_SINGLE = analogue.differs(
    "one 128-d model per seed under the MLRC architecture and optimiser on every training class of the "
    f"benchmark; {_NO_SEARCH}",
    paper=f"{analogue.BN_INCEPTION}; {_NO_SEARCH}",
)


def _folds(profile: str) -> str:
    p = ARTIFACT.defaults(profile)
    trained = "all" if p["mlrc_run_folds"] is None else len(p["mlrc_run_folds"])
    return (
        f"{p['mlrc_folds']} folds ({trained} trained), {p['mlrc_repetitions']} repetition(s) per seed over "
        f"{len(p['seeds'])} seeds for the paper's 10 repetitions, on the benchmark; {_NO_SEARCH}"
    )


_MLRC_FOLDS = analogue.differs(_folds, paper=f"{analogue.BN_INCEPTION}; {_NO_SEARCH}")


def _claim(where: str, metric: str, key: str) -> Claim:
    """PS's gain for Norm-softmax in ``metric`` under the single model or (``where`` says so) the fold protocol,
    facing Table I's column of that embedding; the concatenated fold protocol is Table 4's primary claim."""
    folds = "fold protocol" in where
    embedding = None if not folds else "concatenated" if "concatenated" in where else "separated"
    return Claim(
        f"PS improves the {metric} of Norm-softmax ({where})",
        _gain("normsoftmax", metric, "mlrc folds" if folds else "single model", embedding),
        unit=f"{metric} points",
        differs=_MLRC_FOLDS if folds else _MLRC_SINGLE,
        arms=_ARMS,
        paper_effect=_ti(
            f"{'Concatenated (512-dim)' if embedding == 'concatenated' else 'Separated (128-dim)'} {metric}"
        ),
        primary=key == "folds_concat_map",
        training_fit=True,
        key=key,
    )


ARTIFACT = Artifact(
    id="ps_table4_mlrc",
    paper="proxy_synthesis",
    label="Table 4",
    tier="ablation",
    title="MLRC evaluation of six losses with and without PS (+ Tables G, I, K)",
    description=(
        "PS Table 4 / G / I / K (CUB, Cars, SOP): the MLRC protocol (4-fold class-disjoint CV on the training "
        "classes, 128-d fold models, batch 32 = 8 x 4, RMSprop, 10 repetitions; P@1, R-Precision, MAP@R of the "
        "concatenated 512-d and the separated 128-d embeddings) for Norm-softmax, CosFace, ArcFace, SoftTriple, "
        "Proxy-NCA and Proxy-anchor, each with and without PS. Every fold model is a run of the run store "
        "(`dmllab.training.mlrc.fold_runs`: trained on three folds' classes, the best epoch on the fourth fold's "
        "classes kept, `run.keep_best`), so the study plans, shares and stores them; the notebook embeds the test "
        "split with each fold's final model and computes the concatenated and separated numbers "
        "(`mlrc.aggregate`; rows `param_protocol = mlrc folds`, facing Table 4's columns). Besides, one single "
        "128-d model per (loss, PS, seed) under the MLRC architecture and optimiser trained on all training "
        "classes (`mlrc_config`; `param_protocol = single model`, facing the 'Separated (128-dim)' columns). "
        "Quick: Norm-softmax only, all 4 folds, 1 repetition per seed (seeds stand in for the 10 "
        "repetitions), the config's lr (PS's 1e-6 is for BN-Inception). Smoke: 4 folds, one trained. The "
        "paper's 50-trial hyper-parameter search is not run."
    ),
    parameters={
        "smoke": {
            "bases": ["normsoftmax"],
            "datasets": ["synthetic"],
            "mlrc_folds": 4,
            "mlrc_run_folds": [0],
            "mlrc_repetitions": 1,
        },
        "quick": {
            "bases": ["normsoftmax"],
            "datasets": ["synthetic"],
            "mlrc_folds": 4,
            "mlrc_run_folds": None,
            "mlrc_repetitions": 1,
        },
        "paper": {
            "seeds": [0],
            "bases": list(BASES),
            "datasets": ["cub", "cars", "sop"],
            "mlrc_folds": 4,
            "mlrc_run_folds": None,
            "mlrc_repetitions": 10,
        },
    },
    parameter_help={
        "bases": "losses, each with and without PS",
        "datasets": "paper-profile datasets",
        "mlrc_folds": "folds of the MLRC protocol, each fold model a store run (0: not run)",
        "mlrc_run_folds": "which folds to train (None: all)",
        "mlrc_repetitions": "repetitions of the protocol",
    },
    runs=runs,
    rows=rows,
    reference=reference,
    claims=(
        _claim("MLRC architecture, single 128-d model", "MAP@R", "single_map"),
        _claim("MLRC architecture, single 128-d model", "P@1", "single_p1"),
        _claim("MLRC fold protocol, concatenated 512-d: Table 4", "MAP@R", "folds_concat_map"),
        _claim("MLRC fold protocol, concatenated 512-d: Table 4", "P@1", "folds_concat_p1"),
        _claim("MLRC fold protocol, separated 128-d", "MAP@R", "folds_separated_map"),
    ),
    figures=(Figure(_plot, caption="P@1, RP, MAP@R per loss with and without PS (mean +- std over seeds)."),),
    not_reproduced={
        "Quick: 10 repetitions of the fold protocol": "the seeds, each on its own draw of the benchmark with one repetition, stand in for them",
        "Quick: CosFace, ArcFace, SoftTriple, Proxy-NCA, Proxy-anchor": "run budget (the paper profile runs them)",
        "The 50-trial hyper-parameter search": "not implemented",
    },
)
