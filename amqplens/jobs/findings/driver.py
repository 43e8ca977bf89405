"""The findings on the driver, for inputs that fit (``findings.engine``, ``findings.driver_max_rows``): no Spark job.

What the rules read is small (the whole-capture metric rows, the connections, a few control frames, the filtered
deliveries and flow events), but as Spark queries the 16 rules cost about 60 stages, a few hundred milliseconds each,
whatever the capture's size. Here each input is read from the Delta snapshot's files with pyarrow: the files of the
captures to do, the filter's own columns first, row group by row group, and the rest of the columns only of the row
groups where it keeps rows (memory holds the rows kept, not the table; the rows kept are counted against the cap
before the wide columns are read); the rules (driver_rules.py) run over pandas frames, vectorised per rule and
table; the rows are labelled as ``amqplens.jobs.labels`` labels them and written with pyarrow
(``TableStore.write_rows``). When the rows kept pass ``findings.driver_max_rows``, the read stops and the stage runs
through Spark: the Spark rules (flow.py, settlement.py, connections.py, errors.py) are the reference, and a test runs
both on the findings fixtures and compares every column of every row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.config import Config
from amqplens.contracts import table as table_def
from amqplens.jobs.findings.errors import ERROR_KIND
from amqplens.jobs.findings.inputs import CONNECTION_COLUMNS, CONTROL_COLUMNS, DELIVERY_COLUMNS, FLOW_COLUMNS
from amqplens.jobs.findings.settlement import OUTCOME_KIND
from amqplens.jobs.labels import cap_label

log = logging.getLogger(__name__)

FLOW_WHOLE_COLUMNS = ("capture_id", "connection_id", "channel", "entity", "entity_kind", "metric", "direction", "value",
                      "observed_us", "metric_row_id")
EVENT_COLUMNS = ("event_id", "ts", "event", "alarm_resource", "node", "connection_id", "reply_text", "message")
ERROR_COLUMNS = ("capture_id", "connection_id", "kind", "raised_by", "code", "condition", "count", "bucket_start",
                 "bucket_seconds", "metric_row_id")
LATENCY_COLUMNS = ("capture_id", "metric", "direction", "method", "p50_us", "count")
REQUEST_COLUMNS = ("capture_id", "connection_id", "request_ts", "request_frame_id")
CAPTURE_COLUMNS = ("capture_id", "capture_date", "first_ts", "last_ts", "path")


class TooMany(Exception):
    """The rows kept passed ``findings.driver_max_rows``, or a table the driver cannot read as Spark would: Spark's
    path runs instead."""


@dataclasses.dataclass
class DriverInputs:
    """The rule inputs of the captures to do, as pandas frames (nullable dtypes: null compares as SQL's; timestamps in
    microseconds since the epoch)."""

    conf: Config
    captures: pd.DataFrame
    connections: pd.DataFrame
    control: pd.DataFrame
    flow_whole: pd.DataFrame
    broker_events: pd.DataFrame
    deliveries: pd.DataFrame
    flow_events: pd.DataFrame
    metrics_errors: pd.DataFrame
    metrics_latency: pd.DataFrame
    request_responses: pd.DataFrame
    rows: int  # the rows kept in all

    def conn_times(self) -> pd.DataFrame:
        """(connection_id, conn_start, conn_end): one row per connection."""
        c = self.connections
        return pd.DataFrame({"connection_id": c["connection_id"], "conn_start": c["start_ts"], "conn_end": c["end_ts"]})


_PANDAS = {pa.string(): pd.StringDtype(), pa.large_string(): pd.StringDtype(), pa.int64(): pd.Int64Dtype(),
           pa.int32(): pd.Int32Dtype(), pa.int16(): pd.Int16Dtype(), pa.int8(): pd.Int8Dtype(),
           pa.float64(): pd.Float64Dtype(), pa.bool_(): pd.BooleanDtype()}


def _frame(data: pa.Table, types: dict | None = None) -> pd.DataFrame:
    """Arrow -> pandas with nullable dtypes (``types``: Arrow type -> pandas dtype, default ``_PANDAS``); timestamps as
    int64 microseconds."""
    cols = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in data.columns]
    return pa.table(cols, names=data.column_names).to_pandas(types_mapper=(types or _PANDAS).get)


class _Reader:
    """Scans tables for the driver path, counting the rows kept against the budget (None: no limit)."""

    def __init__(self, store, units: list[str], budget: int | None):
        self.store, self.units, self.budget, self.kept = store, units, budget, 0

    def read(self, name: str, columns, where, *, by_unit: bool = True) -> pd.DataFrame:
        """``columns`` of the rows ``where`` keeps (of the captures to do unless not ``by_unit``): the filter's own
        columns are read first, row group by row group, and the rest only of the row groups where it keeps rows (the
        control frames are 4 rows of 1.84M at 300 MB: 113 row groups read for 3 columns, 4 for 14)."""
        import pyarrow.dataset as ds

        t = table_def(name)
        columns = list(columns)
        schema = pa.schema([t.arrow_schema().field(c).with_nullable(True) for c in columns])  # as Spark reads them
        dt = self.store.delta(name)
        if dt is None:  # not in the lake: no rows (as the Spark path's empty DataFrame)
            return _frame(schema.empty_table())
        data, small, exact = _dataset(self.store, name, dt, self.units if by_unit else None)
        if not exact:  # a file of several units (not written by amqplens): its rows filtered by unit
            (rkey,) = t.replace_by
            where = where & pc.field(rkey).isin(pa.array(self.units, pa.string()))
        groups: list = []
        # rows: the row groups' rows the filter keeps, counted against findings.driver_max_rows before the columns
        # beyond the filter's are read
        for frag in data.get_fragments():
            for group in (frag.split_by_row_group() if frag.metadata.num_row_groups > 1 else [frag]):
                self._count(name, ds.FileSystemDataset([group], data.schema, data.format, data.filesystem), where, group, groups)
        out = []
        if groups:
            kept = ds.FileSystemDataset(groups, data.schema, data.format, data.filesystem)
            out.append(kept.to_table(columns=columns, filter=where, use_threads=False).cast(schema))
        if small is not None:
            # the small files (a small capture's) are read at once, their kept rows counted batch by batch: one by one
            # each costs a millisecond or more to open, count and read again (300 captures: 5,000 files, 4.8 s)
            for batch in small.to_batches(columns=columns, filter=where, use_threads=False):
                self.kept += batch.num_rows
                if self.budget is not None and self.kept > self.budget:
                    raise TooMany(f"more than findings.driver_max_rows={self.budget} rows kept (at table {name})")
                out.append(pa.Table.from_batches([batch]).cast(schema))
        return _frame(pa.concat_tables(out) if out else schema.empty_table())

    def _count(self, name: str, part, where, fragment, groups: list) -> None:
        """Count the rows of ``part`` (a dataset of ``fragment``) that ``where`` keeps; keep the fragment if any."""
        n = part.count_rows(filter=where)
        if n:
            self.kept += n
            if self.budget is not None and self.kept > self.budget:
                raise TooMany(f"more than findings.driver_max_rows={self.budget} rows kept (at table {name})")
            groups.append(fragment)


SMALL_FILE = 1 << 20  # bytes: a file below this is read whole (filtered), not counted row group by row group first


def _dataset(store, name: str, dt, units: list[str] | None):
    """(the snapshot's files of ``units`` (None: all) as pyarrow datasets (``TableStore.dataset``): the large files'
    and the small files' (None when there are none), whether each file holds one unit)."""
    files, exact = store.unit_files(name, dt, units)
    small = [f for f in files if f[2] < SMALL_FILE]
    return store.dataset(name, [f for f in files if f[2] >= SMALL_FILE]), (store.dataset(name, small) if small else None), exact


def read_inputs(store, conf: Config, capture_ids: list[str], budget: int | None) -> DriverInputs:
    """Every rule input of ``capture_ids``; raises TooMany past ``budget`` rows kept."""
    r = _Reader(store, capture_ids, budget)
    f = pc.field
    control = f("performative") == "attach"
    control = control | ((f("class_name") == "basic") & f("method_name").isin(["consume", "cancel"]))
    heartbeat = f("connection_id").is_valid() & pc.match_substring(pc.utf8_lower(f("message")), "missed heartbeats")
    wanted = (f("outcome").isin(list(OUTCOME_KIND)) | f("redelivered")
              | (f("settle_latency_us") >= conf["findings.slow_settle_min_ms"] * 1000))
    latency = ((f("bucket_seconds") == 0) & (f("entity_kind") == "capture")
               & f("metric").isin(["publish_confirm", "deliver_settle", "transfer_settle"])
               & (f("count") >= conf["findings.slow_settle_min_count"]))
    inp = DriverInputs(
        conf,
        # rows: one per capture
        captures=r.read("captures", CAPTURE_COLUMNS, f("capture_id").is_valid()),
        # rows: one per connection
        connections=r.read("connections", CONNECTION_COLUMNS, f("source") == "capture"),
        # rows: the attach, basic.consume and basic.cancel frames: a few per link and consumer
        control=r.read("frames", CONTROL_COLUMNS, control),
        # rows: <= 10 metrics x entities x 2 directions (the whole-capture rows)
        flow_whole=r.read("metrics_flow", FLOW_WHOLE_COLUMNS, f("bucket_seconds") == 0),
        # rows: the alarms and missed-heartbeat lines of every log ingested (broker_events is per log)
        broker_events=r.read("broker_events", EVENT_COLUMNS, f("event").isin(["alarm_set", "alarm_cleared"]) | heartbeat,
                             by_unit=False),
        # rows: the deliveries with an outcome a rule names, redelivered, or settled slower than slow_settle_min_ms
        deliveries=r.read("deliveries", DELIVERY_COLUMNS, wanted),
        # rows: the blocked, unblocked and channel.flow events
        flow_events=r.read("flow_events", FLOW_COLUMNS, f("event").isin(["blocked", "unblocked", "flow"])),
        # rows: the connection rows of the error kinds in time buckets (the rest of errors()'s filter: driver_rules)
        metrics_errors=r.read("metrics_errors", ERROR_COLUMNS, (f("entity_kind") == "connection")
                              & (f("bucket_seconds") > 0) & f("kind").isin(list(ERROR_KIND))),
        # rows: <= 3 per capture and direction (the capture rows of the settle latencies)
        metrics_latency=r.read("metrics_latency", LATENCY_COLUMNS, latency),
        # rows: channel.open and begin requests
        request_responses=r.read("request_responses", REQUEST_COLUMNS,
                                 f("request").isin(["channel.open", "begin"])),
        rows=0,
    )
    inp.rows = r.kept
    return inp


def _value(v):
    return None if v is None or v is pd.NA else v


def records(df: pd.DataFrame) -> list[dict]:
    """The rows as dicts, pandas' NA as None."""
    return [{k: _value(v) for k, v in row.items()} for row in df.to_dict("records")]


# ------------------------------------------------------------------ labels (amqplens/jobs/labels.py, per finding row)
def _endpoint(ip, port):
    if ip is None or port is None:
        return None
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _json_name(text):
    """get_json_object(text, '$.connection_name'): a string as is, another value as JSON, null when absent."""
    import json

    if text is None:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return None
    v = v.get("connection_name") if isinstance(v, dict) else None
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"))


def connection_labels(connections: pd.DataFrame) -> dict:
    """connection_id -> ``client -> server "name"`` (labels.connection_labels)."""
    out: dict[str, str | None] = {}
    for c in records(connections[["connection_id", "client_properties_json", "client_container_id", "ip_version",
                                  "client_ip", "client_port", "server_ip", "server_port"]]):
        name = _json_name(c["client_properties_json"])
        name = name if name is not None else c["client_container_id"]
        ends: str | None = "trace"
        if c["ip_version"] != 0:
            a, b = _endpoint(c["client_ip"], c["client_port"]), _endpoint(c["server_ip"], c["server_port"])
            ends = None if a is None or b is None else f"{a} -> {b}"
        quoted = f' "{name}"' if name is not None and name != "" else ""
        if c["connection_id"] is not None:
            out.setdefault(c["connection_id"], None if ends is None else ends + quoted)
    return out


def first_non_null(df: pd.DataFrame, keys: list[str], column: str) -> dict:
    """(keys) -> the first non-null ``column`` (Spark's first(ignorenulls)), groups with a null key left out."""
    d = df.dropna(subset=[*keys, column])
    firsts = d.groupby(keys, sort=False)[column].first()
    return {(k if isinstance(k, tuple) else (k,)): v for k, v in firsts.items()}


def label_maps(inp: DriverInputs, connection_ids: set) -> dict:
    """The maps ``label`` looks entities up in; the connections' labels of ``connection_ids`` only (those findings
    name: a few of 10,000 connections)."""
    ctl = inp.control
    conns = inp.connections
    consume = ctl[((ctl["class_name"] == "basic") & (ctl["method_name"] == "consume") & ctl["consumer_tag"].notna()
                   & (ctl["consumer_tag"] != "")).fillna(False)]
    attach = ctl[((ctl["performative"] == "attach") & ctl["handle"].notna()).fillna(False)]
    return {
        "capture": {c["capture_id"]: cap_label(c["path"]) for c in records(inp.captures[["capture_id", "path"]])},
        "connection": connection_labels(conns[conns["connection_id"].isin(list(connection_ids))]),
        "consumer": first_non_null(consume, ["connection_id", "consumer_tag"], "queue"),
        "link": {(cid, ch, f"handle {h}"): name
                 for (cid, ch, h), name in first_non_null(attach, ["connection_id", "channel", "handle"], "link_name").items()},
    }


def label(r: dict, maps: dict) -> str | None:
    """labels._label and with_labels for one finding row (coalesced with its entity)."""
    kind, cid, channel, entity = r["entity_kind"], r["connection_id"], r["channel"], r["entity"]
    conn_label = maps["connection"].get(cid) if cid is not None else None
    conn = conn_label if conn_label is not None else cid
    ch = None if conn is None or channel is None else f"{conn} ch {channel}"
    tail = None
    if kind in ("consumer", "link") and entity is not None and cid is not None and channel is not None:
        tail = entity[len(cid) + len(str(channel)) + 2:]
    text: str | None
    if kind == "capture":
        cap = maps["capture"].get(r["capture_id"])
        text = cap if cap is not None else entity
    elif kind == "connection":
        text = conn
    elif kind == "channel":
        text = ch
    elif kind == "session":
        text = None if conn is None or channel is None else f"{conn} session ch {channel}"
    elif kind == "consumer":
        q = maps["consumer"].get((cid, tail)) if tail is not None else None
        text = None if ch is None or tail is None else f"{ch} consumer {tail}" + (f" queue {q}" if q is not None else "")
    elif kind == "link":
        name = maps["link"].get((cid, channel, tail)) if tail is not None and tail.startswith("handle ") else None
        link = f"{name} ({tail})" if name is not None else tail
        text = " ".join(p for p in (ch, "link", link if link != "" else None) if p is not None)
    elif kind == "exchange":
        text = None if entity is None else f"exchange {entity}"
    else:
        text = None if kind is None or entity is None else f"{kind} {entity}"
    return text if text is not None else entity


# ------------------------------------------------------------------ findings() on the driver
def finish(inp: DriverInputs, raw: list[dict]) -> list[dict]:
    """job.findings for the driver's raw rows: partial, the capture's times, finding_id, entity_label."""
    from amqplens.contracts.findings import FINDINGS

    c = inp.connections
    gap = ((c["missing_bytes_to_server"] + c["missing_bytes_to_client"]) > 0).fillna(False)
    gap_conns = set(c.loc[gap, "connection_id"].dropna())
    gap_caps = set(c.loc[gap, "capture_id"].dropna())
    caps = {r["capture_id"]: r for r in records(inp.captures)}
    maps = label_maps(inp, {r["connection_id"] for r in raw if r["connection_id"] is not None})
    out = []
    for r in raw:
        cap = caps.get(r["capture_id"])
        if cap is None:  # the inner join with captures
            continue
        r = dict(r)
        r["partial"] = (r["connection_id"] in gap_conns) if r["connection_id"] is not None else (r["capture_id"] in gap_caps)
        start = next((v for v in (r["start_ts"], r["end_ts"], cap["first_ts"]) if v is not None), 0)
        r["end_ts"] = next(v for v in (r["end_ts"], cap["last_ts"], start) if v is not None)
        r["start_ts"] = start
        r["entity"] = next((v for v in (r["entity"], r["connection_id"], r["capture_id"]) if v is not None), None)
        r["count"] = 0 if r["count"] is None else r["count"]
        text = "|".join(v for v in (r["capture_id"], r["kind"], r["entity"], r["key"]) if v is not None)
        r["finding_id"] = hashlib.sha256(text.encode()).hexdigest()
        r["capture_date"] = cap["capture_date"]
        r["entity_label"] = label(r, maps)
        out.append({col: r[col] for col in FINDINGS.column_names})
    return out
