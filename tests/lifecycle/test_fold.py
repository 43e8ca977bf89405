"""Folding 0-9-1 content frames onto their method rows (amqplens/lifecycle/fold.py) and the connections
amqplens/lifecycle/array091.py takes from arrays never change a row.

The fused lifecycle with folding, with and without the array path, against the same frames fed one by one to
the machines (``fold_content=False``, what the lifecycle job does), on every capture fixture (the fuzz corpus
included) and on their frame tables mutated at
random: times made equal over long runs (more rows at one time than the runner's reorder window) or moved back,
rows removed or repeated, message numbers and channels changed, hashes added to headers and taken from bodies,
frame types changed, a channel.close / close-ok / connection.close-ok of the other direction put inside a
message, directions flipped, dialects changed. Every deliveries, flow_events and request_responses row must be
the same (the order rows leave in may differ: a folded message is complete at its method).
"""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from amqplens.jobs import lifecycle
from amqplens.lifecycle import array091
from amqplens.lifecycle.batches import FRAME_COLUMNS
from amqplens.lifecycle.chunks import sort_keys
from amqplens.lifecycle.fold import Handed, column_in, fold
from amqplens.lifecycle.fused import _SORT, ConnectionLifecycle
from amqplens.lifecycle.runner import LifecycleOptions
from tests.lifecycle.captures import DATA, frame_id, frames_of

CAPTURES = sorted(p for p in DATA.rglob("*.pcap*") if "tls" not in p.parts)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _table(rows: list[dict]) -> pa.Table:
    columns = [c for c in FRAME_COLUMNS if c != "ts_us"]
    data = {c: [r.get(c) for r in rows] for c in columns}
    data["ts"] = [None if r.get("ts_us") is None else EPOCH + dt.timedelta(microseconds=r["ts_us"]) for r in rows]
    types = {"stream_offset": pa.int64(), "channel": pa.int32(), "message_seq": pa.int64(), "body_size": pa.int64(),
             "delivery_tag": pa.int64(), "ts": pa.timestamp("us", tz="UTC")}
    return pa.table({c: pa.array(v, types.get(c)) if c in types or any(x is not None for x in v) else pa.nulls(len(v))
                     for c, v in data.items()})


def _rows(table: pa.Table, fold_content: bool, batch_rows: int = 8192, arrays: bool = True,
          options: LifecycleOptions = LifecycleOptions()) -> dict[str, list]:
    fused = ConnectionLifecycle(**lifecycle.structs(), options=options, batch_rows=batch_rows, fold_content=fold_content,
                                arrays=arrays)
    out = [b for chunk in table.to_batches(max_chunksize=500) for b in fused.frames("cap", chunk)]
    out += list(fused.finish())
    assert not fused.failed
    rows: dict[str, list] = {}
    for b in out:
        if b.num_rows:
            kind = b.column("kind")[0].as_py()
            rows.setdefault(kind, []).extend(b.column(kind).to_pylist())
    return {k: sorted(v, key=repr) for k, v in rows.items()}


def _folded(table: pa.Table) -> int:
    """Rows fold removes from the table sorted as the fused lifecycle sorts it."""
    return table.num_rows - fold(table.take(pc.sort_indices(table, options=_SORT)), 64).num_rows


