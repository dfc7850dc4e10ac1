"""The evaluator never returns a silently wrong value: overflow, cancellation, non-finite and zero inputs,
and the blocked Recall@K pass (band rule + exact recount) against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from metrics_reference import brute_force_metrics

import dmllab.metrics.evaluator as ev
from dmllab.metrics import (
    NonFiniteEmbeddingError,
    ZeroEmbeddingError,
    evaluate,
    recall_at_k,
    retrieval_metrics,
)

# Random labels leave some classes with one sample and small sets ask for K beyond their size, on purpose: the
# evaluator's warnings about it are expected here (the tests that check them use pytest.warns).
pytestmark = pytest.mark.filterwarnings("ignore::dmllab.metrics.FewReferencesWarning")

KS = (1, 2, 4, 8, 16)


def clustered(rng, n=240, dim=8, n_classes=30, spread=1.5):
    labels = rng.integers(0, n_classes, n)
    centres = rng.normal(size=(n_classes, dim)) * spread
    return (centres[labels] + rng.normal(size=(n, dim))).astype(np.float32), labels


def integer_ties(rng, n=200, dim=3, n_classes=12):
    x = rng.integers(0, 3, size=(n, dim)).astype(np.float32)
    labels = rng.integers(0, n_classes, n)
    labels[:3] = [100, 101, 102]
    return x, labels


@pytest.mark.parametrize("scale", [1e19, 1e30, 1e-30])
def test_huge_or_tiny_embeddings_give_the_true_recall(rng, scale):
    # without the power-of-two rescale, |x| ~ 1e19 makes every float32 distance inf/NaN and every query a hit
    # (R@1 = 100 %)
    x, y = clustered(rng, n=200, n_classes=40, spread=0.3)
    truth = brute_force_metrics(x.astype(np.float64), y, ks=KS)["recall"]
    assert truth[1] < 0.9
    big = (x.astype(np.float64) * scale).astype(np.float32)
    assert np.isfinite(big).all()
    assert recall_at_k(big, y, KS) == pytest.approx(truth, abs=0)
    res = retrieval_metrics(big, y, ks=KS, mlrc=True)
    assert res.recall == pytest.approx(truth, abs=0)
    ref = brute_force_metrics(x, y, ks=KS)
    assert res.map_at_r == pytest.approx(ref["MAP@R"], abs=1e-9)


def test_huge_float64_and_cosine(rng):
    x, y = clustered(rng, n=150, n_classes=30)
    truth = brute_force_metrics(x, y, ks=KS, distance="cosine")["recall"]
    got = recall_at_k(x.astype(np.float64) * 1e200, y, KS, distance="cosine")
    assert got == pytest.approx(truth, abs=0)
    assert recall_at_k(x * np.float32(1e30), y, KS, distance="cosine") == pytest.approx(truth, abs=0)


def test_cancellation_is_resolved_exactly():
    # a large common offset: |q|^2 + |r|^2 - 2 q.r loses every significant digit in float32, so the band
    # rule sends each query to the exact float64 recount
    rng = np.random.default_rng(3)
    n = 120
    x = np.zeros((n, 2), dtype=np.float32)
    x[:, 0] = 4096.0 + rng.integers(0, 64, n) / 64.0
    x[:, 1] = rng.integers(0, 64, n) / 64.0
    y = rng.integers(0, 15, n)
    truth = brute_force_metrics(x, y, ks=KS)["recall"]
    assert recall_at_k(x, y, KS) == pytest.approx(truth, abs=0)
    assert retrieval_metrics(x, y, ks=KS, mlrc=True).recall == pytest.approx(truth, abs=0)


def test_non_finite_embeddings_raise_a_named_error():
    x = np.ones((4, 2), dtype=np.float32)
    x[2, 1] = np.inf
    with pytest.raises(NonFiniteEmbeddingError, match="NaN or inf in 1 of 4 rows"):
        recall_at_k(x, np.array([0, 0, 1, 1]))
    assert issubclass(NonFiniteEmbeddingError, ValueError)


def test_cosine_on_zero_vectors_is_an_error():
    x = np.array([[1.0, 0.0], [0.0, 0.0], [0.5, 0.5], [0.0, 2.0]], dtype=np.float32)
    y = np.array([0, 0, 1, 1])
    with pytest.raises(ZeroEmbeddingError, match=r"all-zero embeddings \(rows \[1\]\)"):
        recall_at_k(x, y, distance="cosine")
    with pytest.raises(ZeroEmbeddingError, match="gallery"):
        retrieval_metrics(x[[0, 2]], y[[0, 2]], gallery=x, gallery_labels=y, distance="cosine")
    # the euclidean distance of a zero vector is well defined
    assert recall_at_k(x, y, (1,))[1] == pytest.approx(brute_force_metrics(x, y, ks=(1,))["recall"][1])


def test_inputs_are_never_modified(rng):
    x, y = clustered(rng, n=60)
    x64 = x.astype(np.float64) * 1e40
    before = x64.copy()
    retrieval_metrics(x64, y, ks=KS, mlrc=True, dtype=torch.float64)
    retrieval_metrics(x64, y, ks=KS, distance="cosine")
    np.testing.assert_array_equal(x64, before)


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_blocked_recall_with_ties_matches_brute_force(rng, chunk_size):
    x, y = integer_ties(rng, n=150)
    truth = brute_force_metrics(x, y, ks=KS)["recall"]
    assert recall_at_k(x, y, KS, chunk_size=chunk_size) == pytest.approx(truth, abs=0)


def test_blocked_gallery_with_ties(rng):
    q, qy = integer_ties(rng, n=90)
    g, gy = integer_ties(np.random.default_rng(5), n=120)
    truth = brute_force_metrics(q, qy, g, gy, ks=KS)["recall"]
    for chunk in (5, 32, 500):
        got = retrieval_metrics(q, qy, gallery=g, gallery_labels=gy, ks=KS, chunk_size=chunk).recall
        assert got == pytest.approx(truth, abs=0)


def test_ties_go_to_the_exact_recount(rng, monkeypatch):
    calls = []
    original = ev._exact_ranks

    def recording(rows, *args):
        calls.append(len(rows))
        return original(rows, *args)

    monkeypatch.setattr(ev, "_exact_ranks", recording)
    x, y = integer_ties(rng, n=100)
    recall_at_k(x, y, KS)
    assert calls and sum(calls) < len(y)  # only the queries with a tie at a K boundary
    calls.clear()
    xc, yc = clustered(rng, n=100)
    recall_at_k(xc, yc, KS)  # continuous data: no near tie
    assert sum(calls) == 0


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
def test_blocked_pass_equals_full_rows_and_torch_matmul(rng, distance):
    x, y = clustered(rng, n=300, dim=16, n_classes=40)
    fast = recall_at_k(x, y, KS, distance=distance)
    assert recall_at_k(x, y, KS, distance=distance, matmul="torch") == fast
    assert retrieval_metrics(x, y, ks=KS, mlrc=True, distance=distance).recall == fast
    assert fast == pytest.approx(brute_force_metrics(x, y, ks=KS, distance=distance)["recall"], abs=0)


def test_evaluate_passes_matmul_and_rejects_unknown(rng):
    x, y = clustered(rng, n=50)
    assert evaluate(x, y, metrics=("recall",), matmul="torch") == evaluate(x, y, metrics=("recall",))
    with pytest.raises(ValueError, match="matmul"):
        recall_at_k(x, y, matmul="blas")
