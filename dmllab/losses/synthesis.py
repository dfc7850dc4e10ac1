"""Proxy Synthesis (Gu, Ko, Kim, AAAI 2021): synthetic classes for any proxy loss (Eq. 4-5).

Per batch, one lambda ~ Beta(alpha, alpha) is drawn. Each synthetic pair interpolates two (embedding,
proxy) pairs of *different* classes (Eq. 4): x~ = lambda x_i + (1 - lambda) x_j and
p~ = lambda p_{y_i} + (1 - lambda) p_{y_j}. Synthetic k gets the new label C + k; int(mu * B) synthetics are
kept; the synthetic proxies are appended as extra classes for every sample, real and synthetic, and the
base loss is evaluated on the union (Eq. 5, one Monte-Carlo sample of the expectation per batch).

Partner scheme (deterministic; :func:`synthesis_partners`): sort the batch by label (stable); a sample at
sorted position s in a class block [a, a + n) is paired with the sample at sorted position
``(a + n + ((s - a + r) mod (B - n))) mod B``, i.e. it walks through the *complement* of its class block in
circular order, so the partner always has a different label. Synthetic k uses anchor k mod B (batch order)
and round r = k // B (different partners when mu > 1). For class-balanced batches (n images per class) this
is the label-sorted batch rolled by n. A batch with a single class has no valid partner: synthesis is
skipped and the base loss is computed on the real batch (``last_lam`` is then None). Inside
:func:`dmllab.losses._validate.sync_free` that choice is made on the device: both losses are computed and
``torch.where`` keeps one (the same value and gradients; a one-class batch then still draws its lambda and
partners, so the draws after it differ from the eager path's, which skips them).

Options (PS Tables 1-2):

* ``pairing="sorted"`` (default, deterministic, above) or ``"random"``: each anchor gets a partner drawn
  uniformly from the batch samples of a *different* class (PS Sec. 3.2: "given two random pairs ... from
  different classes"; Algorithm 1 ``sample_pairs``). The sorted scheme pairs class y with the next larger
  class ids present in the batch, which on CUB/Cars (class ids in taxonomic order) puts most synthetics
  between sibling species; the released code pairs neighbours of the sampler's (random-class-order) batch, so
  its partners are effectively random classes. **The paper preset should use ``"random"``**: it is what the
  paper text says and what the released code does in effect; ``"sorted"`` stays the default only so that
  existing configs and stored runs keep their meaning.
* ``lam``: a static lambda (PS Table 2a) instead of lambda ~ Beta(alpha, alpha) (Table 2b).
* ``embeddings`` / ``proxies`` in {"original", "synthetic", "both"}: which elements enter X^ and P^ (PS
  Table 1). The five valid combinations are M1 = (original, original) (the base loss), M2 = (synthetic,
  synthetic), M3 = (original, both), M4 = (synthetic, both) and PS = (both, both) (default). With proxies
  "synthetic" the synthetic labels are 0..K-1 instead of C..C+K-1.

Multi-centre losses (SoftTriple, ``centers_per_class`` = K > 1) store K rows per class; the wrapper mixes the
(K * D) class blocks, i.e. centre k of class y_i with centre k of class y_j.

Mixing space: the base losses that L2-normalise embeddings/proxies internally (ProxyNCA, NormSoftMax,
margin-softmax, Proxy Anchor) get their vectors L2-normalised *before* mixing, as in the official code,
and re-normalised by the base loss; losses that do not normalise (SoftmaxLoss, Heated-up Softmax with raw
f) mix raw vectors, and a bias, if the base has one, is interpolated like the proxies.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from dmllab.validation import check_number

from ._registry import LOSSES
from ._validate import check_batch, sync_free_checks
from .proxy import ProxyLoss, _fp32_region

PAIRINGS = ("sorted", "random")
# PS Table 1: (embeddings, proxies) entering the loss -> the paper's row name.
COMPOSITIONS = {
    ("original", "original"): "M1",
    ("synthetic", "synthetic"): "M2",
    ("original", "both"): "M3",
    ("synthetic", "both"): "M4",
    ("both", "both"): "PS",
}


def _log_gamma_sample(shape: float, generator: torch.Generator | None) -> float:
    """log of one Gamma(shape, 1) draw (Marsaglia-Tsang; shape < 1 through the U^(1/shape) boost)."""
    log_boost = 0.0
    if shape < 1.0:
        u = torch.rand((), generator=generator, dtype=torch.float64).item()
        log_boost = math.log(max(u, 1e-300)) / shape
        shape += 1.0
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        x = torch.randn((), generator=generator, dtype=torch.float64).item()
        v = (1.0 + c * x) ** 3
        if v <= 0.0:
            continue
        u = torch.rand((), generator=generator, dtype=torch.float64).item()
        if math.log(max(u, 1e-300)) < 0.5 * x * x + d - d * v + d * math.log(v):
            return math.log(d * v) + log_boost


def sample_beta(alpha: float, generator: torch.Generator | None = None) -> float:
    """One lambda ~ Beta(alpha, alpha) as X / (X + Y) with X, Y ~ Gamma(alpha), drawn from ``generator``.

    Works in log space (stable for small alpha). ``generator=None`` uses torch's global generator.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0; got {alpha!r}")
    log_x, log_y = _log_gamma_sample(alpha, generator), _log_gamma_sample(alpha, generator)
    return 1.0 / (1.0 + math.exp(min(log_y - log_x, 700.0)))


