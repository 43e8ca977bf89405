"""The findings rules over the driver's pandas frames (driver.py): each rule of flow.py, settlement.py,
connections.py and errors.py again, vectorised per rule and table (filters, groupBys and joins in pandas), then one
dict per finding row (the text, as Spark's format_string writes it). Same text, same numbers, same keys: the Spark
rules stay the reference (tests/findings/test_driver.py compares both on the findings fixtures).

SQL's null semantics are kept: the frames have pandas' nullable dtypes (a comparison with null is null, and a filter
keeps only true), a join never matches a null key (``_join``), a groupBy keeps the null group (``_group``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import math

import numpy as np
import pandas as pd

from amqplens.contracts.findings import SEVERITY
from amqplens.jobs.findings.driver import DriverInputs, TooMany, finish, log, read_inputs, records
from amqplens.jobs.findings.errors import ERROR_KIND, WHAT
from amqplens.jobs.findings.settlement import OUTCOME_KIND, WORDS


# ------------------------------------------------------------------ Spark's (Java's) text and SQL's nulls
def js(v) -> str:
    """``%s``: null as 'null'."""
    return "null" if v is None else str(v)


def jd(v) -> str:
    """``%d``."""
    return "null" if v is None else str(int(v))


def jf(v, digits: int) -> str:
    """``%.<digits>f`` as Java writes it: the double's shortest decimal digits, rounded half up (Python's '%.2f'
    rounds the binary value: 4.485 -> '4.48', Java '4.49')."""
    if v is None:
        return "null"[:digits]  # Java's Formatter: the precision cuts 'null' too
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    q = decimal.Decimal(repr(v)).quantize(decimal.Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP)
    return format(q, "f")


def seconds(us) -> str:
    """rows.seconds: '4.48 s', or '12 ms' below one second."""
    if us is not None and us >= 1_000_000:
        return jf(us / 1e6, 2) + " s"
    return jf(None if us is None else us / 1e3, 0) + " ms"


def counted(n, one: str, many: str) -> str | None:
    return None if n is None else f"{n} {one if n == 1 else many}"


def concat_ws(sep: str, *values) -> str:
    return sep.join(str(v) for v in values if v is not None)


def coalesce(*values):
    return next((v for v in values if v is not None), None)


def greatest(*values):
    """SQL's greatest: nulls skipped, null when every value is null."""
    vs = [v for v in values if v is not None]
    return max(vs) if vs else None


def least(*values):
    vs = [v for v in values if v is not None]
    return min(vs) if vs else None


def ratio(a, b):
    """a / b as Spark divides (null when b is 0)."""
    return None if a is None or b is None or b == 0 else a / b


def floor(v):
    return None if v is None else math.floor(v)


def true(mask: pd.Series) -> pd.Series:
    """A filter's rows: true only (null and false dropped)."""
    return mask.fillna(False).astype(bool)


def known_isin(s: pd.Series, values) -> pd.Series:
    """SQL's IN: null for a null value (pandas' isin says false)."""
    return s.isin(list(values)).astype("boolean").mask(s.isna())


def _join(left: pd.DataFrame, right: pd.DataFrame, on, how: str = "left") -> pd.DataFrame:
    """A join that never matches a null key (pandas' merge matches NA with NA)."""
    on = [on] if isinstance(on, str) else list(on)
    return left.merge(right.dropna(subset=on), on=on, how=how)


def _group(df: pd.DataFrame, keys):
    return df.groupby(list(keys), dropna=False, sort=False)


def _agg(df: pd.DataFrame, keys, **aggs) -> pd.DataFrame:
    """groupBy(keys).agg(name=(column, 'min'|'max'|'sum'|'count'|'first')): SQL's aggregates (nulls skipped; a sum of
    nulls is null; count counts rows)."""
    g = _group(df, keys)
    cols = {}
    for name, (col, how) in aggs.items():
        if how == "count":
            cols[name] = g.size()
        elif how == "sum":
            cols[name] = g[col].sum(min_count=1)
        elif isinstance(df[col].dtype, pd.StringDtype):
            cols[name] = _text_agg(df, keys, col, how)
        else:
            cols[name] = getattr(g[col], how)()
    out = pd.DataFrame(cols)
    return out.reset_index()


def _text_agg(df: pd.DataFrame, keys, col: str, how: str) -> pd.Series:
    """min, max or first of a text column per group, on the values' ranks (pandas aggregates text group by group in
    Python: 2 s for 10,000 connections); Python orders text by code point, as Spark by UTF-8 bytes: the same order."""
    codes, uniques = pd.factorize(df[col], sort=True)
    ranks = pd.Series(pd.array(codes, dtype="Int64"), index=df.index).mask(codes < 0)
    picked = getattr(_group(df.assign(_rank=ranks), keys)["_rank"], how)()
    out = pd.Series(pd.NA, index=picked.index, dtype=pd.StringDtype())
    known = picked.notna()
    out[known] = pd.array(uniques, dtype=pd.StringDtype())[picked[known].to_numpy(dtype="int64")]
    return out


