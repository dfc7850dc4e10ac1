"""The notebook runtime (dmllab.pipeline.notebook), parameter resolution (dmllab.experiments.params) and the
generated notebooks (dmllab.pipeline.template)."""

from __future__ import annotations

import types

import pytest

from dmllab.experiments import Artifact, Claim, Figure
from dmllab.experiments.execution import Execution
from dmllab.experiments.params import resolve_parameters
from dmllab.pipeline import notebook as nbmod
from dmllab.pipeline import template
from dmllab.profiles import PROFILES


def _artifact(**kw) -> Artifact:
    base = dict(
        id="pnpp_fig9_toy",
        paper="pnpp",
        label="Fig. 9",
        title="A toy",
        description="Shows nothing.",
        parameters={
            "smoke": {"seeds": [0], "temperature": 1.0, "steps": 3},
            "quick": {"seeds": [0, 1, 2], "temperature": 0.1, "steps": 300},  # claims: at least 3 seeds
            "paper": {"seeds": [0, 1, 2], "temperature": 0.1, "steps": 3000},
        },
        claims=(Claim("it works", lambda df: None),),
        rows=lambda params, lookup: [],
        figures=(Figure(lambda tables: None),),
    )
    base.update(kw)
    return Artifact(**base)


def test_unknown_parameter_lists_valid_ones():
    art = _artifact()
    with pytest.raises(ValueError) as err:
        resolve_parameters(art, {"profile": "smoke", "seedz": [1]})
    msg = str(err.value)
    assert "unknown parameter 'seedz' for notebook pnpp_fig9_toy" in msg
    for name in ("profile", "seeds", "execution", "manifest", "train_missing", "temperature", "steps"):
        assert name in msg


def test_defaults_fill_none_and_keep_given_values():
    art = _artifact()
    p = resolve_parameters(
        art, {"profile": "quick", "seeds": None, "execution": "device=cpu", "temperature": None, "steps": 7}
    )
    assert p.values == {"profile": "quick", "seeds": [0, 1, 2], "temperature": 0.1, "steps": 7}
    assert p.execution == Execution("cpu") and p.device == "cpu"
    p = resolve_parameters(art, {"profile": "smoke", "seeds": 5})
    assert p["seeds"] == [5] and p["temperature"] == 1.0


def test_bad_profile_and_seeds():
    art = _artifact()
    with pytest.raises(ValueError, match="valid profiles: smoke, quick, paper"):
        resolve_parameters(art, {"profile": "fast"})
    with pytest.raises(ValueError, match="seeds must be"):
        resolve_parameters(art, {"profile": "smoke", "seeds": "0"})
    with pytest.raises(ValueError, match=r"notebook pnpp_fig9_toy: parameter seeds must be .*integer >= 0"):
        resolve_parameters(art, {"profile": "smoke", "seeds": [0, -1]})


def test_parameter_of_the_wrong_type_fails_in_setup():
    art = _artifact()
    with pytest.raises(ValueError, match=r"parameter 'steps' must be of type int .*got 7.5"):
        resolve_parameters(art, {"profile": "smoke", "steps": 7.5})
    with pytest.raises(ValueError, match=r"parameter 'temperature' must be of type float"):
        resolve_parameters(art, {"profile": "smoke", "temperature": "0.1"})
    assert resolve_parameters(art, {"profile": "smoke", "temperature": 1})["temperature"] == 1
    sweep = {p: {"temps": [1.0, 0.5], "epochs": None if p == "smoke" else 2} for p in PROFILES}
    art = _artifact(id="pnpp_fig9_sweep", parameters=sweep)
    with pytest.raises(ValueError, match=r"parameter 'temps' must be of type list .*papermill -y"):
        resolve_parameters(art, {"profile": "quick", "temps": 0.1})
    p = resolve_parameters(art, {"profile": "smoke", "temps": (0.25,), "epochs": 3})
    assert p["temps"] == (0.25,) and p["epochs"] == 3
    assert resolve_parameters(art, {"profile": "smoke", "temps": [1, 0.5]})["temps"] == [
        1,
        0.5,
    ]  # int for float
    with pytest.raises(ValueError, match=r"parameter 'temps' must be a list of float .*element 'a' is str"):
        resolve_parameters(art, {"profile": "quick", "temps": ["a", "b"]})
    with pytest.raises(ValueError, match=r"parameter 'temps' must be a list of float .*element True is bool"):
        resolve_parameters(art, {"profile": "quick", "temps": [1.0, True]})


def test_train_missing_must_be_a_bool(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "res"))
    ns = {"profile": "smoke", "execution": "device=cpu"}
    assert nbmod.setup(ns, "pnpp_fig3_two_moons").train_missing is True  # None: a notebook run by hand trains
    assert nbmod.setup({**ns, "train_missing": False}, "pnpp_fig3_two_moons").train_missing is False
    for bad in ("maybe", 1, "False"):
        with pytest.raises(ValueError, match=r"parameter train_missing must be None or true or false, got"):
            nbmod.setup({**ns, "train_missing": bad}, "pnpp_fig3_two_moons")


