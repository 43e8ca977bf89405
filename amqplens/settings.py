"""The configuration model: every key, its rule, its default and what it means (pydantic).

``amqplens.config`` loads the layers and checks them through ``Settings``; this module is imported when a
configuration is loaded or its keys listed, not by the modules a Spark task imports (pydantic's import is
0.07 s a Python worker would pay). conf/defaults.yaml and the table of docs/configuration.md are generated from
it (python -m tools.gen_config_docs).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Callable, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

@dataclasses.dataclass(frozen=True)
class Rule:
    expected: str  # what a reader of the error message should have written
    check: Callable[[Any], Any]  # returns the normalised value or raises ValueError


def _int(minimum: int | None = None) -> Rule:
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
                v = int(v)
            else:
                raise ValueError
        if minimum is not None and v < minimum:
            raise ValueError
        return v

    return Rule(f"an integer >= {minimum}" if minimum is not None else "an integer", check)


def _int_or_auto(minimum: int) -> Rule:
    inner = _int(minimum)

    def check(v):
        return "auto" if v == "auto" else inner.check(v)

    return Rule(f"auto or {inner.expected}", check)


def _bool() -> Rule:
    words = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}

    def check(v):
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.lower() in words:
            return words[v.lower()]
        raise ValueError

    return Rule("true or false", check)


def _str(pattern: str | None = None, expected: str = "a non-empty string") -> Rule:
    def check(v):
        if not isinstance(v, str) or not v:
            raise ValueError
        if pattern and not re.fullmatch(pattern, v):
            raise ValueError
        return v

    return Rule(expected, check)


def _choice(*options: str) -> Rule:
    def check(v):
        if isinstance(v, bool):  # YAML reads bare on/off as booleans
            v = "on" if v else "off"
        if v not in options:
            raise ValueError
        return v

    return Rule("one of " + ", ".join(options), check)


def _ports() -> Rule:
    def check(v):
        if isinstance(v, (int, str)) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, list):
            raise ValueError
        out = []
        for p in v:
            p = int(p) if isinstance(p, str) and p.strip().isdigit() else p
            if isinstance(p, bool) or not isinstance(p, int) or not 0 < p < 65536:
                raise ValueError
            out.append(p)
        return out

    return Rule("a list of TCP ports (1-65535)", check)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}


def _size() -> Rule:
    def check(v):
        if isinstance(v, bool):
            raise ValueError
        if isinstance(v, int):
            n = v
        else:
            m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(v))
            if not m or m.group(2).lower() not in _UNITS:
                raise ValueError
            n = int(m.group(1)) * _UNITS[m.group(2).lower()]
        if n < 1:
            raise ValueError
        return n

    return Rule("a size in bytes, optionally with a unit: 128m, 64k, 1g", check)


_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration() -> Rule:
    def check(v):
        if isinstance(v, bool):
            raise ValueError
        m = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", str(v))
        if not m or int(m.group(1)) < 1:
            raise ValueError
        return int(m.group(1)) * _SECONDS[m.group(2) or "s"]

    return Rule("a duration of at least 1 second: 30s, 1m, 5m, 1h (a bare number is seconds)", check)


def _spark_extra() -> Rule:
    def check(v):
        if not isinstance(v, dict) or not all(isinstance(k, str) and k.startswith("spark.") for k in v):
            raise ValueError
        return {k: str(x) for k, x in v.items()}

    return Rule("a mapping of spark.* keys to values", check)


def _fraction() -> Rule:
    def check(v):
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ValueError
        v = float(v)
        if not 0 <= v <= 1:
            raise ValueError
        return v

    return Rule("a number between 0 and 1", check)


def _number(minimum: float) -> Rule:
    def check(v):
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ValueError
        v = float(v)
        if not v >= minimum:
            raise ValueError
        return v

    return Rule(f"a number >= {minimum:g}", check)


def _names(expected: str) -> Rule:
    def check(v):
        v = [v] if isinstance(v, str) else v
        if not isinstance(v, list) or not all(isinstance(p, str) and p for p in v):
            raise ValueError
        return v

    return Rule(expected + " (strings; [] for none)", check)


_EXPECTATION_PATTERNS = "a list of expectation names, table names or fnmatch patterns (table.check*)"


# -- the model: every key, its type (the rule its values pass), its default and what it means ------------------------
# conf/defaults.yaml and the reference table of docs/configuration.md are generated from it (python -m
# tools.gen_config_docs; tests/unit/test_config.py says when they are stale).


class Expected:
    """Annotated metadata: the rule a setting's values go through."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule


