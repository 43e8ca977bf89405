"""The 0-9-1 array pass a chunk of a connection at a time (``array091.ConnectionPass``) gives the rows the pass over
the whole connection gives (``array091.lifecycle``), and leaves to the machines the connections it leaves.

Every connection of every capture fixture (the fuzz corpus included) and of mutated frame tables (test_fold's
mutations: times moved back and repeated over long runs, rows removed and repeated, message numbers, channels,
frame types, directions and dialects changed, closes inside messages), folded whole, then cut into chunks where
the time rises (the contract ``feed`` states): at every such place, every few rows and at random ones. The rows
compared are every column of deliveries, flow_events and request_responses.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from amqplens.lifecycle import array091
from amqplens.lifecycle.fold import fold
from amqplens.lifecycle.fused import _SORT
from tests.lifecycle.captures import DATA, frames_of
from tests.lifecycle.test_fold import CAPTURES, _frame, _message, _table, mutated_samples

WINDOW = 64


def _rows(results) -> dict[str, list]:
    out: dict[str, list] = {"delivery": [], "flow_event": [], "request_response": []}
    for r in results:
        for part in r.deliveries(50):
            out["delivery"] += part.to_pylist()
        for part in r.flow_events(50):
            out["flow_event"] += part.to_pylist()
        out["request_response"] += r.request_responses
    return {k: sorted(v, key=repr) for k, v in out.items()}


def _cuts(ts: np.ndarray, every: int | None, rng: random.Random) -> list[int]:
    """Places where a chunk may start (the time rises there), every ``every`` rows or so (None: at random)."""
    rising = np.flatnonzero(ts[1:] > ts[:-1]) + 1
    if every is None:
        return sorted(rng.sample(rising.tolist(), min(len(rising), rng.randint(1, 6))))
    cuts, last = [], 0
    for p in rising.tolist():
        if p - last >= every:
            cuts.append(p)
            last = p
    return cuts


def _compare(connection: pa.Table, every: int | None, rng: random.Random, max_pending: int = 10_000) -> bool:
    """Whether the connection was taken; asserts the chunks' rows are the whole pass's."""
    whole = array091.lifecycle(connection, WINDOW, max_pending_returns=max_pending)
    taken = bool(whole.taken.all())
    ts = pc.fill_null(connection.column("ts").cast(pa.int64()), 0).to_numpy()
    bounds = [0, *_cuts(ts, every, rng), connection.num_rows]
    chunked = array091.ConnectionPass(WINDOW, max_pending)
    results = []
    for k in range(len(bounds) - 1):
        got = chunked.feed(connection.slice(bounds[k], bounds[k + 1] - bounds[k]), k == len(bounds) - 2)
        if got is None:
            break
        results.append(got)
    assert chunked.bad != taken, (taken, len(bounds))
    if taken:
        assert _rows(results) == _rows([whole])
    return taken


def _connections(table: pa.Table):
    folded = fold(table.take(pc.sort_indices(table, options=_SORT)), WINDOW)
    if not isinstance(folded, pa.Table) or "fold_frame_ids" not in folded.column_names:
        return
    conns = folded.column("connection_id")
    for cid in pc.unique(conns).to_pylist():
        yield folded.filter(pc.fill_null(pc.equal(conns, cid), False) if cid is not None else pc.is_null(conns))


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(DATA)))
def test_chunks_give_the_whole_connections_rows(path):
    rng = random.Random(str(path))
    for connection in _connections(_table(frames_of(path))):
        for every in (1, 7, 100, None):
            _compare(connection, every, rng)


def test_chunks_take_the_broker_fixtures_connections():
    """Not vacuous: most connections of the real-broker captures are taken, cut into many chunks."""
    taken = total = 0
    rng = random.Random(0)
    for path in sorted((DATA / "broker").glob("*.pcap")):
        for connection in _connections(_table(frames_of(path))):
            total += 1
            taken += _compare(connection, 3, rng)
    assert total >= 40 and taken >= 0.7 * total, (taken, total)


@pytest.mark.parametrize("seed", range(8))
def test_chunks_of_mutated_frames_give_the_whole_connections_rows(seed):
    rng = random.Random(seed)
    for _, mutated in mutated_samples(rng):
        for connection in _connections(_table(mutated)):
            _compare(connection, rng.choice((1, 5, None)), rng)


@pytest.mark.parametrize("max_pending", [10_000, 1])
def test_mandatory_publishes_of_a_fixture_across_chunks(max_pending):
    """mandatory_return.pcap without its basic.return frames (test_fold's case): its mandatory publishes wait for a
    return until their channel ends, carried from chunk to chunk; with a bound of 1 the connection is the machine's."""
    rows = frames_of(DATA / "broker" / "mandatory_return.pcap")
    returns = {(r["direction"], r["channel"], r["message_seq"]) for r in rows if r.get("method_name") == "return"}
    rows = [r for r in rows if (r["direction"], r["channel"], r.get("message_seq")) not in returns]
    taken = [_compare(c, every, random.Random(every), max_pending) for c in _connections(_table(rows)) for every in (1, 4)]
    assert all(taken) if max_pending > 1 else not any(taken)


@pytest.mark.parametrize("max_pending", [10_000, 6, 5])
def test_confirmed_mandatory_publishes_carried_ended(max_pending, monkeypatch):
    """Confirmed mandatory publishes end at their confirm yet stay where a return may name them until a later
    mandatory publish finds them ended: a chunk cut between carries them ended, gives their rows once, and counts
    them against the bound as the whole pass does (six waiting at most here: taken with a bound of 6, not 5)."""
    rows = [_frame("to_server", 0, 1, "method", "open", class_name="channel"),
            _frame("to_client", 0, 2, "method", "open-ok", class_name="channel"),
            _frame("to_server", 1, 3, "method", "select", class_name="confirm"),
            _frame("to_client", 1, 4, "method", "select-ok", class_name="confirm")]
    for k in range(6):
        rows += _message("to_server", 10 + 3 * k, 10 + k, "publish", k + 1, mandatory=True)
    rows.append(_frame("to_client", 10, 20, "method", "ack", delivery_tag=3, multiple=True))
    for k in range(2):
        rows += _message("to_server", 40 + 3 * k, 30 + k, "publish", k + 7, mandatory=True)
    rows += [_frame("to_client", 11, 40, "method", "ack", delivery_tag=8, multiple=True),
             _frame("to_server", 50, 50, "method", "close", class_name="channel"),
             _frame("to_client", 12, 51, "method", "close-ok", class_name="channel")]
    carried_ended = []
    carry_from = array091.ConnectionPass.carry_from

    def spy(self, *args):
        carry_from(self, *args)
        carried_ended.append(int(self.carry["emitted"].sum()))

    monkeypatch.setattr(array091.ConnectionPass, "carry_from", spy)
    (connection,) = _connections(_table(rows))
    assert _compare(connection, 1, random.Random(0), max_pending) == (max_pending >= 6)
    if max_pending >= 6:
        assert max(carried_ended) >= 3
