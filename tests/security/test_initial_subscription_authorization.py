"""PIP-124's initial subscription takes consume as well as produce, as Pulsar checks
SUBSCRIBE for it: a role that may only produce cannot create a subscription (which
would hold the topic's entries) by attaching a producer."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import Keys, admin
from .wire import TokenPeer, answer_of

T = BaseCommand.Type


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        token_secret_key=keys.url, admin=True, authentication_enabled=True,
        authorization_enabled=True, superuser_roles="admin",
    ) as b:
        yield b


def attach(broker: EmbeddedBroker, keys: Keys, role: str, topic: str, initial: str) -> int | None:
    """The error of a PRODUCER of ``role`` asking for ``initial`` (None: attached)."""
    peer = TokenPeer(broker.port, keys.token(role))
    frame = peer.request(BaseCommand(type=T.PRODUCER, producer=pb.CommandProducer(
        topic=topic, producer_id=1, request_id=1, initial_subscription_name=initial)), 1)
    peer.close()
    answer = answer_of(frame)
    assert answer is not None
    return answer[1]


def test_an_initial_subscription_takes_consume_as_well_as_produce(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    ns = f"public/initial-{uuid.uuid4().hex[:8]}"
    assert admin(broker, keys, "PUT", f"/admin/v2/namespaces/{ns}").status == 204
    for role, actions in (("writer", ["produce"]), ("both", ["produce", "consume"])):
        path = f"/admin/v2/namespaces/{ns}/permissions/{role}"
        assert admin(broker, keys, "POST", path, actions).status == 204
    topic = f"persistent://{ns}/t"
    assert admin(broker, keys, "PUT", f"/admin/v2/persistent/{ns}/t").status == 204
    subscriptions = f"/admin/v2/persistent/{ns}/t/subscriptions"

    assert attach(broker, keys, "writer", topic, "held") == pb.AuthorizationError
    assert admin(broker, keys, "GET", subscriptions).json() == []
    assert attach(broker, keys, "writer", topic, "") is None  # producing alone is granted
    assert attach(broker, keys, "both", topic, "held") is None
    assert admin(broker, keys, "GET", subscriptions).json() == ["held"]
