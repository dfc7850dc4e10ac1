"""Run the notebooks in batch with papermill: ``dmllab study``.

Each notebook runs in its own worker process (and papermill starts a kernel per notebook), several at a
time, each with ``OMP_NUM_THREADS = cores // jobs`` so that parallel jobs do not over-subscribe the CPU.
Executed copies go to ``results/executed/<profile>/`` (not in git). A failing notebook does not stop the
others; the summary names the failing cell's error. Finished training runs are reused from the run store by
the notebooks themselves (``dmllab.training``), so a re-run only computes what is missing.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.pipeline.artifacts import PROFILES

KERNEL_NAME = "python3"
_FALLBACK_KERNEL = "dmllab-python"


@dataclass(frozen=True)
class NotebookResult:
    """Outcome of one executed notebook."""

    name: str
    status: str  # "ok" | "FAILED"
    wall_s: float
    output: Path | None = None
    error: str = ""  # "ename: evalue" of the failing cell
    cell: int | None = None  # index of the failing cell


def discover(directory: str | os.PathLike | None = None) -> list[Path]:
    """The notebooks of ``directory`` (default ``notebooks/``), sorted; names starting with ``_`` are templates."""
    from dmllab.pipeline.notebook import notebooks_dir

    directory = Path(directory) if directory is not None else notebooks_dir()
    return sorted(p for p in directory.glob("*.ipynb") if not p.name.startswith("_"))


def select(notebooks: Sequence[Path], only: str | None) -> list[Path]:
    """Keep the notebooks whose stem matches ``only``: comma-separated glob patterns or substrings.

    Raises:
        ValueError: nothing matches; the message lists the available notebooks.
    """
    if not only:
        return list(notebooks)
    patterns = [p.strip() for p in only.split(",") if p.strip()]

    def matches(stem: str) -> bool:
        return any(fnmatch.fnmatch(stem, p) if any(ch in p for ch in "*?[") else p in stem for p in patterns)

    chosen = [nb for nb in notebooks if matches(nb.stem)]
    if not chosen:
        names = ", ".join(nb.stem for nb in notebooks) or "(none)"
        raise ValueError(f"--only {only!r} matches no notebook; notebooks: {names}")
    return chosen


def check_parameters(notebook: Path, parameters: Mapping[str, Any]) -> None:
    """Raise ValueError when ``parameters`` holds a name the notebook's parameters cell does not define."""
    import papermill

    declared = papermill.inspect_notebook(str(notebook))
    if not declared:
        raise ValueError(f"{notebook.name} has no cell tagged 'parameters'")
    unknown = sorted(set(parameters) - set(declared))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for notebook {notebook.stem}; valid parameters: {', '.join(declared)}"
        )


def _kernel_python(argv0: str) -> str:
    # jupyter_client runs kernels whose argv[0] is a bare "python" with the current interpreter.
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    return sys.executable if argv0 in bare else argv0


def ensure_kernel() -> str:
    """Return a kernel name whose interpreter is this one (so notebooks see the same dmllab and packages).

    ``python3`` is used when it resolves to ``sys.executable`` (true for a virtual environment with
    ipykernel); otherwise a kernelspec for this interpreter is written under ``<cache>/jupyter`` and put first
    on ``JUPYTER_PATH`` (also for the kernels of the worker processes, which inherit the environment).
    """
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
    (kdir / "kernel.json").write_text(json.dumps(spec, indent=1))
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("JUPYTER_PATH")]))
    return _FALLBACK_KERNEL


