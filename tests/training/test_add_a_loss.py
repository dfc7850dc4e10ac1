"""Adding a loss is one loss module, one registry line and one preset line (docs/guide/library.md, "Adding a
loss"): a loss written in a temporary module trains through the presets, takes ``--set`` overrides by its own
keyword names, is checked by its own constructor, and has a tuning search space, with nothing else edited."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest

from dmllab.losses import LOSSES
from dmllab.training import apply_overrides, presets
from dmllab.training.config import ConfigValueError
from dmllab.training.protocol import run_protocol

LOSS_MODULE = '''
"""A made-up proxy loss for the test: Norm-softmax with an additive margin on the positive logit (a pure function
plus a thin module, as every dmllab loss)."""

import torch
from torch.nn import functional as F

from dmllab.losses import LOSSES, ProxyLoss
from dmllab.training.presets.methods import method, with_loss


def margin_normsoftmax_logits(embeddings, proxies, *, temperature):
    return F.normalize(embeddings, dim=1) @ F.normalize(proxies, dim=1).T / temperature  # (B, C)


def margin_normsoftmax(embeddings, labels, proxies, *, temperature, margin):
    logits = margin_normsoftmax_logits(embeddings, proxies, temperature=temperature)
    return F.cross_entropy(logits - margin / temperature * F.one_hot(labels, proxies.shape[0]), labels)


@LOSSES.register("margin_normsoftmax")  # the registry line
class MarginNormSoftmax(ProxyLoss):
    def __init__(self, num_classes, embedding_dim, *, temperature=0.1, margin=0.1, proxy_init="randn/8"):
        super().__init__(num_classes, embedding_dim, proxy_init=proxy_init)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.temperature, self.margin = float(temperature), float(margin)

    def _loss(self, embeddings, labels, proxies, bias):
        return margin_normsoftmax(embeddings, labels, proxies, temperature=self.temperature, margin=self.margin)

    def _logits(self, embeddings, proxies, bias):
        return margin_normsoftmax_logits(embeddings, proxies, temperature=self.temperature)


@method("margin_normsoftmax", tuned=("margin", "its margin"))  # the preset line
def margin_normsoftmax_preset(cfg, spec):
    return with_loss(cfg, "margin_normsoftmax", margin=0.2)
'''


@pytest.fixture
def new_loss(tmp_path, monkeypatch):
    """The loss module imported from a temporary folder; the registries restored afterwards."""
    monkeypatch.setattr(LOSSES, "_items", dict(LOSSES._items))
    monkeypatch.setattr(presets.METHODS, "_items", dict(presets.METHODS._items))
    path = tmp_path / "my_margin_loss.py"
    path.write_text(textwrap.dedent(LOSS_MODULE))
    spec = importlib.util.spec_from_file_location("my_margin_loss", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "my_margin_loss", module)
    spec.loader.exec_module(module)
    return module


def test_a_new_loss_trains_through_the_presets(new_loss):
    cfg = presets.get("margin_normsoftmax", "synthetic", "smoke")
    assert cfg.loss.name == "margin_normsoftmax" and cfg.loss.kw == {"margin": 0.2}
    result = run_protocol(cfg, progress=False)
    assert 0.0 <= result.metrics["R@1"] <= 1.0 and result.history


def test_its_keywords_are_config_keys_and_its_constructor_checks_them(new_loss):
    cfg = presets.get("margin_normsoftmax", "synthetic", "smoke")
    assert apply_overrides(cfg, ["loss.temperature=0.05"]).loss.kw == {"margin": 0.2, "temperature": 0.05}
    with pytest.raises(ValueError, match=r"takes no keyword 'scale'.*valid: margin, proxy_init, temperature"):
        apply_overrides(cfg, ["loss.scale=2"])
    from dmllab.training.build import check

    with pytest.raises(ConfigValueError, match="loss: temperature must be > 0"):
        check(apply_overrides(cfg, ["loss.temperature=-1"]))


def test_it_can_be_wrapped_by_proxy_synthesis_and_tuned(new_loss):
    from dmllab.losses import ProxySynthesis, build_loss
    from dmllab.pipeline.tune import search_space
    from dmllab.spec import Spec

    wrapped = build_loss(
        Spec("proxy_synthesis", wraps=Spec("margin_normsoftmax")), num_classes=4, embedding_dim=8
    )
    assert isinstance(wrapped, ProxySynthesis) and isinstance(wrapped.base, new_loss.MarginNormSoftmax)
    space = search_space("margin_normsoftmax", "synthetic", "smoke")
    assert [d.name for d in space.dims][-1] == "loss_margin" and space.dims[-1].centre == 0.2


def test_on_quick_it_runs_untuned_and_says_so_first(new_loss, monkeypatch, capsys):
    """The new method has no tuned quick recipe: ``dmllab train`` says so on its first line, naming the command
    that tunes it, while a tuned method's run starts with its description."""
    import dmllab.training
    from dmllab.cli import main
    from dmllab.training.presets.tuned import untuned

    def stop(*args, **kwargs):
        raise ValueError("not trained in this test")

    monkeypatch.setattr(dmllab.training, "run", stop)
    for method, first in (("margin_normsoftmax", "UNTUNED: "), ("proxynca++", "proxynca++ ")):
        assert main(["train", "--method", method, "--dataset", "synthetic", "--profile", "quick"]) == 2
        assert capsys.readouterr().out.splitlines()[0].startswith(first)
    line = untuned(presets.get("margin_normsoftmax", "synthetic", "quick"))
    assert "`dmllab tune --profile quick --methods margin_normsoftmax`" in line
    assert untuned(presets.get("margin_normsoftmax", "synthetic", "smoke")) is None  # smoke reads no recipes