def test_a_handed_table_is_let_go_as_the_rows_kept_are_copied():
    """``fold`` of a ``Handed`` table gives the table ``fold`` gives of the table itself, and holds the frames once:
    the peak of what it allocates stays well under the folded copy (each source column goes as its copy is made),
    where a table the caller still holds costs the whole copy on top (the measurement sees that). A broker capture's
    frames, two columns widened to 2 KB a row so that the copy, not the folding's own arrays, is the peak."""
    rows = frames_of(DATA / "broker" / "clean_traffic.pcap")
    table = _table(rows)
    for name in ("routing_key", "arguments_json"):
        wide = pa.array([f"{i:06d}" + "x" * 2000 for i in range(table.num_rows)])
        table = table.set_column(table.column_names.index(name), name, wide)
    table = table.take(pc.sort_indices(table, options=_SORT))
    before = pa.default_memory_pool()
    pools, peaks, outs = [], {}, {}
    try:
        for how in ("kept", "handed"):
            pool = pa.proxy_memory_pool(pa.system_memory_pool())  # its own peak; outlives every buffer from it
            pools.append(pool)
            source = pc.take(table, pa.array(range(table.num_rows)), memory_pool=pool)  # a copy in ``pool``
            start = pool.bytes_allocated()
            pa.set_memory_pool(pool)
            if how == "kept":
                outs[how] = fold(source, 64)
                del source
            else:
                handed = Handed(source)
                del source
                outs[how] = fold(handed, 64)
                assert handed.table is None
            pa.set_memory_pool(before)
            peaks[how] = pool.max_memory() - start
        assert outs["handed"].equals(outs["kept"])
        out = outs["kept"].get_total_buffer_size()
        assert outs["kept"].num_rows < table.num_rows  # something folded
        assert peaks["kept"] >= out, peaks
        assert peaks["handed"] < 0.6 * out, (peaks, out)
    finally:
        pa.set_memory_pool(before)
        outs.clear()


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(DATA)))
def test_folding_changes_no_row_of_a_fixture(path):
    table = _table(frames_of(path))
    reference = _rows(table, False, arrays=False)
    assert _rows(table, True, arrays=False) == reference
    assert _rows(table, True) == reference


def _dictionaries(table: pa.Table) -> pa.Table:
    """``table`` with the text columns the lifecycle job's direct tasks read dictionary-encoded so encoded, in chunks
    of 100 rows (each chunk its own dictionary, as a Parquet read's row groups are)."""
    table = pa.Table.from_batches(table.to_batches(max_chunksize=100))
    for i, field in enumerate(table.schema):
        if field.name in lifecycle.DICTIONARY_COLUMNS and pa.types.is_string(field.type):
            table = table.set_column(i, field.name, pa.chunked_array(
                [c.dictionary_encode() for c in table.column(i).chunks], pa.dictionary(pa.int32(), pa.string())))
    return table


def _direct_rows(table: pa.Table) -> dict[str, list]:
    """The lifecycle job's direct task's rows (``sorted_table_lifecycle``) of ``table`` sorted as its read sorts."""
    from amqplens.lifecycle.fused import sorted_table_lifecycle

    table = table.take(pc.sort_indices(sort_keys(table), options=_SORT))
    rows: dict[str, list] = {}
    for b in sorted_table_lifecycle(Handed(table), [], **lifecycle.structs(), batch_rows=300):
        if b.num_rows:
            kind = b.column("kind")[0].as_py()
            rows.setdefault(kind, []).extend(b.column(kind).to_pylist())
    return {k: sorted(v, key=repr) for k, v in rows.items()}


@pytest.mark.parametrize("path", [p for p in CAPTURES if "fuzz" not in p.parts], ids=lambda p: str(p.relative_to(DATA)))
def test_frames_read_as_dictionaries_give_the_same_rows(path):
    """The lifecycle job's direct tasks read the repeated text columns dictionary-encoded
    (``jobs.lifecycle.DICTIONARY_COLUMNS``): folded, from arrays and through the machines, every row is the one the
    frames fed one by one give (every fixture but the fuzz corpus, which the next test mutates)."""
    table = _table(frames_of(path))
    encoded = _dictionaries(table)
    assert not table.num_rows or any(pa.types.is_dictionary(t) for t in encoded.schema.types)
    assert _direct_rows(encoded) == _rows(table, False, arrays=False)


def _one_connection_tasks(table: pa.Table) -> dict[str, list]:
    """``_direct_rows`` of each connection of ``table`` alone, read as a direct task of one connection reads it: no
    frame_id column (the lifecycle makes the ids of the rows it writes) and the connection id not read but made, a
    dictionary of its one value (``read_sorted``'s ``single``)."""
    rows: dict[str, list] = {}
    for cid in pc.unique(table.column("connection_id")).to_pylist():
        mine = table.filter(pc.equal(table.column("connection_id"), cid) if cid is not None
                            else pc.is_null(table.column("connection_id")))
        mine = mine.drop_columns(["frame_id", "connection_id"])
        if cid is not None:
            mine = mine.append_column("connection_id", pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(mine.num_rows, np.int32)), pa.array([cid], pa.string())))
        else:
            mine = mine.append_column("connection_id", pa.nulls(mine.num_rows, pa.string()))
        for kind, got in _direct_rows(mine).items():
            rows.setdefault(kind, []).extend(got)
    return {k: sorted(v, key=repr) for k, v in rows.items()}


