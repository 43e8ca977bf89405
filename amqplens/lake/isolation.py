"""A capture fails alone: a stage that raises on a run's captures is retried one capture at a time.

Whatever one capture makes a job raise (a decoder bug in a task, a file gone between listing and
reading, a driver-side conversion), the captures that do not raise are written as usual; each one that
still raises alone is marked ``failed`` in ``captures`` with the error text, and the run goes on
(``amqplens run`` exits 3). Its row is written under a unit id of its own (``failed_unit``), its error
begins with ``FAILED_IN``, and the next run retries it, and only it. Usage errors (bad input
paths, bad config) are the caller's and are raised as before.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from amqplens.config import ConfigError
from amqplens.inputs import InputError

log = logging.getLogger(__name__)
USAGE_ERRORS = (InputError, ConfigError)
MAX_ERROR_CHARS = 1000  # of the text kept in captures.error
# the line of a Python traceback (a Spark worker's, inside the JVM's error text) that names the exception
# how the error of a capture that raised begins (what a file without a readable record says is final, not retried)
FAILED_IN = "failed in "
_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)):?\s(.*)$")


@dataclasses.dataclass
class Isolated:
    results: list  # what the stage returned: once for all captures, or per capture that did not raise
    failed: dict[str, str]  # capture id -> error text


def error_text(stage: str, exc: BaseException) -> str:
    """One line: the stage and the exception, for a Spark error the last exception its worker's traceback names."""
    text = str(exc)
    named = [m.group(1).rsplit(".", 1)[-1] + ": " + m.group(2) for m in map(_EXCEPTION_LINE.match, text.splitlines()) if m]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    what = named[-1] if named else f"{type(exc).__name__}: {first}"
    return f"{FAILED_IN}{stage}: {what}"[:MAX_ERROR_CHARS]


def isolated(stage: str, ids: list[str], run_all, run_one) -> Isolated:
    """``run_all(ids)``; when it raises, ``run_one(id)`` for each id in turn. ``run_all`` returns a list, ``run_one``
    one result (or None). A retry costs one job per capture, and only a run that raised pays it."""
    try:
        return Isolated(list(run_all(ids) or []), {})
    except USAGE_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of one capture must not end the others
        if len(ids) <= 1:
            log.warning("%s failed on capture %s: %s", stage, ids[0][:12] if ids else "-", exc)
            return Isolated([], {cid: error_text(stage, exc) for cid in ids})
        log.warning("%s failed on %d captures together (%s); retrying them one at a time", stage, len(ids),
                    error_text(stage, exc))
    out = Isolated([], {})
    for cid in ids:
        try:
            result = run_one(cid)
        except USAGE_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001
            out.failed[cid] = error_text(stage, exc)
            log.warning("%s failed on capture %s: %s", stage, cid[:12], out.failed[cid])
            continue
        if result is not None:
            out.results.extend(result if isinstance(result, list) else [result])
    return out


def failed_unit(app_id: str, run_id: str) -> str:
    """The unit id of a failed capture's row: never the job's own, so the capture is not done for the next run."""
    return f"{app_id}#failed-{run_id}"


def retry_unit(app_id: str, run_id: str) -> str:
    """The unit id of a capture retried after a failure whose job unit the tables already hold."""
    return f"{app_id}#retry-{run_id}"


def plan(store, apps: dict[str, str], run_id: str) -> tuple[dict[str, str], list[str]]:
    """Of a job's inputs (capture id -> the job's app id): the units to write now (not committed yet, or failed
    before: those under ``retry_unit``), and the ids already done."""
    retry = failed_ids(store, list(apps))
    committed = {cid for cid, a in apps.items() if store.committed("captures", a)}
    units = {cid: retry_unit(a, run_id) if cid in committed else a for cid, a in apps.items()
             if cid not in committed or cid in retry}
    return units, [cid for cid in apps if cid not in units]


def failed_ids(store, capture_ids: list[str]) -> set[str]:
    """The captures of ``capture_ids`` that failed because a stage raised on them (a rerun retries them; a file with
    nothing readable in it is failed too, but that is its final result, and a rerun changes no table)."""
    from pyspark.sql import functions as F

    if not capture_ids or store.delta("captures") is None:
        return set()
    rows = (store.read("captures", list(capture_ids)).where((F.col("status") == "failed")
                                         & F.col("error").startswith(FAILED_IN))
            .select("capture_id").collect())
    return {r.capture_id for r in rows}


def mark_failed(spark, store, failed: dict[str, str], units: dict[str, str], run_id: str, rows: dict[str, dict] | None = None):
    """Write the captures row of each failed capture: its existing row (or ``rows[id]``) with status failed and the
    error. ``units``: capture id -> the job's app id (the row goes under ``failed_unit`` of it)."""
    from amqplens.contracts import CAPTURES

    if not failed:
        return
    rows = dict(rows or {})
    missing = [cid for cid in failed if cid not in rows]
    if missing and store.delta("captures") is not None:
        for r in store.read("captures", missing).collect():
            rows[r.capture_id] = r.asDict()
    out = [rows[cid] | {"status": "failed", "error": error, "run_id": run_id} for cid, error in failed.items() if cid in rows]
    if out:
        df = spark.createDataFrame(out, CAPTURES.spark_schema())
        store.write("captures", df, units={r["capture_id"]: failed_unit(units[r["capture_id"]], run_id) for r in out},
                    run_id=run_id)