def _typed(rule: Rule) -> tuple[BeforeValidator, Expected]:
    """A setting's Annotated metadata, unpacked into its type (``Annotated[int, *Int(0)]``, a form type checkers read):
    the rule's check runs before pydantic's own validation; ``Expected`` keeps the rule."""
    return BeforeValidator(rule.check), Expected(rule)


Str = Annotated[str, *_typed(_str())]
Bool = Annotated[bool, *_typed(_bool())]
Size = Annotated[int, *_typed(_size())]
Ports = Annotated[list, *_typed(_ports())]
Duration = Annotated[int, *_typed(_duration())]
Fraction = Annotated[float, *_typed(_fraction())]


def Int(minimum: int) -> tuple[BeforeValidator, Expected]:  # noqa: N802 - a type's metadata
    return _typed(_int(minimum))


def Choice(*options: str) -> tuple[BeforeValidator, Expected]:  # noqa: N802 - a type's metadata
    return _typed(_choice(*options))


def Number(minimum: float) -> tuple[BeforeValidator, Expected]:  # noqa: N802 - a type's metadata
    return _typed(_number(minimum))


def Names(expected: str) -> tuple[BeforeValidator, Expected]:  # noqa: N802 - a type's metadata
    return _typed(_names(expected))


def setting(default: Any, doc: str) -> Any:
    """A key's default (as a YAML file writes it; it goes through the key's rule like any value) and its meaning."""
    return Field(default, description=doc)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)


class SparkSettings(_Section):
    master: Str = setting("local[*]", "the embedded session's master; under spark-submit its settings win")
    app_name: Str = setting("amqplens", "Spark application name")
    shuffle_partitions: Annotated[Any, *_typed(_int_or_auto(1))] = setting(
        "auto", "partitions of the flow and connection shuffles (and Spark SQL's, in the embedded session): `auto` is two "
        "per core Spark runs tasks on (4 on a 2-core machine: 10% faster end to end on the 100 MB benchmark capture than "
        "the former 8), or a number")
    ui_enabled: Bool = setting(False, "Spark UI")
    progress_bar: Annotated[str, *Choice("auto", "on", "off")] = setting("auto", "Spark's console progress bar; auto = on when stdout is a terminal")
    driver_memory: Annotated[str, *_typed(_str(r"\d+[kmgt]?", "a JVM memory size such as 2g or 512m"))] = setting(
        "2g", "embedded session only: the driver JVM's heap")
    quick_jit: Bool = setting(
        True, "embedded session only: the JVM's C1 compiler alone (`-XX:TieredStopAtLevel=1`, with the code cache kept at "
        "240 MB, as C1 alone would shrink it to 48 MB and a demo run filled that): end to end 30% faster on small captures, "
        "13% on the 100 MB benchmark capture, 5% on 300 MB: set false for local runs of many GB")
    class_sharing: Bool = setting(
        True, "embedded session only: map the class-data-sharing archive the install step built (`python -m "
        "amqplens.jvm_archive`; `--check` says whether this JVM maps it). About 18,000 Spark, Parquet and Arrow classes come "
        "parsed and verified: 4 s off a small capture's run. An archive of another JDK or other jars is not used (its name "
        "carries a key of both) and a JVM that cannot map it loads classes the usual way")
    extra: Annotated[dict, *_typed(_spark_extra())] = setting({}, 'any other spark.* settings, e.g. {"spark.executor.memory": "4g"}')