def execute_notebook(
    notebook: str | os.PathLike,
    output: str | os.PathLike,
    parameters: Mapping[str, Any],
    *,
    kernel_name: str = KERNEL_NAME,
    threads: int | None = None,
    cwd: str | os.PathLike | None = None,
) -> NotebookResult:
    """Execute one notebook with papermill; never raises for a failing cell (the result says FAILED).

    Args:
        notebook: the source notebook.
        output: where the executed copy goes (written also when a cell fails).
        parameters: injected after the ``parameters`` cell.
        kernel_name: from :func:`ensure_kernel`.
        threads: ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` for the kernel (inherited through the environment).
        cwd: working directory of the kernel (default: the repository root).
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    notebook, output = Path(notebook), Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(notebook),
            str(output),
            parameters=dict(parameters),
            kernel_name=kernel_name,
            progress_bar=False,
            log_output=False,
            cwd=str(cwd if cwd is not None else paths.repo_root()),
        )
    except PapermillExecutionError as err:
        return NotebookResult(
            notebook.stem,
            "FAILED",
            time.perf_counter() - start,
            output,
            f"{err.ename}: {err.evalue}",
            err.exec_count,
        )
    except Exception as err:  # kernel death, bad notebook JSON, ...: reported, never fatal to the study
        return NotebookResult(
            notebook.stem, "FAILED", time.perf_counter() - start, output, f"{type(err).__name__}: {err}"
        )
    return NotebookResult(notebook.stem, "ok", time.perf_counter() - start, output)


def study_parameters(
    profile: str, *, data_root: str | None = None, device: str | None = None
) -> dict[str, Any]:
    """The parameters ``dmllab study`` injects into every notebook."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    params: dict[str, Any] = {"profile": profile}
    if data_root is not None:
        params["data_root"] = str(data_root)
    if device is not None:
        params["device"] = device
    return params


def run_study(
    profile: str = "quick",
    *,
    only: str | None = None,
    jobs: int = 1,
    data_root: str | None = None,
    device: str | None = None,
    notebooks: str | os.PathLike | None = None,
    executed_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> list[NotebookResult]:
    """Execute the selected notebooks, ``jobs`` at a time; return one result per notebook (in name order).

    Raises:
        ValueError: an unknown profile, or ``only`` matching nothing (listing the notebooks).
    """
    from tqdm.auto import tqdm

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    params = study_parameters(profile, data_root=data_root, device=device)
    chosen = select(discover(notebooks), only)
    out_dir = Path(executed_dir) if executed_dir is not None else paths.results_dir() / "executed" / profile
    kernel = ensure_kernel()
    threads = max(1, (os.cpu_count() or 1) // jobs)
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # an explicit user limit is kept
        threads = max(1, min(threads, int(os.environ["OMP_NUM_THREADS"])))

    results: dict[str, NotebookResult] = {}
    runnable = []
    for nb in chosen:
        try:
            check_parameters(nb, params)
        except ValueError as err:
            results[nb.stem] = NotebookResult(nb.stem, "FAILED", 0.0, None, f"ValueError: {err}")
        else:
            runnable.append(nb)

    bar = tqdm(total=len(chosen), desc=f"study ({profile})", unit="notebook", disable=not progress)
    bar.update(len(results))
    # Spawned workers: a fresh interpreter per job, so nothing (threads, torch state) leaks from the parent.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {
            pool.submit(
                execute_notebook, nb, out_dir / nb.name, params, kernel_name=kernel, threads=threads
            ): nb
            for nb in runnable
        }
        for fut in as_completed(futures):
            try:
                res = fut.result()
            except Exception as err:  # the worker process died (killed, out of memory): report, go on
                nb = futures[fut]
                res = NotebookResult(
                    nb.stem,
                    "FAILED",
                    0.0,
                    out_dir / nb.name,
                    f"worker process failed: {type(err).__name__}: {err}",
                )
            results[res.name] = res
            bar.set_postfix_str(f"{res.name}: {res.status}")
            bar.update(1)
    bar.close()
    return [results[nb.stem] for nb in chosen]


def format_summary(results: Sequence[NotebookResult]) -> str:
    """A plain-text table (notebook, status, wall time) followed by the failing cells' errors."""
    width = max([len("notebook")] + [len(r.name) for r in results])
    lines = [f"{'notebook':<{width}}  {'status':<6}  {'wall':>8}", f"{'-' * width}  ------  --------"]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status:<6}  {r.wall_s:>7.1f}s")
    total = sum(r.wall_s for r in results)
    failed = [r for r in results if r.status != "ok"]
    lines.append(f"{len(results) - len(failed)} ok, {len(failed)} failed; notebook time {total:.1f}s")
    for r in failed:
        where = f" (cell {r.cell})" if r.cell is not None else ""
        lines.append(f"\nFAILED {r.name}{where}: {r.error}")
        if r.output is not None:
            lines.append(f"  executed copy: {r.output}")
    return "\n".join(lines)
