"""What policies and features read of a topic without depending on ``Topic`` itself: its
name and its metadata (where its own policies and its epoch are kept), and its producers
by name. ``Topic`` is the implementation; depending on this Protocol keeps the policy and
PIP-68 modules out of the topic's import circle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from magnetar.broker.topics.producer import Producer
    from magnetar.protocol.topic_name import TopicName
    from magnetar.storage import TopicMetadata


class TopicView(Protocol):
    """A loaded topic: its name and its metadata."""

    @property
    def name(self) -> str: ...
    @property
    def topic_name(self) -> TopicName: ...
    @property
    def metadata(self) -> TopicMetadata: ...


class TopicWithProducers(TopicView, Protocol):
    """A loaded topic and its producers by name (PIP-68 access modes change them)."""

    @property
    def producers(self) -> dict[str, Producer]: ...