class LakeSettings(_Section):
    root: Str = setting("./lake", "where the tables live (`--lake` sets it)")
    staging_max_age_hours: Annotated[int, *Int(0)] = setting(1, "staging leftovers of crashed writes older than this are removed")
    pack_small_units: Bool = setting(
        True, "small captures share files: the ingest's tasks write the captures read directly that are at most "
        "`capture.min_split_size` into one file per table, task and capture date, and the driver's writes (metrics on "
        "the driver, findings, captures rows) put captures of fewer than 200,000 rows of a table in one file per date. "
        "Each such file lists its captures and their rows in its footer; replacing one of them rewrites the file "
        "without its rows in the same commit. Off: one file per capture and table, as before (300 small captures: "
        "about 3,000 files, which every later stage reads)")


class InputsSettings(_Section):
    roots: Annotated[list, *Names("a list of folders")] = setting(
        [], "when set: every input file must resolve (after `..` and symlinks) inside one of these folders; empty: any path")


class CaptureSettings(_Section):
    split_size: Size = setting("128m", "byte-range splits of one capture file (k, m, g units: binary, 1m = 2^20 bytes)")
    min_split_size: Size = setting(
        "8m", "a file smaller than `split_size` still gets one split per core (`spark.default.parallelism`), none smaller "
        "than this; smaller splits (small files) share a task up to this many bytes, and many captures all this small "
        "are decoded a capture per task")
    batch_rows: Annotated[int, *Int(1)] = setting(8192, "packets per Arrow batch")
    direct: Annotated[str, *Choice("auto", "on", "off")] = setting(
        "auto", "read captures without a packet shuffle: each decoding task scans the whole file (the numba header "
        "scan, `amqplens/decode/capture/headscan.py`) and keeps the flows the driver gave it, balanced by bytes. "
        "`auto`: when Spark runs locally (`local[...]`: every task reads the driver's paths); `on`: also on a cluster "
        "(every executor must read the same paths); `off`: byte-range splits and a shuffle by flow. A capture the scan "
        "cannot read whole (resyncs, fragments, odd link types) or a missing numba takes the shuffle path; the captures "
        "row says which (`splits` 0: direct). Same rows either way")
    amqp_ports: Ports = setting([5672], "TCP ports whose flows are AMQP")
    tls_ports: Ports = setting(
        [5671], "TCP ports whose flows are AMQP over TLS: decrypted with `capture.keylog`, else recorded, not decoded")
    sniff: Bool = setting(True, "also keep flows on other ports whose client opens with `AMQP`")
    max_ooo_buffer: Size = setting("4m", "out-of-order bytes buffered per connection direction")
    retransmit_history: Size = setting(
        "256k", "delivered bytes kept per direction to compare a retransmission with (`overlap_conflicts`; at most "
        "`max_ooo_buffer`): the per-connection memory of a healthy stream")
    port_reuse_idle_s: Annotated[int, *Int(0)] = setting(60, "a SYN after this much idle on a 4-tuple starts a new connection")
    keylog: Annotated[list, *Names("a list of NSS key log files (SSLKEYLOGFILE) to decrypt TLS with")] = setting(
        [], "NSS key log files (`SSLKEYLOGFILE`) that decrypt TLS connections (`--keylog PATH ...` sets it); read once by "
        "the driver, broadcast to the decode tasks, never written anywhere")


