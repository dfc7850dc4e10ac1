"""ProxyNCA++ Fig. 4c: R@1 against the proxies' learning rate."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue
from dmllab.experiments.artifact import Artifact, Claim, Run
from dmllab.experiments.params import Params
from dmllab.experiments.pnpp import _common as C


def build(dataset: str, profile: str, lr: float) -> Any:
    cfg = C.pnpp(dataset, profile)
    return cfg if lr == cfg.optim.lr_proxies else cfg.replace("optim.lr_proxies", float(lr))


def preset_proxy_lr(dataset: str, profile: str) -> float:
    """The proxy lr of the profile's ProxyNCA++ preset: 4e2 (Table 1), or on quick the tuned embedding lr times
    the tuned proxy ratio (``dmllab tune``, on validation). The sweep always contains it."""
    return float(C.pnpp(dataset, profile).optim.lr_proxies)


def runs(params: Params) -> list[Run]:
    return C.sweep_runs(params, build, "proxy_lr", params["proxy_lrs"], preset=preset_proxy_lr)


_FIGURE = C.sweep_figure(
    "proxy_lr",
    "proxy learning rate (log)",
    "Fig. 4c: ProxyNCA++ R@1 against the proxy lr (dotted: the preset's)",
    "the proxy lr",
)

ARTIFACT = Artifact(
    id="pnpp_fig4c_proxy_lr",
    paper="pnpp",
    label="Fig. 4c",
    title="R@1 against the proxies' learning rate (ProxyNCA++)",
    description=(
        "ProxyNCA++ Fig. 4c: R@1 on CUB against the proxy learning rate (Table 1: 4e2 on CUB, 'fast proxies'). "
        "The swept values are not printed; dmllab sweeps decades around 4e2 with everything else as the "
        "ProxyNCA++ preset, and always adds the preset's proxy lr (4e2 on the paper profile; on quick the tuned "
        "embedding lr times the tuned proxy ratio, chosen by dmllab tune on validation), whose runs are the "
        "shared preset runs. Quick: 4, 40, 400, 4000 and the preset's on the offline benchmark."
    ),
    parameters={
        "smoke": {"datasets": ["synthetic"], "proxy_lrs": [4.0, 400.0]},
        "quick": {"datasets": ["synthetic"], "proxy_lrs": [4.0, 40.0, 400.0, 4000.0]},
        "paper": {"datasets": ["cub"], "proxy_lrs": [0.4, 4.0, 40.0, 400.0, 4000.0]},
    },
    parameter_help={"datasets": "datasets to train on", "proxy_lrs": "the swept proxy learning rates"},
    runs=runs,
    claims=(
        Claim(
            "fast proxies: R@1 at the preset's proxy lr (the paper's 4e2; on quick the tuned one) above the "
            "smallest proxy lr swept",
            lambda df: C.preset_vs(df, "R@1", "proxy_lr", "min"),
            unit="R@1 points",
            differs=analogue.differs(
                lambda p: (
                    f"proxy lrs {', '.join(f'{x:g}' for x in ARTIFACT.parameters[p]['proxy_lrs'])} and the "
                    f"preset's {preset_proxy_lr('synthetic', p):.3g} with the preset's other lrs ({analogue.lr_line(C.pnpp('synthetic', p), ('backbone', 'embedding'))}; "
                    "paper: base lr 4e-3)"
                ),
                "proxynca++",
            ),
            arms=("proxynca++",),
            primary=True,
            key="fast_vs_slowest",
        ),
    ),
    figures=(_FIGURE,),
)
