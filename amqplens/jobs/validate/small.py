"""amqplens/jobs/validate/quality.py's extra columns for a small run, in pandas, on rows read straight from the lake (no Spark job).

A table slice of at most ``validate.pandas_max_rows`` rows is read with delta-rs and
pyarrow, given the same extra columns as ``amqplens.jobs.validate.quality.batch`` gives a Spark batch
(same names, same offending values as text, null when nothing is wrong) and validated
by GX's pandas engine. Spark's planning and a dozen small shuffles per table cost
seconds on a capture of a few hundred KB; these cost milliseconds. amqplens/jobs/validate/quality.py
stays the reference: a test validates the fixtures' lake through both and compares
every expectation's outcome.
"""

from __future__ import annotations

import functools

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from amqplens.contracts import Table, table
from amqplens.contracts import expectations as ex
from amqplens.jobs.validate.quality import SOURCE_CAPTURE

INTEGER_TYPES = ("int8", "int16", "int32", "int64")


def read_slice(store, name: str, ids: list[str] | None, columns: list[str] | None = None) -> pd.DataFrame:
    """The rows of table ``name`` whose ``replace_by`` value is one of ``ids`` (None: every row), as pandas.

    Timestamps stay in microseconds (Arrow's unit): any year a table holds fits.
    """
    columns = columns or table(name).column_names
    data = store.read_arrow(name, columns, ids, threads=True)  # threads: the work of a run goes on after it
    if data.num_columns == 0:  # no such table yet
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return data.to_pandas()


def _text(values: pd.Series, column_type: str) -> pd.Series:
    """Values as Spark's ``cast("string")`` writes them (integers without a decimal point, timestamps in UTC)."""
    if column_type in INTEGER_TYPES:
        return values.map(lambda v: None if pd.isna(v) else str(int(v)))
    if column_type == "timestamp":
        def spark_ts(v):
            if pd.isna(v):
                return None
            text = v.strftime("%Y-%m-%d %H:%M:%S")
            return text + (f".{v.microsecond:06d}".rstrip("0") if v.microsecond else "")

        return values.map(spark_ts)
    return values.map(lambda v: None if pd.isna(v) else str(v))


def _shown(t: Table, df: pd.DataFrame, column: str, flagged: pd.Series) -> pd.Series:
    """``column=value`` where ``flagged``, else null (only the flagged rows' values are written out: usually none)."""
    flagged = flagged.fillna(False).astype(bool)
    out = pd.Series(None, index=df.index, dtype=object)
    if flagged.any():
        out[flagged] = ("" + column + "=" + _text(df.loc[flagged, column], t.column(column).type).fillna("null")).to_numpy()
    return out


def _listed(parts: list[pd.Series], index) -> pd.Series:
    """'a, b' of the non-null parts per row, or null when every part is null."""
    parts = [p for p in parts if p.notna().any()]
    if not parts:
        return pd.Series(None, index=index, dtype=object)
    out = pd.Series([""] * len(index), index=index, dtype=object)
    for p in parts:
        p = p.fillna("")
        out = out.where(p == "", out.where(out == "", out + ", ") + p)
    return out.where(out != "", None)


