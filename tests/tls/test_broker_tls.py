"""The real broker's TLS fixtures (tests/data/tls, tools/tls_fixtures.py) through the pipeline's batch
functions, without Spark. Oracles: the same scenario captured in the clear (its frames, byte for byte
in every column but the connection id and times), and tshark decrypting with the same key log
(``-o tls.keylog_file``): its frames, connection by connection and direction by direction, and the
cipher suite its ServerHello dissection names.

Bad input tried: each capture with another capture's key log (no matching client random).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import subprocess

import pytest

from amqplens.decode.tls import KeyLog
from amqplens.decode.tls.suites import suite_name
from amqplens.config import load_config
from amqplens.jobs.ingest_captures import options_from
from tests.conftest import DATA
from tests.e2e.hostile_captures import reference
from tests.v0_9_1 import tshark_oracle

TLS = DATA / "tls"
PIKA = ("tls12", "tls12_chacha", "tls13")  # the clear capture's scenario, byte for byte in the clear
FIXTURES = (*PIKA, "tls13_pyamqp")  # py-amqp: the same steps, its own client properties
TYPE_CODE = {"method": 1, "header": 2, "body": 3, "heartbeat": 8}
IGNORED = ("connection_id", "ts_us")


def decode(name: str, keylog: str | None, tmp_path) -> dict:
    base = options_from(load_config())
    keys = KeyLog.read([TLS / f"{keylog}.keylog"]) if keylog else None
    options = dataclasses.replace(base, decode_options=dataclasses.replace(base.decode_options, tls_keys=keys))
    return reference((TLS / f"{name}.pcap").read_bytes(), name, options, tmp_path)


def comparable(frames) -> list:
    return sorted(({k: v for k, v in f.items() if k not in IGNORED} for f in frames), key=lambda r: (r["direction"], r["stream_offset"]))


@pytest.fixture(scope="module")
def clear(tmp_path_factory):
    return decode("tls_plain", None, tmp_path_factory.mktemp("clear"))


@pytest.mark.parametrize("name", PIKA)
def test_tls_fixture_decodes_to_the_clear_captures_frames(name, clear, tmp_path):
    out = decode(name, name, tmp_path)
    (conn,) = out["connection"]
    assert comparable(out["frame"]) == comparable(clear["frame"]) and len(clear["frame"]) > 100
    assert out["error"] == []
    assert conn["tls"] is True and conn["server_port"] == 5671


@pytest.mark.tshark
@pytest.mark.skipif(not tshark_oracle.available(), reason="tshark is not installed")
@pytest.mark.parametrize("name", FIXTURES)
def test_decrypted_frames_equal_tsharks(name, tmp_path):
    theirs = tshark_oracle.frames(str(TLS / f"{name}.pcap"), str(TLS / f"{name}.keylog"))
    out = decode(name, name, tmp_path)
    for direction in ("to_server", "to_client"):
        ours = [(f["channel"], TYPE_CODE[f["frame_type"]], f["class_id"] if f["frame_type"] == "method" else None, f["method_id"], f["delivery_tag"])
                for f in sorted(out["frame"], key=lambda f: f["stream_offset"])
                if f["direction"] == direction and f["frame_type"] != "protocol_header"]
        assert ours == theirs[(0, direction)] and len(ours) > 40


@pytest.mark.tshark
@pytest.mark.skipif(not tshark_oracle.available(), reason="tshark is not installed")
@pytest.mark.parametrize("name", FIXTURES)
def test_version_and_suite_are_the_server_hellos(name, tmp_path):
    """The suite number tshark reads from the ServerHello, named by amqplens' table; the version is the fixture's."""
    out = subprocess.run(["tshark", "-n", "-r", str(TLS / f"{name}.pcap"), "-Y", "tls.handshake.type == 2", "-T", "fields",
                          "-e", "tls.handshake.ciphersuite"], capture_output=True, text=True, check=True).stdout.split()
    (facts,) = decode(name, name, tmp_path)["facts"]
    assert facts["tls_cipher_suite"] == suite_name(int(out[0], 16))
    assert facts["tls_version"] == {"tls12": "1.2", "tls12_chacha": "1.2", "tls13": "1.3", "tls13_pyamqp": "1.3"}[name]
    assert facts["tls_status"] == "decrypted"


@pytest.mark.parametrize("name,other", [("tls12", "tls13"), ("tls13", "tls12"), ("tls12_chacha", "tls12"), ("tls13_pyamqp", "tls13")])
def test_another_captures_key_log_leaves_it_no_key_and_whole(name, other, tmp_path):
    out = decode(name, other, tmp_path)
    (conn,) = out["connection"]
    assert out["frame"] == []
    rows = sorted((e["direction"], e["reason"], e["offset"]) for e in out["error"])
    assert rows == [("to_client", "tls", 0), ("to_server", "tls", 0)]
    lengths = {e["direction"]: e["length"] for e in out["error"]}
    assert lengths == {"to_server": conn["bytes_to_server"], "to_client": conn["bytes_to_client"]}


def test_py_amqp_over_tls_settles_as_its_client_counted(tmp_path):
    out = decode("tls13_pyamqp", "tls13_pyamqp", tmp_path)
    client = json.loads((TLS / "tls13_pyamqp.oracle.json").read_text())["client"]
    methods = collections.Counter((f["direction"], f["method_name"]) for f in out["frame"] if f["class_name"] == "basic")
    assert methods[("to_server", "publish")] == client["published"] and methods[("to_client", "deliver")] == client["delivered"]
    assert methods[("to_server", "ack")] == client["acked"] and methods[("to_server", "reject")] == client["rejected"]
    assert methods[("to_client", "ack")] == client["confirmed"] and out["error"] == []


@pytest.mark.parametrize("name", FIXTURES)
def test_no_secret_and_no_plain_response_reaches_a_row(name, tmp_path):
    out = decode(name, name, tmp_path)
    text = repr(out)
    for secrets in KeyLog.read([TLS / f"{name}.keylog"]).sessions.values():
        for secret in secrets.values():
            assert secret.hex() not in text and repr(secret)[2:-1] not in text
    start_ok = [f for f in out["frame"] if f["method_name"] == "start-ok"]
    assert start_ok and "\\x00guest\\x00guest" not in text and "\\u0000guest\\u0000guest" not in text
