"""The metric tables on the driver, for lakes that fit (``metrics.engine``, ``metrics.driver_max_rows``): no Spark job.

On a small capture the metrics stage was Spark's fixed costs: about 44 jobs and 11,700 round trips to the JVM for a
few thousand rows (10 s of a 0.94 MB capture's 23 s run). Here the tables the stage reads are read from the Delta
snapshot's files of the captures to do with pyarrow (the columns each metric reads), the rows are computed column by
column in pandas and numpy as the Spark queries compute them (each function below names the one it follows), the
rows are labelled as ``amqplens.jobs.labels`` labels them, and each table is written with pyarrow
(``TableStore.write_arrow``), ``metrics_errors`` last; two tables at a time, in driver threads. Python runs per table,
per distinct entity (its label) and per output row (its id's hash), never per frame or delivery.

The Spark queries (settlement.py, faults.py, flow.py, percentiles.py with grouped.py and e2e.py) stay the reference
and the path for larger lakes: a test runs both on every fixture and compares every column of every row. What the
driver cannot do as Spark does (a time Python's calendar cannot write as Spark's text, before year 1 or after 9999)
raises ``Unsupported`` and the stage runs through Spark instead.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.contracts import table as table_def
from amqplens.contracts import expectations as ex
from amqplens.decode.common.rows import STAGE_FRAME
from amqplens.jobs.findings.driver import _PANDAS, connection_labels, first_non_null, label
from amqplens.jobs.findings.driver import _frame as _nullable
from amqplens.jobs.labels import cap_label
from amqplens.jobs.metrics.e2e import AGAIN, FIRST, NULL_US, PUBLISH, REQUEUE, REQUEUED, _segment_starts, fifo_columns
from amqplens.jobs.metrics.fifo_events import key_starts
from amqplens.jobs.metrics.flow import ENTITY
from amqplens.jobs.metrics.frame import Frame
from amqplens.jobs.metrics.grouped import METRICS, group_table
from amqplens.jobs.metrics.inputs import CONTROL_COLUMNS, DELIVERY_COLUMNS
from amqplens.jobs.metrics.percentiles import E2E_COLUMNS
from amqplens.jobs.metrics.settlement import UNSETTLED_AT_CLOSE

log = logging.getLogger(__name__)


STRING = pd.StringDtype("pyarrow")  # Arrow's strings: compared, hashed and grouped in Arrow, not object by object
_TYPES = {**_PANDAS, pa.string(): STRING, pa.large_string(): STRING}


def _frame(data: pa.Table) -> pd.DataFrame:
    """Arrow -> pandas with nullable dtypes (strings kept in Arrow); timestamps as int64 microseconds."""
    return _nullable(data, _TYPES)


class Unsupported(Exception):
    """A value the driver cannot treat exactly as Spark does: the stage runs through Spark."""


# ------------------------------------------------------------------ Spark's column semantics in pandas
def _true(cond) -> np.ndarray:
    """A condition as ``where`` reads it: null is false."""
    if isinstance(cond, (bool, np.bool_)):
        return np.asarray(cond)
    return pd.Series(cond).fillna(False).astype(bool).to_numpy()


def _text(s: pd.Series) -> pd.Series:
    """``cast(x as string)`` for strings and integers (nullable)."""
    return s.astype(STRING)


def _sarr(s) -> pa.ChunkedArray | pa.Array:
    """A Series (or a scalar) as Arrow strings (integers written as Spark's cast writes them)."""
    a = pa.array(s, from_pandas=True) if isinstance(s, pd.Series) else pa.scalar(s, pa.large_string())
    return a if pa.types.is_large_string(a.type) else pc.cast(a, pa.large_string())


def _sser(a, index) -> pd.Series:
    a = a if isinstance(a, pa.ChunkedArray) else pa.chunked_array([a])
    return pd.Series(pd.arrays.ArrowStringArray(a.cast(pa.large_string())), index=index)


def pick(cond, a, b, index) -> pd.Series:
    """Strings: ``a`` where ``cond`` (null: false), else ``b`` (Series or scalars, None for null), in Arrow."""
    return _sser(pc.if_else(pa.array(_true(cond)), _sarr(a), _sarr(b)), index)


def concat_ws(sep: str, *parts: pd.Series) -> pd.Series:
    """Spark's ``concat_ws``: the non-null parts joined by ``sep``; "" when every part is null."""
    acc = _sarr(parts[0])
    for p in parts[1:]:
        p = _sarr(p)
        joined = pc.binary_join_element_wise(acc, p, pa.scalar(sep, pa.large_string()))
        acc = pc.if_else(pc.is_null(p), acc, pc.if_else(pc.is_null(acc), p, joined))
    return _sser(pc.fill_null(acc, ""), parts[0].index)


def concat(*parts) -> pd.Series:
    """Spark's ``concat``: null when any part is null."""
    acc = None
    for p in parts:
        acc = p if acc is None else acc + p
    return acc


def _str(index, value) -> pd.Series:
    return pd.Series(value, index=index, dtype=STRING)


def _int(index, value=None, dtype="Int64") -> pd.Series:
    return pd.Series(pd.NA if value is None else value, index=index, dtype=dtype)


def bucket_of(ts: pd.Series, bucket_s: int) -> pd.Series:
    """``frame.bucket_of`` on microseconds: floor(us / b) * b, the division in doubles as Spark's ``/``."""
    b = bucket_s * 1_000_000
    v = ts.to_numpy(dtype="float64", na_value=np.nan)
    f = np.floor(v / b)
    out = np.where(np.isnan(f), 0, f).astype(np.int64) * b
    return pd.Series(pd.array(out, dtype="Int64")).where(~np.isnan(f), pd.NA).set_axis(ts.index)


def _extreme(parts: tuple[pd.Series, ...], pick, empty: int) -> pd.Series:
    """The ``pick`` (np.maximum, np.minimum) of the non-null values per row, null when all are null; Int64 parts
    in numpy (a null as ``empty``, which no pick prefers to a value), others through pandas."""
    if not all(isinstance(p.dtype, pd.Int64Dtype) and p.index.equals(parts[0].index) for p in parts):
        frame = pd.concat(parts, axis=1)
        out = frame.max(axis=1, skipna=True) if pick is np.maximum else frame.min(axis=1, skipna=True)
        return out.astype(parts[0].dtype)
    values = pick.reduce([p.to_numpy(dtype=np.int64, na_value=empty) for p in parts])
    none = np.logical_and.reduce([p.isna().to_numpy() for p in parts])
    return pd.Series(pd.arrays.IntegerArray(values, none), index=parts[0].index)


def greatest(*parts: pd.Series) -> pd.Series:
    """Spark's ``greatest``: the largest non-null value, null when all are null."""
    return _extreme(parts, np.maximum, np.iinfo(np.int64).min)


def least(*parts: pd.Series) -> pd.Series:
    return _extreme(parts, np.minimum, np.iinfo(np.int64).max)


def group(df: pd.DataFrame, keys: list[str]):
    """Spark's ``groupBy``: nulls are a key value like any other."""
    return df.groupby(keys, dropna=False, sort=False)


# ------------------------------------------------------------------ the shape every metric table shares (frame.py)
def with_entities(df: pd.DataFrame, specs) -> pd.DataFrame:
    """``frame.with_entities``: one row per (row, entity it counts for), the capture always.

    ``specs``: (kind, name Series, connection Series or None, channel Series or None), aligned with ``df``."""
    base = df.drop(columns=[c for c in ("connection_id", "channel") if c in df.columns])
    out = []
    for kind, name, conn, ch in [("capture", df["capture_id"], None, None), *specs]:
        keep = _true(name.notna())
        part = base[keep].copy()
        part["entity_kind"] = kind
        part["entity"] = _text(name[keep]).to_numpy()
        part["connection_id"] = (_str(part.index, pd.NA) if conn is None else _text(conn[keep])).to_numpy()
        part["channel"] = (_int(part.index, dtype="Int32") if ch is None else ch[keep].astype("Int32")).to_numpy()
        out.append(part)
    rows = pd.concat(out, ignore_index=True)
    for c in ("entity_kind", "entity", "connection_id"):
        rows[c] = rows[c].astype(STRING)
    rows["channel"] = rows["channel"].astype("Int32")
    return rows


def with_buckets(df: pd.DataFrame, caps: pd.DataFrame, bucket_s: int, ts: str = "ts") -> pd.DataFrame:
    """``frame.with_buckets``: each row in its time bucket and in the whole capture (an inner join with the captures)."""
    # rows: caps holds one row per capture (``Inputs.caps``): df's, then x 2
    d = df.merge(caps[["capture_id", "capture_date", "first_ts"]], on="capture_id", how="inner")
    timed = d.assign(bucket_start=bucket_of(d[ts], bucket_s), bucket_seconds=np.int32(bucket_s))
    whole = d.assign(bucket_start=d["first_ts"].fillna(0).astype("Int64"), bucket_seconds=np.int32(0))
    out = pd.concat([timed, whole], ignore_index=True).drop(columns=["first_ts"])
    out["bucket_seconds"] = out["bucket_seconds"].astype("Int32")
    return out


def _ts_text(us) -> str:
    """A timestamp (microseconds, UTC) as Spark's ``cast(x as string)`` writes it."""
    try:
        t = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=int(us))
    except OverflowError:
        raise Unsupported(f"a time of {us} microseconds since 1970 is outside years 1-9999") from None
    text = f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    return text + (f".{t.microsecond:06d}".rstrip("0") if t.microsecond else "")