def raw(r: dict, kind: str | None, *, entity_kind, entity, connection_id, start, end, summary, evidence, count,
        channel=None, key="", severity=None) -> dict:
    """rows.finding for one row."""
    return {"capture_id": r["capture_id"], "kind": kind, "severity": severity or SEVERITY.get(kind or ""),
            "entity_kind": entity_kind, "entity": None if entity is None else str(entity),
            "connection_id": None if connection_id is None else str(connection_id),
            "channel": None if channel is None else int(channel), "start_ts": start, "end_ts": end,
            "summary": summary, "evidence": evidence, "count": None if count is None else int(count),
            "key": None if key is None else str(key)}


def _ids(table: str, column: str, *values) -> str:
    return f"{table} {column}=" + concat_ws(",", *values)


def _micros_text(us: int) -> str:
    """date_format(ts, 'HH:mm:ss.SSS') in UTC."""
    t = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def _tail(s: pd.Series) -> pd.Series:
    """element_at(split(s, '/'), -1)."""
    return s.str.split("/").str[-1].astype(pd.StringDtype())


NO_CLOSE = lambda c: c["amqp_closed_by"].isna() & c["close_code"].isna() & c["close_condition"].isna()  # noqa: E731


# ------------------------------------------------------------------ flow.py
def publisher_blocked(inp: DriverInputs) -> list[dict]:
    fe = inp.flow_events
    ev = fe[true(fe["event"].isin(["blocked", "unblocked"]) & (fe["entity"] == "connection"))]
    ev = ev.sort_values(["connection_id", "ts", "event_id"], na_position="first", kind="stable")
    g = _group(ev, ["connection_id"])
    ev = ev.assign(prev=g["event"].shift(1), next_ts=g["ts"].shift(-1), next_id=g["event_id"].shift(-1))
    ev = ev[true((ev["event"] == "blocked") & (ev["prev"].fillna("unblocked") == "unblocked"))]
    ev = _join(ev, inp.conn_times(), "connection_id")  # rows: one time row per connection
    end = ev["next_ts"].fillna(ev["conn_end"]).fillna(ev["ts"])
    ev = ev.assign(end=end, us=end - ev["ts"])
    blocks = ev[true(ev["us"] >= inp.conf["findings.min_blocked_ms"] * 1000)]
    # the alarm: the earliest alarm_set within [block start - tolerance, block end] (sorted, searched: rows = blocks)
    be = inp.broker_events
    alarms = be[true((be["event"] == "alarm_set") & be["ts"].notna())].sort_values("ts", kind="stable")
    at = alarms["ts"].to_numpy(dtype=np.int64)
    tol = inp.conf["logs.join_tolerance_s"] * 1_000_000
    alarm_rows = records(alarms[["event_id", "ts", "alarm_resource", "node"]])
    out = []
    for r in records(blocks):
        i = int(np.searchsorted(at, r["ts"] - tol, "left"))
        a = alarm_rows[i] if i < len(at) and at[i] <= r["end"] else None
        still = ", still blocked when the connection ended" if r["next_ts"] is None else ""
        alarm = "" if a is None or a["event_id"] is None else (
            f"; the broker log shows a {js(a['alarm_resource'])} alarm set on {js(a['node'])} at {_micros_text(a['ts'])}")
        reason = f" ({r['reason']})" if r["reason"] is not None else ""
        summary = f"The broker blocked the connection{reason} for {seconds(r['us'])}{still}{alarm}: its publishes were not read meanwhile."
        evidence = _ids("flow_events", "event_id", r["event_id"], r["next_id"])
        if a is not None and a["event_id"] is not None:
            evidence += f"; broker_events event_id={a['event_id']}"
        out.append(raw(r, "publisher_blocked", entity_kind="connection", entity=r["connection_id"],
                       connection_id=r["connection_id"], start=r["ts"], end=r["end"], summary=summary,
                       evidence=evidence, count=math.floor(r["us"] / 1000), key=r["event_id"]))
    return out


def _share(v, of) -> str:
    """``%.0f`` of 100 * v / of (null when ``of`` is 0)."""
    return jf(None if ratio(v, of) is None else 100 * v / of, 0)


def _of_flow_row(r: dict, kind: str, entity_kind: str, summary: str, *, start, end) -> dict:
    """A finding about one whole-capture row of metrics_flow (a time in microseconds: its count, in milliseconds)."""
    return raw(r, kind, entity_kind=entity_kind, entity=r["entity"], connection_id=r["connection_id"], channel=r["channel"],
               start=start, end=end, summary=summary, evidence=_ids("metrics_flow", "metric_row_id", r["metric_row_id"]),
               count=floor(r["value"] / 1000) if r["value"] is not None else None)