class DecodeSettings(_Section):
    max_error_bytes: Annotated[int, *Int(0)] = setting(4096, "raw bytes kept per `decode_errors` row (the hash covers all)")
    body_prefix_bytes: Annotated[int, *Int(0)] = setting(0, "bytes of each message body kept (0 = size and sha256 only)")
    field_table_letters: Annotated[str, *Choice("rabbitmq", "spec")] = setting("rabbitmq", "0-9-1 field-table type letters: `rabbitmq` or `spec`")
    compiled: Annotated[str, *Choice("auto", "on", "off")] = setting(
        "auto", "the 0-9-1 codec's hot frames (basic.publish, deliver, ack, nack, reject, content headers, bodies, "
        "heartbeats) and AMQP 1.0's (flows, dispositions, one-transfer messages with their properties_json) through "
        "the numba-compiled walks, each direction decoded ahead of the other between drains "
        "(`amqplens/decode/v0_9_1/hotpath.py`, `ahead.py`; `amqplens/decode/v1_0/hotpath.py`, `ahead.py`), and the TCP "
        "reassembler's runs of in-order packets of a kept connection (`amqplens/decode/tcp/run_kernel.py`): `auto` "
        "when numba imports, `on` the same (a missing numba "
        "still degrades, never fails; a warning says so), `off` the Python decoder alone (the reference). Same rows "
        "either way; not part of the capture's fingerprint (docs/performance.md)")
    redact_headers: Annotated[list, *Names("a list of header or property names")] = setting(
        ["authorization", "proxy-authorization", "cookie", "set-cookie", "password", "passwd", "secret", "token",
         "access_token", "refresh_token", "api_key", "apikey", "x-api-key"],
        "header and property names (any case, any depth) whose values are stored as `<redacted>` in `properties_json`, "
        "`arguments_json` and the peers' properties; `[]` keeps every value")


class LifecycleSettings(_Section):
    fused: Bool = setting(
        True, "the ingest's decode tasks run the lifecycle machines on each connection they decoded and write "
        "`deliveries`, `flow_events` and `request_responses` themselves (no frames re-read, no second shuffle, no "
        "row->Arrow of the wide frame rows); `false`: the `lifecycle` job derives them from `frames` in a second pass. "
        "Same rows either way; not part of the capture's fingerprint")
    compiled: Annotated[str, *Choice("auto", "off")] = setting(
        "auto", "in the fused lifecycle and the `lifecycle` job, `auto` folds 0-9-1 content frames onto their "
        "messages and does the 0-9-1 connections it models (publishes with and without confirms, consumers with or "
        "without acks, basic.get, qos, cancels, closes) and the AMQP 1.0 ones (sessions and links begun and attached, "
        "credit and windows, transfers of one or several frames, dispositions of any range, detach, end, close) in one "
        "compiled pass per batch of connections, the machines the rest (without numba: the machines all); `off` the "
        "machines alone, frame by frame (the reference). Same rows either way (docs/performance.md)")
    fused_max_held_frames: Annotated[int, *Int(1)] = setting(
        1_000_000, "a decode task holds at most this many frames of connections not yet whole (about 200 bytes each); a "
        "capture that needs more (long-lived connections of a large capture: 1.3 GB in one worker at 1 GB of 8 long "
        "connections) is left to the `lifecycle` job, which derives the same rows in a second pass. A direct task "
        "(`capture.direct`) knows what share of each capture's packets it has read, and leaves a capture to the job as "
        "soon as the frames it holds (at least a sixteenth of this) are on course to pass this by the capture's end")
    direct: Annotated[str, *Choice("auto", "off")] = setting(
        "auto", "the `lifecycle` job's tasks read the frames files of the connections they are given themselves "
        "(pyarrow; the driver plans the connections onto tasks by their frames); `off`: Spark reads the frames and "
        "shuffles and sorts them by connection (also what a capture with a connection of more than "
        "`max_connection_frames` frames takes, or a frames file not written by amqplens). Same rows either way")
    direct_task_frames: Annotated[int, *Int(1)] = setting(
        1_000_000, "a direct `lifecycle` task is given connections of about this many frames in all (at least one task "
        "per core, a connection never split); it holds their frames (about 170 bytes a frame of a 0-9-1 capture as "
        "read: no frame ids, the repeated text as dictionaries, and the folding's and array pass's arrays of them: "
        "about 400 bytes a frame at the peak), but a task given one connection of more than `chunk_frames` frames "
        "holds a chunk of it at a time")
    chunk_frames: Annotated[int, *Int(0)] = setting(
        65_536, "a 0-9-1 connection of more frames than this is done a chunk of about this many frames at a time "
        "(sorted, folded and passed from arrays, the pass's state carried from one chunk to the next), so that a task "
        "holds a chunk, not the connection: by the ingest's decode tasks as the frames come (the fused lifecycle), and "
        "by a direct `lifecycle` task given one connection as it reads it. A "
        "connection the array pass does not model, or whose times go back or that has no place to cut, is done "
        "whole (by the job where the ingest had passed a chunk of it). 0: every connection whole. Same rows either way")
    max_connection_frames: Annotated[int, *Int(1)] = setting(
        4_000_000, "the `lifecycle` job's direct tasks hold a connection whole where it is not done in chunks "
        "(`chunk_frames`: one the array pass does not model, or one sharing its task): a worker then peaks at about "
        "400 bytes a frame of it above its ~400 MiB at rest (1.7 GB for one of 3.4M frames). A capture with a "
        "connection of more frames takes Spark's sort, and that connection goes to the machines frame by frame as it "
        "comes, held nowhere (about 3x slower). Same rows either way")


