"""Pure loss functions (the functional core, like ``torch.nn.functional``).

Every function takes the batch ``embeddings`` (B, D), integer ``labels`` (B,) in [0, C) and the class
representatives ``proxies`` (C, D) explicitly, so that Proxy Synthesis can call the same function with extra
synthetic embeddings, labels and proxies. All return the mean over the batch (a scalar tensor).

These functions compute in the dtype they are given; the modules in :mod:`dmllab.losses.proxy` cast to
float32 and disable autocast before calling them. No input validation happens here (see ``_validate``).

Papers:
    ProxyNCA++ (Teh et al., ECCV 2020): Eq. 3 (ProxyNCA), Eq. 6 (ProxyNCA++), appendix Eq. 9 (NormSoftMax).
    Proxy Anchor (Kim et al., CVPR 2020): Eq. 4 / Eq. 5.
    Proxy Synthesis (Gu et al., AAAI 2021): supplement Eq. 6 (margin-softmax family).
    Heated-up Softmax Embedding (Zhang et al.): alpha-scaled softmax with normalised weights.
    SoftTriple (Qian et al., ICCV 2019): Eq. 8 (relaxed similarity), Eq. 10 (loss), Eq. 12 (regulariser);
        printed as (ii)-(iii) in the Proxy Synthesis supplement.
    Virtual Softmax (Chen, Deng, Shen, NeurIPS 2018): W_virt = ||W_y|| x / ||x|| (PS Sec. 2, Table 5).
    mixup (Zhang et al. 2018) / Manifold Mixup (Verma et al. 2019): lambda-weighted targets (PS Table 5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_similarity_matrix(embeddings: torch.Tensor, proxies: torch.Tensor) -> torch.Tensor:
    """Cosine similarity s(x, p) between every embedding and every proxy, shape (B, C)."""
    return F.normalize(embeddings, dim=1) @ F.normalize(proxies, dim=1).t()  # (B, C)


def squared_euclidean_to_proxies(embeddings: torch.Tensor, proxies: torch.Tensor) -> torch.Tensor:
    """d(x/|x|, p/|p|) = ||x/|x| - p/|p|||^2 for every embedding/proxy pair, shape (B, C).

    For unit vectors this equals 2 - 2 cos; it is clamped at 0 against rounding.
    """
    return (2.0 - 2.0 * cosine_similarity_matrix(embeddings, proxies)).clamp_min(0.0)  # (B, C)


def proxy_nca_logits(embeddings: torch.Tensor, proxies: torch.Tensor, *, temperature: float) -> torch.Tensor:
    """The ProxyNCA(++) logits -d(x/|x|, p/|p|) / T, shape (B, C) (the argument of exp in Eq. 6)."""
    return -squared_euclidean_to_proxies(embeddings, proxies) / temperature


def proxy_nca(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    proxies: torch.Tensor,
    *,
    temperature: float,
    prob: bool = True,
) -> torch.Tensor:
    """ProxyNCA++ (Eq. 6) or classic ProxyNCA (Eq. 3), averaged over the batch.

    With ``prob=True`` (+prob) the loss is the cross-entropy of the proxy assignment probability,
    ``-log( exp(-d_y/T) / sum_{a in A} exp(-d_a/T) )``, where d is the squared Euclidean distance between
    the L2-normalised embedding and proxies and the sum runs over all proxies including the positive one.
    With ``prob=False`` the positive proxy is excluded from the denominator (Eq. 3, here also divided by
    T); this loss is unbounded below and can be negative. ``temperature=1`` is the unscaled loss.

    Args:
        embeddings: (B, D) embeddings (any norm; normalised here).
        labels: (B,) integer labels in [0, C).
        proxies: (C, D) proxies (any norm; normalised here).
        temperature: T > 0 (ProxyNCA++ uses 1/9).
        prob: include the positive proxy in the denominator.
    """
    logits = proxy_nca_logits(embeddings, proxies, temperature=temperature)  # (B, C)
    if prob:
        return F.cross_entropy(logits, labels)
    positive = logits.gather(1, labels[:, None]).squeeze(1)  # (B,)
    negatives = logits.scatter(1, labels[:, None], float("-inf"))  # (B, C), positive removed
    return (torch.logsumexp(negatives, dim=1) - positive).mean()


def norm_softmax_logits(
    embeddings: torch.Tensor, proxies: torch.Tensor, *, temperature: float
) -> torch.Tensor:
    """NormSoftMax logits cos(x, p) / T, shape (B, C)."""
    return cosine_similarity_matrix(embeddings, proxies) / temperature


def norm_softmax(
    embeddings: torch.Tensor, labels: torch.Tensor, proxies: torch.Tensor, *, temperature: float
) -> torch.Tensor:
    """NormSoftMax (ProxyNCA++ appendix Eq. 9): softmax cross-entropy over cosine similarity / T.

    Also the LN variant of Heated-up Softmax with alpha = 1/T and no bias.
    """
    return F.cross_entropy(norm_softmax_logits(embeddings, proxies, temperature=temperature), labels)


def softmax_logits(embeddings: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Unnormalised linear classifier logits <x, w> + b, shape (B, C)."""
    return F.linear(embeddings, weight, bias)