def _key_text(s: pd.Series, kind: str) -> pa.Array:
    """A key column as Spark's text of it, nulls as \\N (``frame.add_row_id``); times and dates written once per
    distinct value (a table's rows share a few buckets and captures)."""
    if kind in ("timestamp", "date"):
        write = _ts_text if kind == "timestamp" else (lambda v: v.isoformat())
        texts = {v: write(v) for v in s.dropna().unique()}
        s = s.astype(object).map(texts)
    return pa.array(s.astype(STRING).fillna("\\N"), pa.string())


def add_row_id(df: pd.DataFrame, keys: list[str], table) -> pd.DataFrame:
    """``frame.add_row_id``: sha2 of the keys' text joined by |."""
    types = {c.name: c.type for c in table.columns}
    if not len(df):
        return df.assign(metric_row_id=pd.Series([], index=df.index, dtype=STRING))
    text = pc.binary_join_element_wise(*[_key_text(df[k], types[k]) for k in keys], "|")
    ids = [hashlib.sha256(t.encode()).hexdigest() for t in text.to_pylist()]
    return df.assign(metric_row_id=pd.Series(ids, index=df.index, dtype=STRING))


# ------------------------------------------------------------------ inputs (inputs.py)
FLOW_COLUMNS = ("event_id", "connection_id", "capture_id", "ts", "frame_id", "entity", "channel", "consumer_tag",
                "link_handle", "event", "prefetch_count", "in_flight", "flow_active", "blocked", "reason", "link_credit",
                "incoming_window", "remote_incoming_window")
CONNECTION_COLUMNS = ("connection_id", "capture_id", "dialect", "start_ts", "end_ts", "syn_seen", "handshake_rtt_us",
                      "heartbeat", "server_idle_timeout_ms", "client_idle_timeout_ms", "client_properties_json",
                      "client_container_id", "ip_version", "client_ip", "client_port", "server_ip", "server_port")
HEARTBEAT_COLUMNS = ("capture_id", "connection_id", "direction", "dialect", "ts", "frame_type")
FLAG_COLUMNS = ("capture_id", "sent_ts", "dialect", "connection_id", "channel", "flags")


class Inputs:
    """What the four tables read of the captures to do, as pandas (nullable dtypes, times in microseconds): the small
    inputs at once, then ``parts``: "flow" (every frame's heartbeat columns, the flow events, the deliveries' flags)
    and "deliveries"; ``each_table`` reads one part, computes its tables, lets it go and reads the other."""

    def __init__(self, store, capture_ids: list[str], parts: tuple[str, ...] = ("flow", "deliveries")):
        self._store, self._ids = store, capture_ids
        self.captures = _frame(self._read("captures", ("capture_id", "capture_date", "first_ts", "path")))
        f = pc.field
        control = ((f("class_name") == "basic") & (f("method_name") == "consume")) | (
            (f("class_name") == "connection") & f("method_name").isin(["open-ok", "close"])) | (
            (f("class_name") == "channel") & (f("method_name") == "close")) | f("performative").isin(
            ["open", "attach", "detach", "end", "close"]) | f("decode_error").is_valid()
        # a scan of its own keeps only the control frames of each batch as it is read: every frame's 18 columns at once
        # were the peak of the stage's memory (1.8 GB for the 300 MB load capture's 1.85M frames)
        self.control = _frame(self._read("frames", CONTROL_COLUMNS, where=control))
        self.connections = _frame(self._read("connections", CONNECTION_COLUMNS))
        self.requests = _frame(self._read("request_responses", ("capture_id", "request_ts", "dialect", "request",
                                                                "latency_us", "connection_id", "channel")))
        self.decode_errors = _frame(self._read("decode_errors", ("capture_id", "ts", "connection_id", "stage", "reason")))
        for part in parts:
            getattr(self, f"read_{part}")()

    def _read(self, name, columns, where=None):
        t = table_def(name)
        schema = pa.schema([t.arrow_schema().field(c).with_nullable(True) for c in columns])
        data = self._store.read_arrow(name, list(columns), self._ids, threads=True, where=where)  # the run goes on after it
        return schema.empty_table() if data.num_columns == 0 else data.cast(schema)

    def read_flow(self) -> None:
        """metrics_flow's and metrics_errors' large inputs."""
        # the frames for heartbeats: every frame, six columns, kept in Arrow, the text columns as their Parquet
        # dictionaries' codes (a capture's frames name a few connections): the 2 GB load capture's 12.4M frames as
        # pandas strings were about 2 GB, as codes about 0.3 GB
        self.frames = self._store.read_arrow("frames", HEARTBEAT_COLUMNS, self._ids, threads=True,
                                             dictionary=HEARTBEAT_COLUMNS[:4] + HEARTBEAT_COLUMNS[5:])
        self.flow_events = _frame(self._read("flow_events", FLOW_COLUMNS))
        self.flagged = _anomalous_deliveries(self._read("deliveries", FLAG_COLUMNS, where=pc.field("flags").is_valid()))

    def drop_flow(self) -> None:
        self.frames = self.flow_events = None

    def read_deliveries(self) -> None:
        """metrics_latency's and metrics_settlement's large input."""
        # a shallow copy of the control frames: another thread may be reading them (``view``)
        self.deliveries = _with_queue(_frame(self._read("deliveries", DELIVERY_COLUMNS)), self.control.copy(deep=False))

    def view(self) -> "Inputs":
        """The same inputs, each frame a shallow copy: a thread of its own reads its view (pandas may consolidate a
        frame's blocks or fill its column cache when read: in the view's own objects, never in another thread's)."""
        out = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, pd.DataFrame):
                setattr(out, name, value.copy(deep=False))
        return out

    def caps(self) -> pd.DataFrame:
        return self.captures[["capture_id", "capture_date", "first_ts"]].drop_duplicates("capture_id")


def _anomalous_deliveries(deliveries: pa.Table) -> pd.DataFrame:
    """``faults.peer_anomalies``' delivery rows: one per flag of a delivery with flags (a null flag too, as explode)."""
    flags = deliveries.column("flags").combine_chunks() if deliveries.num_rows else pa.array([], pa.list_(pa.string()))
    n = pc.fill_null(pc.list_value_length(flags), 0)
    rows = deliveries.filter(pc.greater(n, 0))
    flags = rows.column("flags").combine_chunks() if rows.num_rows else pa.array([], pa.list_(pa.string()))
    parent = pc.list_parent_indices(flags)
    base = rows.select(["capture_id", "sent_ts", "dialect", "connection_id", "channel"]).take(parent)
    return _frame(base.append_column("condition", pc.list_flatten(flags)))


