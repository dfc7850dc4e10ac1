"""Proxy Anchor (Kim et al., CVPR 2020) with ResNet-50: the released ResNet-50 recipe.

Where each value was read (paper = 002 in /work/shared/papers; README and train.py = the authors' release,
tjddus9597/Proxy-Anchor-CVPR2020; official-code.md = /work/shared/notes):

* loss (PA Eq. 4), alpha 32, delta 0.1: paper Sec. 5.1 / Table 7 text; README commands use the defaults.
* AdamW, weight decay 1e-4: paper Sec. 4.2 "Training"; train.py defaults (``--optimizer adamw``,
  ``--weight-decay 1e-4``). lr 1e-4 (CUB, Cars) / 6e-4 (SOP, In-Shop): paper Sec. 4.2 and the README commands.
  Proxy lr x100: paper Sec. 4.2; train.py param group ``criterion.proxies`` at ``lr * 100``; embedding layer
  at ``lr * 1``.
* batch 120 of random batches, 5 warm-up epochs (trunk frozen, embedding and proxies train): the README's
  ResNet-50 commands (``--batch-size 120 --warm 5``; train.py samples randomly without ``--IPC``).
  official-code.md: warm-up 5 epochs for ResNet-50.
* lr decay: train.py's ``StepLR(step_size=--lr-decay-step, gamma=--lr-decay-gamma)`` stepped after every
  epoch, warm-up epochs included. ResNet-50 README commands: step 5 on CUB, 10 on Cars, gamma 0.5 (default);
  SOP and In-Shop have only BN-Inception commands: step 20, gamma 0.25 (used here for ResNet-50 as well).
  dmllab's warm-up epochs come *before* its schedule, so the StepLR is expressed as the equivalent
  MultiStepLR milestones in schedule epochs (:func:`released_step_milestones`), giving the released per-epoch
  lrs exactly.
* epochs: 60 in total, warm-up included: train.py's default ``--epochs 60``, which the README commands do not
  change (the paper's text says 40 on CUB/Cars: ``epochs=40``).
* grad clip by value 10 on the model *and* the proxies (``clip_proxies``): train.py, after ``loss.backward()``:
  ``clip_grad_value_(model.parameters(), 10)`` and, ``if args.loss == 'Proxy_Anchor'``,
  ``clip_grad_value_(criterion.parameters(), 10)``.
* head GAP + GMP -> Linear (kaiming init) -> L2: official-code.md; BN statistics frozen on CUB/Cars
  (``--bn-freeze 1``: ``m.eval()`` every epoch, train.py:265-271), trained on SOP/In-Shop: README commands and the
  dataset spec. The BN affine parameters train after the warm-up (``model.freeze_bn_affine=False``): the model's
  constructor sets their ``requires_grad`` to False (net/resnet.py:150-155), but train.py sets
  ``requires_grad = True`` on every parameter outside the embedding and the proxies at ``epoch == args.warm``
  (train.py:285-287), BN weight and bias included; the trunk (BN affine included) is frozen during the warm-up
  in both. ``model.freeze_bn_affine=true`` keeps them frozen for the whole run.
  224 crops (``proxy_anchor`` transform): paper Sec. 4.2 "Image setting".
* precision: fp32 (``run.amp="off"``): train.py has no autocast or loss scaling. ``run.amp=bf16`` is an option.
* evaluation by cosine similarity (train.py ``evaluate_cos``). The released code keeps the epoch with the best
  *test* R@1; dmllab trains the fixed schedule on every training class and tests the last model
  (``two_stage=True``: the ProxyNCA++ protocol, selecting on validation).
"""

from __future__ import annotations

from dataclasses import replace

from dmllab.spec import Spec
from dmllab.training.config import ExperimentConfig, OptimConfig, ScheduleConfig
from dmllab.training.presets.datasets import DatasetSpec
from dmllab.training.presets.methods import fixed_schedule, method, with_loss
from dmllab.training.presets.profiles import class_balanced