def softmax(
    embeddings: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """The SM baseline: softmax cross-entropy of an unnormalised linear classifier with bias."""
    return F.cross_entropy(softmax_logits(embeddings, weight, bias), labels)


def heated_softmax_logits(
    embeddings: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *, alpha: float
) -> torch.Tensor:
    """Heated-up Softmax logits alpha * <f, w/|w|> + b, shape (B, C).

    ``embeddings`` are used as given: the model head provides f_hat (L2-normalised for the LN variant,
    BatchNorm without scale divided by sqrt(dim) for the BN variant).
    """
    logits = alpha * (embeddings @ F.normalize(weight, dim=1).t())  # (B, C)
    return logits if bias is None else logits + bias


def heated_softmax(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    alpha: float,
) -> torch.Tensor:
    """Heated-up Softmax Embedding loss: cross-entropy of alpha * <f, w_hat> + b."""
    return F.cross_entropy(heated_softmax_logits(embeddings, weight, bias, alpha=alpha), labels)


def margin_softmax_logits(embeddings: torch.Tensor, proxies: torch.Tensor, *, scale: float) -> torch.Tensor:
    """Margin-free scores gamma * cos(x, p), shape (B, C) (the margin only applies to a known target)."""
    return scale * cosine_similarity_matrix(embeddings, proxies)


def margin_softmax(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    proxies: torch.Tensor,
    *,
    scale: float,
    m1: float = 1.0,
    m2: float = 0.0,
    m3: float = 0.0,
    eps: float = 1e-7,
) -> torch.Tensor:
    """SphereFace / CosFace / ArcFace in one form (Proxy Synthesis supplement Eq. 6, printed as (viii)).

    ``-log( e^{g(cos(m1 theta_y + m2) - m3)} / (e^{g(cos(m1 theta_y + m2) - m3)} + sum_{q != y} e^{g s(x,q)}) )``
    with theta_y = arccos s(x, p_y) and g = ``scale``. The margin acts on the target logit only; the cosine
    is clamped to [-1 + eps, 1 - eps] before ``acos`` (whose derivative is infinite at +-1). When m1 = 1
    and m2 = 0 the target logit is g (s - m3) computed directly, without the acos round trip (identical
    value, exact gradient). With m1 = 1, m2 = m3 = 0 this is NormSoftMax with T = 1/g. The formula is used
    as printed: no "easy margin" or monotonicity fix for m1 * theta + m2 > pi.
    """
    cos = cosine_similarity_matrix(embeddings, proxies)  # (B, C)
    target_cos = cos.gather(1, labels[:, None])  # (B, 1)
    if m1 == 1.0 and m2 == 0.0:
        target = target_cos - m3
    else:
        theta = torch.acos(target_cos.clamp(-1.0 + eps, 1.0 - eps))
        target = torch.cos(m1 * theta + m2) - m3
    logits = cos.scatter(1, labels[:, None], target)  # (B, C), target logit replaced
    return F.cross_entropy(scale * logits, labels)


def proxy_anchor(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    proxies: torch.Tensor,
    *,
    alpha: float,
    delta: float,
) -> torch.Tensor:
    """Proxy Anchor loss (Eq. 4, computed as Eq. 5) with the official code's averaging.

    ``(1/|P+|) sum_{p in P+} log(1 + sum_{x in X_p+} e^{-alpha (s(x,p) - delta)})
      + (1/C) sum_{p in P} log(1 + sum_{x in X_p-} e^{alpha (s(x,p) + delta)})``

    s is the cosine similarity; P+ are the proxies with at least one positive in the batch. The negative
    term is averaged over all C proxies, as in the released code (the paper writes 1/|P-|).
    ``log(1 + sum e^z)`` is evaluated as ``logsumexp([0, z...])`` (= softplus(LSE(z))), which cannot overflow
    for any alpha and is 0 for a proxy without positives (negatives), with finite gradients.
    """
    num_proxies = proxies.shape[0]
    cos = cosine_similarity_matrix(embeddings, proxies)  # (B, C)
    pos_mask = F.one_hot(labels, num_proxies).bool()  # (B, C)
    neg_inf = torch.tensor(float("-inf"), dtype=cos.dtype, device=cos.device)
    zero_row = torch.zeros(1, num_proxies, dtype=cos.dtype, device=cos.device)
    pos_exponents = torch.where(pos_mask, -alpha * (cos - delta), neg_inf)  # (B, C)
    neg_exponents = torch.where(pos_mask, neg_inf, alpha * (cos + delta))  # (B, C)
    pos_terms = torch.logsumexp(torch.cat([zero_row, pos_exponents]), dim=0)  # (C,)
    neg_terms = torch.logsumexp(torch.cat([zero_row, neg_exponents]), dim=0)  # (C,)
    num_with_positives = pos_mask.any(dim=0).sum()
    return pos_terms.sum() / num_with_positives + neg_terms.sum() / num_proxies


def soft_triple_logits(
    embeddings: torch.Tensor, centers: torch.Tensor, *, centers_per_class: int, gamma: float
) -> torch.Tensor:
    """SoftTriple relaxed similarity S'(x, c) (SoftTriple Eq. 8; PS supplement Eq. ii), shape (B, C).

    ``S'(x, c) = sum_k softmax_k(s(x, w_c^k) / gamma) s(x, w_c^k)`` with s the cosine similarity and the K
    centers of class c at rows ``c * K + k`` of ``centers`` (C * K, D) (class-major, as
    pytorch-metric-learning's ``fc.view(-1, C, K)``).
    """
    sim = cosine_similarity_matrix(embeddings, centers)  # (B, C*K)
    sim = sim.view(sim.shape[0], -1, centers_per_class)  # (B, C, K)
    weights = torch.softmax(sim / gamma, dim=2)
    return (weights * sim).sum(dim=2)  # (B, C)


def soft_triple_regularizer(
    centers: torch.Tensor, *, centers_per_class: int, eps: float = 1e-5
) -> torch.Tensor:
    """SoftTriple centre regulariser (SoftTriple Eq. 12 with the Eq. 13 normaliser):
    ``sum_c sum_{t<s} sqrt(2 + eps - 2 w_c^t . w_c^s) / (C K (K - 1))`` on L2-normalised centres.

    ``sqrt(2 - 2 cos)`` is the distance of two unit centres; ``eps`` (1e-5, the authors' code) keeps the
    square root differentiable when two centres coincide. Zero when K = 1.
    """
    k = centers_per_class
    if k == 1:
        return centers.sum() * 0.0
    w = F.normalize(centers, dim=1).view(-1, k, centers.shape[1])  # (C, K, D)
    num_classes = w.shape[0]
    gram = w @ w.transpose(1, 2)  # (C, K, K)
    upper = torch.triu(torch.ones(k, k, dtype=torch.bool, device=centers.device), diagonal=1)
    dist = torch.sqrt((2.0 + eps - 2.0 * gram[:, upper]).clamp_min(0.0))  # (C, K(K-1)/2)
    return dist.sum() / (num_classes * k * (k - 1))


def soft_triple(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    centers: torch.Tensor,
    *,
    centers_per_class: int,
    scale: float = 20.0,
    gamma: float = 0.1,
    margin: float = 0.01,
    tau: float = 0.2,
) -> torch.Tensor:
    """SoftTriple loss (SoftTriple Eq. 10 + tau * Eq. 12; PS supplement Eq. iii with eps = ``scale``).

    ``-log( e^{lambda (S'(x, y) - delta)} / (e^{lambda (S'(x, y) - delta)} + sum_{c != y} e^{lambda S'(x, c)}) )``
    averaged over the batch, plus ``tau`` times :func:`soft_triple_regularizer` of ``centers``. The
    paper's names: lambda = ``scale`` (20), gamma = ``gamma`` (0.1; the softmax over centres uses 1/gamma),
    delta = ``margin`` (0.01), tau = ``tau`` (0.2), K = ``centers_per_class`` (10).
    """
    logits = soft_triple_logits(embeddings, centers, centers_per_class=centers_per_class, gamma=gamma)
    target = logits.gather(1, labels[:, None]) - margin  # (B, 1)
    loss = F.cross_entropy(scale * logits.scatter(1, labels[:, None], target), labels)
    if tau:
        loss = loss + tau * soft_triple_regularizer(centers, centers_per_class=centers_per_class)
    return loss


def virtual_softmax_logits(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    clip: float | None = 10.0,
) -> torch.Tensor:
    """Softmax logits with one virtual negative class appended, shape (B, C + 1).

    Virtual Softmax (Chen et al. 2018; PS Sec. 2): ``W_virt = ||W_y|| x / ||x||``, so the virtual logit is
    ``W_virt^T x = ||W_y|| ||x||`` (no bias). ``clip`` caps it (PS supplement D.4: "we clip the similarity
    with a virtual negative class to be under 10 for softmax", without which training fails); None: no cap.
    """
    logits = softmax_logits(embeddings, weight, bias)  # (B, C)
    virtual = weight[labels].norm(dim=1) * embeddings.norm(dim=1)  # (B,)
    if clip is not None:
        virtual = virtual.clamp_max(clip)
    return torch.cat([logits, virtual[:, None]], dim=1)  # (B, C + 1)


def virtual_softmax(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    clip: float | None = 10.0,
) -> torch.Tensor:
    """Virtual Softmax: cross-entropy over the C real classes plus the virtual negative class of each sample
    (:func:`virtual_softmax_logits`); the target is the real label."""
    return F.cross_entropy(virtual_softmax_logits(embeddings, labels, weight, bias, clip=clip), labels)


def mixup_loss(
    loss_fn, embeddings: torch.Tensor, labels_a: torch.Tensor, labels_b: torch.Tensor, lam: float
) -> torch.Tensor:
    """Mixed-target loss of mixup / Manifold Mixup: ``lam * L(f(x~), y_a) + (1 - lam) * L(f(x~), y_b)``.

    For a softmax cross-entropy this equals the cross-entropy against the mixed one-hot target
    ``lam e_{y_a} + (1 - lam) e_{y_b}`` (the cross-entropy is linear in the target), the form of Zhang et al.
    (2018, Eq. 1); for any other proxy loss it is the lambda-weighted combination, as in their code.
    """
    return lam * loss_fn(embeddings, labels_a) + (1.0 - lam) * loss_fn(embeddings, labels_b)
