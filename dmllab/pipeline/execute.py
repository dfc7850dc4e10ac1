"""Executing notebooks: a Jupyter kernel of this interpreter (:func:`ensure_kernel`), papermill with kernel-start
retries (:func:`execute_notebook`), the stamps that let an unchanged notebook be skipped (:func:`stamp`), and the
study's notebook and plotting steps (:func:`run_notebooks`, :func:`run_plots`; docs/guide/study.md). Executed
notebooks go to ``results/executed/<profile>/``, each beside its kernel's ``.stderr.log`` and ``.stamp``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.fileio import regular_file, replacing, write_text_atomic
from dmllab.pipeline.executors import LocalExecutor
from dmllab.pipeline.jobs import SKIPPED, Interrupted, JobResult, quiet
from dmllab.pipeline.plan import Plan, manifest_path

KERNEL_NAME = "python3"
_FALLBACK_KERNEL = "dmllab-python"


def _kernel_python(argv0: str) -> str:
    # jupyter_client runs kernels whose argv[0] is a bare "python" with the current interpreter.
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    return sys.executable if argv0 in bare else argv0


def ensure_kernel() -> str:
    """A kernel name whose interpreter is this one: ``python3`` when it is, else a kernelspec written under
    ``<cache>/jupyter``, put first on ``JUPYTER_PATH`` (inherited by the workers' kernels)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
        if os.path.realpath(_kernel_python(spec.argv[0])) == os.path.realpath(sys.executable):
            return KERNEL_NAME
    except NoSuchKernel:
        pass
    root = paths.cache_dir() / "jupyter"
    kdir = root / "kernels" / _FALLBACK_KERNEL
    kdir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.prefix})",
        "language": "python",
    }
    write_text_atomic(kdir / "kernel.json", json.dumps(spec, indent=1))
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("JUPYTER_PATH")]))
    return _FALLBACK_KERNEL


KERNEL_START_TIMEOUT_S = 120
KERNEL_START_ATTEMPTS = 3


