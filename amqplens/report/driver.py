"""The report's queries on the driver (``report.engine``): pyarrow reads of the lake's files, Arrow and pandas, no Spark job.

Each function answers what its namesake in amqplens/report/data.py answers through Spark (the reference), in the same
pandas shape (the dtypes Spark's Arrow ``toPandas`` gives: a column with nulls of integers as float64, timestamps
naive UTC ``datetime64[ns]``), so the pages are the same text either way (tests/metrics/test_report_engines.py).
A report's queries are a dozen small aggregates; through Spark each costs its planning and a job or two (5-8 s for a
report on any lake, most of it fixed), here a read of the columns it needs.

Every read keeps only the rows its filter selects (pyarrow's dataset filter, row groups skipped by their statistics)
and counts them against ``report.driver_max_rows`` (``TooMany``: the report goes to Spark). The rows kept are the
settled deliveries and request/responses (the latency figure), the deliver/transfer events (the busiest series),
and bounded sets: aggregates, top-N, the paged connections' frames and events.

The quantiles of the latency figure are exact here (nearest rank: the value at rank ceil(p * n)); Spark's
``percentile_approx`` (accuracy 10000) gives the same values for a kind of fewer than 10,000 latencies and, above,
values within 1/10000 of the rank.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.contracts import table as table_def
from amqplens.jobs.findings.driver import TooMany, connection_labels
from amqplens.report.data import LATENCY_QUANTILES, LIFECYCLE_CLASSES, LIFECYCLE_PERFORMATIVES, OUTCOME_BAD, QUANTILE_NAMES
from amqplens.report.logs import MARKS

f = pc.field
_NULLABLE = {pa.string(): pd.StringDtype(), pa.large_string(): pd.StringDtype(), pa.int64(): pd.Int64Dtype(),
             pa.int32(): pd.Int32Dtype(), pa.int16(): pd.Int16Dtype(), pa.int8(): pd.Int8Dtype(),
             pa.float64(): pd.Float64Dtype(), pa.bool_(): pd.BooleanDtype()}


class Lake:
    """The lake's tables read on the driver, the rows kept counted against ``budget`` (None: no limit). Thread-safe:
    the report's queries run from several threads."""

    def __init__(self, store, budget: int | None):
        self.store, self.budget, self.kept = store, budget, 0
        self._lock = threading.Lock()

    def arrow(self, name: str, columns, where=None, dictionary: tuple[str, ...] = ()) -> pa.Table:
        """``columns`` of the rows ``where`` keeps, as Arrow (the contract's types, nullable); the text columns named in
        ``dictionary`` as Parquet holds them, dictionary-encoded (no string built per row), each column's chunks
        sharing one dictionary."""
        t = table_def(name)
        columns = list(columns)
        fields = [t.arrow_schema().field(c).with_nullable(True) for c in columns]
        schema = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in dictionary else f for f in fields])
        dt = self.store.delta(name)
        if dt is None:  # not in the lake: no rows, as Spark's empty DataFrame
            return schema.empty_table()
        files, _ = self.store.unit_files(name, dt, None)
        # use_threads=False: the report is the last thing a run does (see TableStore.read_arrow)
        out = self.store.dataset(name, files, dictionary).to_table(columns=columns, filter=where, use_threads=False)
        out = out.cast(schema)
        if dictionary:
            out = out.unify_dictionaries()
        with self._lock:
            self.kept += out.num_rows
            if self.budget is not None and self.kept > self.budget:
                raise TooMany(f"more than report.driver_max_rows={self.budget} rows kept (at table {name})")
        return out

    def frame(self, name: str, columns, where=None) -> pd.DataFrame:
        """As ``arrow``, in pandas with nullable dtypes (null compares as SQL's) and timestamps as int64 microseconds."""
        return nullable(self.arrow(name, columns, where))


def nullable(data: pa.Table) -> pd.DataFrame:
    cols = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in data.columns]
    return pa.table(cols, names=data.column_names).to_pandas(types_mapper=_NULLABLE.get)


def as_spark(df: pd.DataFrame, timestamps=()) -> pd.DataFrame:
    """A nullable frame as Spark's Arrow ``toPandas`` gives it: ``timestamps`` (int64 microseconds) as naive UTC
    datetime64[ns], integers with a null as float64, text as object; a fresh RangeIndex."""
    t = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
    cols = [c.cast(pa.timestamp("us")).cast(pa.timestamp("ns")) if n in timestamps else c
            for n, c in zip(t.column_names, t.columns)]
    return pa.table(cols, names=t.column_names).to_pandas()


