"""Brokers for test suites: :class:`EmbeddedBroker` and the ``magnetar_broker`` pytest fixture."""

from magnetar.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
