"""ProxyNCA++ Fig. 5 (appendix A): R@1 of NormSoftMax against its temperature."""

from __future__ import annotations

from dmllab.experiments import analogue, kit
from dmllab.experiments.artifact import Artifact, Claim, Run
from dmllab.experiments.params import Params
from dmllab.experiments.pnpp import _common as C


def preset_temperature(dataset: str, profile: str) -> float:
    """The T of the profile's NormSoftMax preset: 1/2 (the authors' pick from this figure), or on quick the T
    that ``dmllab tune`` chose on validation. The sweep always contains it."""
    return float(kit.config("normsoftmax", dataset, profile).loss.get("temperature"))


# "Lowering T beyond the optimum hurts" compares the preset's T with T one step of the paper's grid (factors of 2)
# below it.
BELOW = 2.0


def runs(params: Params) -> list[Run]:
    return C.sweep_runs(
        params,
        lambda d, p, t: kit.config("normsoftmax", d, p, temperature=t),
        "temperature",
        params["temperatures"],
        preset=preset_temperature,
        descending=True,
        below=BELOW,
    )


_FIGURE = C.sweep_figure(
    "temperature", "temperature T (log)", "Fig. 5: NormSoftMax R@1 against T (dotted: the preset's T)", "T"
)

ARTIFACT = Artifact(
    id="pnpp_fig5_normsoftmax_temperature",
    paper="pnpp",
    label="Fig. 5",
    title="R@1 of NormSoftMax against the temperature T",
    description=(
        "ProxyNCA++ appendix A, Fig. 5: NormSoftMax (no layer norm, no class-balanced batches, no fast proxies) "
        "on CUB against T; the authors pick T = 1/2 from it. The swept values are not printed: dmllab sweeps "
        "factors of 2 around 1/2 and always adds the preset's T (1/2 on the paper profile; on quick the T that "
        "dmllab tune chose on validation), whose runs are the NormSoftMax runs of pnpp_table12_13_normsoftmax. "
        "Quick: T = 1, 1/4, 1/16, the preset's and half of it on the offline benchmark."
    ),
    parameters={
        "smoke": {"datasets": ["synthetic"], "temperatures": [1.0, 0.5]},
        "quick": {"datasets": ["synthetic"], "temperatures": [1.0, 0.25, 0.0625]},
        "paper": {"datasets": ["cub"], "temperatures": [1.0, 0.5, 0.25, 0.125, 1 / 16, 1 / 32]},
    },
    parameter_help={"datasets": "datasets to train on", "temperatures": "the swept T"},
    runs=runs,
    claims=(
        Claim(
            "NormSoftMax: R@1 at the preset's T (the paper's 1/2; on quick the tuned T) above T = 1",
            lambda df: C.preset_vs(df, "R@1", "temperature", 1.0),
            unit="R@1 points",
            differs=analogue.differs(
                "both temperatures at the profile's NormSoftMax settings", "normsoftmax"
            ),
            arms=("normsoftmax",),
            primary=True,
            key="t2_vs_t1",
        ),
        Claim(
            "NormSoftMax: R@1 at the preset's T (the paper's 1/2; on quick the tuned T) above half that T",
            lambda df: C.preset_vs(df, "R@1", "temperature", "below"),
            unit="R@1 points",
            differs=analogue.differs(
                "half the preset's T, one step of the paper's grid (which it prints only as a curve)",
                "normsoftmax",
            ),
            arms=("normsoftmax",),
            key="below_optimum",
        ),
    ),
    figures=(_FIGURE,),
)
