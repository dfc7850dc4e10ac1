"""NMI against a direct scikit-learn call, and embed_dataset."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dmllab.metrics import embed_dataset, nmi


def test_nmi_matches_direct_sklearn(rng):
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    labels = rng.integers(0, 6, 150)
    x = rng.normal(size=(6, 5))[labels] * 2 + rng.normal(size=(150, 5))
    pred = KMeans(n_clusters=6, n_init=10, random_state=3).fit_predict(x)
    expected = normalized_mutual_info_score(labels, pred, average_method="geometric")
    assert nmi(torch.from_numpy(x).float(), torch.from_numpy(labels), seed=3) == pytest.approx(
        expected, abs=1e-6
    )
    # geometric differs from sklearn's default (arithmetic) in general; the value is in [0, 1]
    assert 0.0 <= nmi(x, labels, seed=3) <= 1.0


def test_nmi_extremes(rng):
    labels = np.repeat(np.arange(4), 20)
    separated = np.eye(4)[labels] * 100 + rng.normal(size=(80, 4)) * 0.01
    assert nmi(separated, labels) == pytest.approx(1.0)
    assert nmi(separated, labels, n_clusters=1) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="n_clusters"):
        nmi(separated, labels, n_clusters=81)


class _Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.BatchNorm1d(8), nn.Dropout(0.5))

    def forward(self, x):
        return self.net(x).double()  # embed_dataset must return float32 whatever the model returns


@pytest.mark.parametrize("was_training", [True, False])
def test_embed_dataset(was_training):
    torch.manual_seed(0)
    model = _Toy().train(was_training)
    data = [(torch.randn(5, 3, 2, 2), torch.arange(5) + 5 * i) for i in range(3)]
    emb, lab = embed_dataset(model, data, "cpu")
    assert emb.shape == (15, 8) and emb.dtype == torch.float32 and not emb.requires_grad
    assert lab.dtype == torch.long and lab.tolist() == list(range(15))
    assert model.training is was_training
    model.eval()
    with torch.no_grad():
        expected = torch.cat([model(x) for x, _ in data]).float()
    torch.testing.assert_close(emb, expected)  # eval mode: BN running stats, no dropout
    emb_amp, _ = embed_dataset(model.train(was_training), data, "cpu", amp=True)
    torch.testing.assert_close(emb_amp, expected, atol=5e-2, rtol=5e-2)


def test_embed_dataset_restores_mode_on_error():
    model = _Toy().train()
    with pytest.raises(ValueError, match="inputs, labels"):
        embed_dataset(model, [torch.zeros(2, 3, 2, 2)], "cpu")
    assert model.training
    with pytest.raises(ValueError, match="no batches"):
        embed_dataset(model, [], "cpu")