def channel_flow_off(inp: DriverInputs) -> list[dict]:
    fw, fe = inp.flow_whole, inp.flow_events
    off = fw[true((fw["metric"] == "flow_off_us") & (fw["value"] > 0)
                  & (fw["value"] >= inp.conf["findings.min_blocked_ms"] * 1000))]
    flows = fe[true((fe["event"] == "flow") & fe["flow_active"].notna())]
    flows = flows.assign(off=flows["ts"].where(~flows["flow_active"].astype(bool)))
    # rows: one per (connection, channel) after the groupBy
    span = _agg(flows, ["connection_id", "channel"], off_ts=("off", "min"), last_ts=("ts", "max"))
    rows = _join(_join(off, span, ["connection_id", "channel"]), inp.conn_times(), "connection_id")
    out = []
    for r in records(rows):
        v, obs = r["value"], r["observed_us"]
        summary = (f"The channel spent {seconds(v)} with channel.flow off ({_share(v, obs)}% of the {seconds(obs)} observed): "
                   "its peer asked it to stop sending content.")
        out.append(_of_flow_row(r, "channel_flow_off", "channel", summary, start=coalesce(r["off_ts"], r["conn_start"]),
                                end=coalesce(r["conn_end"], r["last_ts"])))
    return out


def _consumer_life(inp: DriverInputs) -> pd.DataFrame:
    c = inp.control
    frames = c[true((c["class_name"] == "basic") & c["consumer_tag"].notna())]
    frames = frames.assign(consume=frames["ts"].where(true(frames["method_name"] == "consume")),
                           cancel=frames["ts"].where(true(frames["method_name"] == "cancel")))
    # rows: one per consumer tag
    return _agg(frames, ["connection_id", "channel", "consumer_tag"], life_start=("consume", "min"),
                life_end=("cancel", "min"))


def slow_consumer(inp: DriverInputs) -> list[dict]:
    fw = inp.flow_whole
    rows = fw[true((fw["metric"] == "at_prefetch_limit_us") & (fw["entity_kind"] == "consumer") & (fw["value"] > 0))]
    rows = rows.assign(consumer_tag=_tail(rows["entity"]))
    rows = _join(_join(rows, inp.conn_times(), "connection_id"), _consumer_life(inp),
                 ["connection_id", "channel", "consumer_tag"])
    span = rows["life_end"].fillna(rows["conn_end"]) - rows["life_start"].fillna(rows["conn_start"])
    obs = rows["observed_us"]
    life = obs.where(true(obs <= span) | span.isna(), span)  # least(): nulls skipped
    rows = rows.assign(life_us=life)
    rows = rows[true((rows["life_us"] >= inp.conf["findings.min_life_ms"] * 1000)
                     & (rows["value"] >= inp.conf["findings.slow_consumer_share"] * rows["life_us"]))]
    out = []
    for r in records(rows):
        v, life_us = r["value"], r["life_us"]
        summary = (f"The consumer was held at its prefetch limit for {seconds(v)}, {_share(v, life_us)}% of its "
                   f"{seconds(life_us)} life: the broker waited for its acks before delivering more.")
        out.append(_of_flow_row(r, "slow_consumer", "consumer", summary, start=coalesce(r["life_start"], r["conn_start"]),
                                end=coalesce(r["life_end"], r["conn_end"])))
    return out


def credit_starved(inp: DriverInputs) -> list[dict]:
    fw, c = inp.flow_whole, inp.control
    rows = fw[true((fw["metric"] == "zero_credit_us") & (fw["entity_kind"] == "link")
                   & (fw["observed_us"] >= inp.conf["findings.min_life_ms"] * 1000) & (fw["value"] > 0)
                   & (fw["value"] >= inp.conf["findings.credit_starved_share"] * fw["observed_us"]))]
    rows = _join(rows, inp.conn_times(), "connection_id")
    # the broker's attach (to the client, role receiver) of a link the client sends on: one per (connection, channel,
    # handle) after the distinct
    senders = c[true((c["performative"] == "attach") & (c["direction"] == "to_client") & (c["role"] == "receiver"))]
    senders = pd.DataFrame({"connection_id": senders["connection_id"], "channel": senders["channel"],
                            "_h": "handle " + senders["handle"].astype(pd.StringDtype())}).drop_duplicates()
    rows = rows.assign(_h=_tail(rows["entity"]))
    rows = rows[rows.set_index(["connection_id", "channel", "_h"]).index.isin(
        senders.dropna().set_index(["connection_id", "channel", "_h"]).index)]  # left semi join
    out = []
    for r in records(rows):
        v, obs = r["value"], r["observed_us"]
        summary = (f"The sender link had no link credit for {seconds(v)}, {_share(v, obs)}% of the {seconds(obs)} observed: "
                   "the broker left the client unable to send.")
        out.append(_of_flow_row(r, "credit_starved", "link", summary, start=r["conn_start"], end=r["conn_end"]))
    return out


