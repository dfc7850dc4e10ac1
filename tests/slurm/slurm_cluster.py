"""A real single-node SLURM cluster in a scratch folder, for the tests and CI.

slurm-wlm (slurmctld, slurmd, slurmdbd), munge and MariaDB from the distribution's packages (Debian 12: slurm-wlm
22.05), all run as root with every file in the scratch folder ``S``: configuration (``S/etc/slurm.conf``; clients
find it through ``SLURM_CONF``), munge key and socket, the accounting database (submitit reads job states through
``sacct``), state, spool, logs and pid files. Ports are free ones picked at start, so two clusters on one machine
do not meet. The node is ``localhost`` with the machine's CPUs (``nproc``), in one partition ``debug``.

    python tests/slurm/slurm_cluster.py start S     # prints the line that points the SLURM clients at it
    python tests/slurm/slurm_cluster.py stop S      # stops every daemon and job it started

:func:`unavailable` says why a cluster cannot start here (not root, a binary missing), None where it can.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PARTITION = "debug"
#: Daemons and clients a cluster needs (Debian packages slurm-wlm, slurmdbd, munge, mariadb-server).
BINARIES = (
    "munged",
    "mariadbd",
    "mariadb-install-db",
    "mariadb",
    "slurmdbd",
    "slurmctld",
    "slurmd",
    "sbatch",
    "sacct",
    "sinfo",
    "scontrol",
)
#: Environment variable that every process the cluster starts inherits: :func:`stop` finds them by it.
MARKER = "DMLLAB_TEST_CLUSTER"
#: Daemons in the order they start (stopped in the reverse order).
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")


@dataclass(frozen=True)
class Cluster:
    """A started cluster: its folder, the environment its clients need (``SLURM_CONF``), its node's CPUs."""

    folder: Path
    cpus: int
    partition: str = PARTITION

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.folder / "etc" / "slurm.conf")}


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def unavailable() -> str | None:
    """Why a cluster cannot start on this machine (one line), or None."""
    if not sys.platform.startswith("linux"):
        return "a test SLURM cluster needs Linux"
    if os.geteuid() != 0:
        return "a test SLURM cluster runs its daemons as root (this is not root)"
    missing = [b for b in BINARIES if _which(b) is None]
    if missing:
        return (
            f"SLURM, munge or MariaDB not installed (missing {', '.join(missing)}; Debian: "
            "apt-get install slurm-wlm slurmdbd munge mariadb-server)"
        )
    return None


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


def _configure(s: Path, cpus: int) -> tuple[dict[str, str], int]:
    """Write the configuration; returns the daemons' environment and slurmdbd's port."""
    ctld, slurmd, dbd = _free_ports(3)
    munge = s / "run" / "munge.socket"
    auth = f"AuthType=auth/munge\nAuthInfo=socket={munge}\n"
    _write(
        s / "etc" / "slurmdbd.conf",
        f"{auth}DbdHost=localhost\nDbdPort={dbd}\nSlurmUser=root\nLogFile={s}/log/slurmdbd.log\n"
        f"PidFile={s}/run/slurmdbd.pid\nStorageType=accounting_storage/mysql\nStorageHost=localhost\n"
        "StorageUser=root\nStorageLoc=slurm_acct_db\n",
        0o600,
    )
    _write(
        s / "etc" / "slurm.conf",
        f"ClusterName=dmltest\nSlurmctldHost=localhost\nSlurmctldPort={ctld}\nSlurmdPort={slurmd}\n"
        f"SlurmUser=root\nSlurmdUser=root\n{auth}MpiDefault=none\nProctrackType=proctrack/linuxproc\n"
        "TaskPlugin=task/none\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nReturnToService=2\n"
        f"StateSaveLocation={s}/state\nSlurmdSpoolDir={s}/spool\nSlurmctldPidFile={s}/run/slurmctld.pid\n"
        f"SlurmdPidFile={s}/run/slurmd.pid\nSlurmctldLogFile={s}/log/slurmctld.log\n"
        f"SlurmdLogFile={s}/log/slurmd.log\nJobAcctGatherType=jobacct_gather/none\n"
        f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
        f"AccountingStoragePort={dbd}\nAccountingStoragePass={munge}\nJobCompType=jobcomp/none\nMailProg=/bin/true\nMinJobAge=300\n"
        "KillWait=2\nSchedulerParameters=sched_interval=2\n"
        f"NodeName=localhost NodeHostname=localhost CPUs={cpus} RealMemory=1000 State=UNKNOWN\n"
        f"PartitionName={PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
    )
    env = {
        **os.environ,
        MARKER: str(s),
        "SLURM_CONF": str(s / "etc" / "slurm.conf"),
        "MYSQL_UNIX_PORT": str(s / "run" / "mysqld.sock"),
    }
    return env, dbd


def _spawn(s: Path, name: str, argv: list[str], env: dict[str, str]) -> None:
    log = open(s / "log" / f"{name}.out", "ab")  # noqa: SIM115  (the daemon owns it)
    proc = subprocess.Popen(
        argv, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
    )
    (s / "run" / f"{name}.popen").write_text(str(proc.pid))


def _dead(s: Path) -> str | None:
    """The first daemon started here that has exited."""
    for name in DAEMONS:
        path = s / "run" / f"{name}.popen"
        if path.exists() and not _alive(int(path.read_text())):
            return name
    return None


