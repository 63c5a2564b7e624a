"""Broker settings, and how they are read: defaults < TOML file < MAGNETAR_* env < flags.

Every setting is a field of ``BrokerConfig``, declared in the module of its concern
(network, storage, runtime, limits, policy_defaults, security); its help text lives in the
field's metadata, so ``magnetar serve --help`` (generated from the fields) cannot drift
from them. ``load_config`` (loader.py) is the one loader; checks.py says whether values
can be used. A value that cannot be used raises ``ConfigError``, which names the setting,
the value and the reason.
"""

from magnetar.broker.config.broker_config import BrokerConfig
from magnetar.broker.config.checks import MINUS_ONE_IS_NO_LIMIT, csv_setting
from magnetar.broker.config.errors import ConfigError, listen_error, os_reason
from magnetar.broker.config.loader import config_fields, default_of, load_config, parse_value

__all__ = [
    "MINUS_ONE_IS_NO_LIMIT",
    "BrokerConfig",
    "ConfigError",
    "config_fields",
    "csv_setting",
    "default_of",
    "listen_error",
    "load_config",
    "os_reason",
    "parse_value",
]
