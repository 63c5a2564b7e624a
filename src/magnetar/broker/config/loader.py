"""Reading the settings: defaults < TOML file < MAGNETAR_* env < flags, each value parsed
by its field's type, then checked (``load_config``, the one loader)."""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

from magnetar.broker.config.broker_config import BrokerConfig
from magnetar.broker.config.errors import ConfigError

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("not a boolean (true/false, 1/0, yes/no, on/off)")


def _parse_int(value: Any) -> int:
    if isinstance(value, (bool, float)):
        raise ValueError("not a whole number")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError("not a whole number") from None


def _parse_optional_port(value: Any) -> int | None:
    if str(value).strip().lower() in ("", "none", "off"):
        return None
    try:
        return _parse_int(value)
    except ValueError:
        raise ValueError("not a port number (1-65535) or 'off'") from None


def _parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("not a number")
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    return number


def _parse_optional_str(value: Any) -> str | None:
    text = str(value)
    return None if text.strip().lower() in ("", "none") else text


def _parse_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError("not a string")
    return str(value)


def _parse_path(value: Any) -> Path:
    return Path(_parse_str(value))


# The annotations of BrokerConfig's fields (strings: this module postpones them).
_PARSERS: dict[str, Callable[[Any], Any]] = {
    "bool": _parse_bool,
    "int": _parse_int,
    "int | None": _parse_optional_port,
    "float": _parse_float,
    "str": _parse_str,
    "str | None": _parse_optional_str,
    "Path": _parse_path,
}


def config_fields() -> list[Field[Any]]:
    """BrokerConfig's fields, each with a parser (checked here, so a new field with a
    new type fails at once)."""
    found = list(fields(BrokerConfig))
    for f in found:
        if str(f.type) not in _PARSERS:
            raise TypeError(f"BrokerConfig.{f.name}: no parser for {f.type}")
    return found


def default_of(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    raise TypeError(f"BrokerConfig.{f.name} has no default")


def parse_value(name: str, value: Any, source: str = "") -> Any:
    """``value`` (text from env or a flag, or a TOML value) as setting ``name``'s type."""
    kinds = {f.name: str(f.type) for f in config_fields()}
    if name not in kinds:
        raise ConfigError(name, value, "unknown setting", source)
    try:
        return _PARSERS[kinds[name]](value)
    except ValueError as exc:
        raise ConfigError(name, value, str(exc), source) from None


def _check_external_ports(config: BrokerConfig, sources: Mapping[str, str]) -> None:
    # Port 0 (any free port) makes sense only where the caller reads the port back.
    if config.port == 0:
        raise ConfigError("port", 0, "not a port number (1-65535)", sources.get("port", ""))
    if config.admin_port == 0:
        raise ConfigError(
            "admin_port", 0, "not a port number (1-65535) or 'off'", sources.get("admin_port", "")
        )


def load_config(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> BrokerConfig:
    """Layer the sources; an unknown key in the file, an unreadable file or a bad value
    raises ConfigError (a ValueError)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    names = [f.name for f in config_fields()]
    if config_file is not None:
        try:
            with open(config_file, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError("config", config_file, exc.strerror or str(exc)) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("config", config_file, f"not valid TOML: {exc}") from None
        section = data.get("broker", data)
        for key, value in section.items():
            name = key.replace("-", "_")
            if name not in names:
                raise ConfigError(key, value, "unknown setting", str(config_file))
            values[name] = parse_value(name, value, str(config_file))
            sources[name] = str(config_file)
    for name in names:
        env_key = f"MAGNETAR_{name.upper()}"
        if env_key in env:
            values[name] = parse_value(name, env[env_key], env_key)
            sources[name] = env_key
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = parse_value(name, value)
            sources[name] = ""
    config = BrokerConfig(**values)
    try:
        config.validate()
    except ConfigError as exc:
        if exc.source or not sources.get(exc.setting):
            raise
        raise ConfigError(exc.setting, exc.value, exc.reason, sources[exc.setting]) from None
    _check_external_ports(config, sources)
    return config
