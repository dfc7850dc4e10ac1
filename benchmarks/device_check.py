"""One command for the ten minutes of an H100/H200 that a session may be lent: every GPU measurement the study's
plan needs, each part a child process under its own time limit, the rows into ``results/benchmarks/``, and one
screen saying what each number means for the plan.

Parts (the first four are ``benchmarks/bench_gpu.py``'s, whose docstring defines each measure):

1. ``model``: the model step and the evaluation forward pass of every (backbone, crop, batch) the paper plan
   trains, in fp32 and in bf16 (``--settings plan --precisions both``): the GoogLeNet and Inception-v3 rows the
   cost model lacks among them.
2. ``pipeline``: the paper profile's loader alone (1 worker and ``num_workers=auto``) and whole epochs end to end,
   at steady state (``--steps`` batches of the largest batch per epoch).
3. ``syncs``: host syncs per training step under ``torch.cuda.set_sync_debug_mode``.
4. ``quick``: the quick preset's run on the device (cold, then warm) and 1 and 4 runs sharing it.
5. ``study``: a short quick study (``--only`` one artifact) placed by ``--device auto --jobs auto`` with this
   check's rates, its placement line (the GPU's time against the CPU pool's) and its wall time per run.
6. ``fastdev``: the paper fast dev run of ``pnpp_appd_googlenet`` (GoogLeNet at the paper's crops, the real data
   path) on a fake CUB with images at CUB's size, random initialisation.

The rows of parts 1-4 replace the same (benchmark, setting, metric) rows of ``results/benchmarks/gpu.csv`` (the
cost model's calibration; the other rows are kept), parts 5-6 go to ``results/benchmarks/device_check.csv``;
then the paper plan is priced again with the new calibration. ``--dry`` runs every part at toy size on the CPU
(the smoke profile, tiny images, the fast dev run's plan only) into a temporary folder: the script is known to run
before a device is ever lent (a test runs it).

    python benchmarks/device_check.py                 # on the GPU machine: about 10 minutes
    python benchmarks/device_check.py --dry           # on any machine: seconds, writes nothing committed
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))
from bench_gpu import COLUMNS  # noqa: E402  (its rows merge into gpu.csv: one column list)

#: The targets the summary checks (what the GPU path was built for).
LOADER_TARGET = 4000.0  # img/s of the paper profile's loader at num_workers=auto
END_TO_END_TARGET = 0.90  # whole epochs' rate over the model step's
QUICK_STUDY_TARGET_S = 15 * 60.0
STUDY_ARTIFACT = "pnpp_fig4b_kmax"
FASTDEV_ARTIFACT = "pnpp_appd_googlenet"
DRY_PRICED = (
    "pa_fig11_tsne"  # --dry prices this artifact's plan only (ResNet-50 runs: priced by the committed rows)
)


@dataclass(frozen=True)
class Part:
    name: str
    limit_s: int  # the child's time limit on the device (--dry: DRY_LIMIT_S)
    what: str


PARTS = (
    Part("model", 170, "model step + forward pass of every paper setting, fp32 and bf16"),
    Part("pipeline", 110, "loader alone and end to end, steady state"),
    Part("syncs", 60, "host syncs per step"),
    Part("quick", 90, "quick run on the device, 1 and 4 sharing it"),
    Part("study", 100, f"quick study subset ({STUDY_ARTIFACT}) by --device auto"),
    Part("fastdev", 60, f"paper fast dev run ({FASTDEV_ARTIFACT}) on a fake CUB at CUB's image size"),
)
DRY_LIMIT_S = 300  # a loaded 2-core machine; idle, the whole --dry takes well under a minute


#: bench_gpu.py's options of each part on the device.
BENCH_GPU_ARGS = {
    "model": ["--only", "model_step", "--only", "embed", "--settings", "plan", "--precisions", "both",
              "--steps", "30"],
    "pipeline": ["--only", "loader", "--only", "end_to_end", "--steps", "150"],
    "syncs": ["--only", "syncs", "--steps", "20"],
    "quick": ["--only", "quick_run", "--only", "quick_workers", "--quick-seeds", "2", "--gpu-workers", "1,4"],
}  # fmt: skip
#: ``--dry``: every bench_gpu.py part at once at its smoke size on the CPU (one cold quick run, no workers).
DRY_BENCH_GPU_ARGS = ["--device", "cpu", "--smoke", "--quick-seeds", "1", "--only", "model_step", "--only", "embed",
                      "--only", "loader", "--only", "end_to_end", "--only", "syncs", "--only", "quick_run"]  # fmt: skip


def _bench_gpu(options: list[str], out: Path) -> list[str]:
    return [sys.executable, str(BENCH / "bench_gpu.py"), *options, "--out", str(out)]


def _run(cmd: list[str], limit_s: int, env: dict[str, str], log: Path) -> tuple[int, float]:
    """Run ``cmd`` with its output into ``log``; (exit status, 124 past ``limit_s``; wall seconds)."""
    t0 = time.perf_counter()
    with log.open("w") as fh:
        fh.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
        )
        try:
            code = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            code = 124
    return code, time.perf_counter() - t0


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def merge_calibration(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` calibration rows without those ``new`` measures again (same benchmark, setting, metric), then
    ``new``."""
    again = {(r["benchmark"], r["setting"], r["metric"]) for r in new}
    return [r for r in old if (r["benchmark"], r["setting"], r["metric"]) not in again] + list(new)