# ------------------------------------------------------------------ settlement.py
def outcomes(inp: DriverInputs) -> list[dict]:
    d = inp.deliveries
    d = d[true(d["outcome"].isin(list(OUTCOME_KIND)))]
    d = d.assign(last=d["settled_ts"].fillna(d["sent_ts"]))
    # rows: <= connections x 2 directions x len(OUTCOME_KIND)
    groups = _agg(d, ["capture_id", "connection_id", "direction", "outcome"], n=("sent_ts", "count"),
                  first_ts=("sent_ts", "min"), last_ts=("last", "max"), first_id=("delivery_id", "min"),
                  last_id=("delivery_id", "max"), exchange=("exchange", "min"), routing_key=("routing_key", "min"),
                  queue=("queue", "min"), dialect=("dialect", "min"))
    groups = groups.assign(kind=groups["outcome"].map(OUTCOME_KIND))
    groups = groups[(groups["kind"] != "unsettled_at_end") | (groups["n"] >= inp.conf["findings.min_unsettled"])]
    groups = _join(groups, inp.conn_times(), "connection_id")
    out = []
    for r in records(groups):
        n = r["n"]
        what = counted(n, "publish", "publishes") if r["direction"] == "to_broker" else counted(n, "delivery", "deliveries")
        if r["routing_key"] is not None:
            where = f" (e.g. exchange '{coalesce(r['exchange'], '')}', routing key '{r['routing_key']}')"
        elif r["queue"] is not None:
            where = f" (e.g. '{r['queue']}')"
        else:
            where = ""
        summary = f"{js(what)} {js(WORDS.get(r['outcome']))}{where}."
        evidence = (f"deliveries outcome={js(r['outcome'])} connection_id={js(r['connection_id'])} "
                    f"direction={js(r['direction'])} ({jd(n)} rows: delivery_id={js(r['first_id'])} .. {js(r['last_id'])})")
        start = greatest(r["first_ts"], coalesce(r["conn_start"], r["first_ts"]))
        end = coalesce(r["conn_end"], r["last_ts"]) if r["kind"] == "unsettled_at_end" else r["last_ts"]
        out.append(raw(r, r["kind"], entity_kind="connection", entity=r["connection_id"], connection_id=r["connection_id"],
                       start=start, end=end, summary=summary, evidence=evidence, count=n,
                       key=concat_ws("/", r["direction"], r["outcome"])))
    return out


def _consumer_queues(inp: DriverInputs) -> pd.DataFrame:
    c = inp.control
    consume = c[true((c["class_name"] == "basic") & (c["method_name"] == "consume") & c["consumer_tag"].notna())]
    consume = consume.dropna(subset=["queue"])  # first(queue, ignorenulls): a group of null queues joins as null
    # rows: one per (connection, consumer tag)
    return _text_agg(consume, ["connection_id", "consumer_tag"], "queue", "first").rename("consumer_queue").reset_index()


def redelivery_loop(inp: DriverInputs) -> list[dict]:
    d = inp.deliveries
    d = d[true(d["redelivered"] & (d["direction"] == "from_broker"))]
    d = _join(d, _consumer_queues(inp), ["connection_id", "consumer_tag"])  # rows: <= 1 per consumer
    # concat_ws("|", body_sha256, exchange, routing_key), nulls left out (a list comprehension over the rows kept)
    parts = d[["body_sha256", "exchange", "routing_key"]]
    parts = parts.astype(object).where(parts.notna(), None)
    joined = [concat_ws("|", *row) for row in parts.itertuples(index=False, name=None)]
    d = d.assign(q=d["queue"].fillna(d["consumer_queue"]).fillna(""),
                 msg=d["message_id"].fillna(pd.Series(joined, index=d.index, dtype=pd.StringDtype())))
    # rows: <= the redelivered deliveries, one per (queue, message)
    loops = _agg(d, ["capture_id", "q", "msg"], n=("sent_ts", "count"), first_ts=("sent_ts", "min"),
                 last_ts=("sent_ts", "max"), c0=("connection_id", "min"), c1=("connection_id", "max"),
                 first_id=("delivery_id", "min"), last_id=("delivery_id", "max"), message_id=("message_id", "min"))
    loops = loops[loops["n"] >= inp.conf["findings.redelivery_loop_min"]]
    out = []
    for r in records(loops):
        one = r["c0"] if r["c0"] is not None and r["c0"] == r["c1"] else None
        mid = f" (message-id '{r['message_id']}')" if r["message_id"] is not None else ""
        span = None if r["last_ts"] is None or r["first_ts"] is None else r["last_ts"] - r["first_ts"]
        summary = (f"One message{mid} was delivered again {jd(r['n'])} times (redelivered) from queue '{js(r['q'])}' over "
                   f"{seconds(span)}: it goes round in a requeue loop.")
        evidence = (f"deliveries redelivered=true queue={js(r['q'])} ({jd(r['n'])} rows: delivery_id={js(r['first_id'])} .. "
                    f"{js(r['last_id'])})")
        out.append(raw(r, "redelivery_loop", entity_kind="queue", entity=r["q"], connection_id=one, start=r["first_ts"],
                       end=r["last_ts"], summary=summary, evidence=evidence, count=r["n"],
                       key=None if r["msg"] is None else hashlib.sha256(r["msg"].encode()).hexdigest()))
    return out


