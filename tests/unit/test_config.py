"""Layered config: defaults < local < --config files < --set; bad values fail at start, saying why."""

from __future__ import annotations

import shutil

import pytest

from amqplens.config import CONF_DIR, Config, ConfigError, load_config


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


def test_messages_name_their_layer_and_fit_one_line(conf_dir, tmp_path):
    """Issue 36.9: an unknown key in a file names the file (a --set typo says --set); invalid YAML is one line
    with its line and column; a comma list in --set shows the accepted bracket form."""
    typo = tmp_path / "local.yaml"
    typo.write_text("capture:\n  amqp_portz: [5672]\n")
    with pytest.raises(ConfigError) as raised:
        load_config([str(typo)], conf_dir=conf_dir)
    assert str(raised.value).startswith(f"config file {typo}: config key 'capture.amqp_portz' is not known")
    with pytest.raises(ConfigError) as raised:
        load_config(sets=["capture.amqp_portz=[5672]"], conf_dir=conf_dir)
    assert str(raised.value).startswith("--set: config key 'capture.amqp_portz' is not known")
    broken = tmp_path / "broken.yaml"
    broken.write_text("capture:\n  amqp_ports: [1\n  x: 2\n")
    with pytest.raises(ConfigError) as raised:
        load_config([str(broken)], conf_dir=conf_dir)
    assert str(raised.value) == f"config file {broken}: not valid YAML at line 3, column 4: expected ',' or ']', but got ':'"
    with pytest.raises(ConfigError) as raised:
        load_config(sets=["capture.amqp_ports=5672,5673"], conf_dir=conf_dir)
    assert str(raised.value).endswith("(write a list in brackets: capture.amqp_ports=[5672,5673])")
    assert load_config(sets=["capture.amqp_ports=[5672,5673]"], conf_dir=conf_dir)["capture.amqp_ports"] == [5672, 5673]


def test_quick_jit_puts_the_c1_flag_on_the_embedded_driver_only_when_on(conf_dir):
    from amqplens.session import LOG4J, driver_java_options

    on = load_config(sets=["spark.class_sharing=false"], conf_dir=conf_dir)
    off = load_config(sets=["spark.quick_jit=false", "spark.class_sharing=false"], conf_dir=conf_dir)
    assert on["spark.quick_jit"] is True
    assert driver_java_options(on).split() == [f"-Dlog4j2.configurationFile=file:{LOG4J}", "-XX:TieredStopAtLevel=1",
                                               "-XX:ReservedCodeCacheSize=240m"]
    assert driver_java_options(off).split() == [f"-Dlog4j2.configurationFile=file:{LOG4J}"]


def test_class_sharing_maps_the_archive_only_when_on_and_built(conf_dir, tmp_path, monkeypatch):
    from amqplens import session
    from amqplens.session import driver_java_options

    monkeypatch.setattr(session, "_folder", lambda: tmp_path / "jvm")
    on, off = load_config(conf_dir=conf_dir), load_config(sets=["spark.class_sharing=false"], conf_dir=conf_dir)
    assert on["spark.class_sharing"] is True
    assert not any("SharedArchiveFile" in o for o in driver_java_options(on).split())  # not built
    path = session.archive_path()
    assert path.parent == tmp_path / "jvm" and path.name.startswith("spark-") and path.suffix == ".jsa"
    path.parent.mkdir()
    path.write_bytes(b"built")
    assert driver_java_options(on).split()[-2:] == [f"-XX:SharedArchiveFile={path}", "-Xshare:auto"]
    assert not any("SharedArchiveFile" in o for o in driver_java_options(off).split())


def test_shuffle_partitions_default_to_auto_and_take_a_number(conf_dir):
    assert load_config(conf_dir=conf_dir)["spark.shuffle_partitions"] == "auto"
    assert load_config(sets=["spark.shuffle_partitions=16"], conf_dir=conf_dir)["spark.shuffle_partitions"] == 16


def test_defaults_yaml_and_the_docs_table_are_generated_from_the_model_and_current():
    from tools import gen_config_docs

    assert gen_config_docs.main(["--check"]) == 0, "run: python -m tools.gen_config_docs"


def test_the_generated_defaults_read_back_as_the_models_defaults(tmp_path):
    """Each default goes through the YAML writer and the key's rule: what a run reads is the model's default."""
    from amqplens.settings import Settings, flat
    from tools.gen_config_docs import defaults_yaml

    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "defaults.yaml").write_text(defaults_yaml())
    assert load_config(conf_dir=conf_dir).values == flat(Settings())
    # and a layer that gives nothing still gets every key, from the model
    (conf_dir / "defaults.yaml").write_text("{}\n")
    assert load_config(conf_dir=conf_dir).values == flat(Settings())


def test_sizes_are_binary_not_pydantics_decimal_megabytes(conf_dir):
    conf = load_config(sets=["capture.split_size=1m", "logs.split_size=64k", "capture.max_ooo_buffer=1g"], conf_dir=conf_dir)
    assert (conf["capture.split_size"], conf["logs.split_size"], conf["capture.max_ooo_buffer"]) == (1 << 20, 64 << 10, 1 << 30)


def test_the_decoders_own_defaults_are_the_configurations():
    """``pipeline.Options`` and ``DecodeOptions`` keep defaults for library use (``decode_capture``); they are the
    model's, so a capture decoded from Python and one ingested with no config give the same rows."""
    import dataclasses

    from amqplens.settings import Settings, flat
    from amqplens.decode import pipeline
    from amqplens.jobs.ingest_captures import options_from

    from_config = options_from(Config(flat(Settings()), ("model",)))
    library = pipeline.Options(frame_struct=from_config.frame_struct, facts_struct=from_config.facts_struct)
    assert dataclasses.replace(from_config, decode_options=None) == dataclasses.replace(library, decode_options=None)
    assert from_config.decode_options == library.decode_options
