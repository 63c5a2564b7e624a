"""Every admin error as Pulsar answers one: the status and a JSON body
``{"reason": ...}`` (with the reason in the status line too), whoever refused: a
route, the namespace guard (a tenant or namespace that does not exist is a 404 under
every route), or aiohttp itself (no such path: 404; no such method: 405 with Allow)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from admin_http import Reply, http, ok

from magnetar.testing import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True) as broker:
        yield broker


def reason_of(reply: Reply, status: int) -> str:
    assert reply.status == status, reply
    assert reply.headers["Content-Type"].startswith("application/json"), reply
    doc = reply.json()
    assert set(doc) == {"reason"} and isinstance(doc["reason"], str) and doc["reason"]
    return str(doc["reason"])


def test_aiohttps_own_404_and_405_have_a_reason(broker: EmbeddedBroker) -> None:
    assert reason_of(http(broker, "GET", "/admin/v2/no/such/route/at/all/x/y"), 404)
    assert reason_of(http(broker, "GET", "/nothing-here"), 404)
    reply = http(broker, "PATCH", "/admin/v2/brokers/health")
    assert reason_of(reply, 405)
    assert "GET" in reply.headers["Allow"]  # kept from aiohttp's answer


@pytest.mark.parametrize(
    "method, suffix",
    [
        ("GET", "/stats"),
        ("GET", "/internalStats"),
        ("GET", "/lastMessageId"),
        ("GET", "/examinemessage?initialPosition=earliest&messagePosition=1"),
        ("GET", "/partitioned-stats"),
        ("PUT", "/unload"),
        ("GET", "/subscriptions"),
        ("PUT", "/subscription/s"),
        ("DELETE", "/subscription/s"),
        ("POST", "/subscription/s/skip/1"),
        ("POST", "/subscription/s/skip_all"),
        ("POST", "/subscription/s/resetcursor/0"),
        ("POST", "/subscription/s/expireMessages/1"),
        ("GET", "/subscription/s/position/1"),
        ("DELETE", ""),
    ],
)
def test_a_missing_namespace_or_tenant_is_404_under_every_route(
    broker: EmbeddedBroker, method: str, suffix: str
) -> None:
    missing_ns = http(broker, method, f"/admin/v2/persistent/public/nosuch/t{suffix}")
    assert reason_of(missing_ns, 404) == "Namespace public/nosuch does not exist"
    missing_tenant = http(broker, method, f"/admin/v2/persistent/nobody/ns/t{suffix}")
    assert reason_of(missing_tenant, 404) == "Namespace nobody/ns does not exist"


def test_route_refusals_have_a_reason(broker: EmbeddedBroker) -> None:
    local = f"err-{uuid.uuid4().hex[:10]}"
    assert "not found" in reason_of(http(broker, "GET", f"{NS}/{local}/stats"), 404)
    assert "not found" in reason_of(http(broker, "GET", f"{NS}/{local}/internalStats"), 404)
    assert "not found" in reason_of(http(broker, "DELETE", f"{NS}/{local}"), 404)  # an old route
    assert reason_of(http(broker, "PUT", f"{NS}/{local}/partitions", "many"), 400)
    assert reason_of(http(broker, "PUT", "/admin/v2/bogus/public/default/x"), 412)
    ok(broker, "PUT", f"{NS}/{local}")
    assert reason_of(http(broker, "GET", f"{NS}/{local}/subscription/s/position/x"), 400)
    assert reason_of(http(broker, "PUT", f"{NS}/{local}"), 409) == (
        f"topic persistent://public/default/{local} already exists")
    assert reason_of(http(broker, "POST", f"{NS}/{local}/subscription/s/skip/1"), 404) == (
        "Subscription not found")
    ok(broker, "PUT", f"{NS}/{local}-p/partitions", "2")
    reply = http(broker, "GET", f"{NS}/{local}-p/internalStats")
    assert reason_of(reply, 405) == "Internal stats on a partitioned topic is not allowed"
    reply = http(broker, "GET", f"{NS}/{local}-p/lastMessageId")
    assert reason_of(reply, 405) == "Get the last message id on a partitioned topic is not allowed"
    assert reply.reason == "Get the last message id on a partitioned topic is not allowed"


def test_tenant_routes_errors_are_unchanged(broker: EmbeddedBroker) -> None:
    assert reason_of(http(broker, "GET", "/admin/v2/tenants/nobody"), 404) == (
        "Tenant does not exist")