def slow_settle(inp: DriverInputs) -> list[dict]:
    c = inp.conf
    keys = ["capture_id", "metric", "direction", "method"]
    lat = inp.metrics_latency
    medians = pd.DataFrame({**{k: lat[k] for k in keys}, "cap_p50": lat["p50_us"], "cap_count": lat["count"]})
    d = inp.deliveries
    metric = pd.Series(np.where(true(d["dialect"] == "1.0"), "transfer_settle",
                                np.where(true(d["direction"] == "to_broker"), "publish_confirm", "deliver_settle")),
                       index=d.index, dtype=pd.StringDtype())
    mode = (d["dialect"] == "1.0") | d["settle_mode"].isin(["confirm", "manual_ack"])
    d = d[true(d["settle_latency_us"].notna() & mode)].assign(metric=metric)
    d = _join(d, medians, keys, how="inner")  # rows: one median per (capture, metric, direction, method): the deliveries
    d = d[true((d["settle_latency_us"] >= c["findings.slow_settle_factor"] * d["cap_p50"])
               & (d["settle_latency_us"] >= c["findings.slow_settle_min_ms"] * 1000))]
    ek = np.where(d["consumer_tag"].notna(), "consumer", np.where(d["link_name"].notna(), "link", "channel"))
    tagged = d["consumer_tag"].fillna(d["link_name"])
    e = [concat_ws("/", a, b, t) for a, b, t in zip(d["connection_id"].astype(object).where(d["connection_id"].notna(), None),
                                                    d["channel"].astype(object).where(d["channel"].notna(), None),
                                                    tagged.astype(object).where(tagged.notna(), None))]
    d = d.assign(ek=pd.Series(ek, index=d.index, dtype=object), e=pd.Series(e, index=d.index, dtype=object))
    # rows: one per (entity, metric) after the groupBy of the slow ones
    rows = _agg(d, ["capture_id", "connection_id", "channel", "ek", "e", "metric", "direction", "method", "cap_p50",
                    "cap_count"], n=("sent_ts", "count"), lo=("settle_latency_us", "min"), hi=("settle_latency_us", "max"),
                first_ts=("sent_ts", "min"), last_ts=("settled_ts", "max"), first_id=("delivery_id", "min"),
                last_id=("delivery_id", "max"))
    factor, min_us = c["findings.slow_settle_factor"], c["findings.slow_settle_min_ms"] * 1000
    out = []
    for r in records(rows):
        what = {"publish_confirm": "confirms", "deliver_settle": "acks"}.get(r["metric"], "settlements")
        summary = (f"{jd(r['n'])} {what} took {seconds(r['lo'])} to {seconds(r['hi'])}, more than {factor:g} times the "
                   f"capture's median of {seconds(r['cap_p50'])} ({jd(r['cap_count'])} in all).")
        bound = greatest(min_us, None if r["cap_p50"] is None else int(factor * r["cap_p50"]))
        evidence = (f"deliveries settle_latency_us>={jd(bound)} ({jd(r['n'])} rows: delivery_id={js(r['first_id'])} .. "
                    f"{js(r['last_id'])})")
        out.append(raw(r, "slow_settle", entity_kind=r["ek"], entity=r["e"], connection_id=r["connection_id"],
                       channel=r["channel"], start=r["first_ts"], end=r["last_ts"], summary=summary, evidence=evidence,
                       count=r["n"], key=concat_ws("/", r["metric"], r["direction"], r["method"])))
    return out


# ------------------------------------------------------------------ connections.py
def _missed(inp: DriverInputs) -> pd.DataFrame:
    fw = inp.flow_whole
    m = fw[true((fw["metric"] == "missed_heartbeats") & (fw["entity_kind"] == "connection"))]
    to_s, to_c = true(m["direction"] == "to_server"), true(m["direction"] == "to_client")
    m = m.assign(vs=m["value"].where(to_s), vc=m["value"].where(to_c), rs=m["metric_row_id"].where(to_s),
                 rc=m["metric_row_id"].where(to_c))
    # rows: one per connection
    return _agg(m, ["connection_id"], missed_to_server=("vs", "sum"), missed_to_client=("vc", "sum"),
                row_to_server=("rs", "max"), row_to_client=("rc", "max"))