def write_rows(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


class Check:
    """One device check: its working folder, environment and the rows of parts 5-6."""

    def __init__(self, work: Path, dry: bool, device: str) -> None:
        self.work, self.dry, self.device = work, dry, device
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                    "DMLLAB_RESULTS": str(work / "results"), "DMLLAB_FIGURES": str(work / "figures"),
                    "DMLLAB_CACHE": str(work / "cache"), "TORCH_HOME": str(work / "torch"),
                    "PYTHONWARNINGS": "ignore"}  # fmt: skip
        self.rows: list[dict] = []
        self.status: dict[str, str] = {}
        self.stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def add(self, bench: str, setting: str, metric: str, value: float, unit: str, command: str) -> None:
        import torch

        self.rows.append(dict(benchmark=bench, setting=setting, metric=metric, value=f"{value:.4f}", unit=unit,
                              device=self.device, torch_version=torch.__version__, command=command,
                              timestamp=self.stamp))  # fmt: skip

    def run(self, part: Part, cmd: list[str]) -> str:
        """Run one part's command; its log's text (the status says how it ended)."""
        log = self.work / f"{part.name}.log"
        code, wall = _run(cmd, DRY_LIMIT_S if self.dry else part.limit_s, self.env, log)
        self.status[part.name] = (
            f"{'ok' if code == 0 else 'timed out' if code == 124 else f'exit {code}'} ({wall:.0f} s)"
        )
        print(f"{part.name:>8}: {self.status[part.name]}  {part.what}  [log {log}]", flush=True)
        return log.read_text(errors="replace")

    def dmllab(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "dmllab.cli", *args]

    def study(self, part: Part, calibration: Path) -> None:
        """A short quick study placed by --device auto: its placement line, wall time and runs."""
        profile = "smoke" if self.dry else "quick"
        args = ["study", "--profile", profile, "--only", STUDY_ARTIFACT, "--device", "auto", "--jobs", "auto",
                "--calibration", str(calibration), "--no-progress"]  # fmt: skip
        if self.dry:
            args.append("--plan")  # the placement only: a study's notebooks and report take minutes on a CPU
        t0 = time.perf_counter()
        log = self.run(part, self.dmllab(*args))
        wall = time.perf_counter() - t0
        trained = re.search(r"(\d+) trained", log)
        placement = re.search(r"^placement: .*$", log, re.M)
        self.placement = placement.group(0) if placement else "placement: (not printed)"
        command = "dmllab " + " ".join(a for a in args if a not in ("--no-progress", str(calibration)))
        if not self.dry:
            self.add("study_subset", f"{profile}_{STUDY_ARTIFACT}", "wall_s", wall, "s", command)
        if trained and int(trained.group(1)) and not self.dry:
            self.add("study_subset", f"{profile}_{STUDY_ARTIFACT}", "s_per_run", wall / int(trained.group(1)), "s",
                     command)  # fmt: skip

    def fastdev(self, part: Part) -> None:
        """The paper fast dev run of one GoogLeNet artifact on a fake CUB at CUB's image size."""
        sys.path.insert(0, str(BENCH))
        from bench_gpu import make_fake_cub

        root = self.work / "D"
        make_fake_cub(root / "cub", 4, size=(64, 48) if self.dry else (500, 375))
        args = ["study", "--profile", "paper", "--data-root", str(root), "--fast-dev-run", "--pretrained", "none",
                "--no-counts", "--only", FASTDEV_ARTIFACT, "--device", self.device_arg(), "--no-progress"]  # fmt: skip
        if self.dry:
            args.append("--plan")  # a GoogLeNet at 227 px trains for minutes on a CPU: the plan only
        t0 = time.perf_counter()
        log = self.run(part, self.dmllab(*args))
        if self.status[part.name].startswith("ok") and not self.dry:
            self.add("fast_dev_run", f"paper_{FASTDEV_ARTIFACT}_500px", "wall_s", time.perf_counter() - t0, "s",
                     "dmllab " + " ".join(args))  # fmt: skip
        self.fastdev_ready = "READY" in log

    def device_arg(self) -> str:
        return "cpu" if self.dry else "cuda"


