"""PIP-371 with authentication on: a reply goes only to the role that sent the request.

A requester away from the broker (its connection cut) gets its held reply when it comes
back; another role attaching a producer under the requester's name (names are visible
in topic stats) gets nothing, and its closing that producer drops nothing. Batched
requests of magnetar's client carry their mark, so their replies route too."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from admin_http import http
from cutting_proxy import CuttingProxy

from magnetar.client import AuthenticationToken, Client
from magnetar.client.errors import NotAllowed
from magnetar.testing import EmbeddedBroker

from .helpers import Keys, bearer

SETTINGS = {
    "admin": True,
    "authentication_enabled": True,
    "authorization_enabled": True,
    "superuser_roles": "admin",
}
WAIT = 10.0


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(token_secret_key=keys.url, **SETTINGS) as b:  # type: ignore[arg-type]
        yield b


def _namespace(broker: EmbeddedBroker, keys: Keys, grants: dict[str, list[str]]) -> str:
    ns = f"public/rr-{uuid.uuid4().hex[:8]}"
    admin = bearer(keys.token("admin"))
    assert http(f"{broker.admin_url}/admin/v2/namespaces/{ns}", "PUT", headers=admin).status \
        in (200, 204)
    for role, actions in grants.items():
        path = f"/admin/v2/namespaces/{ns}/permissions/{role}"
        assert http(broker, "POST", path, actions, headers=admin).status == 204
    return ns


def _client(url: str, keys: Keys, role: str) -> Client:
    return Client(url, auth=AuthenticationToken(keys.token(role)), operation_timeout=WAIT,
                  initial_backoff=0.05, max_backoff=0.2)


async def _eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_held_reply_goes_only_to_the_requesting_role(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    ns = _namespace(broker, keys, {"alice": ["produce"], "mallory": ["produce"],
                                   "worker": ["consume"]})
    topic = f"persistent://{ns}/rpc"
    service = broker.service
    assert service is not None
    proxy = CuttingProxy(broker.port)
    try:
        async with (
            _client(proxy.url, keys, "alice") as alice,
            _client(broker.service_url, keys, "mallory") as mallory,
            _client(broker.service_url, keys, "worker") as worker,
        ):
            consumer = await worker.subscribe(topic, "s", subscription_type="shared")
            asker = await alice.create_producer(topic, producer_name="asker")
            pending = asker.request_async(b"what is the secret?", timeout=30)
            msg = await consumer.receive(WAIT)
            proxy.refuse = True
            proxy.cut()
            await _eventually(lambda: "asker" not in service.topics[topic].producers)
            forwarded = service.replies.forwarded
            await (await consumer.acknowledge(msg, reply=b"SECRET ANSWER for alice"))
            assert service.replies.held_replies() == 1

            impostor = await mallory.create_producer(topic, producer_name="asker")
            await asyncio.sleep(0.2)  # a wrong hand-over would be written by now
            assert service.replies.forwarded == forwarded
            assert service.replies.held_replies() == 1
            await impostor.close()  # closes its own producer: alice's reply stays
            assert service.replies.held_replies() == 1

            proxy.refuse = False
            result = await asyncio.wait_for(pending, WAIT)
            assert result.value == b"SECRET ANSWER for alice"
            assert service.replies.forwarded == forwarded + 1
    finally:
        proxy.close()


async def test_batched_requests_route_with_authentication(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    ns = _namespace(broker, keys, {"alice": ["produce"], "worker": ["consume"]})
    topic = f"persistent://{ns}/rpc-batched"
    async with (
        _client(broker.service_url, keys, "alice") as alice,
        _client(broker.service_url, keys, "worker") as worker,
    ):
        consumer = await worker.subscribe(topic, "s", subscription_type="shared")
        producer = await alice.create_producer(topic, batching=True, batching_max_delay=0.05)
        pending = [producer.request_async(f"q{i}".encode(), timeout=WAIT) for i in range(3)]
        for _ in range(3):
            msg = await consumer.receive(WAIT)
            await (await consumer.acknowledge(msg, reply=msg.value.upper()))
        results = await asyncio.wait_for(asyncio.gather(*pending), WAIT)
        assert sorted(r.value for r in results) == [b"Q0", b"Q1", b"Q2"]

        # A plain message carries no requester role: a reply to it is refused.
        await producer.send(b"not a request")
        msg = await consumer.receive(WAIT)
        with pytest.raises(NotAllowed, match="no requester role"):
            await (await consumer.acknowledge(msg, reply=b"to whom?"))