@pytest.mark.parametrize("path", [p for p in CAPTURES if "fuzz" not in p.parts], ids=lambda p: str(p.relative_to(DATA)))
def test_frames_read_without_their_ids_give_the_same_rows(path):
    """The direct tasks read no frame_id (made from connection, direction and offset for the rows written:
    ``fold.frame_ids_at``) and a task of one connection not its id: every row, frame ids and the lists of a
    message's frames included, is the one the frames fed one by one with their ids give (the ids there made in
    Python by tests/lifecycle/captures.py, as the ingest job names them)."""
    table = _table(frames_of(path))
    got = _one_connection_tasks(_dictionaries(table))
    assert got == _rows(table, False, arrays=False)
    if path.name in ("consume_prefetch_ack.pcap", "publish_confirms.pcap", "amqp10_rich.pcap"):  # not vacuous
        ids = [i for d in got["delivery"] for i in d["frame_ids"]] + [e["frame_id"] for e in got.get("flow_event", [])]
        assert len(ids) > 20 and all(i and i.count("-") >= 2 for i in ids)


# the direct tasks' reads: the repeated text as dictionaries; and, a task of one connection, without the frame and
# connection ids (the mutated rows then named again as the ingest names frames: an id follows direction and offset)
_READS = {"dictionaries": (100, _direct_rows, False), "without ids": (200, _one_connection_tasks, True)}


@pytest.mark.parametrize("read", sorted(_READS))
@pytest.mark.parametrize("seed", range(4))
def test_mutated_frames_read_as_direct_tasks_read_them_give_the_same_rows(seed, read):
    base, rows_of, renamed = _READS[read]
    rng = random.Random(base + seed)
    for path in rng.sample(CAPTURES, 5):
        rows = frames_of(path)
        if rows:
            mutated = _mutate(rows, rng)
            if renamed:
                mutated = [{**r, "frame_id": frame_id(r)} for r in mutated]
            table = _table(mutated)
            assert rows_of(_dictionaries(table)) == _rows(table, False, arrays=False), path


def test_folding_takes_most_content_frames_of_the_broker_fixtures():
    """Not vacuous: on the real-broker captures most header and body frames are folded."""
    total = folded = 0
    for path in sorted((DATA / "broker").glob("*.pcap")):
        rows = frames_of(path)
        total += sum(r["frame_type"] in ("header", "body", "heartbeat") for r in rows)
        folded += _folded(_table(rows))
    assert total > 1000 and folded > 0.8 * total, (folded, total)


def _mutate(rows: list[dict], rng: random.Random) -> list[dict]:
    rows = [dict(r) for r in rows]
    n = len(rows)
    rare = [r for r in rows if r.get("class_name") in ("channel", "connection")]
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(10)
        i = rng.randrange(n)
        if kind == 0:  # one time over a long run: more rows than the reorder window
            for r in rows[i:i + rng.choice((5, 40, 70, 200))]:
                r["ts_us"] = rows[i]["ts_us"]
        elif kind == 1:  # times moved back
            for r in rng.sample(rows, min(n, 5)):
                r["ts_us"] = (r["ts_us"] or 0) - rng.choice((1, 10, 10_000))
        elif kind == 2:  # rows removed
            rows = [r for r in rows if rng.random() > 0.05]
        elif kind == 3:  # a row repeated (same offset)
            rows.insert(i, dict(rows[i]))
        elif kind == 4:  # message numbers and channels changed
            for r in rng.sample(rows, min(len(rows), 8)):
                if r.get("message_seq") is not None:
                    r["message_seq"] += rng.choice((-1, 1))
                else:
                    r["channel"] = (r.get("channel") or 0) + 1
        elif kind == 5:  # hashes added to headers, taken from bodies
            for r in rng.sample(rows, min(len(rows), 8)):
                if r.get("frame_type") in ("header", "body"):
                    r["body_sha256"] = None if r.get("body_sha256") else "0" * 64
        elif kind == 6:  # frame types changed
            for r in rng.sample(rows, min(len(rows), 5)):
                r["frame_type"] = rng.choice(("heartbeat", "header", "body", "method"))
        elif kind == 7 and rare:  # the other direction's channel or connection end inside a message
            r = dict(rng.choice(rare))
            r["ts_us"] = rows[i]["ts_us"]
            r["stream_offset"] = (r["stream_offset"] or 0) + 1_000_000 + i
            rows.append(r)
        elif kind == 8:  # directions flipped
            for r in rng.sample(rows, min(len(rows), 3)):
                r["direction"] = "to_client" if r["direction"] == "to_server" else "to_server"
        else:  # a dialect changed
            rows[i]["dialect"] = rng.choice(("0-8", "1.0", None))
        n = len(rows)
    return rows