class LogsSettings(_Section):
    split_size: Size = setting("64m", "byte-range split size of a broker log (a Proton trace is read whole)")
    join_tolerance_s: Annotated[int, *Int(0)] = setting(
        5, "a log's connection event or traced message joins a captured connection alive within this many seconds of it")


class MetricsSettings(_Section):
    bucket: Duration = setting("1m", "metric time bucket (`30s`, `1m`, `1h`, ...; a bare number is seconds)")
    concurrent_tables: Annotated[int, *Int(1)] = setting(
        4, "metric tables whose Spark queries run at the same time (from driver threads); their commits still go one by "
        "one, `metrics_errors` last, and nothing is committed if one fails. On a small capture each query is mostly "
        "planning and scheduling, which overlap; `1` runs them one by one")
    count_repeats_from_rows: Annotated[int, *Int(0)] = setting(
        200_000, "from this many frames + deliveries in the captures to do, frames are counted per slot no wider than "
        "the heartbeat interval before metrics_flow's heartbeat window, and metrics_latency's measured things alike "
        "in bucket, entities and value are counted into one row before they are spread over routes (its route rows "
        "once more before their shuffle); below it each is a row of its own, shuffles fewer, which small captures pay "
        "more for than they save. The same rows either way (a test compares them on every fixture). Measured: the "
        "100 MB load capture's metrics 33.1/33.5 s counted against 37.0/38.8 s not; metrics_latency alone on the "
        "300 MB lake 10-15 s counted against 21-22 s not (2.66M route rows, 178k once counted); a 1 MB capture's "
        "within noise either way (about 6,400 rows)")
    engine: Annotated[str, *Choice("auto", "driver", "spark")] = setting(
        "auto", "where the four metric tables are computed: `driver` (delta-rs reads of the columns they read, pandas and "
        "numpy, a pyarrow write: no Spark job), `spark` (Spark queries: the reference and the path for large lakes), "
        "`auto` = the driver while the captures to do hold at most `metrics.driver_max_rows` frames + deliveries, else "
        "Spark. The same rows either way (a test compares every column of every row on every fixture); a time the "
        "driver cannot write as Spark does (before year 1 or after 9999) sends the stage to Spark")
    driver_max_rows: Annotated[int, *Int(0)] = setting(
        20_000_000, "`metrics.engine` auto: frames + deliveries of the captures to do up to which the metrics may run on "
        "the driver, if its estimated peak memory fits too (`metrics.driver_memory_share`). Held in its Python "
        "process: the control frames, connections and requests; then every frame's 6 heartbeat columns (as dictionary "
        "codes) and the flow events for metrics_flow and metrics_errors; then, those let go, the deliveries' 20 "
        "columns for metrics_latency and metrics_settlement; and each table's intermediate frames. The 2 GB load "
        "capture's 15.6M rows peaked at 9.2 GB (about 600 bytes a row), its metrics 80.7 s on the driver "
        "(docs/performance.md)")
    driver_memory_share: Fraction = setting(
        0.7, "`metrics.engine` auto: the share of the memory available when the stage starts (Linux's MemAvailable) "
        "that the driver's estimated peak may take: two tables at a time where it fits, else one at a time where that "
        "fits, else Spark. The estimate: 450 MB, 90 KB a connection, 40 bytes a frame, 1,100 bytes a delivery and a flow "
        "event (fitted on 0-9-1 and AMQP 1.0 lakes; one table at a time 0.9 of that). Where the available memory cannot be read, only "
        "`metrics.driver_max_rows` decides")


