"""Recall@K and the MLRC metrics against brute force (numpy, stable argsort), scikit-learn and PML."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from metrics_reference import brute_force_metrics

from dmllab.metrics import (
    evaluate,
    map_at_r,
    precision_at_1,
    r_precision,
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
    return centres[labels] + rng.normal(size=(n, dim)), labels


def integer_ties(rng, n=200, dim=3, n_classes=12):
    """Coordinates in {0, 1, 2}: many exact distance ties and duplicate points, exact in float32."""
    x = rng.integers(0, 3, size=(n, dim)).astype(np.float32)
    labels = rng.integers(0, n_classes, n)
    labels[:3] = [100, 101, 102]  # singleton classes: no positive
    return x, labels


def assert_matches(res, ref):
    assert res.recall == pytest.approx(ref["recall"], abs=0)
    for name, got in (("P@1", res.precision_at_1), ("RP", res.r_precision), ("MAP@R", res.map_at_r)):
        assert got == pytest.approx(ref[name], abs=1e-12), name


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_random_clustered_matches_brute_force(rng, dtype):
    x, y = clustered(rng)
    res = retrieval_metrics(x, y, ks=KS, mlrc=True, chunk_size=50, dtype=dtype)
    assert_matches(res, brute_force_metrics(x, y, ks=KS))
    assert 0 < res.recall[1] < res.recall[16] <= 1


def test_ties_and_duplicates_follow_the_tie_rule_whatever_the_order(rng):
    x, y = integer_ties(rng)
    res = retrieval_metrics(x, y, ks=KS, mlrc=True, chunk_size=37)  # float32: exact on small integers
    ref = brute_force_metrics(x, y, ks=KS)
    assert_matches(res, ref)
    assert res.num_queries_with_positive == len(y) - 3
    # any order of the samples gives the same metrics
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(len(y))
        assert retrieval_metrics(x[perm], y[perm], ks=KS, mlrc=True, chunk_size=37) == res
    # the tie rule matters on this data: breaking ties by index instead changes the metrics
    from metrics_reference import brute_force_ranking

    order = brute_force_ranking(x, x, leave_one_out=True, distance="euclidean")
    by_index = np.mean([(y[row[:4]] == y[i]).any() for i, row in enumerate(order)])
    assert by_index != res.recall[4]


def test_tie_rule_by_hand():
    # point 0 at the origin; 1 (other class) and 2 (same class) both at squared distance 1 from it.
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    y = np.array([0, 1, 0])
    # query 0: the negative 1 ties with the positive 2 and comes first -> R@1 miss, R@2 hit;
    # query 1: no positive -> miss; query 2: ref 0 (pos, d=1) before ref 1 (neg, d=2) -> hit.
    with pytest.warns(UserWarning, match="1 of 3 queries have no positive"):
        res = retrieval_metrics(x, y, ks=(1, 2), mlrc=True, chunk_size=1)
    assert res.recall == {1: 1 / 3, 2: 2 / 3}
    assert res.precision_at_1 == 0.5
    assert res.map_at_r == 0.5  # query 0: R = 1 and its positive is 2nd, outside the first R -> 0
    # any order gives the same: the tied positive never comes first
    for order in ([0, 2, 1], [2, 1, 0], [1, 0, 2]):
        res2 = retrieval_metrics(x[order], y[order], ks=(1, 2), mlrc=True)
        assert res2 == res


def test_collapsed_embeddings_are_refused_or_follow_the_tie_rule(rng):
    from dmllab.metrics import CollapsedEmbeddingError

    y = np.repeat(np.arange(5), 4)  # 5 classes of 4: 3 positives and 16 negatives per query
    x = np.ones((20, 8), dtype=np.float32)
    with pytest.raises(CollapsedEmbeddingError, match="collapsed"):
        retrieval_metrics(x, y)
    with pytest.raises(CollapsedEmbeddingError, match="collapsed"):
        evaluate(x, y, metrics=("nmi",))
    # allowed: every reference ties, so the 16 negatives come first whatever the order
    for perm in (np.arange(20), rng.permutation(20), np.argsort(y, kind="stable")[::-1]):
        res = retrieval_metrics(x[perm], y[perm], ks=(1, 4, 16, 17), mlrc=True, allow_collapsed=True)
        assert res.recall == {1: 0.0, 4: 0.0, 16: 0.0, 17: 1.0}
        assert res.precision_at_1 == 0.0 and res.map_at_r == 0.0


def test_gallery_mode_inshop_style(rng):
    q, qy = clustered(rng, n=150, n_classes=20)
    g, gy = clustered(np.random.default_rng(1), n=180, n_classes=25)
    qy = qy + 5  # labels 5..24 for queries, 0..24 for the gallery: some labels only on one side
    res = retrieval_metrics(q, qy, gallery=g, gallery_labels=gy, ks=(1, 10, 20, 30), mlrc=True, chunk_size=64)
    assert_matches(res, brute_force_metrics(q, qy, g, gy, ks=(1, 10, 20, 30)))


def test_gallery_mode_with_ties(rng):
    q, qy = integer_ties(rng, n=90)
    g, gy = integer_ties(np.random.default_rng(5), n=120)
    res = retrieval_metrics(q, qy, gallery=g, gallery_labels=gy, ks=KS, mlrc=True, chunk_size=16)
    assert_matches(res, brute_force_metrics(q, qy, g, gy, ks=KS))


def test_cosine_matches_brute_force(rng):
    x, y = clustered(rng, dim=6)
    res = retrieval_metrics(x, y, ks=KS, mlrc=True, distance="cosine", dtype=torch.float64)
    assert_matches(res, brute_force_metrics(x, y, ks=KS, distance="cosine"))


def test_cosine_ties(rng):
    # signed axis vectors of random length: cosines are exactly -1, 0 or 1 after normalisation
    n, dim = 150, 4
    axis, sign = rng.integers(0, dim, n), rng.choice([-1.0, 1.0], n)
    x = np.zeros((n, dim), dtype=np.float32)
    x[np.arange(n), axis] = sign * rng.choice([1.0, 2.0, 4.0], n)
    y = rng.integers(0, 10, n)
    res = retrieval_metrics(x, y, ks=KS, mlrc=True, distance="cosine", chunk_size=32)
    assert_matches(res, brute_force_metrics(x, y, ks=KS, distance="cosine"))


def test_chunk_size_invariance(rng):
    x, y = integer_ties(rng, n=120)
    results = [retrieval_metrics(x, y, ks=KS, mlrc=True, chunk_size=c) for c in (1, 7, 64, 1000)]
    assert all(r == results[0] for r in results[1:])


def test_numpy_and_torch_inputs_agree(rng):
    x, y = clustered(rng, n=100)
    a = retrieval_metrics(x, y, ks=KS, mlrc=True)
    b = retrieval_metrics(torch.from_numpy(x).float(), torch.from_numpy(y), ks=KS, mlrc=True)
    assert a == b


def test_recall_vs_sklearn_nearest_neighbors(rng):
    from sklearn.neighbors import NearestNeighbors

    x, y = clustered(rng, n=400, dim=16, n_classes=40)
    kmax = max(KS)
    nn = NearestNeighbors(n_neighbors=kmax + 1, algorithm="brute").fit(x)
    _, idx = nn.kneighbors(x)
    # drop the query itself (continuous data: it is always its own nearest neighbour)
    assert (idx[:, 0] == np.arange(len(x))).all()
    nbr_labels = y[idx[:, 1:]]
    expected = {k: float((nbr_labels[:, :k] == y[:, None]).any(1).mean()) for k in KS}
    got = recall_at_k(x, y, KS, dtype=torch.float64)
    assert got == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
def test_mlrc_vs_pytorch_metric_learning(rng, distance):
    from pytorch_metric_learning.distances import CosineSimilarity, LpDistance
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    x, y = clustered(rng, n=300, dim=8, n_classes=25)
    y[:2] = [900, 901]  # lone queries: PML leaves them out, so does dmllab
    dist = LpDistance(normalize_embeddings=False) if distance == "euclidean" else CosineSimilarity()
    calc = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count",
        device=torch.device("cpu"),
        knn_func=CustomKNN(dist),
    )
    xt, yt = torch.from_numpy(x).double(), torch.from_numpy(y)
    pml = calc.get_accuracy(xt, yt)  # reference=None: leave-one-out (ref_includes_query=True)
    kw = dict(distance=distance, dtype=torch.float64)
    assert precision_at_1(x, y, **kw) == pytest.approx(pml["precision_at_1"], abs=1e-6)
    assert r_precision(x, y, **kw) == pytest.approx(pml["r_precision"], abs=1e-6)
    assert map_at_r(x, y, **kw) == pytest.approx(pml["mean_average_precision_at_r"], abs=1e-6)

    # query vs gallery: ref_includes_query=False
    g, gy = clustered(np.random.default_rng(3), n=200, dim=8, n_classes=25)
    pml_g = calc.get_accuracy(xt, yt, torch.from_numpy(g).double(), torch.from_numpy(gy), False)
    res = retrieval_metrics(x, y, gallery=g, gallery_labels=gy, ks=(), mlrc=True, **kw)
    assert res.precision_at_1 == pytest.approx(pml_g["precision_at_1"], abs=1e-6)
    assert res.r_precision == pytest.approx(pml_g["r_precision"], abs=1e-6)
    assert res.map_at_r == pytest.approx(pml_g["mean_average_precision_at_r"], abs=1e-6)


def test_queries_without_positive():
    x = np.array([[0.0], [1.0], [2.5], [10.0]])
    y = np.array([0, 0, 1, 2])  # queries 2 and 3 have no positive
    with pytest.warns(UserWarning, match="2 of 4 queries have no positive"):
        res = retrieval_metrics(x, y, ks=(1, 3), mlrc=True)
    assert res.recall == {1: 0.5, 3: 0.5}  # misses count in the denominator
    assert res.num_queries_with_positive == 2
    assert res.precision_at_1 == 1.0 and res.map_at_r == 1.0  # lone queries left out
    for kw in (dict(mlrc=True), dict(mlrc=False)):  # every path: NaN and a warning
        with pytest.warns(UserWarning, match="no query has a positive"):
            res = retrieval_metrics(x[2:], y[2:], ks=(1,), **kw)
        assert math.isnan(res.recall[1])
    assert math.isnan(res.map_at_r if res.map_at_r is not None else float("nan"))
    with pytest.warns(UserWarning, match="share one label map"):  # gallery labels of another label map
        res = retrieval_metrics(x, y, gallery=x, gallery_labels=y + 10, ks=(1,))
    assert math.isnan(res.recall[1])


def test_k_larger_than_references_warns():
    x = np.array([[0.0], [1.0], [5.0]])
    y = np.array([0, 1, 0])
    with pytest.warns(UserWarning, match="only 2 references"):
        res = recall_at_k(x, y, (1, 1000))
    assert res == {1: 0.0, 1000: 2 / 3}


def test_map_at_r_by_hand():
    # query 0 at 0; others ranked 1 (pos), 2 (neg), 3 (pos), 4 (pos): R = 3, top-3 = [pos, neg, pos]
    x = np.array([[0.0], [1.0], [2.0], [3.0], [4.0]])
    y = np.array([0, 0, 1, 0, 0])
    res = retrieval_metrics(x[:1], y[:1], gallery=x[1:], gallery_labels=y[1:], ks=(1,), mlrc=True)
    assert res.map_at_r == pytest.approx((1 / 1 + 2 / 3) / 3)
    assert res.r_precision == pytest.approx(2 / 3)
    assert res.precision_at_1 == 1.0


def test_evaluate_keys_and_range(rng):
    x, y = clustered(rng, n=120, n_classes=10)
    out = evaluate(x, y, metrics=("recall", "nmi", "mlrc"), ks=(1, 2, 4, 8))
    assert list(out) == ["R@1", "R@2", "R@4", "R@8", "P@1", "RP", "MAP@R", "NMI"]
    assert all(0.0 <= v <= 1.0 for v in out.values())
    only = evaluate(x, y, metrics=("map_at_r",))
    assert list(only) == ["MAP@R"] and only["MAP@R"] == out["MAP@R"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(embeddings=np.zeros((4, 2)), labels=np.zeros(3, dtype=int)), "different lengths"),
        (dict(embeddings=np.zeros(4), labels=np.zeros(4, dtype=int)), "2-D"),
        (dict(embeddings=np.full((4, 2), np.nan), labels=np.zeros(4, dtype=int)), "NaN"),
        (dict(embeddings=np.zeros((4, 2)), labels=np.zeros(4)), "integers"),
        (dict(embeddings=np.zeros((4, 2)), labels=np.zeros(4, dtype=int), ks=(0,)), "positive integer"),
        (dict(embeddings=np.zeros((4, 2)), labels=np.zeros(4, dtype=int), distance="l1"), "valid"),
        (dict(embeddings=np.zeros((4, 2)), labels=np.zeros(4, dtype=int), chunk_size=0), "chunk_size"),
        (dict(embeddings=np.zeros((1, 2)), labels=np.zeros(1, dtype=int)), "at least 2"),
        (
            dict(
                embeddings=np.zeros((4, 2)),
                labels=np.zeros(4, dtype=int),
                gallery=np.zeros((3, 3)),
                gallery_labels=np.zeros(3, dtype=int),
            ),
            "dim",
        ),
        (
            dict(embeddings=np.zeros((4, 2)), labels=np.zeros(4, dtype=int), gallery=np.zeros((3, 2))),
            "without",
        ),
    ],
)
def test_input_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        retrieval_metrics(**kwargs)


def test_evaluate_unknown_metric():
    with pytest.raises(ValueError, match="valid"):
        evaluate(np.zeros((4, 2)), np.zeros(4, dtype=int), metrics=("recal",))


def test_memory_is_bounded_by_chunks(rng, monkeypatch):
    """The distance computation only ever sees chunk_size queries at a time (never N x N)."""
    import dmllab.metrics.evaluator as ev

    shapes = []
    original = ev.distance_keys

    def recording(query, reference, ref_sqnorm):
        out = original(query, reference, ref_sqnorm)
        shapes.append(tuple(out.shape))
        return out

    monkeypatch.setattr(ev, "distance_keys", recording)
    x, y = integer_ties(rng, n=100)
    res = retrieval_metrics(x, y, ks=KS, mlrc=True, chunk_size=16)
    assert shapes and all(b <= 16 and n == 100 for b, n in shapes)
    assert sum(b for b, _ in shapes) == 100
    assert_matches(res, brute_force_metrics(x, y, ks=KS))


def test_evaluate_gallery_cosine(rng):
    q, qy = clustered(rng, n=80, n_classes=10)
    g, gy = clustered(np.random.default_rng(2), n=90, n_classes=10)
    out = evaluate(
        q, qy, metrics=("recall", "mlrc"), ks=(1, 10), gallery=g, gallery_labels=gy, distance="cosine"
    )
    ref = brute_force_metrics(q, qy, g, gy, ks=(1, 10), distance="cosine")
    assert out["R@1"] == pytest.approx(ref["recall"][1]) and out["R@10"] == pytest.approx(ref["recall"][10])
    assert out["MAP@R"] == pytest.approx(ref["MAP@R"], abs=1e-9)
