"""Proxy Synthesis (Gu et al., AAAI 2021; paper 004) over a proxy loss: the released setup.

Where each value was read (supplement = the paper's "Conventional Evaluation" paragraph; README and main.py =
the authors' release, navervision/proxy-synthesis; official-code.md = /work/shared/notes):

* 512-d, global average pooling, batch 128 of random batches (``--n_instance=1``), Adam eps 0.01, weight
  decay 1e-4, no warm-up, no gradient clipping: README commands and main.py defaults (official-code.md).
* lr 1e-4, proxy lr 1e-2 (x100): main.py ``--modellr`` / ``--centerlr``; lr 1e-3 on SOP/In-Shop (supplement).
* lr x0.1 once, at epoch 50 (``--decay_step=50 --decay_stop=50``) on every dataset: the README commands
  (official-code.md: "lr x0.1 at epoch 50"). main.py lowers the lr at the *start* of (1-based) epoch 50, so
  epoch 50 already runs at the lower lr: dmllab milestone 49. The supplement's text instead decays at epoch 20
  (CUB, SOP), 50 (Cars), 60 (In-Shop): ``lr_decay="paper"``.
* 130 epochs: the README commands (``--epochs=130``). Fig. D of the supplement shows Cars up to epoch 150:
  ``epochs=150``.
* Norm-softmax scale 23 (T = 1/23), ProxyNCA scale 12 (T = 1/12): README commands; margin-softmax
  parameters per the supplement (the loss registry's presets). Both released losses L2-normalise embeddings and
  proxies (loss/proxy_losses.py:63-64, 92-93), as dmllab's ``normsoftmax`` and ``proxynca`` do.
* the Proxy-NCA base is the release's ``Proxy_NCA``: ``-log_softmax(-scale * ||x - p||^2)`` over *all* proxies,
  the positive included (loss/proxy_losses.py:99-102), i.e. ProxyNCA++'s +prob form (``loss.prob=True``; the
  bases "proxynca" and "proxynca++" are the same loss). ``nca_prob=False``: the classic ProxyNCA of the PS
  paper's citation (Movshovitz-Attias et al. 2017; ProxyNCA++ Eq. 3: the positive left out of the denominator).
* proxies initialised ``kaiming_uniform_(a=sqrt(5))`` (``loss.proxy_init="linear"``; norm about 0.58 at any
  dimension) for the two losses the release has, Norm_SoftMax and Proxy_NCA (loss/proxy_losses.py:59, 88): the
  bases normsoftmax, proxynca and proxynca++. The other bases keep their loss's own initialisation (softmax,
  softtriple, virtual_softmax: the same "linear"; the margin-softmax bases: randn/8, dmllab choice, the release
  has none of them; proxy_anchor: its release's kaiming_normal).
* BN statistics frozen on CUB/Cars (``--freeze_BN``, supplement), the BN affine parameters train
  (``model.freeze_bn_affine=False``): main.py's ``--freeze_BN`` only calls ``m.eval()`` on every BatchNorm2d
  (main.py:393-396) and never touches ``requires_grad`` (there is no warm-up in the README commands).
  ``model.freeze_bn_affine=true`` freezes them too. 224 crops (``proxy_anchor`` transform: main.py
  RandomResizedCrop(224) + flip; Resize(256) + CenterCrop(224)).
* precision: fp32 (``run.amp="off"``): main.py's ``--use_amp`` defaults to False (main.py:95) and no README
  command sets it.
* evaluation: main.py evaluates the L2-normalised features (``features_l2``) for every metric: cosine
  distance and NMI on L2-normalised features. It keeps the checkpoint with the best *test* R@1; dmllab trains
  the fixed schedule on every training class and tests the last model (``two_stage=True``: ProxyNCA++'s).

ResNet-50 replaces BN-Inception (not in torchvision): a documented deviation. ``base="proxy_anchor"`` keeps the
Proxy Anchor preset (supplement: "we follow the experimental setting of (Kim et al. 2020)"; the PS text
quotes PA's BN-Inception batch 180, the preset uses PA's ResNet-50 recipe).

``base="softtriple"``: SoftTriple (Qian et al., ICCV 2019; PS Tables 4 and 6) with the loss's own defaults,
K=10 centres per class, scale 20, gamma 0.1, margin 0.01, tau 0.2 (the SoftTriple paper's values, which the PS
supplement uses), under the released PS setup above. ``base="virtual_softmax"``: Virtual Softmax (Chen et al.,
NeurIPS 2018; the ``virtual_softmax`` loss's defaults), one of the regularizers PS Table 5 compares with, under
the same setup (PS Table 5 trains it over Softmax only; the experiments turn PS off for it).

``regularizer`` (PS Table 5): "none", "input_mixup" or "manifold_mixup" (a mixup wrapper around the loss, lambda ~
Beta(``mixup_alpha``, ``mixup_alpha``), default 0.5 as Table 5's mixup rows; :class:`dmllab.losses.Mixup`).
Input Mixup mixes *images*, so it cannot run on the cached frozen-block features of the quick profile
(``data.feature_views``; ``config.validate`` rejects the combination): the one place that turns the cache off
is this method's overlay (:data:`OVERLAYS`), because the profile overlays run after the builder and the quick
one sets ``data.feature_views`` (:func:`dmllab.training.presets.profiles.quick`); the method overlay runs
last, on every profile, so whatever scale a profile picks, input mixup gets ``data.feature_views=0`` (the
frozen prefix then runs on the mixed images each step).
"""