class FindingsSettings(_Section):
    """The thresholds of the findings rules (amqplens/jobs/findings/; every rule: docs/tables.md, finding rules)."""

    min_blocked_ms: Annotated[int, *Int(0)] = setting(
        0, "publisher_blocked, channel_flow_off: a connection blocked (a channel with flow off) for less than this many "
        "milliseconds raises nothing; 0: any block is a finding")
    min_life_ms: Annotated[int, *Int(0)] = setting(
        500, "slow_consumer, credit_starved: a consumer or link whose state was known for less than this many "
        "milliseconds is too short-lived to judge")
    slow_consumer_share: Fraction = setting(
        0.8, "slow_consumer: the share of a consumer's life (basic.consume to basic.cancel) spent at its prefetch "
        "limit (in-flight >= prefetch) from which it is the bottleneck")
    credit_starved_share: Fraction = setting(
        0.5, "credit_starved: the share of a 1.0 sender link's observed time without link credit from which the sender "
        "is starved")
    min_unsettled: Annotated[int, *Int(1)] = setting(
        1, "unsettled_at_end: deliveries or publishes of one connection and direction left unsettled from which it is a "
        "finding")
    redelivery_loop_min: Annotated[int, *Int(2)] = setting(
        3, "redelivery_loop: deliveries of one message with the redelivered flag (in one queue) from which it goes round "
        "in a loop")
    slow_settle_factor: Annotated[float, *Number(1)] = setting(
        3, "slow_settle: a confirm or ack that took this many times the capture's own median (of its kind: confirms, "
        "acks, 1.0 settlements) is slow")
    slow_settle_min_ms: Annotated[int, *Int(0)] = setting(
        500, "slow_settle: ... and at least this many milliseconds (3x a fast capture's median is still fast)")
    slow_settle_min_count: Annotated[int, *Int(1)] = setting(
        20, "slow_settle: latencies of a kind a capture needs before its median is a yardstick")
    churn_min_connections: Annotated[int, *Int(2)] = setting(
        10, "connection_churn: short-lived connections from one client address from which it churns")
    churn_max_life_s: Annotated[float, *Number(0)] = setting(
        5, "connection_churn: a connection that lasted at most this many seconds is short-lived")
    churn_min_channels: Annotated[int, *Int(2)] = setting(
        20, "connection_churn: channel.open on one connection from which it churns channels (a channel per message)")
    top_n: Annotated[int, *Int(1)] = setting(50, "findings the report and `amqplens summary` list (most severe first)")
    engine: Annotated[str, *Choice("auto", "driver", "spark")] = setting(
        "auto", "where the rules run: `driver` (delta-rs reads of the rules' inputs, pandas, a pyarrow write: no Spark "
        "job), `spark` (a Spark query per rule: the reference), `auto` = the driver while the rows it keeps fit "
        "`findings.driver_max_rows`, else Spark. The same rows either way (a test compares them on the findings "
        "fixtures). Measured on the 300 MB load capture's lake: 2.3-2.9 s on the driver, 20.7-24.1 s through Spark "
        "(docs/performance.md, the findings stage)")
    driver_max_rows: Annotated[int, *Int(0)] = setting(
        1_000_000, "`findings.engine` auto: the rows the driver may keep of the rules' inputs (connections, the control "
        "frames, whole-capture metric rows, the deliveries with a finding's outcome, redelivered or slow, ...) before "
        "the stage goes to Spark; they are held in the driver's Python process as pandas frames (a delivery row 1.2 KB, "
        "a connection 1.6 KB: 1M rows, 1-1.5 GB), the same bound as `validate.pandas_max_rows`; the 300 MB load "
        "capture keeps 85k")