def _sort(df: pd.DataFrame, by: list[str], descending=(), nulls_last_desc: bool = True) -> pd.DataFrame:
    """Spark's ``orderBy``: ascending columns put nulls first, descending ones nulls last; stable."""
    out = df
    for col in reversed(by):
        desc = col in descending
        out = out.sort_values(col, ascending=not desc, na_position="last" if desc else "first", kind="stable")
    return out


def _in(column: str, values) -> pc.Expression:
    return f(column).isin(pa.array(list(values), pa.string()))


# ------------------------------------------------------------------------------------------------------ the figures


def latency_stats(lake: Lake, kinds: int = 25) -> pd.DataFrame:
    """data.latency_stats: per kind, count and quantiles in ms (exact, nearest rank); <= ``kinds`` rows."""
    # the kinds' text as dictionary codes (millions of deliveries at 2 GB, a few dozen kinds), grouped by code
    d = lake.arrow("deliveries", ["dialect", "method", "direction", "settle_latency_us"],
                   f("settle_latency_us").is_valid() & f("settle_mode").is_valid()
                   & ~_in("settle_mode", ["auto_ack", "no_confirm"]) & (f("outcome") != "presettled"),
                   dictionary=("dialect", "method", "direction"))
    r = lake.arrow("request_responses", ["dialect", "request", "latency_us"], f("latency_us").is_valid())
    values: dict[str, list[np.ndarray]] = {}
    for table, parts, col in ((d, ["dialect", "method", "direction"], "settle_latency_us"),
                              (r, ["dialect", "request"], "latency_us")):
        # one row per (parts): dialects x methods x directions, a few dozen
        dictionaries = {p: _dictionary(table.column(p)) for p in parts if pa.types.is_dictionary(table.column(p).type)}
        g = pa.table({**{p: _codes(table.column(p)) if p in dictionaries else table.column(p) for p in parts},
                      col: table.column(col)}).group_by(parts).aggregate([(col, "list")])
        g = _decoded(g, dictionaries)
        lists = g.column(f"{col}_list").combine_chunks()
        offsets, flat = lists.offsets.to_numpy(), lists.values.to_numpy(zero_copy_only=False)
        for i, key in enumerate(g.select(parts).to_pylist()):
            what = " ".join(v for v in key.values() if v is not None)  # concat_ws(" ", ...) skips nulls
            values.setdefault(what, []).append(flat[offsets[i]:offsets[i + 1]])
    rows = []
    for what, chunks in values.items():
        v = np.sort(np.concatenate(chunks))
        n = len(v)
        q = [int(v[min(max(math.ceil(p * n) - 1, 0), n - 1)]) for p in LATENCY_QUANTILES]
        rows.append({"what": what, "n": n, **{name: q[i] / 1000 for i, name in enumerate(QUANTILE_NAMES)}})
    pdf = pd.DataFrame(rows, columns=["what", "n", *QUANTILE_NAMES])
    pdf = pdf.astype({"n": "int64", **dict.fromkeys(QUANTILE_NAMES, "float64")})
    pdf = pdf.sort_values(["median", "what"], ascending=[False, True], kind="stable").head(kinds)
    return pdf.sort_values(["median", "what"], kind="stable").reset_index(drop=True)


SERIES_KEYS = ["connection_id", "channel", "consumer_tag", "link_handle"]


