#!/usr/bin/env python3
"""Real programs under zpage: plain, in user mode and in kernel mode at one budget.

Each program runs a workload whose output is digested: first plainly (its
peak RSS sets the budget: --fraction of it), then under `zpage run` (user
mode) and `zpage run --mode kernel` at that budget. Every run's digest is
compared with the plain run's; a mismatch is an error. See README.md here
for what each figure means.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
MIB = 1 << 20
SEED = 20240611
MODES = ("plain", "user", "kernel")
# Kernel mode is now and then OOM-killed on some kernels (the cgroup's
# reclaim loses a race with the program's allocations); such a run is retried.
KERNEL_ATTEMPTS = 3
KERNEL_PEAK_FIGURE = (
    "zpage_peak_bytes: cgroup_peak_bytes + compressed_memory_peak_bytes "
    "(the memory cgroup's peak RAM plus zram's peak memory, mem_used_max)"
)
USER_PEAK_FIGURE = (
    "zpage_peak_bytes: peak_resident_bytes (wait4 ru_maxrss of the program; the compressed pool lives in the process)"
)
PLAIN_PEAK_FIGURE = "wait4 ru_maxrss of the program"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- running


@dataclasses.dataclass
class Launch:
    """What one process run gave: status, time, peak, digest of its output."""

    exit_status: Optional[int]
    wall_seconds: float
    max_rss_bytes: int
    # The highest VmRSS of one process of the run's tree, sampled every 10 ms.
    sampled_peak_bytes: int
    digest: Optional[str]
    output_head: str
    stderr_tail: str
    timed_out: bool


def descendants(pid: int) -> list[int]:
    """Every process below pid, from /proc (children before grandchildren)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        out += kids
        todo += kids
    return out


def vm_rss(pid: int) -> int:
    """VmRSS of a process in bytes (0 once it is gone)."""
    try:
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


class RssSampler:
    """Samples the VmRSS of every process below (and of) a pid every
    10 ms, on a thread: the highest of one process, as a limit per process
    sees it. zpage's own supervisor (a few MiB) is the root of a supervised
    run and counts like the others."""

    PERIOD = 0.01

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def tree(self) -> list[int]:
        out, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            try:
                for task in (Path("/proc") / str(pid) / "task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        return out

    def run(self) -> None:
        while not self.stopped.is_set():
            for pid in self.tree():
                self.peak = max(self.peak, vm_rss(pid))
            self.stopped.wait(self.PERIOD)

    def stop(self) -> int:
        self.stopped.set()
        self.thread.join()
        return self.peak


def kill_hung(proc: "subprocess.Popen[bytes]", supervised: bool) -> None:
    """Ends a run past its time limit.

    Under zpage only the program is killed: zpage then reaps it, writes its
    summary and, in kernel mode, puts the machine's swap, zram and cgroups
    back, which a SIGKILL to zpage itself would prevent. SIGTERM is not
    enough: zpage passes it on, and a hung program may never act on it.
    """
    targets = descendants(proc.pid) if supervised else [proc.pid]
    for pid in targets:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    if not supervised:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            # WNOWAIT: looks without reaping; launch's wait4 reaps.
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return
        except ChildProcessError:
            return  # already reaped
        time.sleep(0.2)
    proc.kill()


def launch(
    argv: list[str],
    work: Path,
    stdin: Optional[Path] = None,
    env: Optional[dict[str, str]] = None,
    client: Optional[Callable[["subprocess.Popen[bytes]"], tuple[str, str]]] = None,
    timeout: float = 600,
    supervised: bool = False,
) -> Launch:
    """Runs argv and waits for it with wait4, for its own ru_maxrss.

    Without a client the digest is the SHA-256 of everything the program
    writes on stdout; with one (redis), the client talks to the running
    program and returns (digest, text) itself.
    """
    err_path = work / "stderr.txt"
    with open(err_path, "wb") as err, open(stdin or os.devnull, "rb") as inp:
        started = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=inp,
            stdout=subprocess.DEVNULL if client else subprocess.PIPE,
            stderr=err,
            env=env,
            cwd=work,
        )
        timed_out = threading.Event()
        sampler = RssSampler(proc.pid)

        def expire() -> None:
            timed_out.set()
            kill_hung(proc, supervised)

        timer = threading.Timer(timeout, expire)
        timer.start()
        head = b""
        digest: Optional[str] = None
        try:
            if client:
                digest, text = client(proc)
                head = text.encode()
            else:
                assert proc.stdout is not None
                h = hashlib.sha256()
                # Streamed: sort's output is as large as its input.
                while chunk := proc.stdout.read(1 << 20):
                    h.update(chunk)
                    if len(head) < 400:
                        head += chunk[: 400 - len(head)]
                digest = h.hexdigest()
        except Exception as e:  # the program died under the client, or the client failed
            log(f"    client: {e}")
            digest = None
            if proc.poll() is None:
                proc.kill()
        # wait4 rather than Popen.wait: it is the only way to get this
        # child's own rusage (ru_maxrss) and not every child's so far.
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        timer.cancel()
        sampled_peak = sampler.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.stdout:
            proc.stdout.close()
    tail = err_path.read_bytes()[-2000:].decode(errors="replace")
    return Launch(
        exit_status=proc.returncode,
        wall_seconds=wall,
        max_rss_bytes=usage.ru_maxrss * 1024,
        sampled_peak_bytes=sampled_peak,
        digest=digest,
        output_head=head.decode(errors="replace"),
        stderr_tail=tail,
        timed_out=timed_out.is_set(),
    )


