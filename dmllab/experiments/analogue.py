"""What a claim's analogue changes from the paper: the network, learning rates and schedule of a config in a few
words (:func:`network_line`, :func:`lr_line`, :func:`schedule_line`), what a profile's preset changes from the
paper preset (:func:`analogue`), and a claim's ``differs`` built from them (:func:`differs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from dmllab.experiments.kit import TOY_PROFILES, benchmark_for
from dmllab.profiles import PROFILES

_BACKBONE = dict(
    resnet50="ResNet-50", resnet18="ResNet-18", googlenet="GoogLeNet", inception_v3="Inception-v3"
)
# Methods whose paper trained BN-Inception, for which torchvision has no weights (the paper preset: ResNet-50).
BN_INCEPTION_PAPERS = ("proxy_anchor", "proxy_synthesis")
BN_INCEPTION = "ResNet-50 stands in for BN-Inception (torchvision has no BN-Inception weights)"
_DATASET = dict(cub="CUB", cars="Cars", sop="SOP", inshop="In-Shop", synthetic="the offline benchmark")


def network_line(cfg: Any) -> str:
    """The network of ``cfg`` in a few words: "SmallCNN w16 (synthetic pre-training, 4 blocks frozen), 128-d"."""
    m = cfg.model
    if m.backbone.name == "smallcnn":
        kw = m.backbone.kw
        bits = ["synthetic pre-training" if m.pretrained else "from scratch"]
        if m.frozen_blocks:
            bits.append(f"{m.frozen_blocks} blocks frozen")
        name = f"SmallCNN w{kw.get('width', 32)} ({', '.join(bits)})"
    else:
        name = _BACKBONE.get(m.backbone.name, m.backbone.name) + (" (ImageNet)" if m.pretrained else "")
    return f"{name}, {m.embedding_dim}-d"


def group_lrs(cfg: Any) -> dict[str, float]:
    """The learning rate of each optimiser group (backbone, embedding, proxies) that ``cfg`` trains with, by the
    trainer's own rule (:func:`dmllab.training.optim.param_groups`)."""
    from torch import nn

    from dmllab.training.optim import param_groups

    model = nn.Module()
    model.backbone, model.head = nn.Linear(1, 1), nn.Linear(1, 1)
    return {g["name"]: float(g["lr"]) for g in param_groups(model, nn.Linear(1, 1), cfg.optim)}


def lr_line(cfg: Any, groups: Sequence[str] = ("backbone", "embedding", "proxies")) -> str:
    """``cfg``'s learning rates of ``groups`` in a few words: "lr trunk 1, embedding 0.004, proxies 400"."""
    lrs = group_lrs(cfg)
    return "lr " + ", ".join(f"{'trunk' if k == 'backbone' else k} {lrs[k]:.3g}" for k in groups if k in lrs)


def _schedule_parts(cfg: Any) -> list[str]:
    """Epochs, lr rule, heating and protocol of ``cfg``, each in a few words."""
    s, d = cfg.schedule, cfg.data
    parts = [f"{s.epochs}+{s.warmup_epochs}w epochs" if s.warmup_epochs else f"{s.epochs} epochs"]
    if s.scheduler == "plateau":
        parts.append("plateau lr drops")
    elif s.scheduler == "multistep" and s.milestones:
        parts.append(f"{len(s.milestones)} lr drop{'s' if len(s.milestones) > 1 else ''} x{s.factor:g}")
    else:
        parts.append("constant lr" if s.scheduler == "none" else f"{s.scheduler} lr")
    heating = cfg.callback("heating")
    if heating is not None:
        parts.append(f"heated in-run from epoch {heating.get('epoch')}")
    if cfg.finetune.epochs:
        parts.append(f"heated in a {cfg.finetune.epochs}-epoch fine-tune of the converged run")
    parts.append("two-stage (train, then trainval)" if cfg.run.two_stage else f"one stage on {d.train_split}")
    return parts