def _wait(what: str, ok, timeout_s: float, s: Path, log: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return
        dead = _dead(s)
        if dead:
            what, log = f"{what}: {dead} exited", f"{dead}.out"
            break
        time.sleep(0.25)
    tail = ""
    path = s / "log" / log
    if path.exists():
        tail = " | ".join(path.read_text(errors="replace").splitlines()[-5:])
    raise RuntimeError(
        f"test SLURM cluster: {what} did not come up within {timeout_s:.0f} s ({path}: {tail})"
    )


def _quiet(argv: list[str], env: dict[str, str], timeout_s: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)


def start(folder: str | os.PathLike, *, cpus: int | None = None, timeout_s: float = 120) -> Cluster:
    """Start a cluster in ``folder`` (made if missing) and wait until its node is idle and ``sacct`` answers.

    Raises:
        RuntimeError: :func:`unavailable`, or a daemon that did not come up (with the tail of its log); the
            daemons already started are stopped first.
    """
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    s = Path(folder).resolve()
    cpus = cpus or os.cpu_count() or 1
    for sub in ("etc", "state", "spool", "log", "run", "mysql"):
        (s / sub).mkdir(parents=True, exist_ok=True)
    s.chmod(0o755)
    env, dbd_port = _configure(s, cpus)
    try:
        _start(s, env, dbd_port, timeout_s)
    except BaseException:
        stop(s)
        raise
    return Cluster(s, cpus)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _start(s: Path, env: dict[str, str], dbd_port: int, timeout_s: float) -> None:
    key = s / "etc" / "munge.key"
    if not key.exists():
        _write(key, secrets.token_hex(64), 0o400)
    run = s / "run"
    _spawn(
        s,
        "munged",
        [
            _which("munged"),
            "-F",
            "--force",
            f"--socket={run}/munge.socket",
            f"--key-file={key}",
            f"--pid-file={run}/munged.pid",
            f"--seed-file={run}/munged.seed",
            f"--log-file={s}/log/munged.log",
        ],
        env,
    )
    _wait("munged", lambda: (run / "munge.socket").exists(), 20, s, "munged.log")
    if not (s / "mysql" / "mysql").exists():
        out = _quiet(
            [
                _which("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={s}/mysql",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            env,
            timeout_s,
        )
        if out.returncode:
            raise RuntimeError(f"test SLURM cluster: mariadb-install-db failed: {out.stderr.strip()[-300:]}")
    _spawn(
        s,
        "mariadbd",
        [
            _which("mariadbd"),
            "--no-defaults",
            f"--datadir={s}/mysql",
            f"--socket={run}/mysqld.sock",
            f"--pid-file={run}/mariadbd.pid",
            "--skip-networking",
            "--user=root",
            f"--log-error={s}/log/mariadbd.log",
        ],
        env,
    )
    mysql = [_which("mariadb"), "--no-defaults", f"--socket={run}/mysqld.sock", "-uroot"]
    _wait("mariadbd", lambda: _quiet([*mysql, "-e", "SELECT 1"], env).returncode == 0, 60, s, "mariadbd.log")
    _spawn(s, "slurmdbd", [_which("slurmdbd"), "-D"], env)
    _wait("slurmdbd", lambda: _listening(dbd_port), timeout_s, s, "slurmdbd.log")
    _spawn(s, "slurmctld", [_which("slurmctld"), "-D", "-i"], env)
    _spawn(s, "slurmd", [_which("slurmd"), "-D", "-N", "localhost"], env)

    def idle() -> bool:
        out = _quiet(["sinfo", "-h", "-o", "%t"], env)
        return out.returncode == 0 and out.stdout.strip() == "idle"

    _wait("the node (sinfo: idle)", idle, timeout_s, s, "slurmctld.log")
    _wait(
        "accounting (sacct)",
        lambda: _quiet(["sacct", "-n", "-X"], env).returncode == 0,
        60,
        s,
        "slurmdbd.log",
    )


def _ancestors() -> set[int]:
    """This process and its ancestors: a shell that carries the :data:`MARKER` (``stop`` run from it) is not the
    cluster's."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def _marked(s: Path) -> list[int]:
    """Processes whose environment holds this cluster's :data:`MARKER` (its daemons, job steps and jobs)."""
    tag = f"{MARKER}={s}\0".encode()
    mine = _ancestors()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) not in mine:
            try:
                if tag in (proc / "environ").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop(folder: str | os.PathLike, grace_s: float = 10) -> None:
    """Stop the cluster in ``folder``: SIGTERM its daemons (the jobs first, the database last), then SIGKILL what
    is still alive after ``grace_s`` seconds, every process it started included."""
    s = Path(folder).resolve()
    env = {**os.environ, "SLURM_CONF": str(s / "etc" / "slurm.conf")}
    if (s / "run" / "slurmctld.popen").exists():
        with_timeout = subprocess.run
        try:
            with_timeout(["scancel", "--user=root", "--full"], env=env, capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            pass
    pids: list[int] = []
    for name in reversed(DAEMONS):
        path = s / "run" / f"{name}.popen"
        if path.exists():
            pids.append(int(path.read_text()))
            path.unlink()
    jobs = [p for p in _marked(s) if p not in pids]
    for pid in jobs + pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        if pid in pids:  # one daemon after another: slurmd before slurmctld before slurmdbd before mariadbd
            deadline = time.monotonic() + grace_s
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in jobs + pids + _marked(s)):
        time.sleep(0.1)
    for pid in {*jobs, *pids, *_marked(s)}:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in jobs + pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python tests/slurm/slurm_cluster.py start|stop FOLDER", file=sys.stderr)
        return 2
    if argv[0] == "stop":
        stop(argv[1])
        return 0
    try:
        cluster = start(argv[1])
    except RuntimeError as err:
        print(f"cluster: {err}", file=sys.stderr)
        return 1
    print(
        f"export SLURM_CONF={cluster.env['SLURM_CONF']}  # node localhost, {cluster.cpus} CPUs, partition debug"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