def _values(rows: list[dict], bench: str, metric: str) -> dict[str, float]:
    return {
        r["setting"]: float(r["value"]) for r in rows if r["benchmark"] == bench and r["metric"] == metric
    }


def _committed_quick_runs() -> int:
    """The quick study's runs, as the committed study benchmark counted them (results/benchmarks/study.csv)."""
    rows = [
        r for r in read_rows(REPO / "results" / "benchmarks" / "study.csv") if r.get("profile") == "quick"
    ]
    return int(rows[-1]["runs"]) if rows else 0


def summary(new: list[dict], check: Check, priced: str) -> list[str]:
    """The one screen: each number and what it means for the plan (against the targets of the GPU path)."""
    lines = ["", f"device check on {check.device}" + (" (--dry: toy sizes on the CPU, no number means anything)"
                                                    if check.dry else "")]  # fmt: skip
    lines += [f"  {name:>8}: {status}" for name, status in check.status.items()]
    step = _values(new, "model_step", "images_per_s")
    new_backbones = sorted({s.split("_")[0] for s in step} - {"resnet50", "smallcnn"})
    lines.append(f"model step: {len(step)} settings measured" + (f" (new backbones priced: {', '.join(new_backbones)})"
                                                                   if new_backbones else ""))  # fmt: skip
    for s, v in sorted(step.items()):
        lines.append(f"  {s}: {v:,.0f} img/s")
    loader = _values(new, "loader", "images_per_s")
    if loader:
        best = max(loader.values())
        verdict = (
            "holds"
            if best >= LOADER_TARGET
            else "MISSED: the loader bounds the paper runs; more workers or DALI"
        )
        lines.append(f"loader: best {best:,.0f} img/s (target >= {LOADER_TARGET:,.0f}): {verdict}")
    e2e = _values(new, "end_to_end", "images_per_s")
    for s, v in sorted(e2e.items()):
        if s in step:
            ratio = v / step[s]
            verdict = (
                "holds" if ratio >= END_TO_END_TARGET else "MISSED: the cost model's low end is optimistic"
            )
            lines.append(f"end to end {s}: {v:,.0f} img/s = {100 * ratio:.0f} % of the model step "
                         f"(target >= {100 * END_TO_END_TARGET:.0f} %): {verdict}")  # fmt: skip
    syncs = _values(new, "syncs", "host_syncs_per_step")
    if syncs:
        worst = max(syncs, key=syncs.get)
        verdict = "holds" if syncs[worst] == 0 else f"MISSED at {worst}: a step waits for the host"
        lines.append(f"host syncs per step: at most {syncs[worst]:g} (target 0): {verdict}")
    lines += _study_lines(check)
    if getattr(check, "fastdev_ready", False):
        lines.append(
            "paper fast dev run: the GoogLeNet artifact ran through the real data path on the device"
        )
    lines.append(priced)
    return lines