def busiest_series(lake: Lake, entity: str, event: str, values: list[str], n: int, points: int) -> pd.DataFrame:
    """data.busiest_series: the ``n`` entities with the most ``event`` events, each as at most ``points`` steps."""
    keys = SERIES_KEYS
    text = ("connection_id", "consumer_tag")  # read as dictionary codes: millions of rows at 2 GB, a few values
    # every event of the entity kind, read once (a scan decodes every row of the columns it reads whatever the filter
    # keeps: two scans, one for the counts and one for the series, decoded the keys twice)
    rows = lake.arrow("flow_events", [*keys, "ts", "event", *values], f("entity") == entity, dictionary=(*text, "event"))
    dictionaries = {k: _dictionary(rows.column(k)) for k in text}
    # the keys as numbers: the text keys' codes in their (one) dictionary
    coded = pa.table({k: _codes(rows.column(k)) if k in text else rows.column(k) for k in keys})
    is_event = _where_value(rows.column("event"), lambda d: pc.equal(d, event))
    # one row per entity with such events; the n busiest kept
    counted = pa.table({**{k: coded.column(k) for k in keys}, "ts": rows.column("ts")}).filter(is_event)
    counted = counted.group_by(keys).aggregate([("ts", "count"), ("ts", "min"), ("ts", "max")])
    top = nullable(_decoded(counted, dictionaries))
    top = _sort(top.rename(columns={"ts_count": "events", "ts_min": "t0", "ts_max": "t1"}), ["events", *keys],
                descending=("events",)).head(n)
    if top.empty:  # the typed empty frame Spark gives
        fields = table_def("flow_events").arrow_schema()
        empty = pa.schema([*(fields.field(k) for k in keys), pa.field("slot", pa.int64()), fields.field("ts"),
                           *(fields.field(v) for v in values)]).empty_table()
        return as_spark(nullable(empty), timestamps=("ts",))
    # the n entities' events (millions on a large capture's busiest channels: in Arrow and numpy, not pandas)
    owner = _entity_of(coded, _encoded(top[keys], dictionaries))  # -1: not one of the n
    keep = owner >= 0
    fe, owner = rows.select(["ts", *values]).filter(pa.array(keep)), owner[keep]
    del rows, coded
    t0, t1 = top.t0.to_numpy("int64")[owner], top.t1.to_numpy("int64")[owner]
    ts = fe.column("ts").cast(pa.int64()).to_numpy()
    scaled = ((ts - t0) * points).astype("float64") / (np.maximum(t1 - t0, 1) + 1)
    slot = np.minimum(np.maximum(np.floor(scaled), 0), points).astype("int64")
    # <= n * (points + 1) rows: one per entity and slot
    g = (pa.table({"_e": owner, "slot": slot, "ts": ts, **{v: fe.column(v) for v in values}})
         .group_by(["_e", "slot"]).aggregate([("ts", "min"), *((v, "max") for v in values)]))
    at = pa.array(g.column("_e").to_numpy())
    out = nullable(pa.table({**{k: pa.Array.from_pandas(top[k]).take(at) for k in keys}, "slot": g.column("slot"),
                             "ts": g.column("ts_min"), **{v: g.column(f"{v}_max") for v in values}}))
    out = _sort(out, [*keys, "ts"])
    return as_spark(out, timestamps=("ts",))


def _dictionary(column: pa.ChunkedArray) -> pa.Array:
    """The one dictionary of a column read by ``Lake.arrow(dictionary=...)`` (empty when there are no rows)."""
    return column.chunk(0).dictionary if column.num_chunks else pa.array([], column.type.value_type)


