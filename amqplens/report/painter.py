"""The report's PNGs drawn in processes of their own (``report.png_processes``), beside the driver's work.

matplotlib draws a figure in Python and holds the GIL while it does (text layout, glyph by glyph): on the driver's
draw thread the five overview PNGs took 2.5-3.5 s of a 300 MB lake's report and waited for the GIL with the queries
and the connection pages. Here one helper process (``HELPER``) imports matplotlib and
pandas once, then forks N drawing processes (a fork of a process that has started no thread yet: safe); the driver
sends each figure's frames as soon as its query is back and goes on with the plotly specs and the pages.

``amqplens run`` starts the helper at its beginning (``prestart``), so the imports are done long before the report;
``amqplens report`` starts it with its first query. If the helper cannot start or fails, each PNG it did not draw is
drawn on the driver as before (``png.draw``): a report never lacks a PNG because of the helper.

Protocol on the helper's stdin/stdout: 8-byte little-endian length + pickle; the driver sends ``(job_id, args of
png.draw)`` and receives ``(job_id, None or the error's text)``; EOF on stdin ends the helper once its jobs are done.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future

log = logging.getLogger(__name__)

_HEAD = struct.Struct("<Q")
# the helper's command (not ``-m amqplens.report.painter``: the package imports this module before runpy would run it)
HELPER = "import sys; from amqplens.report.painter import main; sys.exit(main(sys.argv[1:]))"


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEAD.pack(len(data)) + data)
    stream.flush()


def _receive(stream):
    """The next message, or None at EOF (or a message cut short: the other side ended)."""
    head = stream.read(_HEAD.size)
    if len(head) < _HEAD.size:
        return None
    (n,) = _HEAD.unpack(head)
    data = stream.read(n)
    return pickle.loads(data) if len(data) == n else None


class Painter:
    """The driver's side: ``submit(png.draw's arguments)`` -> a Future of None (drawn) or of an exception."""

    def __init__(self, processes: int):
        self._lock = threading.Lock()
        self._jobs: dict[int, Future] = {}
        self._next = 0
        # the driver's import path (a spark-submit driver may have amqplens from --py-files, not from its environment)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._proc = subprocess.Popen([sys.executable, "-c", HELPER, str(processes)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=env)
        # sent by a thread of their own: a helper that stops reading fills the pipe, and a write then blocks (the
        # report goes on, and ends the helper after its timeout, which ends the write)
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, name="amqplens-painter", daemon=True)
        self._writer = threading.Thread(target=self._write, name="amqplens-painter-send", daemon=True)
        self._reader.start()
        self._writer.start()

    def _read(self) -> None:
        while True:
            try:
                got = _receive(self._proc.stdout)
            except Exception:  # noqa: BLE001 - a garbled reply: the helper is not usable
                got = None
            if got is None:
                break
            job, error = got
            with self._lock:
                future = self._jobs.pop(job, None)
            if future is not None:
                future.set_result(None) if error is None else future.set_exception(RuntimeError(error))
        # the helper ended: what it did not answer fails (drawn on the driver by the caller)
        with self._lock:
            left, self._jobs = self._jobs, {}
        for future in left.values():
            future.set_exception(RuntimeError(f"the PNG process ended (exit {self._proc.poll()})"))

    def _write(self) -> None:
        while (item := self._outbox.get()) is not None:
            job, args = item
            try:
                _send(self._proc.stdin, (job, args))
            except Exception as e:  # noqa: BLE001 - the helper is gone (broken pipe), or the figure does not pickle
                with self._lock:
                    future = self._jobs.pop(job, None)
                if future is not None:
                    future.set_exception(RuntimeError(f"not sent to the PNG process: {type(e).__name__}: {e}"))
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass

    def submit(self, *args) -> Future:
        future: Future = Future()
        with self._lock:
            job, self._next = self._next, self._next + 1
            self._jobs[job] = future
        self._outbox.put((job, args))
        return future

    def close(self) -> None:
        """No more jobs: the helper ends once those it has are drawn."""
        self._outbox.put(None)

    def stop(self) -> None:
        """``close``, without waiting for the helper to end (its interpreter's exit takes a few tenths of a second,
        which the report need not wait for): it is reaped by the next ``take`` or at exit (``_reap``)."""
        self.close()
        _ending.append(self)

    def kill(self) -> None:
        """End the helper now (it did not answer): the jobs it has not answered fail (``_read`` sees the EOF)."""
        try:
            self._proc.kill()
        except OSError:
            pass

    def wait(self, timeout: float) -> bool:
        """Whether the helper ended within ``timeout`` seconds (killed if not)."""
        try:
            self._proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            return False
        finally:
            self._reader.join(timeout=5)
            self._writer.join(timeout=5)


_prestarted: Painter | None = None
_ending: list[Painter] = []  # stopped, not yet reaped


def _reap(timeout: float = 0.0) -> None:
    """Reap the stopped helpers that ended (``timeout`` 0), or wait for each up to ``timeout`` (at exit)."""
    for painter in list(_ending):
        if timeout > 0:
            painter.wait(timeout)
        elif painter._proc.poll() is None:
            continue
        _ending.remove(painter)


atexit.register(_reap, 30.0)


def prestart(processes: int) -> None:
    """Start the helper now (``amqplens run``, at its beginning), for the report to ``take``."""
    global _prestarted
    if processes > 0 and _prestarted is None:
        try:
            _prestarted = Painter(processes)
        except OSError as e:
            log.warning("report: no PNG process (%s); the PNGs are drawn on the driver", e)
            return
        atexit.register(_stop_prestarted)


def _stop_prestarted() -> None:
    """At exit, a helper that no report took (the run stopped before its report) is told to end."""
    if _prestarted is not None:
        _prestarted.stop()


def take(processes: int) -> Painter | None:
    """The prestarted helper, else a new one; None with ``processes`` 0 or when none can start."""
    global _prestarted
    _reap()
    painter, _prestarted = _prestarted, None
    if painter is not None or processes <= 0:
        return painter
    try:
        return Painter(processes)
    except OSError as e:
        log.warning("report: no PNG process (%s); the PNGs are drawn on the driver", e)
        return None


def _drawn(reply, job: int, _result) -> None:
    reply(job, None)


def _failed(reply, job: int, error: BaseException) -> None:
    reply(job, f"{type(error).__name__}: {error}")


def main(argv: list[str]) -> int:
    """The helper: import, fork the drawing processes, draw what stdin sends, answer on stdout."""
    import multiprocessing

    from amqplens.report import png

    png.preload()
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    lock = threading.Lock()

    def reply(job: int, error: str | None) -> None:
        with lock:
            _send(replies, (job, error))

    # forked before this process starts a thread (the pool's own threads start after its workers)
    with multiprocessing.get_context("fork").Pool(max(1, int(argv[0]))) as pool:
        while (got := _receive(requests)) is not None:
            job, args = got
            drawn, failed = functools.partial(_drawn, reply, job), functools.partial(_failed, reply, job)
            pool.apply_async(png.draw, args, callback=drawn, error_callback=failed)
        pool.close()
        pool.join()
    return 0
