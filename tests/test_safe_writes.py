"""Every file dmllab writes is written one way (:func:`dmllab.fileio.replacing`): a temporary file of a random name
next to it, renamed over it. A link planted at an output path is replaced, never written through; its target stays
as it was. And a file dmllab reads must be a regular file: a FIFO, a device, a folder or a dangling link is a named
error, never a hang."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dmllab import fileio, results

SECRET = b"the user's file, which no write of dmllab may touch\n"


@pytest.fixture
def victim(tmp_path):
    target = tmp_path / "outside" / "victim.txt"
    target.parent.mkdir()
    target.write_bytes(SECRET)
    return target


def _plant(path: Path, target: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def _untouched(path: Path, target: Path) -> None:
    assert target.read_bytes() == SECRET, f"{target} was written through the link at {path}"
    assert path.is_file() and not path.is_symlink(), f"{path} is still the planted link"
    leftovers = [p.name for p in path.parent.iterdir() if ".tmp" in p.name]
    assert leftovers == [], f"temporary files left: {leftovers}"


def test_write_atomic_replaces_a_link_and_compares_nothing_through_it(tmp_path, victim):
    path = _plant(tmp_path / "out" / "a.txt", victim)
    assert fileio.write_atomic(path, SECRET) is True  # equal bytes behind a link: still replaced, not skipped
    _untouched(path, victim)


@pytest.mark.parametrize("keep_partial", [False, True])
def test_replacing_keeps_the_old_file_or_the_partial_one_on_failure(tmp_path, victim, keep_partial):
    path = _plant(tmp_path / "out" / "a.log", victim)
    with pytest.raises(RuntimeError), fileio.replacing(path, keep_partial=keep_partial) as tmp:
        with open(
            tmp, "w"
        ) as fh:  # an ordinary writer that follows links: it only ever sees the temporary file
            fh.write("half")
        raise RuntimeError("the writer failed")
    assert victim.read_bytes() == SECRET
    if keep_partial:
        assert path.read_text() == "half" and not path.is_symlink()
    else:
        assert path.is_symlink()  # nothing replaced
    assert [p.name for p in path.parent.iterdir() if ".tmp" in p.name] == []


def test_a_temporary_name_is_never_one_a_link_was_planted_at(tmp_path, victim, monkeypatch):
    """The temporary file is created with O_EXCL | O_NOFOLLOW: a planted link at a guessed name is an error, not a
    write through it."""
    import uuid

    path = tmp_path / "a.txt"
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=0))
    _plant(path.parent / f".a.txt.{os.getpid()}.{'0' * 12}.tmp", victim)
    with pytest.raises(FileExistsError):
        fileio.write_atomic(path, b"x")
    assert victim.read_bytes() == SECRET


def test_result_csv_checkpoint_sidecar_and_run_folder_replace_links(tmp_path, victim):
    from dmllab.training.protocol import save_atomic

    csv = _plant(tmp_path / "results" / "a.csv", victim)
    row = {
        "experiment": "a",
        "paper": "p",
        "artifact": "t",
        "profile": "smoke",
        "metric": "R@1",
        "value": 50.0,
    }
    with pytest.raises(
        ValueError, match="lacks the column"
    ):  # the link's target is read as the old rows: refused
        results.write_rows(csv, [row])
    assert victim.read_bytes() == SECRET and csv.is_symlink()
    dangling = _plant(tmp_path / "results" / "b.csv", tmp_path / "nowhere" / "b.csv")
    results.write_rows(dangling, [row], mode="replace")
    assert dangling.is_file() and not dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    ckpt = _plant(tmp_path / "ck" / "final.pt", victim)
    _plant(tmp_path / "ck" / "final.pt.sha256", victim)
    save_atomic({"w": 1}, ckpt)
    _untouched(ckpt, victim)
    _untouched(fileio.sidecar(ckpt), victim)


def test_a_run_folder_and_a_divergence_record_replace_links(tmp_path, victim):
    from dmllab.training import RunStore, presets
    from dmllab.training.config import config_hash
    from dmllab.training.protocol import RunResult

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    store = RunStore(tmp_path / "runs")
    run = store.run_dir(cfg, 0)
    _plant(run / "diverged.json", victim)
    store.save_diverged(cfg, 0, FloatingPointError("loss is NaN"), 1.0)
    _untouched(run / "diverged.json", victim)
    result = RunResult({"R@1": 0.5}, [{"epoch": 1, "loss": 1.0}], 1, [], 2.0, config_hash(cfg), 0, "cpu")
    final = store.save(cfg, 0, result)
    assert victim.read_bytes() == SECRET and json.loads((final / "metrics.json").read_text())["seed"] == 0


def test_executed_notebook_its_log_and_its_stamp_replace_links(tmp_path, victim, monkeypatch):
    """What ``dmllab study`` writes under results/executed/<profile>/: papermill's output (rewritten after every
    cell by a writer that follows links), the kernel's stderr log and the stamp."""
    import papermill

    from dmllab.pipeline import execute

    out = tmp_path / "executed" / "smoke" / "a.ipynb"
    for path in (out, out.with_suffix(".stderr.log"), out.with_suffix(".stamp")):
        _plant(path, victim)

    def fake(inp, output, **kwargs):  # open(..., "w"): follows links; papermill records the path it wrote
        Path(output).write_text(json.dumps({"cells": [], "metadata": {"papermill": {"output_path": output}}}))
        os.write(2, b"kernel says hello\n")

    monkeypatch.setattr(papermill, "execute_notebook", fake)
    res = execute.NotebookJob(tmp_path / "a.ipynb", out, {}, "python3")()
    assert res.status == "ok"
    _untouched(out, victim)
    assert json.loads(out.read_text())["metadata"]["papermill"]["output_path"] == str(
        out
    )  # not the temporary
    _untouched(out.with_suffix(".stderr.log"), victim)
    assert b"kernel says hello" in out.with_suffix(".stderr.log").read_bytes()
    csv = tmp_path / "results" / "a.csv"
    csv.parent.mkdir()
    csv.write_text("x\n")
    from dmllab.pipeline.jobs import JobResult

    execute._write_stamps([JobResult("a", "ok", 1.0, output=str(out))], out.parent, {"a": "s"}, csv.parent)
    _untouched(out.with_suffix(".stamp"), victim)