def _codes(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column's codes (null where the value is null)."""
    return pa.chunked_array([c.indices for c in column.chunks], pa.int32())


def _where_value(column: pa.ChunkedArray, test) -> pa.Array:
    """A boolean per row of a dictionary column: ``test`` of its dictionary's values, looked up by code; null -> false."""
    if not column.num_chunks:
        return pa.array([], pa.bool_())
    hit = pc.fill_null(test(_dictionary(column)), False)
    return pc.fill_null(pc.take(hit, _codes(column)), False).combine_chunks()


def _decoded(t: pa.Table, dictionaries: dict) -> pa.Table:
    """``t`` with its code columns named in ``dictionaries`` back to text."""
    return pa.table({c: pc.take(dictionaries[c], t.column(c)) if c in dictionaries else t.column(c) for c in t.column_names})


def _encoded(df: pd.DataFrame, dictionaries: dict) -> pd.DataFrame:
    """``df``'s text columns named in ``dictionaries`` as their codes (the values come from those dictionaries)."""
    out = df.copy()
    for c, d in dictionaries.items():
        code = {v: i for i, v in enumerate(d.to_pylist())}
        out[c] = pd.array([None if pd.isna(v) else code[v] for v in df[c]], pd.Int64Dtype())
    return out


def _entity_of(rows: pa.Table, top: pd.DataFrame) -> np.ndarray:
    """For each row, the index of the ``top`` row whose keys it has (null equal to null: Spark's eqNullSafe), or -1.
    ``top``: a few rows, each a distinct key."""
    n = rows.num_rows
    out = np.full(n, -1, np.int64)
    for i, key in enumerate(top.itertuples(index=False)):
        mask = np.ones(n, bool)
        for name, value in zip(top.columns, key):
            column = rows.column(name)
            if pd.isna(value):
                mask &= column.is_null().to_numpy(zero_copy_only=False)
            else:
                mask &= pc.fill_null(pc.equal(column, pa.scalar(value, column.type)), False).to_numpy(zero_copy_only=False)
        out[mask] = i
    return out


def entity_labels(lake: Lake, kinds: tuple[str, ...], ids: list[str]) -> dict:
    """data.entity_labels: {entity: entity_label} of the given kinds and connections, from metrics_flow."""
    t = lake.arrow("metrics_flow", ["entity", "entity_label"],
                   _in("entity_kind", kinds) & (f("bucket_seconds") == 0) & _in("connection_id", ids))
    # one row per entity
    t = t.group_by(["entity", "entity_label"]).aggregate([])
    return dict(zip(t.column("entity").to_pylist(), t.column("entity_label").to_pylist()))


def outcomes(lake: Lake) -> pd.DataFrame:
    """data.outcomes: messages per dialect, direction and outcome (a few dozen rows)."""
    s = lake.frame("metrics_settlement", ["dialect", "direction", "value", "count"],
                   (f("bucket_seconds") == 0) & (f("entity_kind") == "capture") & (f("measure") == "outcome"))
    keys = ["dialect", "direction", "value"]
    out = s.groupby(keys, dropna=False, sort=False).agg(n=("count", lambda c: c.sum(min_count=1))).reset_index()
    return as_spark(_sort(out, keys))


# ---------------------------------------------------------------------------------------------- the connections


CONNECTION_COLUMNS = ["connection_id", "capture_id", "dialect", "start_ts", "end_ts", "duration_us", "frames_to_server",
                      "frames_to_client", "bytes_to_server", "bytes_to_client", "end_reason", "close_code", "close_text",
                      "close_condition", "client_properties_json", "client_container_id", "ip_version", "client_ip",
                      "client_port", "server_ip", "server_port"]


def connections(lake: Lake, pages: int, timeline: int = 40) -> pd.DataFrame:
    """data.connections: the first ``timeline`` connections by start and the ``pages`` with a page of their own."""
    from amqplens.report.data import CONNECTION_PAGE_COLUMNS

    # rows: one per connection (not a Proton trace)
    c = lake.frame("connections", CONNECTION_COLUMNS, f("ip_version") != 0)
    # one row per connection with errors / with findings above info
    e = lake.frame("metrics_errors", ["connection_id", "count"], (f("entity_kind") == "connection")
                   & (f("bucket_seconds") == 0) & (f("kind") != "decode_error"))
    errs = e.groupby("connection_id", sort=False)["count"].sum(min_count=1)
    found = lake.frame("findings", ["connection_id"], f("connection_id").is_valid() & (f("severity") != "info"))
    counts = found.groupby("connection_id", sort=False).size()
    c["errors"] = c.connection_id.map(errs).astype("Int64").fillna(0)
    c["findings"] = c.connection_id.map(counts).astype("Int64").fillna(0)
    c["frames"] = c.frames_to_server.fillna(0) + c.frames_to_client.fillna(0)
    c["bad_end"] = (c.errors > 0) | (c.end_reason == "rst") | (c.findings > 0)
    paged = _sort(c, ["bad_end", "findings", "frames", "connection_id"], descending=("bad_end", "findings", "frames")).head(pages)
    first = _sort(c, ["start_ts", "connection_id"]).head(timeline)
    # a connection's label is its own row's: made for the <= pages + timeline rows kept, not for every connection
    # (10,000 JSON texts parsed in Python at 2 GB, 0.6 s)
    labels = connection_labels(pd.concat([paged, first]))
    label = lambda df: pd.array([labels.get(i) for i in df.connection_id], pd.StringDtype())  # noqa: E731
    pdf = pd.concat([paged.assign(conn_label=label(paged))[CONNECTION_PAGE_COLUMNS].assign(page=True),
                     first.assign(conn_label=label(first))[CONNECTION_PAGE_COLUMNS].assign(page=False)])
    pdf = pdf.sort_values("page", ascending=False, kind="stable").drop_duplicates("connection_id")
    pdf = as_spark(_sort(pdf, ["start_ts", "connection_id"]), timestamps=("start_ts", "end_ts"))
    return pdf


def blocked_and_errors(lake: Lake, ids: list[str], cap: int):
    """data.blocked_and_errors: (blocked/unblocked events, error frames) of the given connections, <= ``cap`` each."""
    blocked = lake.frame("flow_events", ["connection_id", "ts", "blocked", "reason", "event_id"],
                         (f("entity") == "connection") & _in("connection_id", ids) & f("blocked").is_valid())
    blocked = _first(blocked, cap, ["ts", "event_id"])
    blocked = _sort(blocked, ["ts", "connection_id", "event_id"])[["connection_id", "ts", "blocked", "reason"]]
    error = (((f("method_name") == "close") & f("reply_code").is_valid() & (f("reply_code") != 200))
             | f("error_condition").is_valid())
    errs = lake.frame("frames", ERROR_FRAME_COLUMNS, _in("connection_id", ids) & error)
    errs = _sort(_first(errs, cap, ["ts", "stream_offset", "direction"]), ["ts", "connection_id", "direction", "stream_offset"])
    return as_spark(blocked, timestamps=("ts",)), as_spark(errs, timestamps=("ts",))


ERROR_FRAME_COLUMNS = ["connection_id", "ts", "stream_offset", "direction", "channel", "class_name", "method_name",
                       "performative", "reply_code", "reply_text", "error_condition"]
LIFECYCLE_COLUMNS = ["connection_id", "ts", "direction", "channel", "class_name", "method_name", "performative", "handle",
                     "link_name", "role", "reply_code", "reply_text", "error_condition"]


def _first(df: pd.DataFrame, cap: int, order: list[str]) -> pd.DataFrame:
    """The first ``cap`` rows of each connection in ``order`` (Spark's row_number() <= cap over the same window)."""
    ranked = _sort(df, ["connection_id", *order])
    return ranked[ranked.groupby("connection_id", dropna=False, sort=False).cumcount() < cap]


def lifecycle_frames(lake: Lake, ids: list[str], cap: int):
    """data.lifecycle_frames: open/close/attach/... frames and channel.flow events of the given connections."""
    which = _in("class_name", LIFECYCLE_CLASSES) | _in("performative", LIFECYCLE_PERFORMATIVES)
    frames = lake.frame("frames", [*LIFECYCLE_COLUMNS, "stream_offset"], _in("connection_id", ids) & which)
    frames = _sort(_first(frames, cap, ["ts", "direction", "stream_offset"]), ["ts", "connection_id", "direction", "stream_offset"])
    flows = lake.frame("flow_events", ["connection_id", "ts", "channel", "flow_active", "event_id"],
                       _in("connection_id", ids) & f("flow_active").is_valid())
    flows = _sort(_first(flows, cap, ["ts", "event_id"]), ["ts", "connection_id", "event_id"])
    return (as_spark(frames[LIFECYCLE_COLUMNS], timestamps=("ts",)),
            as_spark(flows[["connection_id", "ts", "channel", "flow_active"]], timestamps=("ts",)))


LATENCY_COLUMNS = ["connection_id", "bucket_start", "bucket_seconds", "metric", "method", "direction", "count", "missing",
                   "p50_us", "p90_us", "p99_us", "max_us"]
OUTCOME_COLUMNS = ["connection_id", "bucket_start", "bucket_seconds", "direction", "value", "count"]


def connection_metrics(lake: Lake, ids: list[str]):
    """data.connection_metrics: per connection of ids and bucket, its latencies and messages per outcome."""
    mine = (f("entity_kind") == "connection") & _in("connection_id", ids)
    lat = lake.frame("metrics_latency", [*LATENCY_COLUMNS, "metric_row_id"], mine & (f("count") > 0))
    lat = _sort(lat, ["bucket_start", "metric_row_id"])[LATENCY_COLUMNS]
    out = lake.frame("metrics_settlement", [*OUTCOME_COLUMNS, "metric_row_id"], mine & (f("measure") == "outcome"))
    out = _sort(out, ["bucket_start", "metric_row_id"])[OUTCOME_COLUMNS]
    return as_spark(lat, timestamps=("bucket_start",)), as_spark(out, timestamps=("bucket_start",))


# ------------------------------------------------------------------------------------------------ the top tables


def _rows(df: pd.DataFrame) -> list[tuple]:
    """Rows as ``Row``s collect to: Python values, None for null."""
    return [tuple(None if v is pd.NA or v is None or (isinstance(v, float) and math.isnan(v)) else v for v in r)
            for r in df.astype(object).itertuples(index=False, name=None)]


def top_tables(lake: Lake, n: int) -> list[tuple[str, str, str, list[str], list[tuple]]]:
    """data.top_tables: (title, table, where, columns, rows) of each top-N table."""
    from amqplens.report.data import TOP_TABLES

    whole = f("bucket_seconds") == 0
    # n rows each: a top-N
    lat = lake.frame("metrics_latency", ["entity_label", "count", "p50_us", "p99_us", "max_us"],
                     whole & (f("metric") == "deliver_settle") & (f("entity_kind") == "consumer"))
    lat = _sort(lat, ["p99_us", "entity_label"], descending=("p99_us",)).head(n)
    slow = pd.DataFrame({"consumer": lat.entity_label, "count": lat["count"], "p50 ms": lat.p50_us / 1000,
                         "p99 ms": lat.p99_us / 1000, "max ms": lat.max_us / 1000})
    s = lake.frame("metrics_settlement", ["entity_label", "count", "messages"],
                   whole & _in("entity_kind", ["queue", "address"]) & (f("measure") == "outcome") & _in("value", OUTCOME_BAD))
    nacked = s.groupby("entity_label", dropna=False, sort=False).agg(
        negative=("count", lambda v: v.sum(min_count=1)), messages=("messages", "max")).reset_index()
    nacked = _sort(nacked, ["negative", "entity_label"], descending=("negative",)).head(n)
    nacked = nacked.rename(columns={"entity_label": "queue or address"})
    fl = lake.frame("metrics_flow", ["entity_label", "value", "observed_us"],
                    whole & (f("metric") == "zero_credit_us") & (f("value") > 0))
    fl = _sort(fl, ["value", "entity_label"], descending=("value",)).head(n)
    starved = pd.DataFrame({"link": fl.entity_label, "ms at zero credit": fl.value / 1000,
                            "ms observed": fl.observed_us / 1000})
    keys = ["kind", "raised_by", "code", "condition"]
    e = lake.frame("metrics_errors", [*keys, "count"], whole & (f("entity_kind") == "capture"))
    errors = e.groupby(keys, dropna=False, sort=False).agg(count=("count", lambda v: v.sum(min_count=1))).reset_index()
    errors = _sort(errors, ["count", *keys], descending=("count",)).head(n)
    events = _broker_events(lake, n)
    frames = {"slow": slow, "nacked": nacked, "starved": starved, "errors": errors, "events": events}
    return [(title, table, where, list(frames[key].columns), _rows(frames[key])) for key, title, table, where in TOP_TABLES]


def _broker_events(lake: Lake, n: int) -> pd.DataFrame:
    """logs.broker_events_table's rows: events per kind, how many joined a captured connection, first and last."""
    t = lake.arrow("broker_events", ["event", "sources", "ts"], f("event") != "other")
    sources = t.column("sources").combine_chunks() if t.num_rows else pa.array([], pa.list_(pa.string()))
    joined = np.zeros(t.num_rows, "int64")  # array_contains(sources, 'capture'), a null array as 0
    parents = pc.list_parent_indices(sources).to_numpy()
    hit = pc.fill_null(pc.equal(pc.list_flatten(sources), "capture"), False).to_numpy(zero_copy_only=False)
    joined[parents[hit]] = 1
    df = nullable(t.select(["event", "ts"]))
    df["joined"] = joined
    # one row per event kind
    g = df.groupby("event", dropna=False, sort=False).agg(events=("event", "size"), joined=("joined", "sum"),
                                                        first=("ts", "min"), last=("ts", "max")).reset_index()
    g = _sort(g, ["events", "event"], descending=("events",)).head(n).rename(columns={"joined": "joined to a capture"})
    g = g.astype({"events": "int64", "joined to a capture": "int64"})
    out = as_spark(g, timestamps=("first", "last"))
    for col in ("first", "last"):
        out[col] = pd.Series([None if pd.isna(v) else v.to_pydatetime() for v in out[col]], dtype=object)
    return out


# -------------------------------------------------------------------------------------------------- broker logs


def broker_event_rows(lake: Lake, ids: list[str]) -> pd.DataFrame:
    """logs.broker_event_rows: (connection_id, ts, event) of the logged events drawn on the given connections' lines."""
    df = lake.frame("broker_events", ["connection_id", "ts", "event", "event_id"],
                    _in("connection_id", ids) & _in("event", MARKS))
    return as_spark(_sort(df, ["ts", "connection_id", "event_id"])[["connection_id", "ts", "event"]], timestamps=("ts",))


def alarm_rows(lake: Lake) -> pd.DataFrame:
    """logs.alarm_rows: the alarm set / cleared events in time order."""
    df = lake.frame("broker_events", ["ts", "event", "alarm_resource", "node", "event_id"],
                    _in("event", ["alarm_set", "alarm_cleared"]))
    return as_spark(_sort(df, ["ts", "event_id"])[["ts", "event", "alarm_resource", "node"]], timestamps=("ts",))