def analogue(method: str, dataset: str, profile: str, **options: Any) -> str:
    """What the ``profile`` preset of ``method`` changes from its paper preset on the paper dataset ``dataset``:
    network, data and schedule (what the paper does after "for"; a schedule part both share is said once),
    derived from the presets, so a changed preset changes the line."""
    from dmllab.training import presets

    here = presets.get(method, benchmark_for(profile, dataset), profile, **options)
    paper = presets.get(method, dataset, "paper", **options)
    paper_net = network_line(paper)
    if method.partition(":")[0] in BN_INCEPTION_PAPERS and paper.model.backbone.name == "resnet50":
        paper_net = paper_net.replace("ResNet-50 (ImageNet)", "ResNet-50 (ImageNet; the paper: BN-Inception)")
    mine, theirs = _schedule_parts(here), _schedule_parts(paper)
    only_paper = [p for p in theirs if p not in mine]
    schedule = ", ".join(mine) + (f" for {', '.join(only_paper)}" if only_paper else "")
    return (
        f"{network_line(here)} on {_DATASET.get(here.dataset, here.dataset)} for "
        f"{paper_net} on {_DATASET.get(paper.dataset, paper.dataset)}; {schedule}"
    )


Line = str | Callable[[str], str]  # a line, or profile -> line


class Differs(Mapping[str, str]):
    """``{profile: line}`` for :attr:`dmllab.experiments.artifact.Claim.differs`, computed when first read (no
    preset is built at import): on smoke and quick, the claim's own difference followed by :func:`analogue` of
    its method; on the paper profile ``paper`` where given (no entry otherwise)."""

    def __init__(
        self, specific: Line, method: str, dataset: str, paper: Line, options: Mapping[str, Any]
    ) -> None:
        self._specific, self._method, self._dataset, self._paper = specific, method, dataset, paper
        self._options, self._cache = dict(options), {}

    def _profiles(self) -> tuple[str, ...]:
        return tuple(p for p in PROFILES if p in TOY_PROFILES or (p == "paper" and self._paper))

    def __getitem__(self, profile: str) -> str:
        if profile not in self._profiles():
            raise KeyError(profile)
        if profile not in self._cache:
            try:
                self._cache[profile] = "; ".join(self.parts(profile))
            except KeyError as err:  # a KeyError here would read as "no line" through Mapping.get
                raise RuntimeError(f"the 'differs' line of {profile!r} could not be built: {err!r}") from err
        return self._cache[profile]

    def parts(self, profile: str) -> tuple[str, ...]:
        """The line's parts on ``profile``: what this comparison changes, then the profile's analogue of the
        method (shared by every claim of the method: the report states each part once per artifact)."""
        if profile not in self._profiles():
            return ()
        if profile == "paper":
            line = self._paper(profile) if callable(self._paper) else self._paper
            return (line,) if line else ()
        own = self._specific(profile) if callable(self._specific) else self._specific
        scale = analogue(self._method, self._dataset, profile, **self._options) if self._method else ""
        return tuple(x for x in (own, scale) if x)

    def __iter__(self) -> Iterator[str]:
        return iter(self._profiles())

    def __len__(self) -> int:
        return len(self._profiles())

    def __repr__(self) -> str:
        return f"Differs({self._specific!r}, {self._method!r}, {self._dataset!r})"


def differs(
    specific: Line, method: str = "", dataset: str = "cub", *, paper: Line = "", **options: Any
) -> Differs:
    """A claim's ``differs``: ``specific`` (a line, or ``profile -> line``) says what this comparison changes from
    the paper; ``method`` (with ``options``) on the paper dataset ``dataset`` adds the profile's network, data and
    schedule against the paper's (:func:`analogue`; none for a toy: ``method=""``); ``paper`` (a line, or
    ``profile -> line``): what the paper profile's preset changes (e.g. ResNet-50 for BN-Inception), if
    anything."""
    return Differs(specific, method, dataset, paper, options)