from __future__ import annotations

from dataclasses import replace

from dmllab.spec import Spec
from dmllab.training.config import ExperimentConfig, OptimConfig, ScheduleConfig
from dmllab.training.presets.datasets import DatasetSpec
from dmllab.training.presets.methods import fixed_schedule, method, with_loss
from dmllab.training.presets.profiles import class_balanced
from dmllab.training.presets.proxy_anchor import proxy_anchor

PS_BASES = (
    "normsoftmax",
    "proxynca",
    "proxynca++",
    "proxy_anchor",
    "softmax",
    "sphereface",
    "cosface",
    "arcface",
    "softtriple",
    "virtual_softmax",
)
REGULARIZERS = ("none", "input_mixup", "manifold_mixup")
MIXUP_ALPHA = 0.5  # PS Table 5's mixup rows (Table E searches 0.3-2.0)
LR_DECAYS = ("code", "paper")
RELEASED_DECAY_EPOCH = 50  # README: --decay_step=50 --decay_stop=50
RELEASED_EPOCHS = 130  # README: --epochs=130
RELEASED_PROXY_INIT = "linear"  # loss/proxy_losses.py: init.kaiming_uniform_(self.proxy, a=math.sqrt(5))


def _feature_views(cfg: ExperimentConfig) -> int:
    """Input mixup mixes images: no cached frozen-block features (the profile's ``data.feature_views`` else)."""
    return 0 if cfg.loss.find("input_mixup") is not None else cfg.data.feature_views


# The small CNN at quick/smoke scale: lr 1e-3 (proxies x100), dmllab choice (the Proxy Anchor base too).
SMALL_CNN_LRS = {"optim.lr": 1e-3, "optim.lr_proxies": 1e-1}
# Every profile, after the profile's overlay: input mixup turns the feature cache off (module docstring).
INPUT_MIXUP = {"data.feature_views": _feature_views}
OVERLAYS = {
    "smoke": {**SMALL_CNN_LRS, **INPUT_MIXUP},
    "quick": {**SMALL_CNN_LRS, **INPUT_MIXUP},
    "paper": INPUT_MIXUP,
}

# The PS supplement ("Conventional Evaluation") searches the base losses' hyper-parameters, then adds PS with
# alpha 0.4, mu 1.0: a base is tuned without PS, whose on/off is the arm's switch.
TUNED = {
    "softmax": (None, "softmax has no hyper-parameter"),
    "normsoftmax": (
        "temperature",
        "the PS release's Norm-softmax scale 23 (T = 1/23); the PS supplement searches the base losses' "
        "hyper-parameters",
    ),
    "proxynca": ("temperature", "the PS release's Proxy-NCA scale 12 (T = 1/12)"),
    "sphereface": (
        "scale",
        "PS supplement, Conventional Evaluation: the margin softmaxes' gamma and m are searched (gamma 30)",
    ),
    "cosface": ("scale", "as SphereFace (gamma 23)"),
    "arcface": ("scale", "as SphereFace (gamma 23)"),
    "softtriple": ("scale", "SoftTriple's scale lambda (Qian et al. 2019, 20)"),
    "proxy_anchor": ("alpha", "as Proxy Anchor (32)"),
    "virtual_softmax": (
        None,
        "Virtual Softmax (Chen et al. 2018) has no hyper-parameter (the cap 10 on its virtual logit is the PS "
        "supplement D.4's guard)",
    ),
}