class ReportSettings(_Section):
    out: Str = setting("auto", "report folder (`--out`); `auto`: `<lake>/_report` beside the lake's tables (`./report` for a lake on an object store)")
    top_n: Annotated[int, *Int(1)] = setting(10, "rows of each top-N table")
    busiest: Annotated[int, *Int(1)] = setting(4, "channels / links drawn in the over-time plots")
    connection_pages: Annotated[int, *Int(0)] = setting(
        20, "connections with a page of their own: those that ended in an error, then the busiest (by frames)")
    max_points: Annotated[int, *Int(10)] = setting(2000, "points per series over time; beyond, each interval keeps its maximum")
    png_processes: Annotated[int, *Int(0)] = setting(
        2, "processes that draw the overview's PNGs (matplotlib) beside the driver's queries and pages: one helper "
        "process imports matplotlib once and forks these (`amqplens run` starts it after the ingest, so that its "
        "imports are done before the report); 0 draws them on the driver. A PNG the processes fail to draw is drawn "
        "on the driver (docs/performance.md, the report's PNGs in processes of their own)")
    engine: Annotated[str, *Choice("auto", "driver", "spark")] = setting(
        "auto", "where the report's queries run: `driver` (pyarrow reads of the columns each needs, Arrow and pandas: no "
        "Spark job), `spark` (Spark queries: the reference), `auto` = the driver while the rows its reads keep fit "
        "`report.driver_max_rows`, else Spark. The same pages either way (a test compares them on the fixtures' lake); "
        "the latency figure's quantiles are exact on the driver and within 1/10000 of the rank through Spark for a kind "
        "of 10,000 latencies or more (docs/performance.md, the report on the driver)")
    driver_max_rows: Annotated[int, *Int(0)] = setting(
        20_000_000, "`report.engine` auto: the rows the driver's reads may keep (the settled deliveries and request/"
        "responses, the deliver and transfer events, then aggregates and each page's frames: a few columns each) "
        "before the report goes to Spark. The 2 GB load capture's report fits: 6.4 s on the driver at 1.7 GB in its "
        "Python process, against 19.0 s at 5M (past it: the driver's reads, then Spark's)")