def _cells_ran(output: Path) -> bool:
    """Whether any code cell of the (partly) executed notebook at ``output`` started executing."""
    try:
        cells = json.loads(output.read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return any(c.get("cell_type") == "code" and c.get("execution_count") is not None for c in cells)


@contextmanager
def _ipc_sockets() -> Iterator[Any]:
    """The kernel manager's configuration for one execution: Unix sockets in a private temporary folder, not TCP
    (no port collides between parallel kernels, no "TCP without encryption" warning)."""
    import shutil
    import tempfile

    from traitlets.config import Config

    folder = tempfile.mkdtemp(prefix="dmllab-kernel-")
    try:
        yield Config({"KernelManager": {"transport": "ipc", "ip": os.path.join(folder, "ipc")}})
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def execute_notebook(
    notebook: str | os.PathLike,
    output: str | os.PathLike,
    parameters: Mapping[str, Any],
    *,
    kernel_name: str = KERNEL_NAME,
    cwd: str | os.PathLike | None = None,
    start_timeout: float = KERNEL_START_TIMEOUT_S,
    attempts: int = KERNEL_START_ATTEMPTS,
) -> JobResult:
    """Execute one notebook with papermill; a failure is the result's FAILED, never raised. A kernel that does
    not come up within ``start_timeout`` s is relaunched, ``attempts`` launches in all, only while no cell ran."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    quiet()
    notebook, output = Path(notebook), Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for attempt in range(1, attempts + 1):
        try:
            # papermill rewrites its output after every cell, following a link at its path: it writes a temporary
            # file of ours instead, which replaces the output when it ends, failed or not
            with _ipc_sockets() as config, replacing(output, keep_partial=True, suffix=".ipynb") as partial:
                try:
                    papermill.execute_notebook(
                        str(notebook),
                        str(partial),
                        parameters=dict(parameters),
                        kernel_name=kernel_name,
                        progress_bar=False,
                        log_output=False,
                        coalesce_streams=True,  # a progress bar's redraws stored as its last line
                        start_timeout=start_timeout,
                        cwd=str(cwd if cwd is not None else paths.repo_root()),
                        config=config,
                    )
                finally:
                    _record_output_path(partial, output)
        except PapermillExecutionError as err:
            why = f"{err.ename}: {err.evalue}"
            return JobResult(
                notebook.stem, "FAILED", time.perf_counter() - start, why, str(output), err.exec_count
            )
        except Exception as err:  # kernel death, bad notebook JSON, ...: reported, never fatal to the study
            if attempt < attempts and isinstance(err, RuntimeError) and not _cells_ran(output):
                print(
                    f"{notebook.stem}: the kernel did not start ({err}); launching a fresh one "
                    f"(attempt {attempt + 1} of {attempts})",
                    file=sys.stderr,
                )
                continue
            why = f"{type(err).__name__}: {err}" + (
                f" (after {attempt} kernel launches)" if attempt > 1 else ""
            )
            return JobResult(notebook.stem, "FAILED", time.perf_counter() - start, why, str(output))
        return JobResult(notebook.stem, "ok", time.perf_counter() - start, output=str(output))
    raise AssertionError("unreachable")  # pragma: no cover


def _record_output_path(partial: Path, output: Path) -> None:
    """papermill records the path it wrote (the temporary file) in the notebook's metadata: record ``output``."""
    try:
        nb = json.loads(partial.read_text())
        nb["metadata"]["papermill"]["output_path"] = str(output)
    except (OSError, ValueError, KeyError, TypeError):
        return  # nothing written yet, or not papermill's: left as it is
    partial.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class NotebookJob:
    """One notebook to execute in a pool worker: source, executed output, papermill parameters, kernel name."""

    notebook: Path
    output: Path
    parameters: Mapping[str, Any]
    kernel: str

    def __call__(self) -> JobResult:
        # The kernel inherits this worker's stderr: send it (the kernel's own log lines) to a log next to the
        # executed notebook instead of the user's terminal.
        self.output.parent.mkdir(parents=True, exist_ok=True)
        saved = os.dup(2)
        log_path = self.output.with_suffix(".stderr.log")
        with replacing(log_path, keep_partial=True) as partial, open(partial, "w") as log:
            os.dup2(log.fileno(), 2)
            try:
                return execute_notebook(self.notebook, self.output, self.parameters, kernel_name=self.kernel)
            finally:
                os.dup2(saved, 2)
                os.close(saved)


def last_duration(executed: Path) -> float:
    """Seconds the notebook took at its last execution into ``executed`` (papermill's metadata); 0 if unknown."""
    try:
        return float(json.loads(executed.read_text())["metadata"]["papermill"]["duration"] or 0.0)
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def source_fingerprint() -> str:
    """Hash of every source file of the installed dmllab package (any code change re-runs the notebooks)."""
    import hashlib

    import dmllab

    h = hashlib.sha256()
    root = Path(dmllab.__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def stamp(code: str, job: NotebookJob, run_keys: Sequence[str]) -> str:
    """What a notebook's result depends on, hashed: the package's code (:func:`source_fingerprint`), the notebook,
    its parameters and the keys of the runs it reads."""
    import hashlib

    parts = [
        code,
        job.notebook.read_bytes().hex() if job.notebook.exists() else "",
        json.dumps(dict(job.parameters), sort_keys=True, default=str),
        *sorted(run_keys),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def up_to_date(job: NotebookJob, current: str, csv: Path) -> bool:
    """Whether ``job`` last succeeded with the stamp ``current`` and its artifact's CSV ``csv`` still holds the
    bytes it wrote then (:func:`_stamp_text`: a CSV cut to its valid rows, or edited, is not "cached")."""
    mark = job.output.with_suffix(".stamp")
    try:
        return mark.read_text() == _stamp_text(current, csv)
    except (OSError, UnicodeDecodeError):
        return False


def _stamp_text(current: str, csv: Path) -> str:
    """What a stamp file holds: the stamp and the sha256 of the artifact's CSV (OSError when it is missing)."""
    from dmllab.fileio import sha256_file

    return f"{current} {sha256_file(regular_file(csv, 'result CSV'))}"


# ---------------------------------------------------------------------------------------- study steps


def run_notebooks(
    plan: Plan, local: LocalExecutor, nb_dir: Path, out_dir: Path, force: bool
) -> list[JobResult]:
    """Run every artifact notebook whose inputs changed since its last success (all with ``force``), the
    longest first; results in artifact order. Each gets the plan's profile, execution, manifest, the parameters
    :meth:`~dmllab.pipeline.plan.Plan.parameters` and ``train_missing=False``."""
    from dmllab.results import artifact_csv

    kernel = ensure_kernel()
    code = source_fingerprint()
    where = paths.destination(plan.profile, plan.device)
    manifest = str(manifest_path(plan))
    jobs, stamps, skipped = [], {}, []
    for a in plan.artifacts:
        params = {"profile": plan.profile, "execution": str(plan.execution), "manifest": manifest}
        params.update(train_missing=False, **plan.parameters(a))
        job = NotebookJob(nb_dir / f"{a.id}.ipynb", out_dir / f"{a.id}.ipynb", params, kernel)
        stamps[a.id] = stamp(code, job, [r.run.key for r in plan.runs if a.id in r.artifacts])
        if not force and up_to_date(job, stamps[a.id], artifact_csv(a.id, folder=where.results)):
            skipped.append(JobResult(a.id, "ok", 0.0, output=SKIPPED))
        else:
            jobs.append(job)
    from dmllab.pipeline.template import check_parameters_cell

    planned = {a.id: a for a in plan.artifacts}
    for job in jobs:  # before anything runs: a notebook that would not run the plan's parameters is refused
        if job.notebook.exists():  # a missing one fails as its job, as before
            check_parameters_cell(job.notebook, planned[job.notebook.stem])
    jobs.sort(key=lambda j: -last_duration(j.output))
    order = [a.id for a in plan.artifacts]
    try:
        ran = local.map(
            NotebookJob.__call__, jobs, lambda j: j.notebook.stem, desc=f"notebooks ({plan.profile})"
        )
    except Interrupted as stop:
        _write_stamps(stop.finished, out_dir, stamps, where.results)
        finished = sorted(skipped + list(stop.finished), key=lambda r: order.index(r.name))
        raise Interrupted(stop.signum, finished) from None
    _write_stamps(ran, out_dir, stamps, where.results)
    return sorted(skipped + ran, key=lambda r: order.index(r.name))


def _write_stamps(results: Any, out_dir: Path, stamps: Mapping[str, str], folder: Path) -> None:
    from dmllab.results import artifact_csv

    for res in results:
        if res.status == "ok" and not res.cached:
            try:
                text = _stamp_text(stamps[res.name], artifact_csv(res.name, folder=folder))
            except OSError:  # no CSV to stamp: the notebook runs again next time
                continue
            write_text_atomic(out_dir / f"{res.name}.stamp", text)


def run_plots(
    plan: Plan,
    local: LocalExecutor,
    nb_dir: Path,
    out_dir: Path,
    notebooks: Any,
    force: bool,
) -> list[JobResult]:
    """The plotting notebook of every paper whose artifacts' notebooks ran, or whose figures are missing."""
    kernel = ensure_kernel()
    figures = paths.destination(plan.profile, plan.device).figures
    rerun = {a.paper for a in plan.artifacts if any(r.name == a.id and not r.cached for r in notebooks)}
    papers = [
        p for p in dict.fromkeys(a.paper for a in plan.artifacts) if (nb_dir / f"plots_{p}.ipynb").exists()
    ]
    jobs = []
    for p in papers:
        drawn = [figures / f"{a.id}{f.suffix}.png" for a in plan.artifacts if a.paper == p for f in a.figures]
        if force or p in rerun or not all(png.exists() for png in drawn):
            name = f"plots_{p}.ipynb"
            parameters = {"profile": plan.profile, "device": plan.device}
            jobs.append(NotebookJob(nb_dir / name, out_dir / name, parameters, kernel))
    return local.map(NotebookJob.__call__, jobs, lambda j: j.notebook.stem, desc="plots")
