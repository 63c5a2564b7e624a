"""The broker: connections (ServerCnx), topics, subscriptions, dispatchers, producers.

asyncio only; it reads and writes frames through ``magnetar.protocol`` and keeps
entries and cursors through ``magnetar.storage``.
"""

from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService

__all__ = ["BrokerConfig", "BrokerService"]