def _study_lines(check: Check) -> list[str]:
    per_run = _values(check.rows, "study_subset", "s_per_run")
    lines = [f"study subset: {getattr(check, 'placement', 'placement: (not run)')}"]
    runs = _committed_quick_runs()
    for s, v in per_run.items():
        whole = v * runs
        verdict = "holds" if whole <= QUICK_STUDY_TARGET_S else "MISSED"
        lines.append(f"  {s}: {v:.1f} s per run; the quick study's {runs} runs at that rate: {whole / 60:.1f} min "
                     f"(target <= {QUICK_STUDY_TARGET_S / 60:.0f} min): {verdict}")  # fmt: skip
    return lines


def price_paper(check: Check, calibration: Path) -> str:
    """The paper plan priced with ``calibration``: its total GPU-hours line."""
    only = ["--only", DRY_PRICED] if check.dry else []  # --dry: one artifact's plan, not the whole study's
    cmd = check.dmllab("study", "--profile", "paper", "--plan", "--calibration", str(calibration), "--device", "auto",
                       *only)  # fmt: skip
    log = check.work / "price.log"
    code, _ = _run(cmd, 120, check.env, log)
    total = re.search(r"^total: .*$", log.read_text(errors="replace"), re.M)
    what = f"the {DRY_PRICED} plan" if check.dry else "paper plan"
    return f"{what} re-priced: {total.group(0) if total else f'(no total line; exit {code}, see {log})'}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dry", action="store_true", help="every part at toy size on the CPU, into a temporary folder"
    )
    p.add_argument("--only", action="append", choices=[x.name for x in PARTS], help="run only these parts")
    p.add_argument("--out-dir", type=Path, default=None,
                   help="where the CSVs go (default: results/benchmarks/; --dry: the temporary folder)")  # fmt: skip
    p.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args(argv)
    import torch

    if not args.dry and not torch.cuda.is_available():
        print("device_check.py: no CUDA GPU here (torch.cuda.is_available() is False); --dry checks the script",
              file=sys.stderr)  # fmt: skip
        return 2
    with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        out_dir = args.out_dir or (work / "out" if args.dry else REPO / "results" / "benchmarks")
        check = Check(work, args.dry, "cpu" if args.dry else torch.cuda.get_device_name(0))
        parts = [x for x in PARTS if not args.only or x.name in args.only]
        new: list[dict] = []
        benches = [(x, BENCH_GPU_ARGS[x.name]) for x in parts if x.name in BENCH_GPU_ARGS]
        if args.dry and benches:
            benches = [
                (Part("bench_gpu", DRY_LIMIT_S, "every bench_gpu.py part at smoke size"), DRY_BENCH_GPU_ARGS)
            ]
        for part, options in benches:
            out = work / f"{part.name}.csv"
            check.run(part, _bench_gpu(options, out))
            new += read_rows(out)  # what a part wrote before its time limit is kept
        calibration = out_dir / "gpu.csv"
        write_rows(
            calibration, merge_calibration(read_rows(REPO / "results" / "benchmarks" / "gpu.csv"), new)
        )
        by_name = {x.name: x for x in parts}
        if "study" in by_name:
            check.study(by_name["study"], calibration)
        if "fastdev" in by_name:
            check.fastdev(by_name["fastdev"])
        write_rows(out_dir / "device_check.csv", check.rows)
        priced = price_paper(check, calibration)
        print("\n".join(summary(new, check, priced)))
        print(
            f"wrote {calibration} ({len(new)} new rows) and {out_dir / 'device_check.csv'} ({len(check.rows)} rows)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