def _with_queue(deliveries: pd.DataFrame, control: pd.DataFrame) -> pd.DataFrame:
    """``inputs.deliveries_with_queue``: a delivery without a queue takes its consumer's from its basic.consume."""
    c = control
    consume = c[_true((c["class_name"] == "basic") & (c["method_name"] == "consume") & c["consumer_tag"].notna()
                      & (c["consumer_tag"] != "") & c["connection_id"].notna())]
    # rows: one per (connection, tag): the left join keeps the deliveries' rows
    consumes = consume.groupby(["connection_id", "consumer_tag"], sort=False)["queue"].first().rename("_cq").reset_index()
    d = deliveries.merge(consumes, on=["connection_id", "consumer_tag"], how="left")
    d["queue"] = d["queue"].fillna(d["_cq"]).astype(STRING)
    return d.drop(columns=["_cq"])


def delivery_entities(d: pd.DataFrame):
    """``inputs.delivery_entities`` on pandas."""
    conn, ch = d["connection_id"], d["channel"]
    ten = d["dialect"] == "1.0"
    exchange = pick(d["exchange"] == "", "(default)", d["exchange"], d.index)
    return [
        ("connection", conn, conn, None),
        ("channel", concat_ws("/", conn, ch), conn, ch),
        ("consumer", pick(d["consumer_tag"].notna(), concat_ws("/", conn, ch, d["consumer_tag"]), None, d.index), conn, ch),
        ("link", pick(d["link_name"].notna(), concat_ws("/", conn, ch, d["link_name"]), None, d.index), conn, ch),
        ("queue", pick(~ten, d["queue"], None, d.index), None, None),
        ("address", pick(ten, d["queue"], None, d.index), None, None),
        ("exchange", exchange, None, None),
    ]


# ------------------------------------------------------------------ metrics_settlement (settlement.py)
def settlement(inp: Inputs, bucket_s: int) -> pd.DataFrame:
    d = inp.deliveries
    atom = ["capture_id", "dialect", "direction", "connection_id", "channel", "consumer_tag", "link_name", "queue",
            "exchange", "outcome", "settle_mode"]
    # rows: <= deliveries (alike in every column read, counted once)
    a = d.assign(ts=bucket_of(d["sent_ts"], bucket_s),
                 _re=d["redelivered"].fillna(False).astype("int64"),
                 # null where the outcome is (Spark's isin of null): an atom of unknown outcome sums to null
                 _un=pd.Series(d["outcome"].isin(UNSETTLED_AT_CLOSE).astype("int64"), dtype="Int64").where(d["outcome"].notna(), pd.NA))
    g = group(a, [*atom, "ts"])
    atoms = pd.DataFrame({"n": g.size(), "n_re": g["_re"].sum(), "n_un": g["_un"].sum(min_count=1)}).reset_index()
    rows = with_buckets(with_entities(atoms, delivery_entities(atoms)), inp.caps(), bucket_s)
    measures = [
        rows.assign(measure="outcome", value=rows["outcome"], w=rows["n"]),
        rows.assign(measure="settle_mode", value=rows["settle_mode"].fillna("unknown"), w=rows["n"]),
        rows.assign(measure="redelivered", value="true", w=rows["n_re"]),
        rows.assign(measure="unsettled_at_close", value="true", w=rows["n_un"]),
    ]
    m = pd.concat(measures, ignore_index=True)
    m["value"] = m["value"].astype(STRING)
    gkeys = [*Frame.KEYS, "direction"]
    keys = [*gkeys, "measure", "value"]
    # rows: atoms x entities (<= 8) x 2 buckets x 4 measures, grouped
    g = group(m, keys)
    out = pd.DataFrame({"count": g["w"].sum(min_count=1), "rows": g["n"].sum()}).reset_index()
    red = out["rows"].where(out["measure"] == "redelivered")
    out["messages"] = red.groupby([out[k] for k in gkeys], dropna=False, sort=False).transform("max").astype("Int64")
    out["rate"] = (out["count"].astype("Float64") / out["messages"].astype("Float64"))
    return out


# ------------------------------------------------------------------ metrics_errors (faults.py)
def _error_rows(df, ts, dialect, kind, raised_by, code, condition) -> pd.DataFrame:
    idx = df.index
    as_s = lambda v, dtype=STRING: v if isinstance(v, pd.Series) else pd.Series(v, index=idx, dtype=dtype)  # noqa: E731
    return pd.DataFrame({
        "capture_id": df["capture_id"].astype(STRING), "ts": as_s(ts, "Int64").astype("Int64"),
        "dialect": as_s(dialect).astype(STRING), "kind": as_s(kind).astype(STRING),
        "connection_id": df["connection_id"].astype(STRING),
        "channel": as_s(df["channel"] if "channel" in df else pd.NA, "Int32").astype("Int32"),
        "raised_by": as_s(raised_by).astype(STRING), "code": as_s(code, "Int32").astype("Int32"),
        "condition": as_s(condition).astype(STRING)}, index=idx)


def errors(inp: Inputs, bucket_s: int) -> pd.DataFrame:
    f = inp.control
    is_close = f["method_name"] == "close"
    conds = [_true((f["class_name"] == "channel") & is_close), _true((f["class_name"] == "connection") & is_close),
             _true(f["performative"] == "detach"), _true(f["performative"] == "end"), _true(f["performative"] == "close")]
    kind = pd.Series(np.select(conds, ["channel_exception", "connection_exception", "link_error", "session_error",
                                       "connection_error"], ""), index=f.index)
    failed = _true((f["reply_code"].notna() & (f["reply_code"] != 200)) | f["error_condition"].notna())
    c = f[(kind != "").to_numpy() & failed]
    first_part = lambda s, sep: pd.Series([None if v is pd.NA or v is None else v.split(sep)[0] for v in s],  # noqa: E731
                                          index=s.index, dtype=STRING)
    closes = _error_rows(c, c["ts"], c["dialect"], kind[c.index],
                         pd.Series(np.where(_true(c["direction"] == "to_client"), "broker", "client"), index=c.index,
                                   dtype=STRING),
                         c["reply_code"], c["error_condition"].fillna(first_part(c["reply_text"].fillna(""), " - ")))
    b = f[_true(f["decode_error"].notna())]
    bad = _error_rows(b, b["ts"], b["dialect"], "decode_error", pd.NA, pd.NA, "frame:" + first_part(b["decode_error"], ":"))
    e = inp.decode_errors
    # rows: one caps row per capture: decode_errors
    e = e[_true(e["stage"] != STAGE_FRAME)].merge(inp.caps()[["capture_id", "first_ts"]], on="capture_id", how="inner")
    decode = _error_rows(e, e["ts"].fillna(e["first_ts"]).fillna(0), pd.NA, "decode_error", pd.NA, pd.NA,
                         concat_ws(":", e["stage"], e["reason"]))
    fl = inp.flagged
    flagged = _error_rows(fl, fl["sent_ts"], fl["dialect"], "peer_anomaly", pd.NA, pd.NA, fl["condition"])
    ev = inp.flow_events
    # three-valued, as quality.anomaly's column: an unknown event is neither benign nor an anomaly
    benign = pd.Series(False, index=ev.index, dtype="boolean")
    for event, reasons in ex.REASON_NOT_ANOMALY.items():
        benign = benign | ((ev["event"] == event) & (True if reasons is None else ev["reason"].isin(reasons)))
    fa = ev[_true(ev["reason"].notna() & ~benign)]
    flow = _error_rows(fa, fa["ts"], pd.NA, "peer_anomaly", pd.NA, pd.NA, fa["reason"])
    found = pd.concat([closes, bad, decode, flagged, flow], ignore_index=True)
    conn, ch = found["connection_id"], found["channel"]
    rows = with_entities(found, [("connection", conn, conn, None),
                                 ("channel", pick(found["kind"] == "channel_exception", concat_ws("/", conn, ch), None, found.index),
                                  conn, ch)])
    keys = [*Frame.KEYS, "kind", "raised_by", "code", "condition"]
    # rows: the errors found x 2 entities x 2 buckets, grouped
    b2 = with_buckets(rows, inp.caps(), bucket_s)
    return group(b2, keys).size().rename("count").reset_index()


