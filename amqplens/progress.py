"""What the terminal shows while the CLI runs: one line per stage, a live line during a long one, Spark's own output elsewhere.

- ``quiet_jvm(log_file)``: the JVM the session starts (and the Python workers it
  forks) writes its stdout and stderr into ``log_file`` instead of the terminal:
  Spark's warnings, log4j's lines and the JVM's own notes. ``-v`` keeps them.
- ``Stage``: a context manager around one stage. It prints ``<stage>: <what it did>
  (<seconds>)`` when the stage ends. While it runs, a thread polls Spark's status
  tracker and the stage's counters (``counter``: accumulators the tasks add to when
  they finish: bytes read, frames decoded) and, on a terminal, redraws one line
  (``tasks 3/8, 12.0 MB read, 45,120 frames``; the tasks of every job the stage ran
  so far, so the count only grows); when stdout is not a terminal (CI,
  Airflow's task log) it prints that line as a plain line every ``PLAIN_EVERY_S``
  seconds, so a short stage still prints exactly one line.

Nothing here imports pyspark at module level: the CLI imports it before the session exists.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import pathlib
import sys
import threading
import time

POLL_S = 0.5  # terminal redraws
PLAIN_EVERY_S = 30.0  # a progress line in a log (not a terminal): often enough to see it move, rare enough to read
LOG_DIR = "_logs"  # under the lake root: the JVM's output of each CLI run

_current: "Stage | None" = None  # the stage now running (counters created during it are shown by it)


def log_file_for(lake_root: str, now: dt.datetime | None = None) -> pathlib.Path:
    """``<lake>/_logs/spark-<UTC time>-<pid>.log`` for a local lake; under the temp folder for a remote one."""
    import tempfile

    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%S")
    local = "://" not in lake_root or lake_root.startswith("file://")
    base = pathlib.Path(lake_root.removeprefix("file://")) if local else pathlib.Path(tempfile.gettempdir()) / "amqplens"
    return base.expanduser().absolute() / LOG_DIR / f"spark-{stamp}-{os.getpid()}.log"


def writable_log_file(path: pathlib.Path) -> pathlib.Path:
    """``path`` when its folder can be written; else the same name under ``<temp>/amqplens/_logs``: a command that only
    reads a read-only lake (a shared archive, a snapshot mount) keeps its Spark log elsewhere."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
        return path
    except OSError:
        fallback = pathlib.Path(tempfile.gettempdir()) / "amqplens" / LOG_DIR / path.name
        fallback.parent.mkdir(parents=True, exist_ok=True)
        return fallback


@contextlib.contextmanager
def quiet_jvm(log_file: pathlib.Path | None):
    """Processes started inside this block write their stdout/stderr to ``log_file`` (None: unchanged).

    The file descriptors 1 and 2 point at the file only while the block runs: the
    JVM started in it keeps the file, this Python gets its terminal back.
    """
    if log_file is None:
        yield
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def counter(spark, name: str):
    """An accumulator the tasks add to (``acc.add(n)``); the running ``Stage`` shows it as ``<value> <name>``.

    A ``name`` starting with ``bytes`` is shown in MB (``bytes read``: ``12.0 MB read``). Tasks report when they finish, so it moves per task.
    """
    acc = spark.sparkContext.accumulator(0)
    if _current is not None:
        _current.counters[name] = acc
    return acc


def _amount(name: str, value: int) -> str:
    if name.startswith("bytes"):
        return f"{value / 1e6:,.1f} MB{name.removeprefix('bytes')}"
    return f"{value:,} {name}"


class Stage:
    """One stage of a CLI run; ``done(text)`` says what it did, printed with the time when the block ends."""

    def __init__(self, name: str, spark=None, *, out=None, tty: bool | None = None, plain_every_s: float = PLAIN_EVERY_S):
        self.name, self.spark = name, spark
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.plain_every_s = plain_every_s
        self.counters: dict = {}
        self._jobs: set[int] = set()  # Spark jobs seen running while the stage ran
        self.text = "done"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = 0  # width of the live line on the terminal
        self._t0 = 0.0

    def done(self, text: str) -> None:
        self.text = text

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def status(self) -> str:
        """``tasks d/t (n jobs)`` over every Spark job seen since the stage began, then each counter; empty before any
        job started. The count only grows; the total grows as the stage submits more jobs (a stage of several queries
        plans its jobs one after another), so neither jumps back when one job ends and the next begins."""
        parts = []
        if self.spark is not None:
            tasks = self._tasks(self.spark.sparkContext.statusTracker())
            if tasks is not None:
                done, total, jobs = tasks
                parts.append(f"tasks {done:,}/{total:,}" + (f" ({jobs} jobs)" if jobs > 1 else ""))
        parts += [_amount(name, acc.value) for name, acc in self.counters.items() if acc.value]
        return ", ".join(parts)

    def _tasks(self, tracker) -> tuple[int, int, int] | None:
        """(tasks done, tasks known, jobs) of the jobs running now or seen running since the stage began. A finished
        job counts the tasks it ran (a stage it skipped, its shuffle output reused, has none to run); a running job
        counts every task of its stages, pending ones included."""
        self._jobs.update(tracker.getActiveJobsIds())
        if not self._jobs:
            return None
        done = total = 0
        for job_id in sorted(self._jobs):
            job = tracker.getJobInfo(job_id)
            if job is None:  # no longer retained
                continue
            finished = job.status != "RUNNING"
            for stage_id in job.stageIds:
                info = tracker.getStageInfo(stage_id)
                if info is None:
                    continue
                done += info.numCompletedTasks
                total += info.numCompletedTasks if finished else max(info.numTasks, info.numCompletedTasks)
        return done, total, len(self._jobs)

    def _line(self) -> str:
        status = self.status()
        return f"{self.name}: {status + ' ' if status else ''}({self.elapsed():.0f}s)"

    def _poll(self) -> None:
        last_plain = 0.0
        while not self._stop.wait(POLL_S):
            try:
                line = self._line()
            except Exception:  # the session is stopping: the last redraw is not worth a traceback
                return
            if self.tty:
                self.out.write("\r" + line.ljust(self._shown))
                self.out.flush()
                self._shown = len(line)
            elif self.elapsed() - last_plain >= self.plain_every_s:
                last_plain = self.elapsed()
                print(line, file=self.out, flush=True)

    def __enter__(self) -> "Stage":
        global _current
        self._t0 = time.monotonic()
        _current = self
        self._thread = threading.Thread(target=self._poll, name=f"progress-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        global _current
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        _current = None
        if self.tty and self._shown:
            self.out.write("\r" + " " * self._shown + "\r")
        if exc_type is None:
            print(f"{self.name}: {self.text} ({self.elapsed():.1f}s)", file=self.out, flush=True)