def mutated_samples(rng: random.Random, count: int = 4):
    """(path, its frames mutated) of ``count`` capture fixtures (not the fuzz corpus) ``rng`` picks."""
    paths = [p for p in CAPTURES if "fuzz" not in p.parts]
    for path in rng.sample(paths, count):
        rows = frames_of(path)
        if rows:
            yield path, _mutate(rows, rng)


@pytest.mark.parametrize("seed", range(12))
def test_folding_changes_no_row_of_mutated_frames(seed):
    rng = random.Random(seed)
    for path, mutated in mutated_samples(rng):
        table = _table(mutated)
        batch_rows = rng.choice((7, 100, 8192))
        reference = _rows(table, False, arrays=False)
        assert _rows(table, True, batch_rows) == reference, path
        assert _rows(table, True, batch_rows, arrays=False) == reference, path


def _frame(direction: str, offset: int, ts: int, kind: str, method: str | None = None, seq: int | None = None,
           **values) -> dict:
    row = dict.fromkeys(FRAME_COLUMNS)
    row.update(connection_id="conn", capture_id="cap", direction=direction, stream_offset=offset, ts_us=ts,
               dialect="0-9-1", frame_type=kind, channel=1, class_name="basic" if kind == "method" else None,
               method_name=method, message_seq=seq)
    row.update(values)
    return row


def _message(direction: str, offset: int, ts: int, method: str, seq: int, **values) -> list[dict]:
    return [_frame(direction, offset, ts, "method", method, seq, **values),
            _frame(direction, offset + 1, ts, "header", None, seq, body_size=3, properties_json="{}"),
            _frame(direction, offset + 2, ts, "body", None, seq, body_sha256="ab" * 32)]


def test_more_rows_at_one_time_than_the_window_keep_the_runners_order():
    """At one time, the client's publish, its ack of delivery 1 and 27 more publishes (more than the runner's window
    of 64 rows), then the broker's delivery 1 (its offsets sort after): frame by frame the runner handles the ack
    before the delivery has come in (its window fills with the client's rows), so the ack names an unknown tag.
    Folded, the client's rows are fewer than the window and the delivery would go first; ``fold`` sees that the
    order would change and leaves the connection as it is."""
    t = 1_000_000
    rows = [_frame("to_server", 0, 1, "method", "open", class_name="channel"),
            _frame("to_client", 0, 2, "method", "open-ok", class_name="channel"),
            *_message("to_server", 10, t, "publish", 1),
            _frame("to_server", 13, t, "method", "ack", delivery_tag=1, multiple=False)]
    for k in range(27):
        rows += _message("to_server", 14 + 3 * k, t, "publish", 2 + k)
    rows += _message("to_client", 10_000, t, "deliver", 1, delivery_tag=1, consumer_tag="ct")
    table = _table(rows)
    fused = _rows(table, True)
    assert fused == _rows(table, False)
    assert any(r["reason"] == "ack_of_unknown_tag" for r in fused["flow_event"])
    assert _folded(table) == 0
    fewer = _table([r for r in rows if r["direction"] == "to_client" or r["stream_offset"] < 40])
    assert _folded(fewer) > 0 and _rows(fewer, True) == _rows(fewer, False)