WARMUP_EPOCHS = 5  # README ResNet-50 commands: --warm 5
EPOCHS = 60  # train.py default --epochs (warm-up included)
BATCH_SIZE = 120  # README ResNet-50 commands: --batch-size 120


# The small CNN at quick/smoke scale: lr 1e-3 (proxies x100), dmllab choice.
OVERLAYS = {profile: {"optim.lr": 1e-3, "optim.lr_proxies": 1e-1} for profile in ("quick", "smoke")}

TUNED = (
    "alpha",
    "Proxy Anchor Eq. 4's scale alpha; PA Sec. 5.4 / Fig. 6 studies alpha and delta (32, 0.1) and finds alpha the "
    "sensitive one (below 16 R@1 drops)",
)


def released_step_milestones(*, total_epochs: int, warmup_epochs: int, step_size: int) -> tuple[int, ...]:
    """MultiStepLR milestones (schedule epochs, after ``warmup_epochs``) equal to the released train.py's
    ``StepLR(step_size)`` stepped once per epoch from the first warm-up epoch.

    There the lr of (0-based) epoch ``e`` is ``lr * gamma ** (e // step_size)``; dmllab's schedule epoch ``s``
    (1-based) is code epoch ``e = s - 1 + warmup_epochs``, and a milestone ``d`` lowers the lr for the epochs
    after ``d``. So the drop after code epoch ``k * step_size`` is milestone ``k * step_size - warmup_epochs``;
    0 means the lr is already lowered when the trunk starts training (CUB: step 5 = the 5 warm-up epochs).

    Raises:
        ValueError: a drop inside the warm-up (``step_size < warmup_epochs``), which dmllab's warm-up (full
            lr for the head and proxies) cannot express.
    """
    if step_size < warmup_epochs:
        raise ValueError(f"step_size {step_size} < warm-up {warmup_epochs}: a drop inside the warm-up")
    return tuple(
        k * step_size - warmup_epochs for k in range(1, total_epochs) if k * step_size < total_epochs
    )


@method("proxy_anchor", OVERLAYS, tuned=TUNED)
def proxy_anchor(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    alpha: float = 32.0,
    delta: float = 0.1,
    epochs: int = EPOCHS,
    two_stage: bool = False,
) -> ExperimentConfig:
    """Proxy Anchor loss (PA Eq. 4) in the released ResNet-50 recipe (module docstring). ``epochs``: in total,
    warm-up included (train.py ``--epochs``); ``two_stage``: ProxyNCA++'s protocol instead of the fixed
    schedule."""
    if epochs <= WARMUP_EPOCHS:
        raise ValueError(f"epochs={epochs} must exceed the {WARMUP_EPOCHS} warm-up epochs")
    lr = 6e-4 if spec.large else 1e-4
    milestones = released_step_milestones(
        total_epochs=epochs, warmup_epochs=WARMUP_EPOCHS, step_size=spec.pa_lr_decay_step
    )
    cfg = replace(
        cfg,
        data=replace(cfg.data, batch_size=BATCH_SIZE, sampler=class_balanced(None), transform="proxy_anchor"),
        model=replace(
            cfg.model,
            pooling=Spec("avg+max"),
            norm="none",
            l2_normalize=True,
            head_init="kaiming",
            embedding_dim=512,
            freeze_bn=spec.freeze_bn,
            freeze_bn_affine=False,  # train.py: requires_grad = True on every trunk parameter at epoch == warm
        ),
        optim=OptimConfig(
            name="adamw",
            lr=lr,
            lr_proxies=100 * lr,
            eps=1e-8,
            weight_decay=1e-4,
            grad_clip_value=10.0,
            clip_proxies=True,
        ),
        schedule=ScheduleConfig(
            epochs=epochs - WARMUP_EPOCHS,
            warmup_epochs=WARMUP_EPOCHS,
            scheduler="multistep",
            milestones=milestones,
            factor=spec.pa_lr_decay_gamma,
        ),
        run=replace(cfg.run, distance="cosine", amp="off"),
    )
    cfg = fixed_schedule(cfg, spec, two_stage=two_stage)
    return with_loss(cfg, "proxy_anchor", alpha=alpha, delta=delta)
