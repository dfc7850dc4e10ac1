"""ProxyNCA++ Fig. 6 (appendix A): R@1 of NormSoftMax (T = 1/2) against the proxies' learning rate."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue, kit
from dmllab.experiments.artifact import Artifact, Claim, Run
from dmllab.experiments.params import Params
from dmllab.experiments.pnpp import _common as C


def preset_proxy_lr(dataset: str, profile: str) -> float:
    """The proxy lr of the profile's NormSoftMax +fast preset: 4e-1 (100 x the base lr 4e-3), or on quick 100 x
    the tuned embedding lr. The sweep always contains it."""
    return float(kit.config("normsoftmax", dataset, profile, fast=True).optim.lr_proxies)


def build(dataset: str, profile: str, lr: float) -> Any:
    """NormSoftMax with the proxies at ``lr`` (the preset's +fast proxy lr is its +fast run, shared with Tables
    12-13)."""
    fast = kit.config("normsoftmax", dataset, profile, fast=True)
    if abs(lr - fast.optim.lr_proxies) < 1e-12:
        return fast
    return kit.config("normsoftmax", dataset, profile).replace("optim.lr_proxies", float(lr))


def runs(params: Params) -> list[Run]:
    return C.sweep_runs(params, build, "proxy_lr", params["proxy_lrs"], preset=preset_proxy_lr)


def _lrs(profile: str) -> str:
    swept = ", ".join(f"{x:g}" for x in ARTIFACT.parameters[profile]["proxy_lrs"])
    base = analogue.lr_line(kit.config("normsoftmax", "synthetic", profile), ("backbone", "embedding"))
    own = preset_proxy_lr("synthetic", profile)
    return f"proxy lrs {swept} and the +fast preset's {own:.3g} with the preset's other lrs ({base}; paper: base lr 4e-3)"


_FIGURE = C.sweep_figure(
    "proxy_lr",
    "proxy learning rate (log)",
    "Fig. 6: NormSoftMax R@1 against the proxy lr (dotted: the +fast preset's)",
    "the proxy lr",
)

ARTIFACT = Artifact(
    id="pnpp_fig6_normsoftmax_proxy_lr",
    paper="pnpp",
    label="Fig. 6",
    title="R@1 of NormSoftMax against the proxies' learning rate",
    description=(
        "ProxyNCA++ appendix A, Fig. 6: NormSoftMax (T = 1/2, no layer norm, no class-balanced batches) on CUB "
        "against the proxy learning rate; the authors pick 4e-1 (100 x their base lr 4e-3). dmllab sweeps decades "
        "around 4e-1 with the profile's other learning rates (the trunk's and the embedding layer's, printed by "
        "`dmllab presets --method normsoftmax --profile quick` and in each claim's 'differs' line), and always "
        "adds the +fast preset's proxy lr (4e-1 on the paper profile; on quick 100 x the embedding lr that "
        "dmllab tune chose on validation), whose runs are the NormSoftMax +fast runs of Tables 12-13. Quick: "
        "4e-2, 4e-1, 4 and the preset's on the offline benchmark."
    ),
    parameters={
        "smoke": {"datasets": ["synthetic"], "proxy_lrs": [0.04, 0.4]},
        "quick": {"datasets": ["synthetic"], "proxy_lrs": [0.04, 0.4, 4.0]},
        "paper": {"datasets": ["cub"], "proxy_lrs": [0.004, 0.04, 0.4, 4.0, 40.0]},
    },
    parameter_help={"datasets": "datasets to train on", "proxy_lrs": "the swept proxy learning rates"},
    runs=runs,
    claims=(
        Claim(
            "NormSoftMax: R@1 at the +fast preset's proxy lr (the paper's 4e-1; on quick 100 x the tuned "
            "embedding lr) above the smallest swept",
            lambda df: C.preset_vs(df, "R@1", "proxy_lr", "min"),
            unit="R@1 points",
            differs=analogue.differs(_lrs, "normsoftmax"),
            arms=("normsoftmax",),
            primary=True,
            key="vs_slowest",
        ),
        Claim(
            "NormSoftMax: R@1 at the +fast preset's proxy lr (the paper's 4e-1; on quick 100 x the tuned "
            "embedding lr) above the largest swept",
            lambda df: C.preset_vs(df, "R@1", "proxy_lr", "max"),
            unit="R@1 points",
            differs=analogue.differs(_lrs, "normsoftmax"),
            arms=("normsoftmax",),
            key="vs_fastest",
        ),
    ),
    figures=(_FIGURE,),
)