def test_the_array_path_takes_the_plain_connections_of_the_fixtures():
    """Not vacuous: connections array091 models (publishes with and without confirms, consumers with acks, nacks
    and rejects, cancels, basic.get, closes) go that way; the others (tx, returns, channel.flow, blocked) do not."""
    taken, why = {}, {}
    for path in sorted((DATA / "broker").glob("*.pcap")) + [DATA / "demo" / "demo.pcap"]:
        table = _table(frames_of(path))
        folded = fold(table.take(pc.sort_indices(table, options=_SORT)), 64)
        result = array091.lifecycle(folded, 64, debug=True)
        conns = folded.column("connection_id").to_numpy(zero_copy_only=False)
        taken[path.stem] = (len(set(conns[result.taken])), len(set(conns)))
        why[path.stem] = {w[3] for w in result.why.values() if w[0] == "row"}
    assert taken["churn"][0] >= 30 and taken["pipelined_publish"] == (1, 1) and taken["publish_nacked"] == (1, 1)
    assert taken["consumer_cancelled"] == (2, 2) and taken["demo"][0] >= 4
    assert sum(t for t, _ in taken.values()) >= 50, taken
    assert taken["basic_get"] == (1, 1) and taken["heartbeat"] == (1, 1)  # basic.get, get-ok, get-empty
    assert ("tx", "select") in why["tx"] and ("channel", "flow-ok") in why["channel_flow"]
    assert ("basic", "return") in why["mandatory_return"]  # returns are the machines'


@pytest.mark.parametrize("max_pending", [10_000, 1])
def test_mandatory_publishes_no_return_names_are_sent_at_their_channels_end(max_pending):
    """mandatory_return.pcap without its basic.return frames (and their content): the mandatory publishes wait for a
    return that never comes and are ``sent`` when their channel ends; the array path takes the connection, and with
    a bound of 1 pending publish it leaves it to the machine, which expires the older with a flag. Both ways every
    row is the machine's."""
    rows = frames_of(DATA / "broker" / "mandatory_return.pcap")
    returns = {(r["direction"], r["channel"], r["message_seq"]) for r in rows if r.get("method_name") == "return"}
    rows = [r for r in rows if (r["direction"], r["channel"], r.get("message_seq")) not in returns]
    table = _table(rows)
    options = LifecycleOptions(max_pending_returns=max_pending)
    reference = _rows(table, False, options=options)
    assert _rows(table, True, options=options) == reference
    mandatory = [d for d in reference["delivery"] if d["method"] == "publish" and d["outcome"] == "sent"
                 and d["settled_by_frame_id"] == d["frame_ids"][0]]
    assert mandatory
    folded = fold(table.take(pc.sort_indices(table, options=_SORT)), 64)
    taken = array091.lifecycle(folded, 64, max_pending_returns=max_pending).taken
    assert taken.all() if max_pending > 1 else not taken.any()
    flagged = [d for d in reference["delivery"] if "return_window_exceeded" in (d["flags"] or [])]
    assert bool(flagged) == (max_pending == 1)


def test_the_array_path_raising_leaves_the_capture_to_the_lifecycle_job(monkeypatch):
    """A bug in the array path (it should never raise) fails the capture as the machines raising does: named in
    ``failed`` (the ingest then commits none of its lifecycle rows and the lifecycle job derives them)."""
    def broken(*args, **kwargs):
        raise RuntimeError("array bug")

    monkeypatch.setattr(array091, "lifecycle", broken)
    fused = ConnectionLifecycle(**lifecycle.structs())
    table = _table(frames_of(DATA / "broker" / "churn.pcap"))
    for chunk in table.to_batches(max_chunksize=500):
        list(fused.frames("cap", chunk))
    list(fused.finish())
    assert fused.failed == {"cap": "RuntimeError: array bug"}


