"""A capture's id is the SHA-256 of its bytes: the mapped hash against hashlib over the bytes read whole."""

import hashlib
import os

import pytest

from amqplens.inputs import capture_files, sha256_file


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 17])
def test_sha256_file_is_hashlib_of_the_bytes(tmp_path, size):
    path = tmp_path / "x.pcap"
    data = os.urandom(size)
    path.write_bytes(data)
    assert sha256_file(str(path), chunk=4096) == hashlib.sha256(data).hexdigest()


def test_capture_files_calls_on_file_before_each_hash(tmp_path):
    """Two names of one content are one capture; ``on_file`` sees every path, each once, in the listing's order."""
    for name, data in (("a.pcap", b"one"), ("b.pcap", b"two"), ("c.pcap", b"one")):
        (tmp_path / name).write_bytes(data)
    seen: list[str] = []
    files = capture_files([str(tmp_path)], on_file=seen.append)
    assert [os.path.basename(p) for p in seen] == ["a.pcap", "b.pcap", "c.pcap"]
    assert sorted(f.capture_id for f in files) == sorted({hashlib.sha256(b"one").hexdigest(), hashlib.sha256(b"two").hexdigest()})
