"""Dataset facts that presets need, one :class:`DatasetSpec` per dataset (:data:`DATASETS`).

Every per-dataset difference of a preset is a field here, read by the method modules; no method module
branches on a dataset's name. Each field says which paper (or released code) it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class DatasetSpec:
    """Facts about one dataset.

    ProxyNCA++ (Teh et al., Table 1 and official-code.md): ``lr``, ``lr_proxies``, ``batch_size``, ``per_class``
    ("cbs"), ``epochs`` (40 CUB/Cars, 80 SOP/In-Shop), ``two_stage`` (In-Shop: trainval only, constant lr),
    ``ks`` (R@K of the papers), ``nmi`` (NMI reported for CUB and Cars only), the splits.

    Proxy Anchor (Kim et al. Sec. 4.2 and the released README / train.py, tjddus9597/Proxy-Anchor-CVPR2020):
    ``large`` (SOP/In-Shop: lr 6e-4 instead of 1e-4), ``freeze_bn`` (BN frozen on CUB/Cars; also Proxy
    Synthesis), ``pa_lr_decay_step`` / ``pa_lr_decay_gamma`` (the ResNet-50 commands: step 5 CUB, 10 Cars; SOP and
    In-Shop have only BN-Inception commands: step 20, gamma 0.25).

    Proxy Synthesis (Gu et al. supplement, "Conventional Evaluation"): ``ps_decay_epoch_text``, the epoch
    where the paper's text decays the lr (20 CUB/SOP, 50 Cars, 60 In-Shop); the released code decays at 50.

    Heated-up Softmax (Zhang et al. Sec. 5.1-5.2, Tables 1-2): ``heated_optimizer`` / ``heated_lr`` (SGD
    momentum 0.9 lr 4e-3; Adam lr 1e-2 on the product dataset SOP), ``heated_nmi`` (NMI reported for Cars,
    CUB and SOP, not In-Shop).

    ``sized_by_profile``: the offline benchmark renders images at any size and class count, so the quick and
    smoke profiles set them (the ``data.dataset`` spec's keywords); real datasets and digits are used as they are.

    ``images_in_memory``: the dataset holds its images as one uint8 array, so the quick profile's in-memory
    tensor path and frozen-prefix feature cache apply (``data.in_memory``, ``model.frozen_blocks``); folders of
    image files (the real datasets) keep the per-image loader and full fine-tuning at the quick scale.
    """

    name: str
    lr: float
    lr_proxies: float
    batch_size: int
    per_class: int
    epochs: int
    two_stage: bool
    ks: tuple[int, ...]
    nmi: bool
    val_split: str | None = "val"
    test_split: str | None = "test"
    query_split: str | None = None
    gallery_split: str | None = None
    large: bool = False
    freeze_bn: bool = True
    pa_lr_decay_step: int = 5
    pa_lr_decay_gamma: float = 0.5
    ps_decay_epoch_text: int = 20
    heated_optimizer: str = "sgd"
    heated_lr: float = 4e-3
    heated_nmi: bool = True
    sized_by_profile: bool = False
    images_in_memory: bool = False


_CUB = DatasetSpec(
    "cub", 4e-3, 4e2, 32, 4, 40, True, (1, 2, 4, 8), True, pa_lr_decay_step=5, ps_decay_epoch_text=20
)
DATASETS: dict[str, DatasetSpec] = {
    "cub": _CUB,
    "cars": DatasetSpec(
        "cars", 4e-3, 4e2, 32, 4, 40, True, (1, 2, 4, 8), True, pa_lr_decay_step=10, ps_decay_epoch_text=50
    ),
    "sop": DatasetSpec(
        "sop",
        2.4e-2,
        2.4e2,
        192,
        3,
        80,
        True,
        (1, 10, 100, 1000),
        False,
        large=True,
        freeze_bn=False,
        pa_lr_decay_step=20,
        pa_lr_decay_gamma=0.25,
        ps_decay_epoch_text=20,
        heated_optimizer="adam",
        heated_lr=1e-2,
    ),
    "inshop": DatasetSpec(
        "inshop",
        2.4e-2,
        2.4e3,
        192,
        3,
        80,
        False,
        (1, 10, 20, 30, 40),
        False,
        val_split=None,
        test_split=None,
        query_split="query",
        gallery_split="gallery",
        large=True,
        freeze_bn=False,
        pa_lr_decay_step=20,
        pa_lr_decay_gamma=0.25,
        ps_decay_epoch_text=60,
        heated_nmi=False,
    ),
    # The offline benchmark and digits behave like CUB (class-disjoint halves), so they take CUB's facts.
    "synthetic": replace(_CUB, name="synthetic", sized_by_profile=True, images_in_memory=True),
    "digits": replace(_CUB, name="digits"),
}