def test_a_stamp_covers_the_csv_bytes(tmp_path):
    """A CSV cut to its valid rows (or edited) after the notebook succeeded is not "cached": the stamp records
    its checksum."""
    from dmllab.pipeline import execute
    from dmllab.pipeline.jobs import JobResult

    out = tmp_path / "executed" / "a.ipynb"
    out.parent.mkdir()
    csv = tmp_path / "a.csv"
    csv.write_text("h\n1\n2\n")
    execute._write_stamps([JobResult("a", "ok", 1.0, output=str(out))], out.parent, {"a": "s"}, tmp_path)
    job = execute.NotebookJob(tmp_path / "a.ipynb", out, {}, "python3")
    assert execute.up_to_date(job, "s", csv)
    assert not execute.up_to_date(job, "other", csv)
    csv.write_text("h\n1\n")
    assert not execute.up_to_date(job, "s", csv)
    csv.unlink()
    assert not execute.up_to_date(job, "s", csv)


def test_the_kernels_stderr_log_follows_no_link_even_on_failure(tmp_path, victim, monkeypatch):
    import papermill

    from dmllab.pipeline import execute

    out = tmp_path / "a.ipynb"
    _plant(out.with_suffix(".stderr.log"), victim)

    def fake(inp, output, **kwargs):
        os.write(2, b"Traceback: boom\n")
        raise OSError("no kernel")

    monkeypatch.setattr(papermill, "execute_notebook", fake)
    res = execute.NotebookJob(tmp_path / "a.ipynb", out, {}, "python3")()
    assert res.status == "FAILED"
    _untouched(out.with_suffix(".stderr.log"), victim)
    assert b"boom" in out.with_suffix(".stderr.log").read_bytes()


