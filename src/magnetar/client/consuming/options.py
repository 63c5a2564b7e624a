"""Consumer options from a dict, a TOML file or a JSON file (PIP-106's configuration).

The keys are ``Client.subscribe``'s arguments; the result is its keyword arguments::

    opts = load_consumer_options("consumer.toml")
    consumer = await client.subscribe(topic, "sub", **opts)

A redelivery backoff is named by class, ``"module:Class"``, with its parameters:

.. code-block:: toml

    subscription_type = "shared"
    ack_timeout = 10.0

    [negative_ack_redelivery_backoff]
    class = "magnetar.client:MultiplierRedeliveryBackoff"
    params = { min_delay = 1.0, max_delay = 60.0, multiplier = 2 }

    [dead_letter_policy]
    max_redeliver_count = 5
    initial_subscription_name = "audit"

Every mistake (an unknown key, a value of the wrong type, a class that does not
import or is no :class:`RedeliveryBackoff`, parameters its constructor refuses) is a
:class:`ConsumerConfigError` naming the key and the problem. A dict built in Python
may also hold the objects themselves (a backoff instance, a ``DeadLetterPolicy``).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import os
import tomllib
from collections.abc import Callable, Mapping
from typing import Any

from magnetar.client.backoff import RedeliveryBackoff
from magnetar.client.client import Client
from magnetar.client.consuming.config import INITIAL_POSITIONS, SUBSCRIPTION_TYPES
from magnetar.client.consuming.dead_letter import DeadLetterPolicy

__all__ = ["ConsumerConfigError", "consumer_options", "load_consumer_options"]


class ConsumerConfigError(ValueError):
    """A consumer configuration that cannot be used; the message names the key."""


class _Problem(Exception):
    """A value's problem, before the key is known."""


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Problem(f"expected a number of seconds, got {_show(value)}")
    if value < 0:
        raise _Problem(f"must not be negative, got {value!r}")
    return float(value)