def _added(df: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """``df`` with ``columns`` set on it, in place (``batch`` hands each table's slice on as a shallow copy): a wide
    slice is not copied once per extra column (``assign``: the 100 MB capture's frames copied 6 times, 4.5 of the
    13.6 s of its batches)."""
    for name, values in columns.items():
        df[name] = values
    return df


def with_required(t: Table, df: pd.DataFrame) -> pd.DataFrame:
    parts = [pd.Series(c, index=df.index).where(df[c].isna(), None) for c in ex.required_columns(t)]
    return _added(df, {ex.REQUIRED_NULL: _listed(parts, df.index)})


def with_negative(t: Table, df: pd.DataFrame) -> pd.DataFrame:
    parts = [_shown(t, df, c, df[c] < 0) for c in ex.non_negative_columns(t)]
    return _added(df, {ex.NEGATIVE: _listed(parts, df.index)})


def _micros(values: pd.Series) -> pd.Series:
    """Microseconds since the epoch, as floats (NaN for null)."""
    return (pd.to_datetime(values, utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(microseconds=1)


def with_window(t: Table, df: pd.DataFrame, captures: pd.DataFrame, slack_s: int) -> pd.DataFrame:
    """Timestamps outside [first_ts - slack, last_ts + slack] of their capture (see amqplens.jobs.validate.quality.with_window)."""
    caps = captures.drop_duplicates("capture_id").set_index("capture_id")
    lo = df["capture_id"].map(_micros(caps["first_ts"]) - slack_s * 1_000_000)
    hi = df["capture_id"].map(_micros(caps["last_ts"]) + slack_s * 1_000_000)
    judged = df["source"] == SOURCE_CAPTURE if "source" in df.columns else pd.Series(True, index=df.index)
    bucket = df["bucket_seconds"].astype("float64") * 1_000_000 if "bucket_seconds" in df.columns else 0

    def outside(c):
        us = _micros(df[c])
        start = us + bucket if c == "bucket_start" else us
        return judged & ((start < lo) | (us > hi))

    return _added(df, {ex.OUTSIDE_WINDOW: _listed([_shown(t, df, c, outside(c)) for c in ex.window_columns(t)], df.index)})


def with_reference(t: Table, df: pd.DataFrame, column: str, keys: set) -> pd.DataFrame:
    """``column``'s values (one, or each of an array) that ``keys`` lacks (see amqplens.jobs.validate.quality.with_reference)."""
    if t.column(column).type.startswith("array<"):
        def missing(values):
            if values is None or len(values) == 0:
                return None
            lost = [v for v in values if v is None or v not in keys]
            return ", ".join(sorted({v for v in lost if v is not None})) if lost else None

        # the rows with an element ``keys`` lacks, found column-wise; only those are written out
        lists = pa.array(df[column].tolist(), pa.list_(pa.string()))
        flat = pc.list_flatten(lists)
        lost = pc.invert(pc.fill_null(pc.is_in(flat, value_set=pa.array(list(keys), pa.string())), False))
        rows = set(pc.filter(pc.list_parent_indices(lists), lost).to_pylist())
        out = pd.Series(None, index=df.index, dtype=object)
        if rows:
            at = sorted(rows)
            out.iloc[at] = [missing(df[column].iloc[i]) for i in at]
        return _added(df, {ex.missing_column(column): out})
    values = df[column]
    return _added(df, {ex.missing_column(column): values.where(values.notna() & ~values.isin(keys), None)})


def with_connection_rows(captures: pd.DataFrame, connections: pd.DataFrame) -> pd.DataFrame:
    counts = connections.groupby("capture_id").size()
    return _added(captures, {ex.CONNECTION_ROWS: captures["capture_id"].map(counts).fillna(0).astype("int64")})


def with_accounting(connections: pd.DataFrame, frames: pd.DataFrame, decode_errors: pd.DataFrame) -> pd.DataFrame:
    """Frame and codec/gap error bytes per decoded connection and direction (see amqplens.jobs.validate.quality.with_accounting)."""
    from amqplens.decode.common.rows import STAGE_FRAME

    def per_direction(df, measure):
        df = df[df["connection_id"].notna()]
        return df.groupby(["connection_id", "direction"])[measure].sum()

    frame_bytes = per_direction(frames, "size")
    error_bytes = per_direction(decode_errors[decode_errors["stage"] != STAGE_FRAME], "length")
    c = connections
    decoded = c["dialect"].notna() & c["tls"].eq(False) & c["source"].eq(SOURCE_CAPTURE)
    def summed(sums, direction):
        if direction not in sums.index.get_level_values("direction"):
            return pd.Series(0.0, index=c.index)
        return c["connection_id"].map(sums.xs(direction, level="direction")).fillna(0)

    out = {ex.accounted(d): (summed(frame_bytes, d) + summed(error_bytes, d)).where(decoded, None) for d in ex.TO_SERVER_CLIENT}
    stream = sum(c[f"bytes_{d}"] - c[f"missing_bytes_{d}"] for d in ex.TO_SERVER_CLIENT)
    codec = sum(c[f"codec_error_bytes_{d}"].fillna(0) for d in ex.TO_SERVER_CLIENT)
    out[ex.CODEC_ERROR_SHARE] = (codec / stream).where(decoded & (stream > 0), None)
    return _added(c, out)


def with_percentile_order(t: Table, df: pd.DataFrame) -> pd.DataFrame:
    cols = ("p50_us", "p90_us", "p99_us", "max_us")
    broken = functools.reduce(lambda acc, ab: acc | (df[ab[0]] > df[ab[1]]), zip(cols, cols[1:]), pd.Series(False, index=df.index))
    shown = [_shown(t, df, c, broken & df[c].notna()) for c in cols]
    return _added(df, {ex.PERCENTILES_UNORDERED: _listed(shown, df.index)})


# what the extra columns of the other tables read of a table (connections' byte accounting, captures' connection
# rows, every table's capture window); read with the table's own
READ_BY_OTHERS = {
    "frames": ("connection_id", "direction", "size"),
    "decode_errors": ("connection_id", "direction", "length", "stage"),
    "connections": ("capture_id",),
    "captures": ("capture_id", "first_ts", "last_ts"),
}
# the inputs of this module's extra columns besides the checked ones (the window's source and bucket, the anomalies,
# the percentile order, the byte accounting)
EXTRA_INPUTS = ("capture_id", "source", "bucket_seconds", "flags", "event", "reason", "p50_us", "p90_us", "p99_us", "max_us",
                "dialect", "tls", *(f"{p}_{d}" for p in ("bytes", "missing_bytes", "codec_error_bytes", "tls_overhead_bytes")
                                    for d in ex.TO_SERVER_CLIENT))


def columns_read(t: Table, settings) -> list[str]:
    """The columns of ``t`` a small run reads: what its suite and extra columns read and what others' extras read of
    it (frames: 48 of its 88 columns), in the table's order."""
    used = {*t.key, *ex.required_columns(t), *ex.non_negative_columns(t), *ex.window_columns(t), *ex.references(t),
            *ex.suite_columns(t, settings), *EXTRA_INPUTS, *READ_BY_OTHERS.get(t.name, ())}
    return [c for c in t.column_names if c in used]


class SmallRun:
    """The run's slices as pandas, each read once with only the columns validation reads (``columns_read``);
    key sets of the referenced tables."""

    def __init__(self, store, ids: list[str], settings):
        self.store, self.ids, self.settings = store, ids, settings
        self._slices: dict[str, pd.DataFrame] = {}
        self._keys: dict = {}

    def slice(self, name: str) -> pd.DataFrame:
        if name not in self._slices:
            self._slices[name] = read_slice(self.store, name, self.ids, columns_read(table(name), self.settings))
        return self._slices[name]

    def keys(self, target: str, *, whole_table: bool = False) -> set:
        (key,) = table(target).key
        if (target, whole_table) not in self._keys:
            rows = read_slice(self.store, target, None, [key]) if whole_table else self.slice(target)
            self._keys[target, whole_table] = set(rows[key].dropna())
        return self._keys[target, whole_table]


def with_anomaly(t: Table, df: pd.DataFrame) -> pd.DataFrame:
    """``amqplens.jobs.validate.quality.with_anomaly``: deliveries' flags joined by ``,`` when there are any; flow_events' reason unless
    ``REASON_NOT_ANOMALY`` calls it benign; other tables unchanged."""
    if t.name == "deliveries":
        def joined(flags):
            flags = [] if flags is None or (isinstance(flags, float) and pd.isna(flags)) else list(flags)
            return ",".join(str(f) for f in flags) if flags else None

        return _added(df, {ex.ANOMALY: pd.Series([joined(f) for f in df["flags"]], index=df.index, dtype=object)})
    if t.name == "flow_events":
        benign = pd.Series(False, index=df.index)
        for event, reasons in ex.REASON_NOT_ANOMALY.items():
            benign |= (df["event"] == event) & (True if reasons is None else df["reason"].isin(reasons))
        return _added(df, {ex.ANOMALY: df["reason"].where(df["reason"].notna() & ~benign.fillna(False).astype(bool), None)})
    return df


def batch(t: Table, run: SmallRun, conf) -> pd.DataFrame:
    """``amqplens.jobs.validate.quality.batch`` for a small run: table ``t``'s rows with the columns its suite reads and no other."""
    df = run.slice(t.name).copy(deep=False)  # the extra columns go on this copy, not on the run's slice
    if t.name == "captures":
        df = with_connection_rows(df, run.slice("connections"))
    elif t.name == "connections":
        df = with_accounting(df, run.slice("frames"), run.slice("decode_errors"))
    elif t.name == "metrics_latency":
        df = with_percentile_order(t, df)
    df = with_anomaly(t, with_negative(t, with_required(t, df)))
    if ex.window_columns(t):
        df = with_window(t, df, run.slice("captures"), conf["validate.window_slack_s"])
    for column, target in ex.references(t).items():
        df = with_reference(t, df, column, run.keys(target, whole_table=t.replace_by != ("capture_id",)))
    return df[ex.suite_columns(t, ex.Settings.from_config(conf))]
