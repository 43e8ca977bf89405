"""Layered YAML configuration shared by the CLI and spark-submit entry points.

Layers, later wins: ``conf/defaults.yaml``, ``conf/local.yaml`` (ignored by
git), each ``--config FILE``, each ``--set key=value``. Every leaf is checked
against ``SPEC`` at start; a bad value fails with the key, the value and what
was expected, before any Spark work begins.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
import re
import site
import sys
import zipfile
from typing import Any, Callable

import yaml


def _conf_dir() -> pathlib.Path | zipfile.Path:
    """``conf/`` next to the packages (the source tree); inside the zip when spark-submit runs us from
    ``--py-files``; ``<prefix>/share/amqplens/conf`` when the wheel is installed (its data files)."""
    root = pathlib.Path(__file__).resolve().parent.parent
    if zipfile.is_zipfile(root):
        return zipfile.Path(root, "conf/")
    if (root / "conf" / "defaults.yaml").is_file():
        return root / "conf"
    for prefix in (sys.prefix, site.getuserbase()):  # pip install into a venv / the interpreter, or --user
        installed = pathlib.Path(prefix) / "share" / "amqplens" / "conf"
        if (installed / "defaults.yaml").is_file():
            return installed
    return root / "conf"  # load_config then says which defaults.yaml is missing


CONF_DIR = _conf_dir()


class ConfigError(ValueError):
    """A configuration value that cannot be used."""


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


def _names(expected: str) -> Rule:
    def check(v):
        v = [v] if isinstance(v, str) else v
        if not isinstance(v, list) or not all(isinstance(p, str) and p for p in v):
            raise ValueError
        return v

    return Rule(expected + " (strings; [] for none)", check)


_EXPECTATION_PATTERNS = "a list of expectation names, table names or fnmatch patterns (table.check*)"

SPEC: dict[str, Rule] = {
    "spark.master": _str(),
    "spark.app_name": _str(),
    "spark.shuffle_partitions": _int_or_auto(1),
    "spark.ui_enabled": _bool(),
    "spark.progress_bar": _choice("auto", "on", "off"),
    "spark.driver_memory": _str(r"\d+[kmgt]?", "a JVM memory size such as 2g or 512m"),
    "spark.quick_jit": _bool(),
    "spark.class_sharing": _bool(),
    "spark.extra": _spark_extra(),
    "lake.root": _str(),
    "inputs.roots": _names("a list of folders"),
    "lake.staging_max_age_hours": _int(0),
    "capture.split_size": _size(),
    "capture.min_split_size": _size(),
    "capture.batch_rows": _int(1),
    "capture.amqp_ports": _ports(),
    "capture.tls_ports": _ports(),
    "capture.sniff": _bool(),
    "capture.max_ooo_buffer": _size(),
    "capture.retransmit_history": _size(),
    "capture.port_reuse_idle_s": _int(0),
    "capture.keylog": _names("a list of NSS key log files (SSLKEYLOGFILE) to decrypt TLS with"),
    "decode.max_error_bytes": _int(0),
    "decode.body_prefix_bytes": _int(0),
    "decode.field_table_letters": _choice("rabbitmq", "spec"),
    "decode.compiled": _choice("auto", "on", "off"),
    "decode.redact_headers": _names("a list of header or property names"),
    "lifecycle.fused": _bool(),
    "lifecycle.fused_max_held_frames": _int(1),
    "logs.split_size": _size(),
    "logs.join_tolerance_s": _int(0),
    "metrics.bucket": _duration(),
    "metrics.concurrent_tables": _int(1),
    "metrics.count_repeats_from_rows": _int(0),
    "report.out": _str(),
    "report.top_n": _int(1),
    "report.busiest": _int(1),
    "report.connection_pages": _int(0),
    "report.max_points": _int(10),
    "validate.enabled": _bool(),
    "validate.critical": _names(_EXPECTATION_PATTERNS),
    "validate.warning": _names(_EXPECTATION_PATTERNS),
    "validate.max_decode_error_share": _fraction(),
    "validate.max_codec_error_share": _fraction(),
    "validate.window_slack_s": _int(0),
    "validate.sample_keys": _int(1),
    "validate.pandas_max_rows": _int(0),
}


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and f"{dotted}" not in SPEC:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _read_yaml(path: pathlib.Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping at the top level")
    return data


@dataclasses.dataclass(frozen=True)
class Config:
    values: dict[str, Any]
    sources: tuple[str, ...]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def section(self, name: str) -> dict[str, Any]:
        n = len(name) + 1
        return {k[n:]: v for k, v in self.values.items() if k.startswith(name + ".")}

    def with_overrides(self, **dotted: Any) -> "Config":
        """A copy with some keys replaced (keys use __ for dots: lake__root)."""
        pairs = [f"{k.replace('__', '.')}={v}" for k, v in dotted.items()]
        merged = dict(self.values)
        for key, value in _parse_sets(pairs).items():
            merged[key] = value
        return Config(_validate(merged), self.sources + ("overrides",))


def _parse_sets(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r}: expected key=value")
        key, raw = pair.split("=", 1)
        out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def _validate(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        rule = SPEC.get(key)
        if rule is None:
            known = ", ".join(sorted(k for k in SPEC if k.split(".")[0] == key.split(".")[0])) or ", ".join(sorted(SPEC))
            raise ConfigError(f"config key {key!r} is not known (known keys: {known})")
        try:
            out[key] = rule.check(copy.deepcopy(value))
        except (ValueError, TypeError):
            raise ConfigError(f"config key {key!r}: got {value!r}, expected {rule.expected}") from None
    missing = sorted(set(SPEC) - set(out))
    if missing:
        raise ConfigError(f"config keys missing from every layer: {', '.join(missing)}")
    return out


def load_config(
    files: list[str] | None = None,
    sets: list[str] | None = None,
    conf_dir: pathlib.Path | zipfile.Path = CONF_DIR,
) -> Config:
    layers = [conf_dir / "defaults.yaml"]
    if (conf_dir / "local.yaml").exists():
        layers.append(conf_dir / "local.yaml")
    layers += [pathlib.Path(f) for f in files or []]
    merged: dict[str, Any] = {}
    for path in layers:
        merged.update(_flatten(_read_yaml(path)))
    merged.update(_parse_sets(sets or []))
    return Config(_validate(merged), tuple(str(p) for p in layers) + tuple(f"--set {s}" for s in sets or []))


def add_config_arguments(parser) -> None:
    parser.add_argument("--config", action="append", default=[], metavar="FILE", help="extra YAML config layer (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key (repeatable)")


def config_from_args(args) -> Config:
    sets = list(args.set)
    if getattr(args, "lake", None):
        sets.append(f"lake.root={args.lake}")
    if getattr(args, "keylog", None):
        sets.append(f"capture.keylog={json.dumps(args.keylog)}")  # a YAML flow list, whatever the paths hold
    return load_config(args.config, sets)