def heartbeat_timeout(inp: DriverInputs) -> list[dict]:
    be = inp.broker_events
    lines = be[true(be["connection_id"].notna() & be["ts"].notna()
                    & be["message"].str.lower().str.contains("missed heartbeats", regex=False))]
    # rows: one log line per connection (min_by ts: the earliest; min_by passes over a null ts)
    lines = lines.sort_values("ts", kind="stable").drop_duplicates("connection_id")
    logged = pd.DataFrame({"connection_id": lines["connection_id"], "log_id": lines["event_id"],
                           "log_message": lines["message"], "has_log": True})
    rows = _join(_join(inp.connections, _missed(inp), "connection_id"), logged, "connection_id")
    missed = np.maximum(rows["missed_to_server"].fillna(0.0).astype(float), rows["missed_to_client"].fillna(0.0).astype(float))
    rows = rows.assign(missed=missed)
    keep = rows["has_log"].notna() | true(
        (rows["missed"] >= 2) & NO_CLOSE(rows) & (rows["end_reason"] != "capture_end"))
    out = []
    for r in records(rows[keep]):
        has_log = r["has_log"] is True
        said = None if r["log_message"] is None else r["log_message"].strip(" ").split("\n")[-1]
        mts, mtc = coalesce(r["missed_to_server"], 0.0), coalesce(r["missed_to_client"], 0.0)
        if said is not None and "from client" in said.lower():
            silent = "the client"
        else:
            silent = "the client" if mts >= mtc else "the broker"
        hb = r["heartbeat"]
        interval = f" (heartbeat {hb} s)" if hb is not None and hb > 0 else ""
        missed_txt = f", {int(r['missed'])} heartbeat intervals with no frame" if r["missed"] >= 1 else ""
        log_txt = f"; the broker log says '{js(None if said is None else said[:200])}'" if has_log else ""
        end_reason = None if r["end_reason"] is None else r["end_reason"].upper()
        summary = (f"The connection was dropped for missed heartbeats from {silent}{interval}{missed_txt}: it ended by "
                   f"{js(end_reason)} from the {coalesce(r['closed_by'], '?')} with no connection.close{log_txt}.")
        evidence = None
        if r["connection_id"] is not None and not (has_log and r["log_id"] is None):
            evidence = (f"connections connection_id={r['connection_id']}; metrics_flow metric_row_id="
                        + concat_ws(",", r["row_to_server"], r["row_to_client"])
                        + (f"; broker_events event_id={r['log_id']}" if has_log else ""))
        gap = int(max(r["missed"], 2.0)) * int(coalesce(hb, 0)) * 1_000_000
        start = greatest(r["start_ts"], None if r["end_ts"] is None else r["end_ts"] - gap)
        out.append(raw(r, "heartbeat_timeout", entity_kind="connection", entity=r["connection_id"],
                       connection_id=r["connection_id"], start=start, end=r["end_ts"], summary=summary,
                       evidence=evidence, count=1))
    return out


def _of_connection(r: dict, kind: str, summary: str, *, start, end, evidence: str | None = None, count=1) -> dict:
    """A finding about one row of connections (its evidence, unless given: that row)."""
    return raw(r, kind, entity_kind="connection", entity=r["connection_id"], connection_id=r["connection_id"],
               start=start, end=end, summary=summary, count=count,
               evidence=_ids("connections", "connection_id", r["connection_id"]) if evidence is None else evidence)


def abrupt_end(inp: DriverInputs) -> list[dict]:
    c = inp.connections
    decoded = c["dialect"].notna()
    rows = c[true((decoded & c["end_reason"].isin(["fin", "rst"]) & NO_CLOSE(c)) | (~decoded & (c["end_reason"] == "rst")))]
    out = []
    for r in records(rows):
        by = coalesce(r["closed_by"], "?")
        how = f"was reset (TCP RST from the {by})" if r["end_reason"] == "rst" else f"ended with a FIN from the {by}"
        close = " (its AMQP traffic was not decoded)" if r["dialect"] is None else " with no AMQP close from either side"
        out.append(_of_connection(r, "abrupt_end", f"The connection {how}{close}, {seconds(r['duration_us'])} after it began.",
                                  start=r["end_ts"], end=r["end_ts"]))
    return out