# ---------------------------------------------------------------- workloads


@dataclasses.dataclass
class Command:
    argv: list[str]
    stdin: Optional[Path] = None
    env: Optional[dict[str, str]] = None
    client: Optional[Callable[["subprocess.Popen[bytes]"], tuple[str, str]]] = None


class Workload:
    """One program and its workload. `needs`: (command, Debian package)."""

    name = ""
    needs: list[tuple[str, str]] = []
    # Per size: the workload's own scale parameter.
    scale: dict[str, Any] = {}

    def __init__(self, size: str, work: Path) -> None:
        self.size = size
        self.work = work
        self.param = self.scale[size]

    def describe(self) -> str:
        raise NotImplementedError

    def prepare(self) -> None:
        """Makes inputs and compiles, before (and outside) any measured run."""

    def command(self, run_dir: Path) -> Command:
        raise NotImplementedError


def which(command: str) -> str:
    found = shutil.which(command)
    assert found, command
    return found


def text_corpus(limit: int) -> bytes:
    """Real text, the same on every run: the standard library's sources."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    out = bytearray()
    for path in sorted(root.glob("*.py")):
        out += path.read_bytes()
        if len(out) >= limit:
            break
    return bytes(out)


class Python(Workload):
    name = "python"
    needs = []  # the interpreter running this script
    scale = {"small": 5, "full": 55}  # megabytes of source parsed

    def describe(self) -> str:
        return f"CPython: ASTs of {self.param} MB of stdlib source, walked in a seeded order"

    def command(self, run_dir: Path) -> Command:
        # sys.executable, not `python3`: a pyenv shim would run bash first.
        return Command([sys.executable, str(HERE / "python_ast.py"), str(self.param), str(SEED)])


class Node(Workload):
    name = "node"
    needs = [("node", "nodejs")]
    scale = {"small": 12, "full": 130}  # megabytes of source read

    def describe(self) -> str:
        return f"node: {self.param} MB of stdlib source held as lines and tokens"

    def command(self, run_dir: Path) -> Command:
        import sysconfig

        return Command(
            [
                which("node"),
                # V8's default old-space limit is below the full size's heap.
                "--max-old-space-size=8192",
                str(HERE / "node_tokens.js"),
                sysconfig.get_paths()["stdlib"],
                str(self.param),
                str(SEED),
            ]
        )


class Java(Workload):
    name = "java"
    needs = [("java", "default-jdk-headless"), ("javac", "default-jdk-headless")]
    scale = {"small": (300_000, "512m"), "full": (3_000_000, "4g")}  # entries, -Xmx

    def describe(self) -> str:
        return f"JVM: HashMap<String,String> of {self.param[0]} entries (-Xmx{self.param[1]})"

    def prepare(self) -> None:
        subprocess.run(
            [which("javac"), "-d", str(self.work / "classes"), str(HERE / "JavaMap.java")],
            check=True,
        )

    def command(self, run_dir: Path) -> Command:
        entries, heap = self.param
        return Command(
            [which("java"), f"-Xmx{heap}", "-cp", str(self.work / "classes"), "JavaMap", str(entries), str(SEED)]
        )


class Sqlite(Workload):
    name = "sqlite"
    needs = [("sqlite3", "sqlite3")]
    scale = {"small": 500_000, "full": 5_000_000}  # rows

    def describe(self) -> str:
        return f"sqlite3: in-memory table of {self.param} rows with an index, aggregate queries"

    def prepare(self) -> None:
        # Deterministic rows (no random()): text built from the row number,
        # so every run holds and prints the same thing.
        sql = f"""
