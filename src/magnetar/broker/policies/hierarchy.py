"""The one rule every policy of a topic follows, as Pulsar's HierarchyTopicPolicies
(PolicyHierarchyValue.get): the topic's own value, else its namespace's, else the
broker's setting. Each policy module says where its three values are kept; this says
which one is in force."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from magnetar.protocol.topic_name import TopicName

T = TypeVar("T")


def in_force(
    own: T | None,
    name: TopicName | None,
    namespace: Callable[[str, str], T | None],
    broker: T,
) -> T:
    """The value in force on topic ``name``: ``own`` (the topic's; None: unset), else
    ``namespace(tenant, namespace)`` (None: unset; asked only when the topic has none,
    as it may read a file), else ``broker``. Without a name only ``own`` and ``broker``
    count."""
    if own is not None:
        return own
    if name is not None:
        value = namespace(name.tenant, name.namespace)
        if value is not None:
            return value
    return broker