@pytest.mark.parametrize("chunk", [3, 5000])
def test_take_span_and_kept_give_a_plain_take(chunk):
    """``take_span`` (chunk by chunk, a span joined, or short chunks joined) and a ``Kept``'s columns, takes and
    table give what a take from the joined column gives: rows sorted, shuffled, few, many, repeated and none, from a
    string and an integer column of short and of long chunks, with nulls."""
    from amqplens.lifecycle.fold import Kept, take_span

    rng = np.random.default_rng(chunk)
    n = 20_000
    text = [None if i % 7 == 0 else f"v{i}" for i in range(n)]
    source = pa.table({"s": pa.chunked_array([pa.array(text[i:i + chunk]) for i in range(0, n, chunk)]),
                       "i": pa.chunked_array([pa.array(np.arange(i, min(n, i + chunk))) for i in range(0, n, chunk)])})
    for rows in (np.arange(n), np.sort(rng.choice(n, 300, replace=False)), rng.permutation(n)[:5000],
                 rng.integers(0, n, 40), np.array([n - 1, 0, n - 1]), np.zeros(0, np.int64), np.arange(100, 9000)):
        for name in ("s", "i"):
            want = source.column(name).combine_chunks().take(pa.array(rows, pa.int64()))
            assert take_span(source.column(name), rows).equals(want), (name, len(rows))
            assert take_span(source.column(name), rows, join=False).equals(want), (name, len(rows))
    kept_rows = np.sort(rng.choice(n, 6000, replace=False))
    plain = source.take(pa.array(kept_rows))
    added = {"x": pa.array(np.arange(len(kept_rows)))}
    kept = Kept(source, kept_rows, added)
    some = rng.integers(0, len(kept_rows), 500)
    assert kept.take("s", some).equals(plain.column("s").combine_chunks().take(pa.array(some)))
    assert kept.column("i").combine_chunks().equals(plain.column("i").combine_chunks())
    assert kept.take("i", some).equals(plain.column("i").combine_chunks().take(pa.array(some)))  # from the made column
    mask = rng.random(len(kept_rows)) < 0.3
    got = kept.table(mask)
    want = plain.append_column("x", added["x"]).filter(pa.array(mask))
    assert got.column_names == ["s", "i", "x"] and got.equals(want.cast(got.schema))
    # a dictionary-encoded source column (each chunk its own dictionary) comes out as its values
    encoded = source.set_column(0, "s", pa.chunked_array([c.dictionary_encode() for c in source.column("s").chunks]))
    kept = Kept(encoded, kept_rows, added)
    assert kept.schema.field("s").type == pa.string()
    assert kept.take("s", some).equals(plain.column("s").combine_chunks().take(pa.array(some)))
    assert kept.column("s", join=False).combine_chunks().equals(plain.column("s").combine_chunks())
    assert Kept(encoded, kept_rows, added).table(mask).equals(got)


def test_a_header_without_properties_json_gives_null_properties():
    """A message whose header row has no properties_json: null properties from the array path as from the machine
    (the array path's Arrow take of a null code raised before)."""
    rows = [_frame("to_server", 0, 1, "method", "open", class_name="channel"),
            _frame("to_client", 0, 2, "method", "open-ok", class_name="channel")]
    first = _message("to_server", 10, 3, "publish", 0)
    first[1]["properties_json"] = None
    rows += first + _message("to_server", 13, 4, "publish", 1)
    table = _table(rows)
    assert _rows(table, True) == _rows(table, False, arrays=False)
    assert array091.lifecycle(fold(table, 64), 64).taken.all()


def test_the_time_rank_orders_each_connections_times():
    """``fold._time_rank``: within a connection, ranks compare as the times do (equal for equal times), on rows
    sorted by connection and time (the running count) and on rows that are not (a null read as 0 before times
    before 1970: every distinct time ranked)."""
    from amqplens.lifecycle.fold import _time_rank

    rng = np.random.default_rng(5)
    for sort in (True, False):
        for _ in range(20):
            n = int(rng.integers(1, 300))
            conn = np.sort(rng.integers(0, 4, n))
            ts = rng.integers(-5, 40, n)
            if sort:
                ts = ts[np.lexsort((ts, conn))]
            rank = _time_rank(conn, ts)
            same = conn[:, None] == conn[None, :]
            assert ((np.sign(rank[:, None] - rank[None, :]) == np.sign(ts[:, None] - ts[None, :])) | ~same).all()