PRAGMA temp_store = memory;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, payload TEXT);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {self.param})
INSERT INTO t
SELECT i, (i * 7919) % 101, printf('name-%08x', (i * 2654435761) % 4294967296),
       printf('%d lorem ipsum dolor sit amet %x consectetur %d adipiscing elit %s',
              i, (i * 40503) % 65536, i % 977, substr('abcdefghijklmnopqrstuvwxyz', 1 + i % 26))
FROM c;
CREATE INDEX t_name ON t(name);
SELECT grp, count(*), sum(length(payload)), min(name), max(name) FROM t GROUP BY grp ORDER BY grp;
SELECT count(DISTINCT substr(payload, -10)) FROM t;
SELECT name, id FROM t ORDER BY name LIMIT 5 OFFSET {self.param // 2};
SELECT sum(id % 1000), total(length(name)) FROM t WHERE name > 'name-8';
"""
        (self.work / "workload.sql").write_text(sql)

    def command(self, run_dir: Path) -> Command:
        return Command([which("sqlite3"), ":memory:"], stdin=self.work / "workload.sql")


class Sort(Workload):
    name = "sort"
    needs = [("sort", "coreutils")]
    scale = {"small": 90, "full": 700}  # megabytes of input

    def describe(self) -> str:
        return f"GNU sort: {self.param} MB of text lines, all in memory (-S)"

    def prepare(self) -> None:
        corpus = text_corpus(8 * MIB).replace(b"\n", b" ")
        rng = random.Random(SEED)
        target = self.param * 1_000_000
        written = 0
        i = 0
        with open(self.work / "input.txt", "wb") as f:
            while written < target:
                chunk = []
                for _ in range(10_000):
                    start = rng.randrange(len(corpus) - 200)
                    line = corpus[start : start + rng.randrange(20, 160)] + b" %d\n" % i
                    chunk.append(line)
                    i += 1
                data = b"".join(chunk)
                f.write(data)
                written += len(data)

    def command(self, run_dir: Path) -> Command:
        size = (self.work / "input.txt").stat().st_size
        # -S well above the input, so sort holds it all and never spills to
        # temporary files: the memory is the program's, not the disk's.
        buffer = 3 * size // MIB + 64
        return Command(
            [which("sort"), "-S", f"{buffer}M", "-T", str(run_dir), str(self.work / "input.txt")],
            env={**os.environ, "LC_ALL": "C"},
        )


class Redis(Workload):
    name = "redis"
    needs = [("redis-server", "redis-server")]
    scale = {"small": 400_000, "full": 4_500_000}  # keys

    def describe(self) -> str:
        return f"redis-server: {self.param} keys of text set, DEBUG DIGEST, every key read back"

    def prepare(self) -> None:
        self.corpus = text_corpus(8 * MIB)

    def command(self, run_dir: Path) -> Command:
        port = free_port()
        argv = [
            which("redis-server"),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(run_dir),
            "--enable-debug-command", "local",
        ]  # fmt: skip
        return Command(argv, client=lambda proc: self.client(proc, port))

    def values(self) -> Any:
        rng = random.Random(SEED)
        corpus = self.corpus
        for i in range(self.param):
            start = rng.randrange(len(corpus) - 600)
            yield b"key:%d" % i, corpus[start : start + rng.randrange(100, 500)] + b"#%d" % i

    def client(self, proc: "subprocess.Popen[bytes]", port: int) -> tuple[str, str]:
        conn = Resp(connect(port, proc))
        batch: list[list[bytes]] = []
        for key, value in self.values():
            batch.append([b"SET", key, value])
            if len(batch) == 2000:
                conn.pipeline(batch)
                batch = []
        if batch:
            conn.pipeline(batch)
        [dbsize] = conn.pipeline([[b"DBSIZE"]])
        [server_digest] = conn.pipeline([[b"DEBUG", b"DIGEST"]])
        # Every key read back, in a seeded order, and digested here too.
        order = list(range(self.param))
        random.Random(SEED + 1).shuffle(order)
        h = hashlib.sha256()
        for at in range(0, len(order), 2000):
            for value in conn.pipeline([[b"GET", b"key:%d" % i] for i in order[at : at + 2000]]):
                h.update(value)
        try:
            conn.pipeline([[b"SHUTDOWN", b"NOSAVE"]])
        except (ConnectionError, EOFError):
            pass  # the server closes the connection as it exits
        text = f"dbsize {dbsize} debug_digest {server_digest.decode()} values {h.hexdigest()}\n"
        return hashlib.sha256(text.encode()).hexdigest(), text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port: int, proc: "subprocess.Popen[bytes]") -> socket.socket:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited before accepting connections ({proc.returncode})")
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=600)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Resp:
    """Just enough of the redis protocol: pipelined commands, their replies."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")

    def pipeline(self, commands: list[list[bytes]]) -> list[Any]:
        out = bytearray()
        for args in commands:
            out += b"*%d\r\n" % len(args)
            for a in args:
                out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return [self.reply() for _ in commands]

    def reply(self) -> Any:
        line = self.reader.readline()
        if not line:
            raise EOFError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.reader.read(n + 2)
            return data[:-2]
        if kind == b"-":
            raise RuntimeError(f"redis: {rest.decode()}")
        raise RuntimeError(f"redis: unexpected reply {line!r}")


