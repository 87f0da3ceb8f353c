"""Does every notebook run top to bottom in a Binder visitor's pod?

A pod on mybinder.org gives a user who is not root about 2 GiB of memory, a 64 MiB
``/dev/shm`` (Kubernetes' default), one CPU and a ``/tmp`` of its own. As root on Linux,
each notebook here runs in such a pod, built from what the kernel offers:

* a user who is not root (``binder-visitor``, made with ``useradd`` if missing), with a
  home of its own, running the kernel through ``setpriv``;
* a memory cgroup of 2 GiB without swap (cgroup v2 or v1), whose peak is the notebook's
  peak memory (as the cgroup counts it: the kernel and every process it starts, page
  cache included), and a CPU quota of one CPU;
* a mount namespace (``unshare --mount``) with a 64 MiB tmpfs on ``/dev/shm`` and an empty
  folder of the visitor's own on ``/tmp``.

Anywhere else (not root, no cgroup, no namespace) it runs each notebook as this user with a
temporary folder of its own, and says which limits it could not apply.

Run: ``make binder-check`` (``.venv/bin/python -m benchmarks.binder_check [NOTEBOOK ...]``;
``--output`` names the table, default ``benchmarks/results/binder_check.md`` for a run of
every notebook). Each notebook runs under Python's default start method (fork on Linux
before 3.14, as on Binder), one at a time; nothing is written back to the notebooks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "binder_check.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + [
    ROOT / "notebooks" / "talk.ipynb"]
VISITOR = "binder-visitor"
MEMORY_BYTES = 2 * 1024**3
SHM_BYTES = 64 * 1024**2
CPU_PERIOD_US = 100_000
CPUS = 1
CELL_TIMEOUT_S = 600
MiB = 1024**2
# Python's AF_UNIX socket paths (multiprocessing's listeners: TMPDIR/pymp-XXXXXXXX/
# listener-XXXXXXXX) must fit in 107 bytes; the visitor's TMPDIR is a short private folder here
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/pymp-xxxxxxxx/listener-xxxxxxxx")


@dataclass
class Pod:
    """The limits this machine lets the check apply, and why the others are missing."""

    user: pwd.struct_passwd | None = None
    cgroup: Cgroup | None = None
    namespace: bool = False
    own_tmp_mount: bool = False  # /tmp replaced in the namespace (not when the checkout is in it)
    missing: list[str] = field(default_factory=list)

    def describe(self) -> str:
        applied = []
        if self.user is not None:
            applied.append(f"user {self.user.pw_name} (uid {self.user.pw_uid})")
        if self.cgroup is not None:
            applied.append(f"{MEMORY_BYTES // MiB} MiB memory without swap and {CPUS} CPU "
                           f"(cgroup {self.cgroup.version})")
        if self.namespace:
            applied.append(f"a {SHM_BYTES // MiB} MiB /dev/shm (mount namespace)")
        applied.append("a /tmp of its own (mount namespace)" if self.own_tmp_mount
                       else "a temporary folder of its own (TMPDIR)")
        text = "applied: " + "; ".join(applied)
        if self.missing:
            text += ". NOT applied: " + "; ".join(self.missing)
        return text


class Cgroup:
    """One cgroup per notebook run with the pod's memory and CPU limits (v2 or v1)."""

    def __init__(self, name: str):
        self.name = name
        unified = Path("/sys/fs/cgroup")
        if (unified / "cgroup.controllers").exists():
            self.version = "v2"
            parent = unified / _own_cgroup("")
            self.dirs = {"memory": parent / name, "cpu": parent / name}
        else:
            self.version = "v1"
            self.dirs = {kind: Path("/sys/fs/cgroup") / kind / _own_cgroup(kind).lstrip("/")
                         / name for kind in ("memory", "cpu")}

    def create(self) -> None:
        for path in set(self.dirs.values()):
            path.mkdir()
        memory, cpu = self.dirs["memory"], self.dirs["cpu"]
        if self.version == "v2":
            (memory / "memory.max").write_text(str(MEMORY_BYTES))
            if (memory / "memory.swap.max").exists():
                (memory / "memory.swap.max").write_text("0")
            (cpu / "cpu.max").write_text(f"{CPUS * CPU_PERIOD_US} {CPU_PERIOD_US}")
        else:
            (memory / "memory.limit_in_bytes").write_text(str(MEMORY_BYTES))
            if (memory / "memory.memsw.limit_in_bytes").exists():
                (memory / "memory.memsw.limit_in_bytes").write_text(str(MEMORY_BYTES))
            (cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (cpu / "cpu.cfs_quota_us").write_text(str(CPUS * CPU_PERIOD_US))

    def join(self) -> None:
        """Move the calling process into the cgroup (its children follow)."""
        for path in set(self.dirs.values()):
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def peak_bytes(self) -> int | None:
        memory = self.dirs["memory"]
        name = "memory.peak" if self.version == "v2" else "memory.max_usage_in_bytes"
        try:
            return int((memory / name).read_text())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        memory = self.dirs["memory"]
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        try:
            for line in (memory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        """Kill what is left in the cgroup (nothing, after a clean run), then remove it."""
        for path in set(self.dirs.values()):
            try:
                pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            for _ in range(50):  # the last processes may still be leaving
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def _own_cgroup(controller: str) -> str:
    """This process's cgroup path in the hierarchy of ``controller`` ("" for v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path.lstrip("/")
    return ""


def prepare_pod(visitor: str = VISITOR) -> Pod:
    """The pod this machine allows: everything as root on Linux, less elsewhere. The
    ``visitor`` user is made with ``useradd`` if missing."""
    pod = Pod()
    if sys.platform != "linux" or os.geteuid() != 0:
        pod.missing.append("a user who is not root, the memory and CPU limits and /dev/shm "
                           "(they need root on Linux)")
        return pod
    pod.user = _visitor(visitor)
    if pod.user is None:
        pod.missing.append(f"a user who is not root (useradd {visitor} failed)")
    probe = Cgroup(f"binder-check-probe-{os.getpid()}")
    try:
        probe.create()
        pod.cgroup = probe
    except OSError as exc:
        pod.missing.append(f"memory and CPU limits (no cgroup: {exc.strerror})")
    finally:
        probe.remove()
    if shutil.which("unshare") is None:
        pod.missing.append("a 64 MiB /dev/shm (unshare is missing)")
    else:
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "mount",
                               "-t", "tmpfs", "-o", f"size={SHM_BYTES}", "tmpfs", "/dev/shm"],
                              capture_output=True, text=True)
        pod.namespace = done.returncode == 0
        if not pod.namespace:
            pod.missing.append(f"a 64 MiB /dev/shm (mount namespace: {done.stderr.strip()})")
    inside_tmp = [p for p in (ROOT, Path(sys.prefix).resolve())
                  if p.is_relative_to("/tmp")]
    pod.own_tmp_mount = pod.namespace and not inside_tmp
    if pod.namespace and inside_tmp:
        pod.missing.append(f"a /tmp of its own ({inside_tmp[0]} is in /tmp, which the pod "
                           "would hide: TMPDIR names a folder of the visitor's own instead)")
    return pod


def _visitor(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    done = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None
    return pwd.getpwnam(name)


@dataclass
class Run:
    notebook: str
    ok: bool
    seconds: float
    peak_bytes: int | None
    oom_kills: int
    error: str = ""
    outputs: list[str] = field(default_factory=list)  # each code cell's printed text


def run_notebook(path: Path, pod: Pod) -> Run:
    """One notebook top to bottom in a fresh pod; its time, peak memory and first error."""
    # Outside the temporary folder, which the pod replaces with its own /tmp
    scratch = ROOT / "build" / "binder-check"
    scratch.mkdir(parents=True, exist_ok=True)
    scratch.chmod(0o755)  # the visitor reaches its own folder inside
    work = Path(tempfile.mkdtemp(prefix=f"{path.stem}-", dir=scratch))
    # Where _expose parks the ways through closed folders: never under one of those folders
    # (a checkout in a folder closed to others, as `mktemp -d` makes, holds `work` itself).
    # /tmp is open; the pod covers it last, once the ways are in place.
    stash = Path(tempfile.mkdtemp(prefix="binder-check-stash-", dir="/tmp"))
    # The visitor's TMPDIR (where the pod does not cover /tmp): short whatever the checkout's
    # path, so that sockets made in it fit (SOCKET_PATH_MAX)
    tmp = Path(tempfile.mkdtemp(prefix="bc-", dir=_short_base()))
    try:
        return _run_in(path, pod, work, stash, tmp)
    finally:
        for folder in (work, stash, tmp):
            shutil.rmtree(folder, ignore_errors=True)
        try:
            scratch.rmdir()  # unless another run is using it
        except OSError:
            pass


def _short_base() -> str:
    """/tmp where it can be written (the caller's TMPDIR may itself be long), else Python's
    temporary directory."""
    return "/tmp" if os.access("/tmp", os.W_OK | os.X_OK) else tempfile.gettempdir()


def _run_in(path: Path, pod: Pod, work: Path, stash: Path, tmp: Path) -> Run:
    home, copy = work / "home", work / "project"
    home.mkdir(parents=True)
    if len(str(tmp)) + SOCKET_SUFFIX > SOCKET_PATH_MAX:
        return Run(path.name, False, 0.0, None, 0,
                   f"the temporary folder {tmp} is too long for sockets made in it "
                   f"(at most {SOCKET_PATH_MAX - SOCKET_SUFFIX} characters); set TMPDIR shorter")
    shutil.copytree(ROOT / "notebooks", copy / "notebooks")
    if not (copy / "notebooks" / path.name).exists():  # a notebook from elsewhere
        shutil.copy(path, copy / "notebooks" / path.name)
    if (ROOT / "imgs").is_dir():
        shutil.copytree(ROOT / "imgs", copy / "imgs")
    result = work / "result.json"
    if pod.user is not None:
        for folder in (work, home, tmp, copy, *copy.rglob("*")):
            os.chown(folder, pod.user.pw_uid, pod.user.pw_gid)
        os.chmod(work, 0o700)
    os.chmod(tmp, 0o700)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home),
           "LANG": "C.UTF-8", "TMPDIR": "/tmp" if pod.own_tmp_mount else str(tmp),
           "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(ROOT)}  # benchmarks/ is not part of the installed package
    inner = [sys.executable, "-m", "benchmarks.binder_check", "--execute",
             str(copy / "notebooks" / path.name), "--result", str(result)]
    if pod.user is not None:
        inner = ["setpriv", f"--reuid={pod.user.pw_uid}", f"--regid={pod.user.pw_gid}",
                 "--clear-groups", "--inh-caps=-all", *inner]
    command = inner
    if pod.namespace:
        script = " && ".join([
            f"mount -t tmpfs -o size={SHM_BYTES},mode=1777 tmpfs /dev/shm",
            *_expose(stash),
            *([f"mount --bind {tmp} /tmp"] if pod.own_tmp_mount else []), 'exec "$@"'])
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                   "pod", *inner]
    cgroup = None
    if pod.cgroup is not None:
        cgroup = Cgroup(f"binder-check-{os.getpid()}-{path.stem}")
        cgroup.create()
    started = time.monotonic()
    pod_process = None
    try:
        pod_process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True,
                                       preexec_fn=cgroup.join if cgroup else None)
        stdout, stderr = pod_process.communicate()
        done = subprocess.CompletedProcess(command, pod_process.returncode, stdout, stderr)
        seconds = time.monotonic() - started
        peak = cgroup.peak_bytes() if cgroup else None
        kills = cgroup.oom_kills() if cgroup else 0
    finally:
        if pod_process is not None:
            _kill_tree(pod_process.pid)  # interrupted: the kernel and its workers too
        if cgroup is not None:
            cgroup.remove()
    if result.exists():
        outcome = json.loads(result.read_text())
        return Run(path.name, outcome["ok"], seconds, peak or outcome["peak_rss"], kills,
                   outcome["error"], outcome["outputs"])
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return Run(path.name, False, seconds, peak, kills,
               f"exit status {done.returncode}: " + " / ".join(tail))


def _kill_tree(pid: int) -> None:
    """Kill ``pid`` and every process under it (a kernel started in a session of its own
    included) that is still there."""
    import psutil

    try:
        root = psutil.Process(pid)
        tree = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for process in tree:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(tree, timeout=10)


def _expose(stash: Path) -> list[str]:
    """Mount commands that let the visitor reach Python, its environment and this checkout
    where a folder on their way is closed to others (a Python installed under /root, an
    environment in a `mktemp -d` folder apart from the checkout): inside the pod only,
    that folder becomes an empty tmpfs holding just the way through."""
    commands, closed = [], {}
    for target in (Path(sys.base_prefix).resolve(), Path(sys.prefix), ROOT):
        for parent in reversed(target.parents):
            if parent != Path("/") and not os.stat(parent).st_mode & stat.S_IXOTH:
                closed.setdefault(parent, set()).add(target.relative_to(parent).parts[0])
                break
    for number, (parent, children) in enumerate(closed.items()):
        for child in sorted(children):
            keep = stash / f"{number}-{child}"
            keep.mkdir(parents=True)
            commands.append(f"mount --bind {parent / child} {keep}")
        commands.append(f"mount -t tmpfs -o mode=755,size=1m tmpfs {parent}")
        for child in sorted(children):
            commands += [f"mkdir {parent / child}",
                         f"mount --bind {stash / f'{number}-{child}'} {parent / child}"]
    return commands


def execute(path: Path, result: Path) -> None:
    """Inside the pod: run the notebook with nbclient, write ok/error and the peak RSS of
    the kernel's process tree (for machines without a cgroup)."""
    import threading

    import nbformat
    import psutil
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    why = worker_cannot_start()
    if why:
        result.write_text(json.dumps({"ok": False, "error": why, "peak_rss": 0, "outputs": []}))
        return
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    peak, stop = [0], threading.Event()

    def watch():
        while not stop.wait(0.2):
            try:
                kernel = psutil.Process(client.km.provisioner.pid)
                tree = [kernel, *kernel.children(recursive=True)]
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree))
            except (AttributeError, psutil.Error):
                pass

    threading.Thread(target=watch, daemon=True).start()
    error = ""
    try:
        client.execute()
    except CellExecutionError as exc:
        error = str(exc).strip().splitlines()[-1][:300]
    except DeadKernelError as exc:
        error = f"the kernel died ({exc})"[:300]
    except Exception as exc:  # noqa: BLE001 - reported in the table
        error = f"{type(exc).__name__}: {exc}"[:300]
    stop.set()
    outputs = ["".join(o.get("text", "") for o in cell.get("outputs", [])
                       if o.get("output_type") == "stream")
               for cell in nb.cells if cell.cell_type == "code"]
    result.write_text(json.dumps({"ok": not error, "error": error, "peak_rss": peak[0],
                                  "outputs": outputs}))


def worker_cannot_start() -> str:
    """Why a DataLoader worker cannot start in this pod, or "" if one starts: checked before
    the notebook, whose first DataLoader would otherwise wait for it until a cell's timeout."""
    from multiprocessing.connection import Listener

    try:
        Listener(family="AF_UNIX").close()
    except OSError as exc:
        return (f"a socket cannot be made in the temporary folder {tempfile.gettempdir()} "
                f"({exc}): DataLoader workers could not start")
    import torch.utils.data

    from talk_helpers.runtime.start_cost import time_limit_s

    try:
        loader = torch.utils.data.DataLoader(range(2), num_workers=1,
                                             timeout=time_limit_s(10, interpreters=1))
        list(loader)
    except Exception as exc:  # noqa: BLE001 - the reason is the report
        return f"a DataLoader worker cannot start here: {type(exc).__name__}: {exc}"[:300]
    return ""


def table(runs: list[Run], pod: Pod, load: tuple[float, float]) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    import torch

    passed = sum(r.ok for r in runs)
    lines = [
        "# Every notebook in a Binder visitor's pod", "",
        f"`make binder-check` on {platform.system()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {os.cpu_count()} cores, commit {commit}, {stamp}; "
        f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end. One run per "
        "notebook, Python's default start method.", "",
        f"The pod: {pod.describe()}. Peak memory is the cgroup's own peak (the kernel and "
        "every process it started, page cache included)"
        + ("" if pod.cgroup else "; without a cgroup, the peak of the kernel's process "
           "tree's resident memory, polled every 0.2 s") + ".", "",
        f"**{passed} of {len(runs)} notebooks ran top to bottom**; the highest peak "
        f"{max((r.peak_bytes or 0) for r in runs) / MiB:.0f} MiB of "
        f"{MEMORY_BYTES // MiB} MiB.", "",
        "| notebook | ran | s | peak MiB | OOM kills | first error |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in runs:
        peak = f"{r.peak_bytes / MiB:.0f}" if r.peak_bytes else "?"
        error = r.error.replace("|", "\\|")
        lines.append(f"| {r.notebook} | {'✔' if r.ok else '✘'} | {r.seconds:.1f} | {peak} | "
                     f"{r.oom_kills} | {error} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    signal.signal(signal.SIGTERM, _stop)  # stopped: the finally blocks clean up
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--execute", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.execute:
        execute(args.execute, args.result)
        return 0
    notebooks = [p.resolve() for p in args.notebooks] or NOTEBOOKS
    output = args.output or (RESULTS if not args.notebooks else None)
    pod = prepare_pod()
    print(f"Binder pod: {pod.describe()}", flush=True)
    start_load = os.getloadavg()[0]
    runs = []
    for path in notebooks:
        run = run_notebook(path, pod)
        runs.append(run)
        peak = f"{run.peak_bytes / MiB:.0f} MiB" if run.peak_bytes else "? MiB"
        print(f"{'✔' if run.ok else '✘'} {run.notebook}: {run.seconds:.1f} s, "
              f"peak {peak}" + (f" — {run.error}" if run.error else ""), flush=True)
    text = table(runs, pod, (start_load, os.getloadavg()[0]))
    print(text)
    if output is not None:
        output.write_text(text)
        print(f"written to {output.relative_to(ROOT) if output.is_relative_to(ROOT) else output}")
    return 0 if all(r.ok for r in runs) else 1


def _stop(signum, _frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
