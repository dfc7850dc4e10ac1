"""Naive per-sample references written straight from the papers' equations (float64, python loops).

Deliberately slow and literal: no masking tricks, no logsumexp, so that they check the vectorised code in
dmllab.losses.functional rather than repeat it.
"""

from __future__ import annotations

import math

import torch


def _unit(v: torch.Tensor) -> list[float]:
    values = [float(a) for a in v]
    norm = math.sqrt(sum(a * a for a in values))
    return [a / norm for a in values]


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _sqdist(a: list[float], b: list[float]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def proxy_nca(emb, labels, proxies, temperature, prob=True) -> float:
    """ProxyNCA++ Eq. 6 (prob=True) / ProxyNCA Eq. 3 (prob=False), with 1/T, mean over the batch."""
    total = 0.0
    ps = [_unit(p) for p in proxies]
    for x, y in zip(emb, labels.tolist(), strict=True):
        xu = _unit(x)
        numerator = math.exp(-_sqdist(xu, ps[y]) / temperature)
        denominator = sum(math.exp(-_sqdist(xu, p) / temperature) for a, p in enumerate(ps) if prob or a != y)
        total += -math.log(numerator / denominator)
    return total / len(labels)


def norm_softmax(emb, labels, proxies, temperature) -> float:
    """ProxyNCA++ appendix Eq. 9."""
    total = 0.0
    ps = [_unit(p) for p in proxies]
    for x, y in zip(emb, labels.tolist(), strict=True):
        xu = _unit(x)
        numerator = math.exp(_dot(xu, ps[y]) / temperature)
        denominator = sum(math.exp(_dot(xu, p) / temperature) for p in ps)
        total += -math.log(numerator / denominator)
    return total / len(labels)


def linear_softmax(emb, labels, weight, bias, alpha=1.0, normalize_weights=False) -> float:
    """Cross-entropy of alpha * <x, w_c> + b_c (w_c normalised for Heated-up Softmax)."""
    total = 0.0
    ws = [_unit(w) if normalize_weights else [float(a) for a in w] for w in weight]
    bs = [0.0] * len(ws) if bias is None else [float(b) for b in bias]
    for x, y in zip(emb, labels.tolist(), strict=True):
        xs = [float(a) for a in x]
        scores = [alpha * _dot(xs, w) + b for w, b in zip(ws, bs, strict=True)]
        total += -math.log(math.exp(scores[y]) / sum(math.exp(s) for s in scores))
    return total / len(labels)


def margin_softmax(emb, labels, proxies, scale, m1, m2, m3) -> float:
    """Proxy Synthesis supplement Eq. 6 (viii)."""
    total = 0.0
    ps = [_unit(p) for p in proxies]
    for x, y in zip(emb, labels.tolist(), strict=True):
        xu = _unit(x)
        s_pos = _dot(xu, ps[y])
        target = math.exp(scale * (math.cos(m1 * math.acos(s_pos) + m2) - m3))
        others = sum(math.exp(scale * _dot(xu, p)) for q, p in enumerate(ps) if q != y)
        total += -math.log(target / (target + others))
    return total / len(labels)


def proxy_anchor(emb, labels, proxies, alpha, delta) -> float:
    """Proxy Anchor Eq. 4; positive term over P+ (proxies with positives), negative term divided by C."""
    xs = [_unit(x) for x in emb]
    ys = labels.tolist()
    ps = [_unit(p) for p in proxies]
    positive_proxies = sorted(set(ys))
    pos = 0.0
    for c in positive_proxies:
        pos += math.log(
            1 + sum(math.exp(-alpha * (_dot(x, ps[c]) - delta)) for x, y in zip(xs, ys) if y == c)
        )
    neg = 0.0
    for c in range(len(ps)):
        neg += math.log(1 + sum(math.exp(alpha * (_dot(x, ps[c]) + delta)) for x, y in zip(xs, ys) if y != c))
    return pos / len(positive_proxies) + neg / len(ps)


def make_batch(
    batch_size: int = 12, num_classes: int = 5, dim: int = 6, *, seed: int = 0, dtype=torch.float64
):
    """Random (embeddings, labels, proxies); every class present when batch_size >= num_classes."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(batch_size, dim, generator=g, dtype=dtype)
    labels = torch.arange(batch_size) % num_classes
    labels = labels[torch.randperm(batch_size, generator=g)]
    proxies = torch.randn(num_classes, dim, generator=g, dtype=dtype)
    return emb, labels, proxies
