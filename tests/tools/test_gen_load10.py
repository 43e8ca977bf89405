"""AMQP 1.0 load captures (tools/gen_load10.py) against two readers that are not the generator: tshark's AMQP 1.0
dissector (every performative counted) and the project's decoder and 1.0 lifecycle (every frame, no decode error,
each message one delivery settled as the generator settled it: accepted, released or rejected)."""

from __future__ import annotations

import collections
import shutil
import subprocess

import pytest

from amqplens.decode import decode_capture
from amqplens.lifecycle import LifecycleRunner
from amqplens.decode.v1_0.composites import NAMES
from tools.gen_load10 import generate_load10


@pytest.fixture(scope="module")
def load10(tmp_path_factory):
    path = tmp_path_factory.mktemp("load10") / "load10.pcap"
    truth = generate_load10(path, 3, seed=3, short=60)
    return path, truth


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_counts_the_performatives_the_generator_wrote(load10):
    path, truth = load10
    out = subprocess.run(["tshark", "-r", str(path), "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", "amqp", "-T",
                          "fields", "-e", "amqp.performative", "-e", "amqp.sasl.method", "-E", "occurrence=a"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    counts = collections.Counter(NAMES[int(code)] for line in out.splitlines() for part in line.split("\t")
                                 for code in part.split(",") if code)
    assert dict(counts) == truth["performatives"]
    assert truth["performatives"]["transfer"] > 1000 and truth["performatives"]["disposition"] > 300


def test_the_decoder_reads_every_frame_and_the_lifecycle_settles_every_message(load10):
    path, truth = load10
    cap = decode_capture(path, capture_id="cap")
    frames = [f for c in cap.connections for f in c.frames]
    assert not [e for c in cap.connections for e in c.errors]
    assert [f for f in frames if f["decode_error"] is not None] == []
    assert dict(collections.Counter(f["frame_type"] for f in frames)) == {k: v for k, v in truth["frames_by_type"].items() if v}
    assert dict(collections.Counter(f["performative"] for f in frames if f["performative"])) == truth["performatives"]
    assert len(cap.connections) == len(truth["connections"])
    for f in frames:
        f["frame_id"] = f"{f['connection_id']}-{f['direction']}-{f['stream_offset']}"
        f["capture_id"] = "cap"
    runner = LifecycleRunner()
    runner.feed(frames)
    runner.finish()
    deliveries = runner.drain_deliveries()
    sent = collections.Counter(d["direction"] for d in deliveries)
    assert sum(sent.values()) == truth["messages_published"] + truth["messages_delivered"]
    outcomes = collections.Counter(d["outcome"] for d in deliveries)
    assert outcomes["released"] == truth["messages_released"] and outcomes["rejected"] == truth["messages_rejected"]
    assert outcomes["accepted"] == sum(sent.values()) - truth["messages_released"] - truth["messages_rejected"]
    assert outcomes["released"] > 0 and max(d["body_size"] or 0 for d in deliveries) > 20_000  # large ones, in parts