def access_refused(inp: DriverInputs) -> list[dict]:
    c = inp.connections
    code = true(c["close_code"].isin([403, 530]) & (c["amqp_closed_by"] == "server"))
    sasl = true(c["sasl_outcome"].notna() & (c["sasl_outcome"] != "ok"))
    cond = true(c["close_condition"] == "amqp:unauthorized-access")
    rows = c.assign(_code=code, _sasl=sasl)[code | sasl | cond]
    out = []
    for r in records(rows):
        if r["_code"]:
            why = f"connection.close {jd(r['close_code'])} '{coalesce(r['close_text'], '')}'"
        elif r["_sasl"]:
            why = f"SASL outcome {js(r['sasl_outcome'])}"
        else:
            why = f"close {js(r['close_condition'])} '{coalesce(r['close_description'], '')}'"
        who = ((f" for user '{r['user']}'" if r["user"] is not None else "")
               + (f" on vhost '{r['vhost']}'" if r["vhost"] is not None else ""))
        out.append(_of_connection(r, "access_refused", f"The broker refused the connection{who}: {why}.",
                                  start=r["start_ts"], end=r["end_ts"]))
    return out


def tls_not_decrypted(inp: DriverInputs) -> list[dict]:
    c = inp.connections
    rows = c[true(c["tls"] & (c["tls_status"].fillna("no_key") != "decrypted"))]
    out = []
    for r in records(rows):
        summary = (f"A TLS connection amqplens did not decrypt ({coalesce(r['tls_status'], 'no_key')}): its AMQP traffic is "
                   "not in the tables; give its key log with --keylog.")
        out.append(_of_connection(r, "tls_not_decrypted", summary, start=r["start_ts"], end=r["end_ts"]))
    return out


def capture_gaps(inp: DriverInputs) -> list[dict]:
    c = inp.connections
    rows = c[true((c["missing_bytes_to_server"] + c["missing_bytes_to_client"]) > 0)]
    out = []
    for r in records(rows):
        s, k = r["missing_bytes_to_server"], r["missing_bytes_to_client"]
        summary = (f"{s} bytes to the server and {k} to the client were never captured (gaps in the TCP streams): "
                   "findings on this connection may miss or cut what happened.")
        out.append(_of_connection(r, "capture_gaps", summary, start=r["start_ts"], end=r["end_ts"], count=s + k,
                                  evidence=f"decode_errors stage=tcp connection_id={js(r['connection_id'])}"))
    return out


def connection_churn(inp: DriverInputs) -> list[dict]:
    c, conf = inp.connections, inp.conf
    life_s = conf["findings.churn_max_life_s"]
    short = c[true(c["duration_us"] <= life_s * 1e6)]
    # rows: one per (capture, client address)
    groups = _agg(short, ["capture_id", "client_ip"], n=("duration_us", "count"), first_ts=("start_ts", "min"),
                  last_ts=("end_ts", "max"), first_id=("connection_id", "min"), last_id=("connection_id", "max"),
                  total_us=("duration_us", "sum"), timed=("duration_us", "count"))
    groups = groups[groups["n"] >= conf["findings.churn_min_connections"]]
    out = []
    for r in records(groups):
        mean = None if r["total_us"] is None else float(r["total_us"]) / r["timed"]
        span = None if r["last_ts"] is None or r["first_ts"] is None else r["last_ts"] - r["first_ts"]
        summary = (f"{jd(r['n'])} connections from {js(r['client_ip'])} lived {life_s:g} s or less (mean {seconds(mean)}) "
                   f"within {seconds(span)}: each open costs the broker a handshake, an authentication and a process.")
        evidence = (f"connections client_ip={js(r['client_ip'])} duration_us<={int(life_s * 1e6)} "
                    f"(connection_id={js(r['first_id'])} .. {js(r['last_id'])})")
        out.append(raw(r, "connection_churn", entity_kind="client", entity=r["client_ip"], connection_id=None,
                       start=r["first_ts"], end=r["last_ts"], summary=summary, evidence=evidence, count=r["n"],
                       key="connections"))
    rr = inp.request_responses  # channel.open and begin already (driver.read_inputs)
    # rows: one per connection
    opens = _agg(rr, ["capture_id", "connection_id"], n=("request_ts", "count"), first_ts=("request_ts", "min"),
                 last_ts=("request_ts", "max"), first_id=("request_frame_id", "min"), last_id=("request_frame_id", "max"))
    opens = opens[opens["n"] >= conf["findings.churn_min_channels"]]
    for r in records(opens):
        span = None if r["last_ts"] is None or r["first_ts"] is None else r["last_ts"] - r["first_ts"]
        summary = (f"{jd(r['n'])} channels (or sessions) opened on one connection within {seconds(span)}: open a channel "
                   "once and keep it.")
        evidence = (f"request_responses request=channel.open connection_id={js(r['connection_id'])} ({jd(r['n'])} rows: "
                    f"request_frame_id={js(r['first_id'])} .. {js(r['last_id'])})")
        out.append(raw(r, "connection_churn", entity_kind="connection", entity=r["connection_id"],
                       connection_id=r["connection_id"], start=r["first_ts"], end=r["last_ts"], summary=summary,
                       evidence=evidence, count=r["n"], key="channels"))
    return out