def synthesis_partners(
    labels: torch.Tensor,
    num_synthetic: int,
    *,
    pairing: str = "sorted",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(anchors, partners), each (K,) long: indices into the batch with labels[anchor] != labels[partner].

    ``pairing="sorted"``: the deterministic scheme of the module docstring. ``"random"``: anchor k mod B, and
    a partner drawn uniformly (from ``generator``, on the CPU) among the samples of other classes.
    Requires at least two distinct labels.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; valid: {', '.join(PAIRINGS)}")
    batch_size = labels.shape[0]
    device = labels.device
    order = torch.argsort(labels, stable=True)  # sorted position -> batch index
    ordered = labels[order].contiguous()
    # (B,) per sorted position: where its class block starts and how long it is (shapes fixed: no host sync)
    block_start = torch.searchsorted(ordered, ordered, side="left")
    block_size = torch.searchsorted(ordered, ordered, side="right") - block_start
    if sync_free_checks() is None and bool(block_size[0] == batch_size):
        raise ValueError("proxy synthesis needs at least two classes in the batch")
    rank = torch.empty_like(order)
    rank[order] = torch.arange(batch_size, device=device)  # batch index -> sorted position

    k = torch.arange(num_synthetic, device=device)
    anchors = k % batch_size
    s = rank[anchors]  # (K,) sorted positions of the anchors
    a, n = block_start[s], block_size[s]
    # >= 1 but for a one-class batch, which only sync_free lets through
    others = (batch_size - n).clamp_min(1)
    if pairing == "sorted":
        offset = (s - a + k // batch_size) % others
    else:
        u = torch.rand(num_synthetic, generator=generator, dtype=torch.float64).to(device, non_blocking=True)
        offset = (u * others).long().clamp_max(batch_size - n - 1)  # uniform in [0, B - n)
    partners = order[(a + n + offset) % batch_size]  # walks the complement of the anchor's class block
    return anchors, partners


def _select(used: str, original: torch.Tensor | None, synthetic: torch.Tensor | None) -> torch.Tensor | None:
    """The original, the synthetic or both (concatenated) rows; None stays None (no bias)."""
    if original is None:
        return None
    if used == "both":
        return torch.cat([original, synthetic])
    return original if used == "original" else synthetic


class SynthesizedBatch(NamedTuple):
    """The augmented batch: real + synthetic embeddings/labels, real + synthetic proxies (and bias)."""

    embeddings: torch.Tensor  # (B + K, D)
    labels: torch.Tensor  # (B + K,)
    proxies: torch.Tensor  # (C + K, D)
    bias: torch.Tensor | None  # (C + K,) or None
    anchors: torch.Tensor  # (K,)
    partners: torch.Tensor  # (K,)


def synthesize(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    proxies: torch.Tensor,
    *,
    lam: float,
    num_synthetic: int,
    bias: torch.Tensor | None = None,
    pairing: str = "sorted",
    generator: torch.Generator | None = None,
    embeddings_used: str = "both",
    proxies_used: str = "both",
) -> SynthesizedBatch:
    """Build the Proxy Synthesis batch (Eq. 4) for a fixed ``lam`` and K = ``num_synthetic`` synthetics.

    Synthetic k mixes anchor i and partner j (:func:`synthesis_partners` with ``pairing``): embedding
    lam x_i + (1-lam) x_j, proxy lam p_{y_i} + (1-lam) p_{y_j} (bias likewise), label C + k. ``proxies`` has
    one row per class (a multi-centre loss passes its (C, K * D) view). ``embeddings_used`` /
    ``proxies_used`` select the PS Table 1 composition (see :data:`COMPOSITIONS`); with ``proxies_used=
    "synthetic"`` the synthetic labels are k.
    """
    if (embeddings_used, proxies_used) not in COMPOSITIONS:
        raise ValueError(
            f"invalid composition (embeddings={embeddings_used!r}, proxies={proxies_used!r}); valid "
            f"(embeddings, proxies): {', '.join(f'{e}/{p} ({m})' for (e, p), m in COMPOSITIONS.items())}"
        )
    num_classes = proxies.shape[0]
    anchors, partners = synthesis_partners(labels, num_synthetic, pairing=pairing, generator=generator)
    y_i, y_j = labels[anchors], labels[partners]
    synth_emb = lam * embeddings[anchors] + (1.0 - lam) * embeddings[partners]  # (K, D)
    synth_proxies = lam * proxies[y_i] + (1.0 - lam) * proxies[y_j]  # (K, D)
    first = 0 if proxies_used == "synthetic" else num_classes
    synth_labels = first + torch.arange(num_synthetic, device=labels.device, dtype=labels.dtype)
    synth_bias = None if bias is None else lam * bias[y_i] + (1.0 - lam) * bias[y_j]  # (K,)

    return SynthesizedBatch(
        embeddings=_select(embeddings_used, embeddings, synth_emb),
        labels=_select(embeddings_used, labels, synth_labels),
        proxies=_select(proxies_used, proxies, synth_proxies),
        bias=_select(proxies_used, bias, synth_bias),
        anchors=anchors,
        partners=partners,
    )


@LOSSES.register("proxy_synthesis")
class ProxySynthesis(nn.Module):
    """Wrap a proxy loss with Proxy Synthesis (PS Eq. 4-5); defaults alpha = 0.4, mu = 1.0.

    The proxies (and any bias) are the base loss's: ``ProxySynthesis.parameters()`` are exactly the base's.
    Gradients flow to the embeddings and to the proxies through both the real and the synthetic proxies.
    After each call ``last_lam`` holds the lambda used (None when synthesis was skipped) and
    ``last_partners`` the (anchors, partners) indices.

    Args:
        base: the wrapped loss, a :class:`~dmllab.losses.proxy.ProxyLoss` (has ``loss_from_proxies``).
        alpha: Beta(alpha, alpha) parameter (> 0).
        mu: synthetics per real sample; K = int(mu * B).
        generator: torch.Generator for lambda and random pairing (None: torch's global generator).
        lam: static lambda in [0, 1] (PS Table 2a); None (default) samples Beta(alpha, alpha) per batch.
        pairing: "sorted" (default, deterministic) or "random" (the paper; use it in the paper preset).
        embeddings, proxies: the PS Table 1 composition, each "original", "synthetic" or "both" (default
            both/both = PS; :data:`COMPOSITIONS` lists the five valid pairs).
    """

    has_proxies = True
    wraps = True  # dmllab.losses.LOSSES: built around the loss its spec wraps

    def __init__(
        self,
        base: ProxyLoss,
        *,
        alpha: float = 0.4,
        mu: float = 1.0,
        generator: torch.Generator | None = None,
        lam: float | None = None,
        pairing: str = "sorted",
        embeddings: str = "both",
        proxies: str = "both",
    ) -> None:
        super().__init__()
        if not isinstance(base, ProxyLoss):
            raise ValueError(
                f"Proxy Synthesis wraps a proxy loss (with loss_from_proxies); got {type(base).__name__}"
            )
        check_number("alpha", alpha, low=0.0, low_open=True)
        check_number("mu", mu, low=0.0)
        check_number("lam", lam, low=0.0, high=1.0, allow_none=True)
        if pairing not in PAIRINGS:
            raise ValueError(f"unknown pairing {pairing!r}; valid: {', '.join(PAIRINGS)}")
        if (embeddings, proxies) not in COMPOSITIONS:
            raise ValueError(
                f"invalid composition (embeddings={embeddings!r}, proxies={proxies!r}); valid: "
                f"{', '.join(f'{e}/{p} ({m})' for (e, p), m in COMPOSITIONS.items())}"
            )
        self.base = base
        self.alpha = float(alpha)
        self.mu = float(mu)
        self.generator = generator
        self.lam = None if lam is None else float(lam)
        self.pairing = pairing
        self.embeddings_used = embeddings
        self.proxies_used = proxies
        self.last_lam: float | None = None
        self.last_partners: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def num_classes(self) -> int:
        return self.base.num_classes

    @property
    def embedding_dim(self) -> int:
        return self.base.embedding_dim

    @property
    def proxies(self) -> nn.Parameter:
        return self.base.proxies

    @property
    def composition(self) -> str:
        """The PS Table 1 name of the (embeddings, proxies) composition: "M1" ... "M4" or "PS"."""
        return COMPOSITIONS[(self.embeddings_used, self.proxies_used)]

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        """The base loss's (B, C) scores (no synthetic classes at inference)."""
        return self.base.logits(embeddings)

    def forward(
        self, embeddings: torch.Tensor, labels: torch.Tensor, *, lam: float | None = None
    ) -> torch.Tensor:
        """Base loss on the real + synthetic batch; ``lam`` fixes lambda for this call (over ``self.lam``)."""
        check_batch(
            embeddings, labels, num_classes=self.base.num_classes, embedding_dim=self.base.embedding_dim
        )
        num_synthetic = int(self.mu * embeddings.shape[0])
        if num_synthetic == 0 or self.composition == "M1":  # mu * B < 1, or M1: base loss on the real batch
            self.last_lam, self.last_partners = None, None
            return self.base(embeddings, labels)
        if sync_free_checks() is not None:  # the one-class case decided on the device (module docstring)
            lo, hi = torch.aminmax(labels)
            return torch.where(
                lo != hi, self._synthesized(embeddings, labels, lam), self.base(embeddings, labels)
            )
        if torch.unique(labels).numel() < 2:  # no different-class partner exists: the base loss
            self.last_lam, self.last_partners = None, None
            return self.base(embeddings, labels)
        return self._synthesized(embeddings, labels, lam)

    def _synthesized(self, embeddings: torch.Tensor, labels: torch.Tensor, lam: float | None) -> torch.Tensor:
        """The base loss on the real + synthetic batch (a batch of at least two classes)."""
        num_synthetic = int(self.mu * embeddings.shape[0])
        lam = self.lam if lam is None else lam
        if lam is None:
            lam = sample_beta(self.alpha, self.generator)
        elif not 0.0 <= lam <= 1.0:
            raise ValueError(f"lam must be in [0, 1]; got {lam!r}")
        with _fp32_region(embeddings.device):
            emb = embeddings.float()
            proxies = self.base.proxies.float()
            if self.base.normalizes_embeddings:
                emb = F.normalize(emb, dim=1)
            if self.base.normalizes_proxies:
                proxies = F.normalize(proxies, dim=1)
            dim = proxies.shape[1]
            class_rows = proxies.reshape(self.base.num_classes, -1)  # (C, K * D); K = 1 for most losses
            bias = None if self.base.bias is None else self.base.bias.float()
            batch = synthesize(
                emb,
                labels.long(),
                class_rows,
                lam=lam,
                num_synthetic=num_synthetic,
                bias=bias,
                pairing=self.pairing,
                generator=self.generator,
                embeddings_used=self.embeddings_used,
                proxies_used=self.proxies_used,
            )
            self.last_lam, self.last_partners = float(lam), (batch.anchors, batch.partners)
            return self.base.loss_from_proxies(
                batch.embeddings, batch.labels, batch.proxies.reshape(-1, dim), bias=batch.bias
            )

    def extra_repr(self) -> str:
        lam = f"lam={self.lam:g}" if self.lam is not None else f"alpha={self.alpha:g}"
        return f"{lam}, mu={self.mu:g}, pairing={self.pairing}, composition={self.composition}"