def test_lean_nulls_only_the_hot_methods_arguments():
    """``fold.lean``: the arguments of basic.publish / deliver / ack / nack / reject of the 0-9-1 family are null, in
    new compact buffers; every other row's (a consume, a 1.0 transfer, a 0-9-1 method of another class) as it was."""
    from amqplens.lifecycle.fold import lean

    rows = [("basic", "deliver", "0-9-1"), ("basic", "consume", "0-9-1"), ("basic", "ack", "0-8"),
            (None, "transfer", "1.0"), ("queue", "declare", "0-9-1"), ("basic", "publish", "0-9"),
            ("basic", "reject", None)] * 300
    args = [f'{{"n":{i},"pad":"{"x" * 50}"}}' for i in range(len(rows))]
    table = pa.table({"class_name": [r[0] for r in rows], "method_name": [r[1] for r in rows],
                      "dialect": [r[2] for r in rows], "arguments_json": args})
    table = pa.Table.from_batches(table.to_batches(max_chunksize=500))
    out = lean(table)
    hot = [r[0] == "basic" and r[1] in ("deliver", "ack", "publish", "reject") and r[2] in ("0-9-1", "0-8", "0-9")
           for r in rows]
    assert sum(hot) == 900
    assert out.column("arguments_json").to_pylist() == [None if h else a for h, a in zip(hot, args)]
    assert out.column("arguments_json").get_total_buffer_size() < 0.7 * table.column("arguments_json").get_total_buffer_size()
    assert out.drop_columns(["arguments_json"]).equals(table.drop_columns(["arguments_json"]))


@pytest.mark.parametrize("index", [pa.int8(), pa.int16(), pa.int32(), pa.uint8()])
def test_column_in_of_dictionary_columns_is_arrows_is_in_of_their_values(index):
    """``column_in`` tests a dictionary-encoded column on its dictionary: the same answer as Arrow's ``is_in`` of the
    decoded values, on random chunks with null rows, a null among the dictionary's values, a chunk with an empty
    dictionary, an empty chunk, slices (an offset into the buffers) and null rows whose index slots point into the
    dictionary or past it, for each index type."""
    rng = np.random.default_rng(3)
    words = ["method", "header", "body", "heartbeat", "basic", None]
    chunks = []
    for n in (0, 1, 50, 1000):
        values = [words[i] for i in rng.integers(0, len(words), n)]
        chunks.append(pa.array(values, pa.string()).dictionary_encode(null_encoding="encode" if n == 50 else "mask")
                      .cast(pa.dictionary(index, pa.string())))
    chunks.append(pa.DictionaryArray.from_arrays(pa.array([None, None], index), pa.array([], pa.string())))
    chunks += [chunks[3].slice(13, 500), chunks[2].slice(7, 30)]  # slices: buffers that start before their rows
    # null rows whose index slots hold 0 (the dictionary's "method") and 100 (past its end): what a null's slot holds
    # is undefined
    validity = pa.py_buffer(np.packbits(np.array([1, 0, 1, 0, 1, 0, 0, 0], bool), bitorder="little").tobytes())
    slots = pa.py_buffer(np.array([1, 0, 0, 100, 1, 0, 0, 0], index.to_pandas_dtype()).tobytes())
    chunks.append(pa.DictionaryArray.from_arrays(pa.Array.from_buffers(index, 5, [validity, slots], null_count=2),
                                                 pa.array(["method", "body"])))
    table = pa.table({"frame_type": pa.chunked_array(chunks)})
    for wanted in (["method"], ["header", "body"], ["absent"], []):
        expected = pc.fill_null(pc.is_in(table.column("frame_type").cast(pa.string()), pa.array(wanted, pa.string())), False)
        got = column_in(table, "frame_type", wanted)
        assert got.dtype == bool and got.tolist() == expected.to_pylist(), wanted
        assert got.sum() == sum(v in wanted for v in table.column("frame_type").cast(pa.string()).to_pylist())


def _conn(cid: str, methods: list[tuple]) -> list[dict]:
    """A connection of rare methods (direction, class, method, channel[, arguments_json]) and one publish on channel 1
    after the eighth (a connection with content is the array path's)."""
    rows = []
    for k, (direction, cls, method, channel, *args) in enumerate(methods):
        rows.append(_frame(direction, 10 * k, 100 + 10 * k, "method", method, class_name=cls, channel=channel,
                           connection_id=cid, arguments_json=args[0] if args else None))
    rows += [dict(r, connection_id=cid) for r in _message("to_server", 75, 175, "publish", 1)]
    return rows


HANDSHAKE = [("to_client", "connection", "start", 0), ("to_server", "connection", "start-ok", 0),
             ("to_client", "connection", "tune", 0), ("to_server", "connection", "tune-ok", 0),
             ("to_server", "connection", "open", 0), ("to_client", "connection", "open-ok", 0),
             ("to_server", "channel", "open", 1), ("to_client", "channel", "open-ok", 1)]