# ------------------------------------------------------------------ errors.py
def _int32(v: pd.Series) -> pd.Series:
    """An int column times an int literal as Spark computes it (32-bit, wrapping)."""
    return ((v.astype("Int64") + 2**31) % 2**32) - 2**31


def errors(inp: DriverInputs) -> list[dict]:
    e = inp.metrics_errors
    refused = (known_isin(e["kind"], ["connection_exception", "connection_error"])
               & (known_isin(e["code"], [403, 530]) | (e["condition"] == "amqp:unauthorized-access")))
    e = e[true(~refused & (e["code"].fillna(-1) != 0))]
    e = e.assign(b1=e["bucket_start"] + _int32(e["bucket_seconds"].astype("Int64") * 1_000_000))
    keys = ["capture_id", "connection_id", "kind", "raised_by", "code", "condition"]
    # rows: one per (connection, error)
    rows = _agg(e, keys, n=("count", "sum"), b0=("bucket_start", "min"), b1=("b1", "max"), row_id=("metric_row_id", "min"))
    rows = _join(rows, inp.conn_times(), "connection_id")  # rows: one time row per connection
    out = []
    for r in records(rows):
        fkind, n, code = ERROR_KIND.get(r["kind"]), r["n"], r["code"]
        name = concat_ws(" ", code, r["condition"])
        plural = "s" if n is not None and n > 1 else ""
        summary = f"The {coalesce(r['raised_by'], 'peer')} closed {jd(n)} {js(WHAT.get(r['kind']))}{plural} with {name}."
        evidence = (f"metrics_errors kind={js(r['kind'])} connection_id={js(r['connection_id'])} "
                    f"code={'-' if code is None else code} condition={js(r['condition'])} (first metric_row_id={js(r['row_id'])})")
        sev = "warning" if fkind == "connection_error" and r["raised_by"] is not None and r["raised_by"] != "broker" else None
        out.append(raw(r, fkind, entity_kind="connection", entity=r["connection_id"], connection_id=r["connection_id"],
                       start=greatest(r["b0"], coalesce(r["conn_start"], r["b0"])),
                       end=least(r["b1"], coalesce(r["conn_end"], r["b1"])), summary=summary, evidence=evidence,
                       count=n, severity=sev, key=concat_ws("/", r["kind"], r["raised_by"], code, r["condition"])))
    return out


def consumer_cancelled(inp: DriverInputs) -> list[dict]:
    c = inp.control
    rows = c[true((c["class_name"] == "basic") & (c["method_name"] == "cancel") & (c["direction"] == "to_client"))]
    consume = c[true((c["class_name"] == "basic") & (c["method_name"] == "consume"))].dropna(subset=["queue"])
    # rows: one queue per (connection, consumer tag)
    queues = _text_agg(consume, ["connection_id", "consumer_tag"], "queue", "first").rename("q").reset_index()
    rows = _join(rows, queues, ["connection_id", "consumer_tag"])
    out = []
    for r in records(rows):
        q = f" on queue '{r['q']}'" if r["q"] is not None else ""
        summary = (f"The broker cancelled consumer '{coalesce(r['consumer_tag'], '')}'{q} (basic.cancel): its queue was "
                   "deleted or became unavailable; it receives nothing more.")
        out.append(raw(r, "consumer_cancelled", entity_kind="consumer",
                       entity=concat_ws("/", r["connection_id"], r["channel"], r["consumer_tag"]),
                       connection_id=r["connection_id"], channel=r["channel"], start=r["ts"], end=r["ts"],
                       summary=summary, evidence=None if r["frame_id"] is None else f"frames frame_id={r['frame_id']}",
                       count=1, key=r["frame_id"]))
    return out


RULES = (publisher_blocked, channel_flow_off, slow_consumer, credit_starved, outcomes, redelivery_loop, slow_settle,
         heartbeat_timeout, abrupt_end, access_refused, tls_not_decrypted, capture_gaps, connection_churn, errors,
         consumer_cancelled)


def findings_rows(store, conf, capture_ids: list[str], budget: int | None) -> list[dict] | None:
    """The findings rows of ``capture_ids`` (the findings table's columns), or None when the inputs do not fit
    ``budget`` rows kept (None: no limit)."""
    try:
        inp = read_inputs(store, conf, capture_ids, budget)
    except TooMany as exc:
        log.info("findings: not on the driver (%s)", exc)
        return None
    return finish(inp, [row for rule in RULES for row in rule(inp)])