def test_the_execution_is_one_text_parameter(tmp_path, monkeypatch):
    """A notebook's ``execution`` is the text of an Execution: the study's prints it, the setup cell parses it back
    to the same value (a folder with a comma included); a misspelt field or value fails there, naming it."""
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "res"))
    study = Execution("cpu", "/data/a,b", fast_dev_run=2, pretrained=False, check_counts=False, threads=1)
    assert (
        str(study)
        == "device=cpu,fast_dev_run=2,pretrained=false,check_counts=false,threads=1,data_root=/data/a,b"
    )
    assert Execution.parse(str(study)) == study and str(Execution()) == "device=auto"
    ns = {"profile": "smoke", "execution": str(study)}
    assert nbmod.setup(ns, "pnpp_fig3_two_moons").params.execution == study
    for text, needle in [
        ("device=cpu,fast_dev_run=-1", "fast_dev_run='-1' is not a count"),
        ("device=cpu,check_counts=no", "check_counts='no' is not true or false"),
        ("devices=cpu", "not NAME=VALUE,... with NAME one of device, data_root"),
        ("device=gpu", "unknown device 'gpu'"),
    ]:
        with pytest.raises(ValueError, match=needle):
            nbmod.setup({**ns, "execution": text}, "pnpp_fig3_two_moons")


def test_user_globals_ignore_kernel_and_modules():
    ns = {
        "__name__": "__main__",
        "_": 1,
        "_i3": "x",
        "In": [],
        "Out": {},
        "get_ipython": lambda: None,
        "exit": object(),
        "quit": object(),
        "np": types.ModuleType("numpy"),
        "helper": lambda x: x,
        "profile": "smoke",
        "seeds": None,
    }
    assert nbmod._user_globals(ns) == {"profile": "smoke", "seeds": None}


def test_artifact_validation():
    with pytest.raises(ValueError, match="unknown paper"):
        _artifact(paper="nope")
    with pytest.raises(ValueError, match="every profile"):
        _artifact(parameters={"quick": {}})
    with pytest.raises(ValueError, match="different parameter keys"):
        _artifact(parameters={"smoke": {"a": 1}, "quick": {"a": 1}, "paper": {"b": 1}})
    with pytest.raises(ValueError, match="standard parameters"):
        _artifact(parameters={p: {"execution": "device=cpu"} for p in PROFILES})
    with pytest.raises(ValueError, match="give its runs, its rows, or both"):
        _artifact(rows=None)
    with pytest.raises(ValueError, match="must read pnpp_<table"):
        _artifact(id="toy")


def test_generated_notebook_shape(tmp_path):
    import nbformat
    import papermill

    art = _artifact()
    path = tmp_path / "pnpp_fig9_toy.ipynb"
    nbformat.write(template.make_notebook(art), path)
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells[:3]] == ["markdown", "code", "code"]
    assert len(nb.cells) == 3 + len(template.body_cells(art))
    assert nb.cells[1].metadata["tags"] == ["parameters"]
    assert "#   smoke: 1 | quick, paper: 0.1" in nb.cells[1].source  # every profile's value
    assert 'nb.setup(globals(), "pnpp_fig9_toy")' in nb.cells[2].source
    assert "it works" in nb.cells[0].source  # the claims judged
    assert set(papermill.inspect_notebook(str(path))) == {*art.parameter_names, "manifest", "train_missing"}
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_setup_runs_in_a_namespace(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "res"))
    monkeypatch.setenv("DMLLAB_FIGURES", str(tmp_path / "fig"))
    name = "pnpp_fig3_two_moons"
    ns = {
        "profile": "smoke",
        "seeds": None,
        "execution": "device=cpu",
        "manifest": None,
        "train_missing": False,
    }
    ctx = nbmod.setup(ns, name)
    assert ctx.csv_path == tmp_path / "res" / "scratch" / "smoke" / f"{name}.csv"  # not the committed profile
    assert ctx.destination.figures == tmp_path / "fig" / "scratch" / "smoke"
    assert ctx.profile == "smoke" and ctx.device == "cpu" and ctx.train_missing is False
    with pytest.raises(
        ValueError, match=f"unknown parameter 'seedz' for notebook {name}; valid parameters: profile"
    ):
        nbmod.setup({**ns, "seedz": 1}, name)
    with pytest.raises(KeyError, match="valid artifacts"):
        nbmod.setup(ns, "no_such_notebook")


def test_stale_notebooks_detects_edits_outputs_and_orphans(tmp_path):
    import nbformat

    paths = template.write_all(tmp_path)
    assert paths and template.stale_notebooks(tmp_path) == []
    nb = nbformat.read(paths[0], as_version=4)
    nb.cells[-1].source += "\nprint('edited by hand')"
    nbformat.write(nb, paths[0])
    assert template.stale_notebooks(tmp_path) == [paths[0].stem]
    template.write_all(tmp_path)
    nb = nbformat.read(paths[1], as_version=4)
    nb.cells[4].outputs = [nbformat.v4.new_output("stream", text="x")]
    nbformat.write(nb, paths[1])
    (tmp_path / "orphan.ipynb").write_text(paths[2].read_text())
    assert template.stale_notebooks(tmp_path) == sorted([paths[1].stem, "orphan"])
