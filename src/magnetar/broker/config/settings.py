"""Every setting of one broker, in one object: the groups' fields (network, storage,
runtime, limits, policy defaults, security), in that order."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.config.limits import LimitSettings
from magnetar.broker.config.network import NetworkSettings
from magnetar.broker.config.policy_defaults import PolicyDefaults
from magnetar.broker.config.runtime import RuntimeSettings
from magnetar.broker.config.security import SecuritySettings
from magnetar.broker.config.storage import StorageSettings


# A dataclass takes its bases' fields from the last base to the first: network comes first.
@dataclass
class Settings(
    SecuritySettings,
    PolicyDefaults,
    LimitSettings,
    RuntimeSettings,
    StorageSettings,
    NetworkSettings,
):
    """All settings, grouped by concern; ``BrokerConfig`` adds what is derived from them."""