WORKLOADS: dict[str, type[Workload]] = {
    w.name: w for w in (Python, Node, Java, Sqlite, Redis, Sort)
}


# ---------------------------------------------------------------- modes


@dataclasses.dataclass
class Run:
    """One run of a program in one mode, with the figures the table shows."""

    mode: str
    ok: bool
    wall_seconds: Optional[float] = None
    peak_bytes: Optional[int] = None
    # The highest VmRSS of one process, sampled every 10 ms.
    sampled_peak_bytes: Optional[int] = None
    digest: Optional[str] = None
    identical: Optional[bool] = None
    attempts: int = 1
    oom_killed_attempts: int = 0
    exit_status: Optional[int] = None
    timed_out: bool = False
    outer_wall_seconds: Optional[float] = None
    zpage_saved_bytes: Optional[int] = None
    error: Optional[str] = None
    output_head: str = ""
    zpage_summary: Optional[dict[str, Any]] = None


def limit_flag(limit: str, budget: int) -> list[str]:
    """`zpage run`'s flag for the limit at `budget` bytes (whole MiB);
    `auto`: a budget that finds itself (no size)."""
    if limit == "auto":
        return ["--budget", "auto"]
    return [f"--{limit}", f"{max(1, budget // MIB)}M"]


def run_once(
    workload: Workload,
    mode: str,
    zpage: Optional[str],
    budget: Optional[int],
    user_args: list[str],
    timeout: float,
    limit: str = "budget",
) -> Run:
    run_dir = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=workload.work))
    cmd = workload.command(run_dir)
    summary_path = run_dir / "summary.json"
    prefix: list[str] = []
    if mode != "plain":
        assert budget is not None and zpage is not None
        flag_limit = "budget" if limit == "auto" and mode == "kernel" else limit
        prefix = [zpage, "run", *limit_flag(flag_limit, budget), "--summary-json", str(summary_path)]
        prefix += ["--mode", "kernel"] if mode == "kernel" else user_args
        prefix.append("--")
    got = launch(prefix + cmd.argv, run_dir, cmd.stdin, cmd.env, cmd.client, timeout, supervised=bool(prefix))
    run = Run(
        mode=mode,
        ok=got.exit_status == 0 and got.digest is not None and not got.timed_out,
        timed_out=got.timed_out,
        exit_status=got.exit_status,
        outer_wall_seconds=got.wall_seconds,
        digest=got.digest,
        output_head=got.output_head,
        sampled_peak_bytes=got.sampled_peak_bytes,
    )
    if mode == "plain":
        run.wall_seconds = got.wall_seconds
        run.peak_bytes = got.max_rss_bytes
    else:
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
        run.zpage_summary = summary
        if summary is None:
            run.ok = False
        else:
            # zpage's own wall time: the program's, spawn to reap, without
            # the set-up and tear-down of zram and the cgroup in kernel mode.
            run.wall_seconds = summary.get("wall_seconds")
            # zpage's own estimate (no --compare here: the plain runs are
            # this script's), and its peak, one definition in both modes.
            run.zpage_saved_bytes = summary.get("saved_bytes")
            run.peak_bytes = summary.get("zpage_peak_bytes")
    if not run.ok:
        why = f"timed out after {timeout:.0f} s, killed" if got.timed_out else f"exit status {got.exit_status}"
        run.error = f"{why}; stderr: {got.stderr_tail.strip()[-600:]}"
    elif mode == "user" and limit == "memory-max":
        # A limit on each process's whole memory: the kernel's high-water
        # mark (zpage's peak_resident_bytes) and every 10 ms sample under it.
        limit_bytes = max(1, budget // MIB) * MIB  # type: ignore[operator]
        worst = max(run.peak_bytes or 0, run.sampled_peak_bytes or 0)
        if worst > limit_bytes:
            run.ok = False
            run.error = f"the memory max of {limit_bytes / MIB:.0f} MiB was exceeded: peak {worst / MIB:.1f} MiB"
    return run


def oom_killed(run: Run) -> bool:
    """The cgroup's OOM killer ended the run (kernel mode's own count of its kills)."""
    return not run.timed_out and bool((run.zpage_summary or {}).get("oom_kills"))


def run_mode(
    workload: Workload,
    mode: str,
    zpage: Optional[str],
    budget: Optional[int],
    user_args: list[str],
    timeout: float,
    limit: str = "budget",
) -> Run:
    attempts = KERNEL_ATTEMPTS if mode == "kernel" else 1
    ooms = 0
    for attempt in range(1, attempts + 1):
        run = run_once(workload, mode, zpage, budget, user_args, timeout, limit)
        run.attempts = attempt
        if run.ok or not oom_killed(run):
            break
        ooms += 1
        log(f"    kernel mode OOM-killed (attempt {attempt} of {attempts})")
    run.oom_killed_attempts = ooms
    return run


# ---------------------------------------------------------------- report


def median(values: list[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present and len(present) == len(values) else None


def aggregate(runs: list[Run], plain_peak: Optional[float]) -> dict[str, Any]:
    ok = all(r.ok for r in runs)
    # A failed run's figures (an OOM-killed program's peak and time) say
    # nothing about the workload: the mode's figures are then n/a.
    wall = median([r.wall_seconds for r in runs]) if ok else None
    peak = median([r.peak_bytes for r in runs]) if ok else None
    if any(r.ok and not r.identical for r in runs):
        identical: Optional[bool] = False
    else:
        identical = True if ok else None  # None: no complete output to compare
    return {
        "ok": ok,
        "identical": identical,
        "wall_seconds": wall,
        "peak_bytes": peak,
        "sampled_peak_bytes": max((r.sampled_peak_bytes or 0 for r in runs), default=0) if ok else None,
        "peak_ratio": peak / plain_peak if peak is not None and plain_peak else None,
        "saved_bytes": plain_peak - peak if peak is not None and plain_peak is not None else None,
        "attempts": sum(r.attempts for r in runs),
        "oom_killed_attempts": sum(r.oom_killed_attempts for r in runs),
        "runs": [dataclasses.asdict(r) for r in runs],
    }


def fmt(value: Optional[float], spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def table(results: list[dict[str, Any]]) -> str:
    head = ("program", "mode", "budget MiB", "wall s", "peak MiB", "peak/plain", "saved MiB", "identical", "wall user/kernel", "note")
    rows: list[tuple[str, ...]] = [head]
    for p in results:
        modes = p["modes"]
        for mode in MODES:
            m = modes.get(mode)
            if m is None:
                continue
            if "skipped" in m:
                rows.append((p["program"], mode, "", "", "", "", "", "", "", m["skipped"]))
                continue
            ratio = ""
            if mode == "user":
                k = modes.get("kernel") or {}
                uw, kw = m.get("wall_seconds"), k.get("wall_seconds")
                ratio = fmt(uw / kw if uw is not None and kw else None, ".2f")
            notes = []
            ooms = m["oom_killed_attempts"]
            if not m["ok"]:
                why = ""
                if ooms:
                    why = f": OOM-killed in {ooms} of {m['attempts']} attempts"
                elif any(r["timed_out"] for r in m["runs"]):
                    why = ": timed out"
                notes.append("FAILED" + why)
            elif ooms:
                notes.append(f"OOM-killed {ooms} time(s), retried ({m['attempts']} attempts)")
            rows.append(
                (
                    p["program"],
                    mode,
                    "" if mode == "plain" else fmt(p["budget_bytes"] / MIB if p["budget_bytes"] else None, ".0f"),
                    fmt(m["wall_seconds"], ".2f"),
                    fmt(m["peak_bytes"] / MIB if m["peak_bytes"] is not None else None, ".1f"),
                    fmt(m["peak_ratio"], ".2f"),
                    "" if mode == "plain" else fmt(m["saved_bytes"] / MIB if m["saved_bytes"] is not None else None, ".1f"),
                    {True: "yes", False: "NO", None: "n/a"}[m["identical"]],
                    ratio,
                    "; ".join(notes),
                )
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def missing(workload: type[Workload]) -> list[str]:
    return [
        f"{workload.name}: `{command}` is not installed (Debian/Ubuntu: apt-get install {package})"
        for command, package in workload.needs
        if shutil.which(command) is None
    ]


def bench_program(
    cls: type[Workload], args: argparse.Namespace, zpage: Optional[str], user_args: list[str], root: Path
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"{cls.name}-", dir=root))
    workload = cls(args.size, work)
    result: dict[str, Any] = {"program": cls.name, "workload": workload.describe(), "budget_bytes": None, "modes": {}}
    started = time.monotonic()
    log(f"{cls.name}: {workload.describe()}")
    workload.prepare()
    plain_runs = []
    for i in range(args.runs):
        run = run_mode(workload, "plain", zpage, None, user_args, args.timeout)
        log(f"  plain run {i + 1}: {fmt(run.wall_seconds, '.2f')} s, peak {fmt((run.peak_bytes or 0) / MIB, '.1f')} MiB")
        plain_runs.append(run)
    reference = plain_runs[0].digest
    for run in plain_runs:
        run.identical = run.ok and run.digest == reference
    # The budget comes from the highest plain peak, so no plain run could
    # have fitted in it.
    plain_peak = max((r.peak_bytes for r in plain_runs if r.peak_bytes), default=None)
    result["plain_peak_bytes"] = plain_peak
    result["command"] = workload.command(work).argv
    result["modes"]["plain"] = aggregate(plain_runs, plain_peak)
    if not plain_runs[0].ok or plain_peak is None:
        result["error"] = f"the plain run failed: {plain_runs[0].error}"
        log(f"  {result['error']}")
        result["seconds"] = time.monotonic() - started
        return result
    budget = int(plain_peak * args.fraction)
    result["budget_bytes"] = max(1, budget // MIB) * MIB
    for mode in ("user", "kernel"):
        if mode not in args.modes:
            continue
        if mode == "kernel" and os.geteuid() != 0:
            result["modes"][mode] = {"skipped": "kernel mode needs root"}
            continue
        runs = []
        for i in range(args.runs):
            run = run_mode(workload, mode, zpage, budget, user_args, args.timeout, args.limit)
            run.identical = run.ok and run.digest == reference
            if run.ok and not run.identical:
                log(f"  !!! {cls.name} {mode} run {i + 1}: OUTPUT DIFFERS from the plain run's")
                log(f"      plain: {plain_runs[0].output_head[:200]!r}")
                log(f"      {mode}: {run.output_head[:200]!r}")
            elif not run.ok:
                log(f"  !!! {cls.name} {mode} run {i + 1} FAILED: {run.error}")
            log(
                f"  {mode} run {i + 1}: {fmt(run.wall_seconds, '.2f')} s, peak {fmt((run.peak_bytes or 0) / MIB if run.peak_bytes is not None else None, '.1f')} MiB"
                + f" (10 ms samples: {fmt((run.sampled_peak_bytes or 0) / MIB, '.1f')} MiB)"
                + (f", {run.attempts} attempts" if run.attempts > 1 else "")
            )
            runs.append(run)
        result["modes"][mode] = aggregate(runs, plain_peak)
    result["seconds"] = time.monotonic() - started
    log(f"  {cls.name} took {result['seconds']:.1f} s")
    return result


def passed(result: dict[str, Any]) -> bool:
    if "error" in result:
        return False
    return all(m["ok"] and m["identical"] for m in result["modes"].values() if "skipped" not in m)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zpage", default="zpage", help="the zpage binary (default: zpage on PATH)")
    ap.add_argument("--programs", default=",".join(WORKLOADS), help=f"comma list of {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--size", choices=("small", "full"), default="small", help="small: ~100-200 MB per program; full: ~1-2 GB")
    ap.add_argument("--fraction", type=float, default=0.25, help="budget as a fraction of the plain run's peak RSS (default 0.25)")
    ap.add_argument(
        "--limit",
        choices=("budget", "memory-max", "auto"),
        default="budget",
        help="what --fraction sets: zpage run's --budget (default), or --memory-max (each process's whole memory, pool "
        "included; user mode's run fails if a process's peak or a 10 ms sample of its RSS passes it); auto: user mode "
        "runs with --budget auto (kernel mode, which has no automatic budget on cgroup v1, keeps --fraction)",
    )
    ap.add_argument("--runs", type=int, default=1, help="runs per program and mode (default 1; figures are medians)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of plain, user, kernel (plain always runs)")
    ap.add_argument(
        "--user-arg",
        action="append",
        default=[],
        help="extra option for `zpage run` in user mode (repeatable), e.g. --user-arg=--min-mapping=1M",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        help="seconds before a run is killed and counted as failed (default: 300 small, 3600 full)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("--keep-going", action="store_true", help="go on to the next program after one fails")
    ap.add_argument("--keep-temp", action="store_true", help="leave the temporary directory (inputs, stderr, summaries)")
    args = ap.parse_args(argv)
    args.programs = [p.strip() for p in args.programs.split(",") if p.strip()]
    args.modes = {m.strip() for m in args.modes.split(",") if m.strip()}
    unknown = [p for p in args.programs if p not in WORKLOADS]
    if unknown:
        ap.error(f"unknown program(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    if args.modes - set(MODES):
        ap.error(f"unknown mode(s) {', '.join(sorted(args.modes - set(MODES)))}")
    if not 0 < args.fraction <= 1:
        ap.error("--fraction must be in (0, 1]")
    if args.timeout is None:
        args.timeout = 300.0 if args.size == "small" else 3600.0
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    zpage = shutil.which(args.zpage)
    # The programs run in directories of their own: a relative path (the
    # README's `target/release/zpage`) must not be looked up from there.
    zpage = os.path.abspath(zpage) if zpage else None
    if zpage is None and args.modes != {"plain"}:
        log(f"error: zpage not found as `{args.zpage}`: pass --zpage PATH (scripts/install.sh installs it)")
        return 2
    problems = [line for name in args.programs for line in missing(WORKLOADS[name])]
    if problems:
        for line in problems:
            log(f"error: {line}")
        return 2
    version = subprocess.run([zpage, "--version"], capture_output=True, text=True).stdout.strip() if zpage else "n/a"
    root = Path(tempfile.mkdtemp(prefix="zpage-programs-"))
    results = []
    try:
        for name in args.programs:
            result = bench_program(WORKLOADS[name], args, zpage, args.user_arg, root)
            results.append(result)
            if not passed(result) and not args.keep_going:
                log(f"{name} failed; stopping (--keep-going runs the rest)")
                break
    finally:
        if args.keep_temp:
            log(f"temporary files kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    ok = len(results) == len(args.programs) and all(passed(r) for r in results)
    if args.json:
        doc = {
            "suite": "zpage real programs",
            "zpage": zpage,
            "zpage_version": version,
            "size": args.size,
            "fraction": args.fraction,
            "limit": args.limit,
            "runs": args.runs,
            "user_args": args.user_arg,
            "machine": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version()},
            "figures": {
                "wall_seconds": "plain: spawn to reap, measured here; user and kernel: zpage's wall_seconds (spawn to reap of the program); median of the runs",
                "peak_bytes": {"plain": PLAIN_PEAK_FIGURE, "user": USER_PEAK_FIGURE, "kernel": KERNEL_PEAK_FIGURE},
                "saved_bytes": "plain_peak_bytes - peak_bytes",
                "peak_ratio": "peak_bytes / plain_peak_bytes",
            },
            "ok": ok,
            "programs": results,
        }
        print(json.dumps(doc, indent=2))
    else:
        print(table(results))
        print(f"\nzpage: {zpage} ({version}); size {args.size}; {args.limit} {args.fraction} of the plain peak; {args.runs} run(s) each")
        print(f"peak: plain = {PLAIN_PEAK_FIGURE}; user = {USER_PEAK_FIGURE}; kernel = {KERNEL_PEAK_FIGURE}")
    if not ok:
        log("FAILED: see the rows marked NO or FAILED above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
