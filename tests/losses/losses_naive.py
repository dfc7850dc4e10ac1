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


def soft_triple(emb, labels, centers, k, scale, gamma, margin, tau, eps=1e-5) -> float:
    """SoftTriple Eq. 8 (relaxed similarity), Eq. 10 (loss) and tau * Eq. 12 / (C K (K-1)) (regulariser).

    ``centers`` (C * K, D), class c's centres at rows c*K .. c*K + K - 1.
    """
    ws = [_unit(w) for w in centers]
    num_classes = len(ws) // k
    total = 0.0
    for x, y in zip(emb, labels.tolist(), strict=True):
        xu = _unit(x)
        relaxed = []
        for c in range(num_classes):
            sims = [_dot(xu, ws[c * k + j]) for j in range(k)]
            z = sum(math.exp(s / gamma) for s in sims)
            relaxed.append(sum(math.exp(s / gamma) / z * s for s in sims))
        num = math.exp(scale * (relaxed[y] - margin))
        den = num + sum(math.exp(scale * relaxed[c]) for c in range(num_classes) if c != y)
        total += -math.log(num / den)
    reg = 0.0
    for c in range(num_classes):
        for t in range(k):
            for s in range(t + 1, k):
                reg += math.sqrt(2.0 + eps - 2.0 * _dot(ws[c * k + t], ws[c * k + s]))
    reg = reg / (num_classes * k * (k - 1)) if k > 1 else 0.0
    return total / len(labels) + tau * reg


def virtual_softmax(emb, labels, weight, bias, clip) -> float:
    """Softmax over the C classes plus the virtual class W_virt = ||W_y|| x / ||x|| (Chen et al. 2018)."""
    total = 0.0
    for x, y in zip(emb, labels.tolist(), strict=True):
        xs = [float(a) for a in x]
        scores = [_dot(xs, [float(a) for a in w]) + float(b) for w, b in zip(weight, bias, strict=True)]
        wy = [float(a) for a in weight[y]]
        norm_x = math.sqrt(_dot(xs, xs))
        w_virt = [math.sqrt(_dot(wy, wy)) * a / norm_x for a in xs]
        virt = _dot(w_virt, xs)
        if clip is not None:
            virt = min(virt, clip)
        total += -math.log(math.exp(scores[y]) / (sum(math.exp(s) for s in scores) + math.exp(virt)))
    return total / len(labels)
