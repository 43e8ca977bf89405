"""inputs.roots: with roots configured, no input may resolve outside them.

Tried: a file inside the root (allowed), a path climbing out with ``..``, a glob
whose ``..`` reaches a sibling folder, a symlinked file and a symlinked folder
inside the root pointing outside, a root given through a symlink (allowed), a
sibling folder whose name starts with the root's name, and no roots at all;
for broker logs (ingest-logs), a path, a glob and a symlink leaving the root.
"""

from __future__ import annotations

import os

import pytest

from amqplens.config import load_config
from amqplens.jobs.ingest_logs import log_files
from amqplens.inputs import InputError, capture_files, expand_inputs


@pytest.fixture
def tree(tmp_path):
    root, outside, sibling = tmp_path / "captures", tmp_path / "private", tmp_path / "captures-old"
    for d in (root / "day1", outside, sibling):
        d.mkdir(parents=True)
    (root / "day1" / "a.pcap").write_bytes(b"a")
    (outside / "secret.pcap").write_bytes(b"s")
    (sibling / "b.pcap").write_bytes(b"b")
    return tmp_path, root, outside


def test_a_file_inside_the_root_is_read(tree):
    _, root, _ = tree
    assert [f.path for f in capture_files([str(root / "day1")], [str(root)])] == [str(root / "day1" / "a.pcap")]


@pytest.mark.parametrize("spec", ["{root}/../private/secret.pcap", "{root}/day1/../../private/*.pcap", "{root}/../captures-old/b.pcap"])
def test_paths_and_globs_climbing_out_are_refused(tree, spec):
    _, root, _ = tree
    with pytest.raises(InputError, match="outside the configured inputs.roots"):
        expand_inputs([spec.format(root=root)], [str(root)])


def test_symlinks_out_of_the_root_are_refused(tree):
    _, root, outside = tree
    os.symlink(outside / "secret.pcap", root / "day1" / "link.pcap")
    with pytest.raises(InputError, match=r"link.pcap' resolves to .*private/secret.pcap"):
        expand_inputs([str(root)], [str(root)])
    os.remove(root / "day1" / "link.pcap")
    os.symlink(outside, root / "linked_folder")
    with pytest.raises(InputError, match="outside"):
        expand_inputs([str(root / "linked_folder" / "secret.pcap")], [str(root)])


def test_a_root_named_through_a_symlink_still_holds_its_files(tree):
    tmp, root, _ = tree
    os.symlink(root, tmp / "alias")
    assert expand_inputs([str(root / "day1" / "a.pcap")], [str(tmp / "alias")]) == [str(root / "day1" / "a.pcap")]


def test_without_roots_any_path_is_read(tree):
    _, root, outside = tree
    assert expand_inputs([str(root / ".." / "private" / "secret.pcap")]) == [str(outside / "secret.pcap")]


def test_the_config_key_defaults_to_no_roots_and_takes_a_list():
    assert load_config(sets=[])["inputs.roots"] == []
    assert load_config(sets=["inputs.roots=[/data/captures, /mnt/pcaps]"])["inputs.roots"] == ["/data/captures", "/mnt/pcaps"]
    with pytest.raises(Exception, match="inputs.roots"):
        load_config(sets=["inputs.roots=[1, 2]"])


def test_broker_logs_are_held_to_the_roots_too(tree):
    tmp, root, outside = tree
    (root / "logs").mkdir()
    (root / "logs" / "rabbit.log").write_text("2026-11-21 10:00:00.000 [info] <0.1.0> started\n")
    (outside / "other.log").write_text("2026-11-21 10:00:00.000 [info] <0.1.0> private\n")
    assert [f.path for f in log_files([str(root / "logs")], [str(root)])] == [str(root / "logs" / "rabbit.log")]
    for spec in (f"{root}/../private/other.log", f"{root}/day1/../../private/*.log"):
        with pytest.raises(InputError, match="outside the configured inputs.roots"):
            log_files([spec], [str(root)])
    os.symlink(outside / "other.log", root / "logs" / "link.log")
    with pytest.raises(InputError, match=r"link.log' resolves to .*private/other.log"):
        log_files([str(root / "logs")], [str(root)])