@method(
    "proxy_synthesis",
    OVERLAYS,
    variant_option="base",
    default_variant="normsoftmax",
    tuned=TUNED,
)
def proxy_synthesis(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    base: str = "normsoftmax",
    ps_alpha: float = 0.4,
    ps_mu: float = 1.0,
    lr_decay: str = "code",
    epochs: int | None = None,
    two_stage: bool = False,
    regularizer: str = "none",
    mixup_alpha: float = MIXUP_ALPHA,
    nca_prob: bool = True,
) -> ExperimentConfig:
    """Proxy Synthesis (PS Eq. 2-5) over ``base`` in the released setup (module docstring). ``lr_decay``:
    "code" (epoch 50) or "paper" (the supplement's per-dataset epoch); ``epochs``: default 130 (Proxy Anchor
    base: its own 60); ``regularizer`` / ``mixup_alpha``: PS Table 5's mixups (a wrapper around the loss; input
    mixup's ``data.feature_views=0`` is set by :data:`OVERLAYS`, module docstring); ``nca_prob``: base
    "proxynca" with the positive proxy in the softmax denominator (the release), False = classic ProxyNCA."""
    if base not in PS_BASES:
        raise ValueError(f"unknown proxy_synthesis base {base!r}; valid: {', '.join(PS_BASES)}")
    if not nca_prob and base != "proxynca":
        raise ValueError(
            f"nca_prob=False is for base 'proxynca' (classic ProxyNCA); base {base!r} has no such form"
        )
    if regularizer not in REGULARIZERS:
        raise ValueError(f"unknown regularizer {regularizer!r}; valid: {', '.join(REGULARIZERS)}")
    if lr_decay not in LR_DECAYS:
        raise ValueError(f"unknown lr_decay {lr_decay!r}; valid: {', '.join(LR_DECAYS)}")
    if base == "proxy_anchor":
        if lr_decay != "code":
            raise ValueError(
                "lr_decay='paper' is the PS setup's decay; base 'proxy_anchor' keeps the PA schedule"
            )
        pa = {} if epochs is None else {"epochs": epochs}
        cfg = proxy_anchor(cfg, spec, two_stage=two_stage, **pa)
    else:
        if base in ("proxynca", "proxynca++"):
            prob = nca_prob or base == "proxynca++"
            cfg = with_loss(cfg, "proxynca", temperature=1 / 12, prob=prob, proxy_init=RELEASED_PROXY_INIT)
        elif base == "normsoftmax":
            cfg = with_loss(cfg, "normsoftmax", temperature=1 / 23, proxy_init=RELEASED_PROXY_INIT)
        else:
            cfg = with_loss(cfg, base)
        lr = 1e-3 if spec.large else 1e-4
        decay = RELEASED_DECAY_EPOCH if lr_decay == "code" else spec.ps_decay_epoch_text
        cfg = replace(
            cfg,
            data=replace(cfg.data, batch_size=128, sampler=class_balanced(None), transform="proxy_anchor"),
            model=replace(
                cfg.model,
                pooling=Spec("avg"),
                norm="none",
                l2_normalize=False,
                embedding_dim=512,
                freeze_bn=spec.freeze_bn,
                freeze_bn_affine=False,  # main.py --freeze_BN: m.eval() only
            ),
            optim=OptimConfig(
                name="adam", lr=lr, lr_proxies=100 * lr, eps=1e-2, weight_decay=1e-4, grad_clip_value=None
            ),
            # main.py lowers the lr before (1-based) epoch ``decay`` runs: milestone ``decay - 1``.
            schedule=ScheduleConfig(
                epochs=RELEASED_EPOCHS if epochs is None else epochs,
                warmup_epochs=0,
                scheduler="multistep",
                milestones=(decay - 1,),
                factor=0.1,
            ),
            run=replace(cfg.run, distance="cosine", nmi_l2=True, amp="off"),
        )
        cfg = fixed_schedule(cfg, spec, two_stage=two_stage)
    loss = Spec("proxy_synthesis", {"alpha": ps_alpha, "mu": ps_mu}, wraps=cfg.loss)
    if regularizer != "none":
        loss = Spec(regularizer, {"alpha": mixup_alpha}, wraps=loss)
    return replace(cfg, loss=loss)


def without_synthesis(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` without its Proxy Synthesis wrapper (the same config "without PS", as the paper compares): the loss
    it wrapped takes its place (under a mixup, if any)."""
    specs = [s for s in cfg.loss.chain() if s.name != "proxy_synthesis"]
    loss = specs[-1]
    for spec in reversed(specs[:-1]):
        loss = replace(spec, wraps=loss)
    return replace(cfg, loss=loss)
