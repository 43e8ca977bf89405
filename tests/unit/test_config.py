"""Layered config: defaults < local < --config files < --set; bad values fail at start, saying why."""

from __future__ import annotations

import shutil

import pytest

from jobs.config import CONF_DIR, ConfigError, load_config


@pytest.fixture
def conf_dir(tmp_path):
    d = tmp_path / "conf"
    d.mkdir()
    shutil.copy(CONF_DIR / "defaults.yaml", d / "defaults.yaml")
    return d


def test_defaults_load(conf_dir):
    c = load_config(conf_dir=conf_dir)
    assert c["capture.amqp_ports"] == [5672]
    assert c["capture.split_size"] == 128 << 20
    assert c["lifecycle.fused"] is True
    assert load_config(sets=["lifecycle.fused=false"], conf_dir=conf_dir)["lifecycle.fused"] is False


def test_layers_in_order(conf_dir, tmp_path):
    (conf_dir / "local.yaml").write_text("capture:\n  split_size: 64k\n  batch_rows: 100\n")
    extra = tmp_path / "extra.yaml"
    extra.write_text("capture:\n  split_size: 32k\n")
    c = load_config([str(extra)], ["capture.batch_rows=7", "capture.amqp_ports=[5672, 5673]"], conf_dir=conf_dir)
    assert c["capture.split_size"] == 32 << 10  # --config beats local.yaml
    assert c["capture.batch_rows"] == 7  # --set beats everything
    assert c["capture.amqp_ports"] == [5672, 5673]


@pytest.mark.parametrize(
    "setting, message",
    [
        ("capture.split_size=abc", r"'capture.split_size': got 'abc', expected a size in bytes"),
        ("capture.split_size=0", r"got 0, expected a size in bytes"),
        ("capture.batch_rows=-3", r"'capture.batch_rows': got -3, expected an integer >= 1"),
        ("capture.amqp_ports=[70000]", r"'capture.amqp_ports': got \[70000\], expected a list of TCP ports"),
        ("capture.sniff=maybe", r"'capture.sniff': got 'maybe', expected true or false"),
        ("decode.field_table_letters=klingon", r"expected one of rabbitmq, spec"),
        ("spark.driver_memory=lots", r"expected a JVM memory size"),
        ("spark.quick_jit=sometimes", r"'spark.quick_jit': got 'sometimes', expected true or false"),
        ("lifecycle.fused=twice", r"'lifecycle.fused': got 'twice', expected true or false"),
        ("spark.shuffle_partitions=0", r"'spark.shuffle_partitions': got 0, expected auto or an integer >= 1"),
        ("spark.shuffle_partitions=many", r"got 'many', expected auto or an integer >= 1"),
        ("capture.no_such_key=1", r"'capture.no_such_key' is not known"),
        ("novalue", r"expected key=value"),
    ],
)
def test_bad_values_name_key_value_and_expectation(conf_dir, setting, message):
    with pytest.raises(ConfigError, match=message):
        load_config(sets=[setting], conf_dir=conf_dir)


def test_broken_yaml_file_is_named(conf_dir, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("capture: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config([str(bad)], conf_dir=conf_dir)
    with pytest.raises(ConfigError, match="nope.yaml: not found"):
        load_config([str(tmp_path / "nope.yaml")], conf_dir=conf_dir)


def test_quick_jit_puts_the_c1_flag_on_the_embedded_driver_only_when_on(conf_dir):
    from jobs.session import LOG4J, driver_java_options

    on = load_config(sets=["spark.class_sharing=false"], conf_dir=conf_dir)
    off = load_config(sets=["spark.quick_jit=false", "spark.class_sharing=false"], conf_dir=conf_dir)
    assert on["spark.quick_jit"] is True
    assert driver_java_options(on).split() == [f"-Dlog4j2.configurationFile=file:{LOG4J}", "-XX:TieredStopAtLevel=1",
                                               "-XX:ReservedCodeCacheSize=240m"]
    assert driver_java_options(off).split() == [f"-Dlog4j2.configurationFile=file:{LOG4J}"]


def test_class_sharing_maps_the_archive_only_when_on_and_built(conf_dir, tmp_path, monkeypatch):
    from jobs import jvm_archive
    from jobs.session import driver_java_options

    monkeypatch.setattr(jvm_archive, "_folder", lambda: tmp_path / "jvm")
    on, off = load_config(conf_dir=conf_dir), load_config(sets=["spark.class_sharing=false"], conf_dir=conf_dir)
    assert on["spark.class_sharing"] is True
    assert not any("SharedArchiveFile" in o for o in driver_java_options(on).split())  # not built
    path = jvm_archive.archive_path()
    assert path.parent == tmp_path / "jvm" and path.name.startswith("spark-") and path.suffix == ".jsa"
    path.parent.mkdir()
    path.write_bytes(b"built")
    assert driver_java_options(on).split()[-2:] == [f"-XX:SharedArchiveFile={path}", "-Xshare:auto"]
    assert not any("SharedArchiveFile" in o for o in driver_java_options(off).split())


def test_shuffle_partitions_default_to_auto_and_take_a_number(conf_dir):
    assert load_config(conf_dir=conf_dir)["spark.shuffle_partitions"] == "auto"
    assert load_config(sets=["spark.shuffle_partitions=16"], conf_dir=conf_dir)["spark.shuffle_partitions"] == 16
