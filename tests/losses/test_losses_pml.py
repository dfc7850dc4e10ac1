"""Agreement with pytorch-metric-learning where it implements the same loss.

Conventions checked (PML 2.x source):
* ``ProxyNCALoss(softmax_scale=s)``: LpDistance(power=2) on L2-normalised embeddings *and* proxies (squared
  Euclidean), softmax over all proxies (positive included) of -s*d, mean over the batch. This is ProxyNCA++
  Eq. 6 with T = 1/s. (PML drops samples whose probability underflows to exactly 0; not reached here.)
* ``ProxyAnchorLoss(margin=delta, alpha)``: cosine similarity, positive term summed over all proxies (0 for a
  proxy without positives) and divided by the number of proxies with positives, negative term divided by
  ``num_classes``: the official-code convention, so the full losses are compared.
* ``NormalizedSoftmaxLoss(temperature=T)``: weight W of shape (D, C) normalised per class, embeddings
  normalised, logits cos / T, mean cross-entropy: our proxies are W transposed.
"""

from __future__ import annotations

import pytest
import torch
from losses_naive import make_batch

import dmllab.losses as L

pml_losses = pytest.importorskip("pytorch_metric_learning.losses")

C, D = 7, 16


def _batch(seed):
    emb, labels, _ = make_batch(batch_size=24, num_classes=C, dim=D, seed=seed, dtype=torch.float32)
    return emb, labels


def _compare(ours, theirs, their_param, emb, labels):
    """Values and gradients (wrt embeddings and proxies) agree."""
    e1 = emb.clone().requires_grad_(True)
    e2 = emb.clone().requires_grad_(True)
    v1, v2 = ours(e1, labels), theirs(e2, labels)
    torch.testing.assert_close(v1, v2, rtol=1e-5, atol=1e-5)
    v1.backward()
    v2.backward()
    torch.testing.assert_close(e1.grad, e2.grad, rtol=1e-4, atol=1e-6)
    return ours.proxies.grad, their_param.grad


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("temperature", [1 / 9, 1 / 3, 1.0])
def test_proxynca_pp_equals_pml_proxynca(seed, temperature):
    torch.manual_seed(seed)
    ours = L.ProxyNCALoss(C, D, temperature=temperature)
    theirs = pml_losses.ProxyNCALoss(C, D, softmax_scale=1 / temperature)
    with torch.no_grad():
        theirs.proxies.copy_(ours.proxies)
    g1, g2 = _compare(ours, theirs, theirs.proxies, *_batch(seed))
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("num_classes_present", [C, 4])
def test_proxy_anchor_equals_pml(seed, num_classes_present):
    torch.manual_seed(seed)
    ours = L.ProxyAnchorLoss(C, D, alpha=32.0, delta=0.1)
    theirs = pml_losses.ProxyAnchorLoss(C, D, margin=0.1, alpha=32)
    with torch.no_grad():
        theirs.proxies.copy_(ours.proxies)
    emb, labels = _batch(seed)
    labels = labels % num_classes_present  # some proxies without positives
    g1, g2 = _compare(ours, theirs, theirs.proxies, emb, labels)
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("temperature", [0.5, 0.05])
def test_norm_softmax_equals_pml_normalized_softmax(seed, temperature):
    torch.manual_seed(seed)
    ours = L.NormSoftmaxLoss(C, D, temperature=temperature)
    theirs = pml_losses.NormalizedSoftmaxLoss(C, D, temperature=temperature)
    with torch.no_grad():
        theirs.W.copy_(ours.proxies.t())
    g1, g2 = _compare(ours, theirs, theirs.W, *_batch(seed))
    torch.testing.assert_close(g1, g2.t(), rtol=1e-4, atol=1e-6)