# ------------------------------------------------------------------ metrics_flow (flow.py)
def _numbers(s: pd.Series, dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """A nullable column as (values, null mask) in numpy: a null's value is 0."""
    return s.to_numpy(dtype=dtype, na_value=0), s.isna().to_numpy()


def _greatest_numbers(a, am, b, bm) -> tuple[np.ndarray, np.ndarray]:
    """Spark's ``greatest`` of two nullable integer columns: the larger non-null value, null when both are null."""
    return np.where(am, b, np.where(bm, a, np.maximum(a, b))), am & bm


def _bucket_numbers(v: np.ndarray, null: np.ndarray, bucket_s: int) -> tuple[np.ndarray, np.ndarray]:
    """``bucket_of`` on (values, null mask): floor(us / b) * b, the division in doubles as Spark's ``/``."""
    b = bucket_s * 1_000_000
    f = np.floor(np.where(null, np.nan, v.astype(np.float64)) / b)
    bad = np.isnan(f)
    return np.where(bad, 0, f).astype(np.int64) * b, bad


def _looked_up(values: np.ndarray, null: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, null mask) at the positions ``at`` (-1: not found, null)."""
    found = at >= 0
    v, m = np.zeros(len(at), values.dtype), np.ones(len(at), np.bool_)
    v[found], m[found] = values[at[found]], null[at[found]]
    return v, m


def _index_in(values: pd.Series, keys: pd.Series) -> np.ndarray:
    """Each value's position in ``keys`` (unique, no null), -1 where it is not there or null: Arrow's hash lookup."""
    key = _sarr(keys)
    found = pc.index_in(_sarr(values), value_set=key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key)
    return pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _entity_runs(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``ev``'s rows sorted by entity, ts, stream_offset, event_id (nulls first, stably: Arrow's multi-key sort, as
    Spark's window orders an entity's rows) and, in that order, whether each row is of the row before's entity (its
    entity columns all equal, nulls equal, as a window's partition keys)."""
    keys = [*ENTITY, "ts", "stream_offset", "event_id"]
    cols = pa.table({k: pa.array(ev[k], from_pandas=True) for k in keys})
    order = pc.sort_indices(cols, sort_keys=[(k, "ascending", "at_start") for k in keys]).to_numpy()
    return order, ~key_starts(cols.select(list(ENTITY)).take(pa.array(order)), ENTITY)


def _entity_names(first: pd.DataFrame) -> pd.DataFrame:
    """``flow._intervals``' naming, once per entity (``first``: one row of each): its kind, name and channel."""
    c, ch, kind = first["connection_id"], first["channel"], first["entity"]
    handle = concat(_str(first.index, "handle "), _text(first["link_handle"]))
    dest = concat(_str(first.index, "destination "), first["consumer_tag"])
    conds = [_true(kind == "connection"), _true(kind == "consumer"), _true(kind == "link")]
    name = pd.Series(np.select(conds, [c.astype(object).to_numpy(),
                                       concat_ws("/", c, ch, first["consumer_tag"]).astype(object).to_numpy(),
                                       concat_ws("/", c, ch, handle.fillna(dest)).astype(object).to_numpy()],
                               concat_ws("/", c, ch).astype(object).to_numpy()), index=first.index, dtype=STRING)
    return pd.DataFrame({"entity_kind": kind.astype(STRING), "entity": name, "connection_id": c.astype(STRING),
                         "channel": ch.where(_true(kind != "connection"), pd.NA).astype("Int32")})


def _state_metrics(inp: Inputs, bucket_s: int) -> pd.DataFrame:
    """``flow._state_metrics`` (``_intervals``, ``_cut``, the sums per group) in numpy on each event's numbers: each
    flow event's state lasts from its time to its entity's next event's (or its connection's end); each interval
    counts in the bucket it starts in, the one it ends in (once if the same) and the whole capture. The entity's text
    columns are made once per entity, never per interval; the sums per group by Arrow's group-by."""
    ev = inp.flow_events
    # the causing frame's stream_offset: the digits after the frame_id's last "-" (Spark: element_at(split(..), -1)
    # cast to long), in Arrow; what is not a number of at most 18 digits is null, never an error
    last = pc.extract_regex(_sarr(ev["frame_id"]), r"(?:^|-)(?P<o>\d{1,18})$")
    offset = pc.cast(pc.struct_field(last, [0]), pa.int64())
    ev = ev.assign(stream_offset=pd.Series(pd.array(offset.to_pandas(types_mapper=pd.ArrowDtype).astype("Int64")), index=ev.index))
    order, same = _entity_runs(ev)
    n = len(order)
    # each row's entity as a number (sorted order: an entity's rows are one run); its first row in ev
    code = np.cumsum(~same) - 1 if n else np.zeros(0, np.int64)
    firsts = order[np.flatnonzero(~same)]
    conn = inp.connections[["connection_id", "dialect", "end_ts"]]
    conn = conn[conn["connection_id"].notna()].drop_duplicates("connection_id").reset_index(drop=True)
    # rows: connection_id is unique in conn (the left join as a hash lookup, once per entity): flow_events
    at = _index_in(ev["connection_id"].iloc[firsts], conn["connection_id"])[code]
    end_v, end_m = _looked_up(*_numbers(conn["end_ts"]), at)
    t0, t0m = (a[order] for a in _numbers(ev["ts"]))
    # the entity's next time (Spark's lead over its window), else the connection's end; then at least t0
    nxt_m = np.r_[~same[1:] | t0m[1:], True] if n else np.zeros(0, np.bool_)
    nxt = np.r_[t0[1:], 0] if n else np.zeros(0, np.int64)
    t1c, t1cm = np.where(nxt_m, end_v, nxt), nxt_m & end_m
    t1, t1m = _greatest_numbers(t0, t0m, *(np.where(t1cm, t0, t1c), t1cm & t0m))
    # the inner join with the captures (one row each), as a hash lookup
    caps = inp.caps().reset_index(drop=True)
    cap = _index_in(ev["capture_id"], caps["capture_id"])[order]
    inside = cap >= 0
    b = bucket_s * 1_000_000
    s0, s0m = _bucket_numbers(t0, t0m, bucket_s)
    s1, s1m = _bucket_numbers(*_greatest_numbers(t1 - 1, t1m, t0, t0m), bucket_s)
    one = ((s0 == s1) & ~s0m & ~s1m) | (s0m & s1m)
    # each interval in the bucket it starts in, the one it ends in (where another) and the whole capture (a null start)
    rows = np.r_[np.flatnonzero(inside), np.flatnonzero(inside & ~one), np.flatnonzero(inside)]
    k1 = int(inside.sum())
    bs = np.r_[s0[inside], s1[inside & ~one], np.zeros(k1, np.int64)]
    bsm = np.r_[s0m[inside], s1m[inside & ~one], np.ones(k1, np.bool_)]
    r0, r0m, r1, r1m = t0[rows], t0m[rows], t1[rows], t1m[rows]
    lo = np.where(r0m, bs, np.maximum(r0, bs))  # greatest(t0, bs); bs is not null where it is read
    hi = np.where(r1m, bs + b, np.minimum(r1, bs + b))  # least(t1, bs + b)
    ov = np.where(bsm, r1 - r0, np.maximum(0, hi - lo))
    ovm = np.where(bsm, r0m | r1m, False)
    first_v, first_m = _numbers(caps["first_ts"])
    rcap = cap[rows]
    start = np.where(bsm, np.where(first_m[rcap], 0, first_v[rcap]), bs)
    seconds = np.where(bsm, 0, bucket_s).astype(np.int32)

    taken = order[rows]

    def col(name, dtype=np.int64):
        v, m = _numbers(ev[name], dtype)
        return v[taken], m[taken]

    pf, pfm = col("prefetch_count")
    fl, flm = col("in_flight")
    limited = ~pfm & (pf > 0)
    zero = lambda cond: pa.array(np.where(cond, ov, 0), mask=cond & ovm)  # noqa: E731 ``ov.where(cond, 0)``
    ratio = np.where(limited, fl / np.where(limited, pf, 1), np.nan)
    flow_active, flow_m = col("flow_active", np.bool_)
    blocked, blocked_m = col("blocked", np.bool_)
    credit, credit_m = col("link_credit")
    window, window_m = col("incoming_window")
    remote, remote_m = col("remote_incoming_window")
    with np.errstate(over="ignore"):
        weighted = (ov * fl).astype(np.float64) / np.where(limited, pf, 1)
    parts = pa.table({
        "_e": code[rows], "_cap": rcap, "_start": start, "_seconds": seconds,
        "obs": pa.array(ov, mask=ovm), "pref_obs": pa.array(ov, mask=ovm | ~limited),
        "at_limit": zero(limited & ~flm & (fl >= pf)),
        "util_w": pa.array(weighted, mask=ovm | flm | ~limited), "util_max": pa.array(ratio, mask=flm | ~limited),
        "blocked": zero(~blocked_m & blocked), "flow_off": zero(~flow_m & ~flow_active),
        "has_credit": pa.array(~credit_m),
        "zero_credit": zero(~credit_m & (credit == 0)),
        "zero_window": zero((~remote_m & (remote == 0)) | (~window_m & (window == 0))),
    })
    sums = ["obs", "pref_obs", "at_limit", "util_w", "blocked", "flow_off", "zero_credit", "zero_window"]
    agg = parts.group_by(["_e", "_cap", "_start", "_seconds"], use_threads=False).aggregate(
        [(c, "sum") for c in sums] + [("util_max", "max"), ("has_credit", "max")])
    agg = _frame(agg.rename_columns([c.removesuffix("_sum").removesuffix("_max") for c in agg.column_names]))
    # each group's entity, its capture and connection's dialect: a lookup of the entity's first row
    names = _entity_names(ev.iloc[firsts].reset_index(drop=True))
    e = agg["_e"].to_numpy(np.int64)
    g = names.iloc[e].reset_index(drop=True)
    ae = at[np.flatnonzero(~same)][e]  # each group's entity's connection in conn
    found = ae >= 0
    dialect = pd.Series(pd.NA, index=range(len(e)), dtype=STRING)
    dialect[found] = conn["dialect"].iloc[ae[found]].to_numpy()
    ci = agg["_cap"].to_numpy(np.int64)
    keyed = pd.DataFrame({"capture_id": caps["capture_id"].iloc[ci].reset_index(drop=True),
                          "capture_date": caps["capture_date"].iloc[ci].reset_index(drop=True),
                          "bucket_start": agg["_start"], "bucket_seconds": agg["_seconds"].astype("Int32"),
                          **{k: g[k] for k in ("entity_kind", "entity", "connection_id", "channel")}, "dialect": dialect})
    # entities alike in every key column (a connection's rows named from two channels) are one group, as Spark's
    rows_ = pd.concat([keyed, agg[sums + ["util_max", "has_credit"]]], axis=1)
    gg = rows_.groupby(list(Frame.KEYS), dropna=False, sort=False)
    agg = pd.DataFrame({c: (gg[c].max() if c in ("util_max", "has_credit") else gg[c].sum(min_count=1))
                        for c in [*sums, "util_max", "has_credit"]}).reset_index()
    k = agg["entity_kind"]
    prefetch_entity = k.isin(["channel", "consumer"]) & agg["pref_obs"].notna()
    specs = [
        ("prefetch_utilisation", prefetch_entity & (agg["pref_obs"] > 0),
         agg["util_w"].astype("Float64") / agg["pref_obs"].astype("Float64"), agg["pref_obs"]),
        ("prefetch_utilisation_max", prefetch_entity, agg["util_max"], agg["pref_obs"]),
        ("at_prefetch_limit_us", prefetch_entity, agg["at_limit"], agg["pref_obs"]),
        ("blocked_us", k == "connection", agg["blocked"], agg["obs"]),
        ("flow_off_us", k == "channel", agg["flow_off"], agg["obs"]),
        ("zero_credit_us", (k == "link") & agg["has_credit"].astype("boolean"), agg["zero_credit"], agg["obs"]),
        ("zero_window_us", k == "session", agg["zero_window"], agg["obs"]),
    ]
    out = [agg[list(Frame.KEYS)].assign(metric=name, value=value.astype("Float64").where(_true(cond), pd.NA),
                                        observed_us=observed.astype("Int64")) for name, cond, value, observed in specs]
    m = pd.concat(out, ignore_index=True)
    m = m[m["value"].notna().to_numpy()]
    return m.assign(direction=_str(m.index, pd.NA))


def _codes(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A dictionary-encoded column of ``table`` as (each row's code, -1 for null; the dictionary's values as an
    object array with None last, so that code -1 names null). A column read plain is encoded here."""
    col = table.column(name) if table.num_columns else pa.chunked_array([], pa.string())
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    col = pa.table({"c": col}).unify_dictionaries().column(0)  # one dictionary for every chunk
    values = col.chunk(0).dictionary if col.num_chunks else pa.array([], pa.string())
    codes = [pc.fill_null(c.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) for c in col.chunks]
    return (np.concatenate(codes) if codes else np.zeros(0, np.int64)), np.array([*values.to_pylist(), None], dtype=object)


def _heartbeat_metrics(inp: Inputs, bucket_s: int) -> pd.DataFrame:
    """``flow._heartbeat_metrics`` with each frame a slot of its own (the same rows as counted per slot), on integer
    codes: the frames ordered per (connection, direction) by time, each frame's gap to the one before and the
    heartbeats it missed in arrays, counted per (capture, connection, dialect, direction, bucket) and those counts
    summed again for the whole capture; the key columns' text comes back only for the groups (the frames' text
    columns are read as their Parquet dictionaries' codes, never as text per frame)."""
    conn = inp.connections[["connection_id", "heartbeat", "server_idle_timeout_ms", "client_idle_timeout_ms"]]
    conn = conn[conn["connection_id"].notna()].drop_duplicates("connection_id").reset_index(drop=True)
    f = inp.frames
    cid, cid_names = _codes(f, "connection_id")
    # rows: connection_id is unique in conn (the inner join as a lookup, once per distinct id): the frames of known
    # connections
    at_name = _index_in(pd.Series(cid_names[:-1], dtype=STRING), conn["connection_id"])
    at = np.r_[at_name, -1][cid]
    keep = np.flatnonzero(at >= 0)
    at = at[keep]
    number = lambda col: conn[col].to_numpy("float64", na_value=np.nan)[at]  # noqa: E731

    def coded(name):
        code, names = _codes(f, name)
        return code[keep], names

    direction, dir_names = coded("direction")
    dialect_all, dialect_names = coded("dialect")
    frame_type, type_names = coded("frame_type")
    capture, cap_names = coded("capture_id")
    ts_col = f.column("ts") if f.num_columns else pa.chunked_array([], pa.timestamp("us"))
    ts_col = pc.cast(ts_col, pa.int64())
    ts_null = ts_col.is_null().to_numpy(zero_copy_only=False)[keep]
    ts = pc.fill_null(ts_col, 0).to_numpy(zero_copy_only=False)[keep]
    to_server = (dir_names == "to_server")[direction]
    idle = np.where(to_server, number("server_idle_timeout_ms"), number("client_idle_timeout_ms"))
    value = np.where((dialect_names == "1.0")[dialect_all], idle / 1000.0, number("heartbeat"))
    interval = np.where(value > 0, value, np.nan)  # NaN: null (no interval, or not above 0)
    known = frame_type >= 0
    hb = np.isin(type_names, ["heartbeat", "empty"])[frame_type] & known
    # each (connection, direction) in time order, a null time first (as Spark's window orders them)
    order = np.lexsort((np.where(ts_null, np.iinfo(np.int64).min, ts), direction, at))
    same = np.zeros(len(order), bool)
    same[1:] = (at[order][1:] == at[order][:-1]) & (direction[order][1:] == direction[order][:-1])
    t = ts[order]
    gap_ok = same & ~ts_null[order] & np.r_[False, ~ts_null[order][:-1]]
    gap = np.where(gap_ok, (t - np.r_[0, t[:-1]]) / 1e6, np.nan)
    iv = interval[order]
    over = gap_ok & (gap > iv)  # a NaN interval compares false
    missed = np.zeros(len(order), np.int64)
    missed[over] = np.floor(gap[over] / iv[over]).astype(np.int64)
    b = bucket_s * 1_000_000
    bucket = np.where(ts_null[order], -1, np.floor(t / b).astype(np.int64) * b)
    del t, gap, gap_ok, over
    # the frames' slots summed per run of equal keys in this order (a connection's frames of one direction and bucket
    # are one run, as a rule), then the runs grouped: the same sums as grouping every frame, from far fewer rows
    keys = (capture[order], at[order], dialect_all[order], direction[order], bucket, ts_null[order])
    starts = np.flatnonzero(_segment_starts(*keys)) if len(order) else np.zeros(0, np.int64)
    known_o, sent_o = known[order], hb[order]
    runs = pd.DataFrame({"_cap": keys[0][starts], "_conn": keys[1][starts], "_dialect": keys[2][starts],
                         "_dir": keys[3][starts], "_bucket": keys[4][starts], "_bnull": keys[5][starts]})
    if len(starts):
        known_n = np.add.reduceat(known_o.astype(np.int64), starts)
        sent = np.add.reduceat((sent_o & known_o).astype(np.int64), starts)
        runs["sent"] = pd.arrays.IntegerArray(sent, known_n == 0)  # null where no frame of the run is of a known type
        runs["missed"] = np.add.reduceat(missed, starts)
        runs["interval_s"] = pd.array(np.fmax.reduceat(iv, starts), dtype="Float64")  # NaN (null) only where all are
    else:
        runs = runs.assign(sent=pd.array([], "Int64"), missed=np.zeros(0, np.int64), interval_s=pd.array([], "Float64"))
    # rows: one per (capture, connection, dialect, direction, bucket), then one per (capture, connection, dialect,
    # direction) for the whole capture: each <= frames
    whole_keys = ["_cap", "_conn", "_dialect", "_dir"]
    per = runs.groupby([*whole_keys, "_bucket", "_bnull"], sort=False)
    timed = pd.DataFrame({"sent": per["sent"].sum(min_count=1), "missed": per["missed"].sum(),
                          "interval_s": per["interval_s"].max()}).reset_index()
    per = timed.groupby(whole_keys, sort=False)
    whole = pd.DataFrame({"sent": per["sent"].sum(min_count=1), "missed": per["missed"].sum(),
                          "interval_s": per["interval_s"].max()}).reset_index()
    caps = inp.caps().set_index("capture_id")
    first = caps["first_ts"].reindex(cap_names)
    parts = []
    for rows, bucketed in ((timed, True), (whole, False)):
        cid = pd.Series(np.asarray(cap_names, dtype=object)[rows["_cap"]], dtype=STRING)
        known_cap = cid.isin(caps.index).to_numpy()  # the inner join with captures
        rows, cid = rows[known_cap].reset_index(drop=True), cid[known_cap].reset_index(drop=True)
        start = (pd.Series(rows["_bucket"].to_numpy(), dtype="Int64").where(~rows["_bnull"].to_numpy(), pd.NA) if bucketed
                 else pd.Series(first.to_numpy()[rows["_cap"]], dtype="Int64").fillna(0))
        conn_id = conn["connection_id"].iloc[rows["_conn"]].reset_index(drop=True).astype(STRING)
        parts.append(pd.DataFrame({
            "capture_id": cid, "capture_date": caps["capture_date"].reindex(cid).to_numpy(), "bucket_start": start,
            "bucket_seconds": pd.Series(bucket_s if bucketed else 0, index=rows.index, dtype="Int32"),
            "entity_kind": _str(rows.index, "connection"), "entity": conn_id, "connection_id": conn_id,
            "channel": _int(rows.index, dtype="Int32"),
            "dialect": pd.Series(np.asarray(dialect_names, dtype=object)[rows["_dialect"]], dtype=STRING),
            "direction": pd.Series(np.asarray(dir_names, dtype=object)[rows["_dir"]], dtype=STRING),
            "sent": rows["sent"], "missed": rows["missed"], "interval_s": rows["interval_s"]}))
    agg = pd.concat(parts, ignore_index=True)
    specs = [("heartbeats_sent", agg["sent"].astype("Float64")), ("heartbeat_interval_s", agg["interval_s"].astype("Float64")),
             ("missed_heartbeats", agg["missed"].astype("Float64").where(agg["interval_s"].notna(), pd.NA))]
    out = pd.concat([agg[[*Frame.KEYS, "direction"]].assign(metric=name, value=value) for name, value in specs],
                    ignore_index=True)
    out = out[out["value"].notna().to_numpy()]
    return out.assign(observed_us=_int(out.index))


# ------------------------------------------------------------------ metrics_latency (percentiles.py, e2e.py, grouped.py)
def match_key(d: pd.DataFrame) -> pd.Series:
    """``e2e.match_key``."""
    idx = d.index
    ten = _true(d["dialect"] == "1.0")
    where = concat_ws("\x1f", _str(idx, "x"), d["exchange"].fillna(""), d["routing_key"].fillna(""))
    where = pick(ten, concat_ws("\x1f", _str(idx, "1.0"), d["queue"].fillna("")), where, idx)
    by_body = pick(d["body_sha256"].notna(), concat_ws("\x1f", _str(idx, "b"), where, d["body_sha256"]), None, idx)
    return pick(d["message_id"].notna(), "m\x1f" + d["message_id"], by_body, idx)


def end_to_end(d: pd.DataFrame) -> pd.DataFrame:
    """``e2e.end_to_end``: the deliveries from the broker with ``p_us``, their publish's time (null: unmatched), by
    ``fifo_columns`` over the events of every key sorted as its shuffle sorts them."""
    key = match_key(d)
    payload = list(E2E_COLUMNS)  # what latency reads of the matched deliveries, as the Spark path hands on
    broker = _true(d["direction"] == "from_broker")
    keyless = d.loc[broker & key.isna().to_numpy(), payload]
    keyless = keyless.assign(p_us=_int(keyless.index))
    # the deliveries with a key: only the columns the events read, the payload left behind (each event carries its
    # delivery's row number through the pass, the payload is taken after it: the events' sort and the pass move
    # 2 numbers and 4 texts a row, not 14 columns)
    at = broker & key.notna().to_numpy()
    dels = pd.DataFrame({c: d[c][at] for c in ("capture_id", "delivery_id", "queue", "connection_id", "channel",
                                                "consumer_tag", "link_name", "outcome", "settled_ts", "sent_ts",
                                                "redelivered")})
    dels["_key"] = key[at]
    dels["_row"] = np.flatnonzero(at)
    dels["_q"] = dels["queue"].fillna(concat_ws("/", dels["connection_id"], dels["channel"], dels["consumer_tag"],
                                                dels["link_name"])).astype(STRING)
    tsk = lambda s: s.fillna(NULL_US).astype("int64")  # noqa: E731

    def events(df, ts, kind, q, rq, with_row):
        return pd.DataFrame({"capture_id": df["capture_id"], "_key": df["_key"], "_tsk": tsk(ts), "_ev": kind,
                             "_id": df["delivery_id"], "_q": q, "_rq": rq,
                             "_row": df["_row"] if with_row else np.int64(-1)}, index=df.index)

    published = _true((d["direction"] == "to_broker") & key.notna())
    pubs_d = pd.DataFrame({"capture_id": d["capture_id"][published], "_key": key[published],
                           "delivery_id": d["delivery_id"][published], "sent_ts": d["sent_ts"][published]})
    requeued = dels["outcome"].isin(REQUEUED).astype("boolean").where(dels["outcome"].notna(), pd.NA)
    rq_d = dels[_true(requeued)]
    ev = pd.concat([
        events(pubs_d, pubs_d["sent_ts"], PUBLISH, _str(pubs_d.index, pd.NA), False, False),
        events(rq_d, rq_d["settled_ts"].fillna(rq_d["sent_ts"]), REQUEUE, rq_d["_q"], False, False),
        events(dels, dels["sent_ts"], np.where(_true(dels["redelivered"]), AGAIN, FIRST), dels["_q"], requeued, True),
    ], ignore_index=True)
    del pubs_d, rq_d, dels
    types = {"capture_id": pa.string(), "_key": pa.string(), "_tsk": pa.int64(), "_ev": pa.int32(), "_id": pa.string(),
             "_q": pa.string(), "_rq": pa.bool_(), "_row": pa.int64()}
    t = pa.Table.from_pandas(ev, preserve_index=False, schema=pa.schema([(c, types[c]) for c in ev.columns]))
    del ev
    # sorted as the shuffle sorts each key's events (nulls first; stable, as the rows came): Arrow's multi-key sort
    late = pc.greater_equal(t.column("_ev"), FIRST)
    keys = pa.table({"capture_id": t.column("capture_id"), "_key": t.column("_key"), "_tsk": t.column("_tsk"),
                     "_late": late, "_id": t.column("_id")})
    t = t.take(pc.sort_indices(keys, sort_keys=[(k, "ascending", "at_start") for k in keys.column_names]))
    del keys, late
    matched = [b for b in fifo_columns(t.to_batches(), ["capture_id", "_row"]) if b.num_rows] if t.num_rows else []
    del t
    parts = [keyless.astype({"p_us": "Int64"})]
    if matched:
        m = pa.Table.from_batches(matched)
        rows = m.column("_row").to_numpy()
        # rows: each matched delivery's own row of d, by position
        parts.append(d.iloc[rows][payload].reset_index(drop=True).assign(
            p_us=pd.Series(pd.array(m.column("p_us").to_pandas(types_mapper=pd.ArrowDtype).astype("Int64")))))
    return pd.concat(parts, ignore_index=True)


def _measured(inp: Inputs) -> list:
    """``percentiles._measured``: each kind of measured thing (its rows, its entities as ``with_entities`` specs)."""
    d = inp.deliveries
    conds = [_true((d["method"] == "publish") & (d["settle_mode"] == "confirm")),
             _true(d["method"].isin(["deliver", "get-ok"]) & (d["settle_mode"] != "auto_ack")),
             _true((d["method"] == "transfer") & (d["outcome"] != "presettled"))]
    metric = pd.Series(np.select(conds, ["publish_confirm", "deliver_settle", "transfer_settle"], ""), index=d.index)
    s = d[(metric != "").to_numpy()]
    cols = ["connection_id", "channel", "consumer_tag", "link_name", "queue", "exchange"]
    settles = pd.DataFrame({"capture_id": s["capture_id"], "ts": s["sent_ts"], "dialect": s["dialect"],
                            "metric": metric[s.index], "direction": s["direction"], "method": s["method"],
                            "value_us": s["settle_latency_us"], **{c: s[c] for c in cols}})
    e = end_to_end(d)
    e2e = pd.DataFrame({"capture_id": e["capture_id"], "ts": e["sent_ts"], "dialect": e["dialect"], "metric": "end_to_end",
                        "direction": pd.NA, "method": e["method"], "value_us": e["sent_ts"] - e["p_us"],
                        **{c: e[c] for c in cols}})
    r = inp.requests
    rr = pd.DataFrame({"capture_id": r["capture_id"], "ts": r["request_ts"], "dialect": r["dialect"],
                       "metric": "request_response", "direction": pd.NA, "method": r["request"], "value_us": r["latency_us"],
                       "connection_id": r["connection_id"], "channel": r["channel"]})
    f = inp.control
    opened = f[_true(((f["class_name"] == "connection") & (f["method_name"] == "open-ok"))
                     | ((f["performative"] == "open") & (f["direction"] == "to_client")))]
    open_ok = opened.groupby("connection_id", sort=False)["ts"].min().rename("open_ok_ts").reset_index()
    # rows: open_ok holds one row per connection: connections
    c = inp.connections.merge(open_ok, on="connection_id", how="left")
    amqp = (c["open_ok_ts"] - c["start_ts"]).where(_true(c["syn_seen"] & c["open_ok_ts"].notna()), pd.NA)
    hs = lambda metric, value: pd.DataFrame({  # noqa: E731
        "capture_id": c["capture_id"], "ts": c["start_ts"], "dialect": c["dialect"], "metric": metric, "direction": pd.NA,
        "method": pd.NA, "value_us": value, "connection_id": c["connection_id"]})
    conns = pd.concat([hs("tcp_handshake", c["handshake_rtt_us"]), hs("amqp_handshake", amqp)[c["dialect"].notna().to_numpy()]],
                      ignore_index=True)
    out = []
    for df in (settles, e2e, rr, conns):
        for col in ("capture_id", "dialect", "metric", "direction", "method", "connection_id"):
            df[col] = df[col].astype(STRING)
        df["value_us"] = df["value_us"].astype("Int64")
        df["ts"] = df["ts"].astype("Int64")
        if "channel" in df:
            df["channel"] = df["channel"].astype("Int32")
        for col in ("consumer_tag", "link_name", "queue", "exchange"):
            if col in df:
                df[col] = df[col].astype(STRING)
        out.append(df.reset_index(drop=True))
    settles, e2e, rr, conns = out
    conn = lambda df: df["connection_id"]  # noqa: E731
    return [(settles, delivery_entities(settles)), (e2e, delivery_entities(e2e)),
            (rr, [("connection", conn(rr), conn(rr), None), ("channel", concat_ws("/", conn(rr), rr["channel"]), conn(rr), rr["channel"])]),
            (conns, [("connection", conn(conns), conn(conns), None)])]


COUNT_ROUTE_ROWS = 100_000  # route rows from which equal ones are counted into one (fewer: each a row of its own)


def _routes(measured, numbers: dict, bucket_s: int) -> pa.Table:
    """``percentiles._routes``: each measured thing once per route it has an entity in, as the columns
    ``grouped.group_table`` reads. From ``COUNT_ROUTE_ROWS`` route rows in all, equal route rows (the same route,
    entities, bucket and value: a busy queue's many equal latencies) are counted into one row with ``_n``, which
    group_table weighs each row by, as the Spark path's route rows are: the same groups and statistics from fewer
    rows (the 300 MB load capture's 2.7M route rows: about 0.2M). Each route's rows are counted as they are made
    (where they alone reach that many), so that only one route's rows are held uncounted at a time (the 2 GB load
    capture's 18M route rows held at once were 3 GB), then the counts of the routes summed."""
    names_ = [f.name for f in ROUTE_SCHEMA]
    count = lambda t: t.group_by(names_, use_threads=False).aggregate([([], "count_all")]).rename_columns([*names_, "_n"])  # noqa: E731
    parts: list[pa.Table] = []
    total = 0
    for df, specs in measured:
        names = {kind: _text(name) for kind, name, _, _ in specs}
        none = _str(df.index, pd.NA)
        e = lambda kind: names.get(kind, none)  # noqa: E731
        ch = df["channel"].astype("Int32") if "channel" in df else _int(df.index, dtype="Int32")
        nch = _int(df.index, dtype="Int32")
        routes = [
            (0, df["capture_id"], none, nch, none, none, none),
            (1, e("connection").fillna(e("channel")).fillna(e("consumer")).fillna(e("link")), e("connection"), ch,
             e("channel"), e("consumer"), e("link")),
            (2, e("queue").fillna(e("address")), none, nch, e("queue"), e("address"), none),
            (3, e("exchange"), none, nch, e("exchange"), none, none),
        ]
        ci = df["capture_id"].map(numbers).astype("Int32")
        metric_no = df["metric"].map({m: i + 1 for i, m in enumerate(METRICS)}).fillna(0).astype("int32")
        bucket = bucket_of(df["ts"], bucket_s)
        for r, key, c, chan, a, b, dd in routes:
            keep = _true(key.notna() & ci.notna())
            part = pa.Table.from_pandas(pd.DataFrame({
                "_ci": ci[keep], "_r": np.int32(r), "_c": c[keep], "_ch": chan[keep], "_a": a[keep], "_b": b[keep],
                "_d": dd[keep], "dialect": df["dialect"][keep], "_m": metric_no[keep], "direction": df["direction"][keep],
                "method": df["method"][keep], "value_us": df["value_us"][keep], "bucket_us": bucket[keep]}),
                schema=ROUTE_SCHEMA, preserve_index=False)
            total += part.num_rows
            parts.append(count(part) if part.num_rows >= COUNT_ROUTE_ROWS else part)
    if total < COUNT_ROUTE_ROWS:  # no part was counted
        return pa.concat_tables(parts) if parts else ROUTE_SCHEMA.empty_table()
    counted = pa.concat_tables([p if "_n" in p.column_names else count(p) for p in parts])
    # rows: at most the route rows; equal rows of two parts (of two measured kinds: never, their metrics differ) summed
    return counted.group_by(names_, use_threads=False).aggregate([("_n", "sum")]).rename_columns([*names_, "_n"])


ROUTE_SCHEMA = pa.schema([("_ci", pa.int32()), ("_r", pa.int32()), ("_c", pa.string()), ("_ch", pa.int32()),
                          ("_a", pa.string()), ("_b", pa.string()), ("_d", pa.string()), ("dialect", pa.string()),
                          ("_m", pa.int32()), ("direction", pa.string()), ("method", pa.string()),
                          ("value_us", pa.int64()), ("bucket_us", pa.int64())])


def latency(inp: Inputs, bucket_s: int) -> pd.DataFrame:
    caps = inp.caps()
    ids = sorted(caps["capture_id"].dropna())
    numbers = dict(zip(ids, range(1, len(ids) + 1)))
    stats = _frame(pa.Table.from_batches([group_table(_routes(_measured(inp), numbers, bucket_s), bucket_s)]))
    back = caps.assign(_ci=caps["capture_id"].map(numbers).astype("Int32"))
    # rows: one row per capture number on the right: the groups
    out = stats.merge(back, on="_ci", how="inner")
    whole = _true(out["bucket_seconds"] == 0)
    out["bucket_start"] = out["bucket_us"].where(~whole, out["first_ts"].fillna(0)).astype("Int64")
    out["entity"] = pick(out["entity_kind"] == "capture", out["capture_id"], out["entity"], out.index)
    return out.drop(columns=["bucket_us", "first_ts", "_ci"]).assign(exact=True)


# ------------------------------------------------------------------ labels, row ids, the contract's types
def label_maps(inp: Inputs) -> dict:
    """``labels.label_maps`` as the findings driver's ``label`` reads them."""
    ctl = inp.control
    consume = ctl[_true((ctl["class_name"] == "basic") & (ctl["method_name"] == "consume") & ctl["consumer_tag"].notna()
                        & (ctl["consumer_tag"] != ""))]
    attach = ctl[_true((ctl["performative"] == "attach") & ctl["handle"].notna() & ctl["channel"].notna())]
    return {
        "capture": {c: cap_label(p) for c, p in zip(inp.captures["capture_id"], inp.captures["path"].astype(object))},
        "connection": connection_labels(inp.connections),
        "consumer": first_non_null(consume, ["connection_id", "consumer_tag"], "queue"),
        "link": {(cid, ch, f"handle {h}"): name
                 for (cid, ch, h), name in first_non_null(attach, ["connection_id", "channel", "handle"], "link_name").items()},
    }


def _value(v):
    return None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else v


def finish(df: pd.DataFrame, name: str, keys: list[str], maps: dict) -> pa.Table:
    """A table's rows with their row id and label, in the contract's columns and types."""
    t = table_def(name)
    df = add_row_id(df.reset_index(drop=True), keys, t)
    cols = ["entity_kind", "connection_id", "channel", "entity", "capture_id"]
    # a label per entity (its rows share it: every bucket, metric and direction)
    entities = df[cols].drop_duplicates()
    labels = [label(dict(zip(cols, map(_value, r))), maps) for r in zip(*(entities[c].astype(object) for c in cols))]
    entities = entities.assign(entity_label=pd.Series(labels, index=entities.index, dtype=STRING))
    # rows: entities holds each tuple once (nulls match nulls, as the tuples came from df): df's
    df = df.merge(entities, on=cols, how="left")
    arrays = []
    for c in t.columns:
        s = df[c.name] if c.name in df else pd.Series(pd.NA, index=df.index, dtype=object)
        if c.type == "timestamp":
            arrays.append(pa.array(s.astype("Int64"), pa.int64()).cast(c.arrow_type))
        else:
            arrays.append(pa.array(s, c.arrow_type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=pa.schema([pa.field(c.name, c.arrow_type) for c in t.columns]))


KEYS = {
    "metrics_latency": [*Frame.KEYS, "metric", "direction", "method"],
    "metrics_settlement": [*Frame.KEYS, "direction", "measure", "value"],
    "metrics_flow": [*Frame.KEYS, "metric", "direction"],
    "metrics_errors": [*Frame.KEYS, "kind", "raised_by", "code", "condition"],
}


def tables(store, capture_ids: list[str], bucket_s: int) -> dict[str, pa.Table]:
    """The four metric tables of ``capture_ids``, in the order they are committed (``metrics_errors`` last)."""
    return dict(each_table(store, capture_ids, bucket_s))


def each_table(store, capture_ids: list[str], bucket_s: int, threads: int = 2):
    """``(name, rows)`` of the four metric tables in the order they are committed (metrics_flow, metrics_latency,
    metrics_settlement, then ``metrics_errors``, whose commit marks the captures done), each as soon as it is
    computed: the caller writes one while the others are still being computed. ``threads``: tables computed at once
    (each holds its own intermediate frames: 1 holds less)."""
    from concurrent.futures import ThreadPoolExecutor

    from amqplens.decode.common.arrow import use_system_memory_pool

    # the C library's allocator hands freed buffers back (the reads' transient copies): with pyarrow's default
    # mimalloc pool the 2 GB load capture's inputs held 6.7 GB after the read against 5.2 GB, and read in 17.8 s
    # against 13.9 s
    use_system_memory_pool()
    # two parts, each read, used and let go in turn: the flow tables' inputs (every frame's heartbeat columns, the
    # flow events), then the deliveries (the 2 GB load capture's lake: 11.9 -> about 6 GB at the peak)
    inp = Inputs(store, capture_ids, parts=("flow",))
    maps = label_maps(inp)
    compute = lambda f, name, view: finish(f(view, bucket_s), name, KEYS[name], maps)  # noqa: E731
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="amqplens-metrics") as pool:
        # metrics_flow's two halves at once, then metrics_errors and the deliveries' read as the threads come free
        halves = [pool.submit(part, inp.view(), bucket_s) for part in (_state_metrics, _heartbeat_metrics)]
        errors_t = pool.submit(compute, errors, "metrics_errors", inp.view())
        read = pool.submit(inp.read_deliveries)
        flow_rows = pd.concat([h.result() for h in halves], ignore_index=True)  # flow.py's order
        yield "metrics_flow", finish(flow_rows, "metrics_flow", KEYS["metrics_flow"], maps)
        del flow_rows
        done_errors = errors_t.result()
        read.result()
        inp.drop_flow()
        later = {name: pool.submit(compute, f, name, inp.view())
                 for name, f in (("metrics_latency", latency), ("metrics_settlement", settlement))}
        for name, b in later.items():
            yield name, b.result()
    yield "metrics_errors", done_errors  # last: its commit marks the captures done