CLOSE = [("to_server", "connection", "close", 0, '{"reply_code": 200}'), ("to_client", "connection", "close-ok", 0)]
DECLARE = ("to_server", "exchange", "declare", 1, '{"exchange": "x", "nowait": false}')
DECLARE_OK = ("to_client", "exchange", "declare-ok", 1)


@pytest.mark.parametrize("name, methods, plain", [
    ("handshake, declare, close", [*HANDSHAKE, DECLARE, DECLARE_OK, *CLOSE], True),
    ("a no-wait declare", [*HANDSHAKE, ("to_server", "exchange", "declare", 1, '{"nowait": true}'), *CLOSE], False),
    ("no-wait true in a nested table", [*HANDSHAKE, ("to_server", "exchange", "declare", 1,
                                                     '{"arguments": {"nowait": true}, "nowait": false}'), DECLARE_OK, *CLOSE], False),
    ("unreadable arguments", [*HANDSHAKE, ("to_server", "exchange", "declare", 1, '{"nowait": fal'), DECLARE_OK, *CLOSE], True),
    ("the answer on another channel", [*HANDSHAKE, DECLARE, ("to_client", "exchange", "declare-ok", 2), *CLOSE], False),
    ("the answer from the same side", [*HANDSHAKE, DECLARE, ("to_server", "exchange", "declare-ok", 1), *CLOSE], False),
    ("the wrong answer", [*HANDSHAKE, DECLARE, ("to_client", "queue", "declare-ok", 1), *CLOSE], False),
    ("no answer before the close", [*HANDSHAKE, DECLARE, *CLOSE], False),
    ("a channel.close cutting a request off", [*HANDSHAKE, DECLARE,
                                               ("to_client", "channel", "close", 1, '{"reply_code": 404, "class_id": 40, "method_id": 10}'),
                                               ("to_server", "channel", "close-ok", 1), *CLOSE], False),
    ("unanswered at the capture's end", [*HANDSHAKE, DECLARE], False),
    ("two channels' requests crossing", [*HANDSHAKE, ("to_server", "channel", "open", 2), DECLARE,
                                         ("to_client", "channel", "open-ok", 2), DECLARE_OK, *CLOSE], False),
    ("methods that are neither in between", [*HANDSHAKE, ("to_client", "exchange", "frobnicate", 0),
                                             DECLARE, ("to_server", "queue", "unknown", 1), DECLARE_OK, *CLOSE], True),
    ("an answer nobody asked for", [*HANDSHAKE, DECLARE_OK, *CLOSE], False),
    ("a null method name", [*HANDSHAKE, ("to_server", "exchange", None, 1), *CLOSE], True),
])
def test_plain_request_pairs_are_the_matchers_rows(name, methods, plain):
    """The request/response pairs of connections whose rare methods alternate request, answer (``_plain_pairs``:
    made as arrays) against ``RequestMatcher`` (the machine): the same rows in the same order, each case alone and
    all of them in one batch between two plain connections; and ``plain`` says which way the case went. Bad input
    tried: no-wait true (top level and nested), unreadable arguments, an answer on another channel, from the same
    side, the wrong answer, none, a close cutting a request off, crossing channels, an answer with no request, a null
    method name."""
    def taken(table: pa.Table) -> array091.Result:  # without a frame_id column: the ids made as the ingest makes them
        table = table.drop_columns(["frame_id"])
        result = array091.lifecycle(fold(table.take(pc.sort_indices(table, options=_SORT)), 64), 64)
        assert result.taken.all()
        return result

    rows = _conn("mid", methods)
    table = _table(rows)
    got = list(taken(table).request_responses)
    assert sorted((r for _, r in got), key=repr) == _rows(table, False)["request_response"]
    both = _table(_conn("a", [*HANDSHAKE, *CLOSE]) + rows + _conn("z", [*HANDSHAKE, DECLARE, DECLARE_OK, *CLOSE]))
    result = taken(both)
    order = [r["connection_id"] for _, r in result.request_responses]
    assert order == sorted(order)  # connection by connection, as the matcher gives them
    assert sorted((r for _, r in result.request_responses), key=repr) == _rows(both, False)["request_response"]
    batch = result.request_responses
    assert isinstance(batch, array091.RequestRows)
    assert (batch.pairs is not None and "mid" in batch.pairs["connection_id"].to_pylist()) == plain