@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "dangling"])
def test_a_file_read_must_be_a_regular_file(tmp_path, kind):
    path = tmp_path / "x.csv"
    if kind == "fifo":
        os.mkfifo(path)
        words = "a FIFO"
    elif kind == "device":
        path = Path("/dev/zero")
        words = "a character device"
    elif kind == "folder":
        path.mkdir()
        words = "a folder"
    else:
        path.symlink_to(tmp_path / "gone.csv")
        words = "a dangling link"
    with pytest.raises(OSError) as err:
        fileio.regular_file(path, "result file")
    assert words in str(err.value) and str(path) in str(err.value)
    assert fileio.regular_file(Path(__file__)) == Path(__file__)


# ------------------------------------------------------------------------- a notebook edited against the plan
def _notebook(tmp_path, change=None):
    import nbformat

    from dmllab.experiments import registry
    from dmllab.pipeline.template import make_notebook

    artifact = registry.get("pnpp_fig3_two_moons")
    nb = make_notebook(artifact)
    if change is not None:
        change(nb)
    path = tmp_path / f"{artifact.id}.ipynb"
    nbformat.write(nb, str(path))
    return path, artifact


def _untag(nb):
    for cell in nb.cells:
        cell.metadata.pop("tags", None)


def _edit_seeds(nb):
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", ()))
    cell.source = cell.source.replace("seeds = None", "seeds = [0]")


@pytest.mark.parametrize(
    "change, words",
    [
        (_untag, "no cell tagged 'parameters'"),
        (_edit_seeds, "parameters cell was edited (line 3: 'seeds = [0]"),
    ],
)
def test_a_notebook_whose_parameters_cell_is_lost_or_edited_is_refused(tmp_path, change, words):
    from dmllab.pipeline.template import check_parameters_cell

    path, artifact = _notebook(tmp_path)
    check_parameters_cell(path, artifact)  # the generated notebook passes
    path, artifact = _notebook(tmp_path, change)
    with pytest.raises(ValueError) as err:
        check_parameters_cell(path, artifact)
    assert words in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_study_refuses_an_edited_notebook_before_anything_runs(tmp_path, monkeypatch):
    from dmllab.experiments.execution import Execution
    from dmllab.pipeline import execute
    from dmllab.pipeline.executors import LocalExecutor

    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    _notebook(nb_dir, _edit_seeds)
    ran = []
    monkeypatch.setattr(LocalExecutor, "map", lambda self, fn, items, name, desc: ran.extend(items) or [])
    monkeypatch.setattr(execute, "ensure_kernel", lambda: "python3")
    from dmllab.experiments import registry
    from dmllab.pipeline.plan import make_plan

    plan = make_plan(registry.select("pnpp_fig3_two_moons"), "smoke", Execution(device="cpu"))
    with pytest.raises(ValueError, match="parameters cell was edited"):
        execute.run_notebooks(plan, LocalExecutor(1), nb_dir, tmp_path / "executed", force=True)
    assert ran == []


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_weights_or_checkpoint_path_that_is_a_stream_says_why_not(tmp_path, kind):
    from dmllab.models.weights import read_state_dict
    from dmllab.training.checkpoint import load_checkpoint

    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "weights.pth"
        os.mkfifo(path)
    with pytest.raises(fileio.NotRegularFileError, match="needs a file it can seek in"):
        read_state_dict(path)  # never a hang on the FIFO, never "does not exist"
    with pytest.raises(fileio.NotRegularFileError, match="read from a file it can seek in"):
        load_checkpoint(path)


@pytest.mark.parametrize("append", [False, True])
def test_a_partial_download_never_writes_through_a_link(tmp_path, victim, append):
    from dmllab.data.download import _open_part

    part = _plant(tmp_path / "downloads" / "CUB_200_2011.tgz.part", victim)
    with pytest.raises(OSError) as err:
        _open_part(part, append=append)
    assert err.value.filename == str(part) and victim.read_bytes() == SECRET
