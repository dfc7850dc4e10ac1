"""Bad inputs raise a ValueError that names the problem."""

from __future__ import annotations

import pytest
import torch

import dmllab.losses as L

C, D = 10, 8


def _losses():
    return [
        L.ProxyNCALoss(C, D),
        L.ProxyAnchorLoss(C, D),
        L.SoftmaxLoss(C, D),
        L.ProxySynthesis(L.NormSoftmaxLoss(C, D)),
        L.MultiSimilarityLoss(C, D),
    ]


CASES = [
    (
        "labels out of range",
        torch.randn(4, D),
        torch.tensor([0, 1, 13, 2]),
        r"labels must be in \[0, 10\); got max 13",
    ),
    (
        "negative label",
        torch.randn(4, D),
        torch.tensor([0, -1, 3, 2]),
        r"labels must be in \[0, 10\); got min -1",
    ),
    ("float labels", torch.randn(4, D), torch.tensor([0.0, 1.0, 2.0, 3.0]), "integer"),
    ("labels length", torch.randn(4, D), torch.tensor([0, 1, 2]), "3 entries but embeddings has 4 rows"),
    ("labels 2-d", torch.randn(4, D), torch.zeros(4, 1, dtype=torch.long), "shape"),
    ("dim mismatch", torch.randn(4, D + 3), torch.tensor([0, 1, 2, 3]), "dimension mismatch.*11.*8"),
    ("empty batch", torch.randn(0, D), torch.zeros(0, dtype=torch.long), "empty batch"),
    ("1-d embeddings", torch.randn(D), torch.tensor([0]), "ndim=1"),
    ("int embeddings", torch.ones(4, D, dtype=torch.long), torch.tensor([0, 1, 2, 3]), "floating"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_batches(case):
    _, emb, labels, pattern = case
    for loss in _losses():
        with pytest.raises(ValueError, match=pattern):
            loss(emb, labels)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_embeddings(bad):
    emb = torch.randn(4, D)
    emb[2, 3] = bad
    for loss in _losses():
        with pytest.raises(ValueError, match=r"NaN or inf values \(1 of 4 rows"):
            loss(emb, torch.tensor([0, 1, 2, 3]))


def test_logits_check_dimension():
    with pytest.raises(ValueError, match="dimension mismatch"):
        L.NormSoftmaxLoss(C, D).logits(torch.randn(3, D + 1))


def test_loss_from_proxies_checks_against_given_proxies():
    loss = L.NormSoftmaxLoss(C, D)
    with pytest.raises(ValueError, match=r"\[0, 12\); got max 12"):
        loss.loss_from_proxies(torch.randn(3, D), torch.tensor([0, 12, 1]), torch.randn(12, D))
    with pytest.raises(ValueError, match="no bias"):
        loss.loss_from_proxies(
            torch.randn(3, D), torch.tensor([0, 1, 1]), torch.randn(12, D), bias=torch.zeros(12)
        )
    with pytest.raises(ValueError, match="bias must have shape"):
        L.SoftmaxLoss(C, D).loss_from_proxies(torch.randn(3, D), torch.tensor([0, 1, 1]), torch.randn(12, D))


@pytest.mark.parametrize(
    "build,pattern",
    [
        (lambda: L.ProxyNCALoss(0, D), "num_classes"),
        (lambda: L.ProxyNCALoss(C, -2), "embedding_dim"),
        (lambda: L.ProxyNCALoss(C, D, temperature=0.0), "temperature"),
        (lambda: L.ProxyAnchorLoss(C, D, alpha=-1.0), "alpha"),
        (lambda: L.MarginSoftmaxLoss(C, D, scale=float("nan")), "scale"),
        (lambda: L.MarginSoftmaxLoss.from_preset("normface", C, D), "valid: sphereface, cosface, arcface"),
        (lambda: L.TripletSemiHardLoss(2.5, D), "num_classes"),
    ],
)
def test_bad_constructor_arguments(build, pattern):
    with pytest.raises(ValueError, match=pattern):
        build()


def test_sync_free_turns_value_checks_into_flags():
    """Inside sync_free NaN embeddings and labels out of range are flags read by the caller, not errors (a label
    out of range then fails in the loss's own indexing: on the checks alone here); shape and dtype errors still
    raise at once; outside the block the checks raise again."""
    from dmllab.losses._validate import DeviceChecks, check_batch, sync_free

    emb = torch.randn(4, D)
    emb[1, 0] = float("nan")
    labels = torch.tensor([0, 1, 2, 3])
    for loss in _losses():
        with sync_free(DeviceChecks()) as checks:
            loss(emb, labels)
        assert checks.flags(torch.device("cpu")).tolist() == [1.0, 0.0]
        for bad in ([0, 1, 13, 2], [0, -1, 3, 2]):
            with sync_free(DeviceChecks()) as checks:
                check_batch(torch.randn(4, D), torch.tensor(bad), num_classes=C, embedding_dim=D)
            assert checks.flags(torch.device("cpu")).tolist() == [0.0, 1.0]
        with sync_free(DeviceChecks()) as checks:
            loss(torch.randn(4, D), labels)
        assert checks.flags(torch.device("cpu")).tolist() == [0.0, 0.0]
        with sync_free(DeviceChecks()), pytest.raises(ValueError, match="dimension mismatch"):
            loss(torch.randn(4, D + 1), labels)
        with pytest.raises(ValueError, match="NaN or inf"):
            loss(emb, labels)
