"""Layered YAML configuration shared by the CLI and spark-submit entry points.

Layers, later wins: ``conf/defaults.yaml``, ``conf/local.yaml`` (ignored by
git), each ``--config FILE``, each ``--set key=value``. Every key is a field of
the ``Settings`` model (pydantic), with its rule, its default and what it means;
``conf/defaults.yaml`` and docs/configuration.md's table are generated from it.
A bad value fails with the key, the value and what was expected, before any
Spark work begins. Sizes are binary (``1m`` = 2^20 bytes), unlike pydantic's
``ByteSize``, which reads ``m`` as 10^6.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
import site
import sys
import zipfile
from typing import Any

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


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    from amqplens.settings import SPEC  # here, not at the top: a Spark task imports this module, not the model

    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and f"{dotted}" not in SPEC:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _yaml_where(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: where it is (1-based line and column) and what the parser expected."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or ""
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{where}: {problem}" if problem else where


def _read_yaml(path: pathlib.Path | zipfile.Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML{_yaml_where(exc)}") from None
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


def _validate(values: dict[str, Any], origins: dict[str, str] | None = None) -> dict[str, Any]:
    """The flat values of every layer, checked through ``Settings``: each key known, each value its rule's; a key no
    layer gives keeps the model's default. Returns every key's value, flat and dotted. ``origins`` names the layer
    each key came from (a file, or ``--set``), which an error message names."""
    from pydantic import ValidationError

    from amqplens.settings import SPEC, Settings, flat  # here, not at the top: see _flatten
    for key in values:
        if key not in SPEC:
            known = ", ".join(sorted(k for k in SPEC if k.split(".")[0] == key.split(".")[0])) or ", ".join(sorted(SPEC))
            raise ConfigError(f"{_origin(origins, key)}config key {key!r} is not known (known keys: {known})")
    nested: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, name = key.split(".", 1)
        nested.setdefault(section, {})[name] = copy.deepcopy(value)
    try:
        settings = Settings.model_validate(nested)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(part) for part in err["loc"][:2])
        got = values.get(key)
        hint = ""
        if isinstance(got, str) and "," in got and "list" in SPEC[key].expected:
            hint = f" (write a list in brackets: {key}=[{got}])"
        raise ConfigError(f"{_origin(origins, key)}config key {key!r}: got {got!r}, expected {SPEC[key].expected}{hint}") from None
    return flat(settings)


def _origin(origins: dict[str, str] | None, key: str) -> str:
    return f"{origins[key]}: " if origins and key in origins else ""


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
    origins: dict[str, str] = {}
    for path in layers:
        values = _flatten(_read_yaml(path))
        merged.update(values)
        origins.update(dict.fromkeys(values, f"config file {path}"))
    values = _parse_sets(sets or [])
    merged.update(values)
    origins.update(dict.fromkeys(values, "--set"))
    return Config(_validate(merged, origins), tuple(str(p) for p in layers) + tuple(f"--set {s}" for s in sets or []))


def report_dir(conf: Config, out: str | None = None) -> str:
    """The report folder: ``out`` (``--out``), else ``report.out``; ``auto`` puts it in the lake, ``<lake>/_report``,
    so two lakes never share (or overwrite) one report; a lake on an object store gets ``./report``."""
    chosen = out or conf["report.out"]
    if chosen != "auto":
        return chosen
    root = str(conf["lake.root"])
    if "://" in root and not root.startswith("file://"):
        return "./report"
    return str(pathlib.Path(root.removeprefix("file://")) / "_report")


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