class ValidateSettings(_Section):
    enabled: Bool = setting(True, "`run`'s validate stage (between metrics and report); `amqplens validate` always runs")
    critical: Annotated[list, *Names(_EXPECTATION_PATTERNS)] = setting(
        ["*"], "invariants whose failure fails the run (exit 4): expectation names, table names or fnmatch patterns")
    warning: Annotated[list, *Names(_EXPECTATION_PATTERNS)] = setting(
        [], "... except these, which are only reported. Observations (what peers do: credit or windows overrun, flagged "
        "deliveries, undecodable content; see amqplens/contracts/expectations.py) are always warnings")
    max_decode_error_share: Fraction = setting(0.1, "frames whose content did not decode, as a share of the run's frames")
    max_codec_error_share: Fraction = setting(
        0.5, "mean share of a decoded connection's stream bytes in codec `decode_errors`")
    window_slack_s: Annotated[int, *Int(0)] = setting(1, "seconds a timestamp may lie outside its capture's first..last packet")
    sample_keys: Annotated[int, *Int(1)] = setting(5, "keys of offending rows reported per failed expectation")
    concurrent_tables: Annotated[int, *Int(1)] = setting(
        4, "tables whose one-pass counts (the Spark path's tallies) run at the same time, from driver threads; GX then "
        "validates the tables one by one. `1` counts them one by one")
    pandas_max_rows: Annotated[int, *Int(0)] = setting(
        50_000, "a run whose tables hold at most this many rows each is validated by GX's pandas engine on the rows "
        "(delta-rs, pandas; no Spark); a larger one by counts (each table's checks counted in one pass, on the driver or "
        "by Spark: `validate.tally`; the tally validated by GX, the checks it does not pass by GX's Spark engine on the "
        "rows); 0: always by counts. The pandas path costs about 16 us more a frame: on the 100 MB load capture (613k "
        "frames) 13.9 s against 3.9 s for the driver's counts, on the 0.94 MB one (7k) the same within the noise")
    tally: Annotated[str, *Choice("auto", "driver", "spark")] = setting(
        "auto", "past `validate.pandas_max_rows`, where each table's checks are counted before GX validates the counts: "
        "`driver` (delta-rs scans in record batches and Arrow compute: no Spark job; amqplens/jobs/validate/columnar.py), "
        "`spark` (one Spark aggregate per table and one job per reference target: the reference, and the path for "
        "large lakes), `auto` = the driver while the run's largest table holds at most `validate.tally_driver_max_rows` "
        "rows. The same counts either way (a test compares them); the checks a count does not pass are validated by "
        "GX's Spark engine on the rows either way, with samples")
    tally_driver_max_rows: Annotated[int, *Int(0)] = setting(
        16_000_000, "`validate.tally` auto: the rows of the run's largest table up to which the counts run on the driver. "
        "It holds each table's key column, a hash table of the frames' and connections' keys and the values that name "
        "them: the 2 GB load capture's lake (12.4M frames, 5.4M flow events) peaked at 4.0 GB in the driver's Python "
        "process, about 330 bytes per row of the largest table; its validate stage took 24.6 s against 158.4 s with "
        "the Spark counts")


class Settings(_Section):
    """Every configuration key, by section (``capture.split_size`` is ``Settings().capture.split_size``)."""

    spark: SparkSettings = SparkSettings()
    lake: LakeSettings = LakeSettings()
    inputs: InputsSettings = InputsSettings()
    capture: CaptureSettings = CaptureSettings()
    decode: DecodeSettings = DecodeSettings()
    lifecycle: LifecycleSettings = LifecycleSettings()
    logs: LogsSettings = LogsSettings()
    metrics: MetricsSettings = MetricsSettings()
    findings: FindingsSettings = FindingsSettings()
    report: ReportSettings = ReportSettings()
    validate_: ValidateSettings = Field(ValidateSettings(), alias="validate")  # BaseModel has a validate method

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _sections() -> dict[str, type[_Section]]:
    # pydantic types a field's annotation as any type form (or None); Settings' fields are all sections
    return {(f.alias or name): cast("type[_Section]", f.annotation) for name, f in Settings.model_fields.items()}


def keys() -> dict[str, tuple[Rule, Any, str]]:
    """Every key, dotted, in the model's order: (its rule, its default as written, what it means)."""
    out = {}
    for section, model in _sections().items():
        for name, f in model.model_fields.items():
            rule = next(m.rule for m in f.metadata if isinstance(m, Expected))
            out[f"{section}.{name}"] = (rule, f.default, f.description or "")
    return out


SPEC: dict[str, Rule] = {k: rule for k, (rule, _, _) in keys().items()}


def flat(settings: Settings) -> dict[str, Any]:
    """The settings as dotted keys -> values."""
    return {f"{section}.{name}": value for section, fields in settings.model_dump(by_alias=True).items()
            for name, value in fields.items()}