def _optional_number(value: Any) -> float | None:
    return None if value is None else _number(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Problem(f"expected an integer, got {_show(value)}")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Problem(f"expected true or false, got {_show(value)}")
    return value


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Problem(f"expected a non-empty string, got {_show(value)}")
    return value


def _optional_string(value: Any) -> str | None:
    return None if value is None else _string(value)


def _choice(table: Mapping[str, int]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value.lower() not in table:
            raise _Problem(f"must be one of {sorted(table)}, got {_show(value)}")
        return value

    return check


def _topics(value: Any) -> str | list[str]:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(isinstance(t, str) and t for t in value):
        return list(value)
    raise _Problem(f"expected a topic name or a non-empty list of them, got {_show(value)}")


def _string_table(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _Problem(f"expected a table of strings to strings, got {_show(value)}")
    return dict(value)


def _import(spec: str) -> Any:
    """The object ``"package.module:Name"`` (or ``"module:Outer.Inner"``) names."""
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise _Problem(f"{spec!r} must name a class as 'module:Class', e.g. "
                       "'magnetar.client:MultiplierRedeliveryBackoff'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise _Problem(f"cannot import module {module_name!r} ({exc})") from None
    for part in qualname.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise _Problem(f"module {module_name!r} has no {qualname!r}") from None
    return target


def _backoff(value: Any) -> RedeliveryBackoff:
    if isinstance(value, RedeliveryBackoff):
        return value
    if isinstance(value, str):
        spec, params = value, {}
    elif isinstance(value, Mapping):
        unknown = set(value) - {"class", "params"}
        if unknown:
            raise _Problem(f"unknown field(s) {sorted(unknown)}; a backoff has 'class' and "
                           "'params'")
        if "class" not in value:
            raise _Problem("missing 'class' (e.g. 'magnetar.client:MultiplierRedeliveryBackoff')")
        spec, params = value["class"], value.get("params", {})
        if not isinstance(spec, str):
            raise _Problem(f"'class' must be a string 'module:Class', got {_show(spec)}")
        if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
            raise _Problem(f"'params' must be a table of parameters, got {_show(params)}")
    else:
        raise _Problem("expected 'module:Class' or a table with 'class' and 'params', "
                       f"got {_show(value)}")
    cls = _import(spec)
    if not isinstance(cls, type) or not issubclass(cls, RedeliveryBackoff):
        raise _Problem(f"{spec!r} is not a RedeliveryBackoff class")
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:
        raise _Problem(f"{spec} does not take params {dict(params)!r}: {exc}") from None


def _dead_letter_policy(value: Any) -> DeadLetterPolicy:
    if isinstance(value, DeadLetterPolicy):
        return value
    if not isinstance(value, Mapping):
        raise _Problem(f"expected a table (max_redeliver_count, dead_letter_topic, "
                       f"retry_letter_topic, initial_subscription_name), got {_show(value)}")
    try:
        return DeadLetterPolicy(**value)
    except (TypeError, ValueError) as exc:
        raise _Problem(str(exc)) from None


# How each option that a file can give is checked (and converted).
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "topic": _topics,
    "subscription": _string,
    "subscription_type": _choice(SUBSCRIPTION_TYPES),
    "initial_position": _choice(INITIAL_POSITIONS),
    "receiver_queue_size": _integer,
    "consumer_name": _optional_string,
    "priority_level": _integer,
    "ack_timeout": _optional_number,
    "negative_ack_redelivery_delay": _optional_number,
    "negative_ack_redelivery_backoff": _backoff,
    "ack_timeout_redelivery_backoff": _backoff,
    "dead_letter_policy": _dead_letter_policy,
    "retry_enable": _boolean,
    "durable": _boolean,
    "properties": _string_table,
    "subscription_properties": _string_table,
    "read_compacted": _boolean,
    "ack_group_time": _number,
    "ack_group_max_size": _integer,
    "batch_index_ack_enabled": _boolean,
    "pattern_auto_discovery_period": _number,
}


def _subscribe_parameters() -> list[str]:
    return [name for name in inspect.signature(Client.subscribe).parameters if name != "self"]


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def consumer_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """Check a consumer configuration and return ``Client.subscribe``'s keyword
    arguments (backoffs and the dead-letter policy built from their tables)."""
    if not isinstance(config, Mapping):
        raise ConsumerConfigError(f"a consumer configuration is a table, not {_show(config)}")
    known = _subscribe_parameters()
    options: dict[str, Any] = {}
    for key, value in config.items():
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConsumerConfigError(f"{key}: not an option of Client.subscribe{hint}")
        check = _CHECKS.get(key)
        if check is None:
            # An object no file can spell (a schema, a listener, a clock, ...): a dict
            # built in Python passes it through to subscribe as it is.
            if isinstance(value, str | int | float | bool | list | Mapping):
                raise ConsumerConfigError(
                    f"{key}: cannot come from a configuration; pass it to subscribe()"
                )
            options[key] = value
            continue
        try:
            options[key] = check(value)
        except _Problem as exc:
            raise ConsumerConfigError(f"{key}: {exc}") from None
    if options.get("negative_ack_redelivery_delay") is not None and options.get(
        "negative_ack_redelivery_backoff"
    ) is not None:
        raise ConsumerConfigError(
            "negative_ack_redelivery_backoff: give it or negative_ack_redelivery_delay, "
            "not both"
        )
    return options


def load_consumer_options(
    path: str | os.PathLike[str], *, section: str | None = None
) -> dict[str, Any]:
    """:func:`consumer_options` of a ``.toml`` or ``.json`` file (of its table
    ``section``, dotted for nested tables, if given)."""
    name = os.fspath(path)
    suffix = os.path.splitext(name)[1].lower()
    try:
        with open(name, "rb") as f:
            if suffix == ".toml":
                document: Any = tomllib.load(f)
            elif suffix == ".json":
                document = json.load(f)
            else:
                raise ConsumerConfigError(f"{name}: a consumer configuration is a .toml or "
                                          f".json file, not {suffix or 'a file without suffix'}")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConsumerConfigError(f"{name}: does not parse: {exc}") from None
    if section:
        for part in section.split("."):
            if not isinstance(document, Mapping) or part not in document:
                raise ConsumerConfigError(f"{name}: has no table [{section}]")
            document = document[part]
    try:
        return consumer_options(document)
    except ConsumerConfigError as exc:
        raise ConsumerConfigError(f"{name}: {exc}") from None
