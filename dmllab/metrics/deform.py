"""Embedding deformation (Proxy Synthesis Sec. 4.4, Fig. 5, supplement Table B), on embedding tensors.

"For a gallery set, synthetic embeddings generated with lambda and original embeddings are used. For a query
set, synthetic embeddings are used to find other synthetic embeddings generated with the same manner."

dmllab's reading: a *synthetic class* is an unordered pair of classes {a, b} (a < b). A synthetic embedding
of it is ``lam * x_a + (1 - lam) * x_b`` with x_a, x_b drawn uniformly from the (L2-normalised, when
``normalize``) embeddings of classes a and b. For each of ``num_pairs`` random class pairs, ``per_pair``
query synthetics and, independently, ``per_pair`` gallery synthetics are drawn; the gallery is the gallery
synthetics plus all original embeddings (labelled with their classes, never a positive of a synthetic
query). Recall@K of the queries is computed by :func:`dmllab.metrics.evaluate` (query vs gallery). The
orientation a < b makes lam and 1 - lam different deformations, as in Table B; lambda = 0.5 is the easiest
(furthest from both originals), lambda near 0 or 1 the hardest (synthetics next to an original class).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch
import torch.nn.functional as F


class DeformedEmbeddings(NamedTuple):
    query: torch.Tensor  # (Q, D) synthetic
    query_labels: torch.Tensor  # (Q,) pair ids offset by the number of classes
    gallery: torch.Tensor  # (G + N, D) synthetic + original
    gallery_labels: torch.Tensor  # (G + N,)


def _class_pairs(classes: torch.Tensor, num_pairs: int, generator: torch.Generator) -> torch.Tensor:
    """``num_pairs`` distinct unordered pairs (a < b) of ``classes``, uniformly at random, shape (P, 2)."""
    c = classes.numel()
    total = c * (c - 1) // 2
    if num_pairs > total:
        raise ValueError(f"num_pairs={num_pairs} exceeds the {total} class pairs of {c} classes")
    ii, jj = torch.triu_indices(c, c, offset=1)
    pick = torch.randperm(total, generator=generator)[:num_pairs]
    return torch.stack([classes[ii[pick]], classes[jj[pick]]], dim=1)


def embedding_deformation(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    lam: float,
    *,
    num_pairs: int = 100,
    per_pair: int = 5,
    normalize: bool = True,
    generator: torch.Generator | None = None,
) -> DeformedEmbeddings:
    """Query and gallery sets of the embedding-deformation test at ``lam`` (module docstring).

    Args:
        embeddings: (N, D) original embeddings; labels: (N,) integer classes.
        lam: interpolation coefficient in [0, 1].
        num_pairs: random class pairs (each a synthetic class); per_pair: query (and gallery) synthetics per pair.
        normalize: L2-normalise the embeddings before mixing (the PS mixing space for cosine losses).
        generator: CPU torch.Generator (None: a fresh one seeded 0, so the sets are reproducible).
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1]; got {lam!r}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    emb = F.normalize(embeddings.float(), dim=1) if normalize else embeddings.float()
    labels = labels.long().cpu()
    classes = torch.unique(labels)
    pairs = _class_pairs(classes, num_pairs, g)  # (P, 2)
    members = {int(c): torch.nonzero(labels == c).squeeze(1) for c in classes}
    offset = int(classes.max()) + 1

    def draw() -> tuple[torch.Tensor, torch.Tensor]:
        idx_a, idx_b = [], []
        for a, b in pairs.tolist():
            ma, mb = members[a], members[b]
            idx_a.append(ma[torch.randint(len(ma), (per_pair,), generator=g)])
            idx_b.append(mb[torch.randint(len(mb), (per_pair,), generator=g)])
        ia, ib = torch.cat(idx_a).to(emb.device), torch.cat(idx_b).to(emb.device)
        synth = lam * emb[ia] + (1.0 - lam) * emb[ib]  # (P * per_pair, D)
        ids = offset + torch.arange(len(pairs)).repeat_interleave(per_pair)
        return synth, ids

    query, query_labels = draw()
    gallery_synth, gallery_ids = draw()
    return DeformedEmbeddings(
        query=query,
        query_labels=query_labels,
        gallery=torch.cat([gallery_synth, emb]),
        gallery_labels=torch.cat([gallery_ids, labels]),
    )


def embedding_deformation_recall(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    lambdas: Iterable[float],
    *,
    ks: Iterable[int] = (1,),
    num_pairs: int = 100,
    per_pair: int = 5,
    normalize: bool = True,
    distance: str = "cosine",
    seed: int = 0,
) -> dict[float, dict[str, float]]:
    """{lambda: {"R@K": ...}} of the embedding-deformation test (PS Fig. 5 / Table B) for each lambda.

    The same class pairs and sample indices are used for every lambda (one generator seeded ``seed`` per
    lambda), so the curve over lambda varies only lambda.
    """
    from dmllab.metrics import evaluate

    out = {}
    for lam in lambdas:
        d = embedding_deformation(
            embeddings,
            labels,
            lam,
            num_pairs=num_pairs,
            per_pair=per_pair,
            normalize=normalize,
            generator=torch.Generator().manual_seed(seed),
        )
        out[float(lam)] = evaluate(
            d.query,
            d.query_labels,
            gallery=d.gallery,
            gallery_labels=d.gallery_labels,
            metrics=("recall",),
            ks=tuple(ks),
            distance=distance,
        )
    return out
