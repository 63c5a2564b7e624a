"""Tenant admin roles, as Pulsar has them (tokens): a role in a tenant's ``adminRoles``
administers the tenant's namespaces and topics over the admin API and may produce,
consume and look up there over the binary protocol; nothing outside its tenant, and
not the tenant itself. A plain role may only what it was granted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.client import AuthenticationToken, Client
from magnetar.client.errors import AuthorizationError
from magnetar.testing import EmbeddedBroker

from .helpers import Keys, as_role

SETTINGS = {
    "admin": True,
    "authentication_enabled": True,
    "authorization_enabled": True,
    "superuser_roles": "admin",
}
BOSS = "acme-admin"


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(token_secret_key=keys.url, **SETTINGS) as b:  # type: ignore[arg-type]
        yield b


@pytest.fixture
def tenant(broker: EmbeddedBroker, keys: Keys) -> str:
    """A tenant of its own whose admin is BOSS (created by the superuser)."""
    name = f"acme-{uuid.uuid4().hex[:8]}"
    reply = as_role(broker, keys, "admin", "PUT", f"/admin/v2/tenants/{name}",
                    {"adminRoles": [BOSS], "allowedClusters": ["standalone"]})
    assert reply.status == 204, reply
    return name


def client(broker: EmbeddedBroker, keys: Keys, role: str) -> Client:
    return Client(broker.service_url, auth=AuthenticationToken(keys.token(role)),
                  operation_timeout=5)


def test_a_tenant_admin_administers_its_tenant_over_rest(
    broker: EmbeddedBroker, keys: Keys, tenant: str
) -> None:
    ns = f"{tenant}/ns"

    def boss(method: str, path: str, body: object = None) -> int:
        return as_role(broker, keys, BOSS, method, path, body).status

    assert boss("PUT", f"/admin/v2/namespaces/{ns}") == 204
    assert as_role(broker, keys, BOSS, "GET", f"/admin/v2/namespaces/{tenant}").json() == [ns]
    # What the official client's test service does as public's admin.
    assert boss("POST", f"/admin/v2/namespaces/{ns}/deduplication", True) == 204
    assert boss("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy",
                "FORWARD") == 204
    assert boss("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2) == 204
    assert boss("PUT", f"/admin/v2/persistent/{ns}/single") == 204
    assert boss("PUT", f"/admin/v2/persistent/{ns}/single/subscription/s") == 204
    assert boss("PUT", f"/admin/v2/persistent/{ns}/single/compaction") == 204
    assert boss("POST", f"/admin/v2/namespaces/{ns}/retention",
                {"retentionTimeInMinutes": 5, "retentionSizeInMB": 1}) == 204
    assert boss("POST", f"/admin/v2/namespaces/{ns}/permissions/plain", ["produce"]) == 204
    assert boss("GET", f"/admin/v2/persistent/{ns}/single/stats") == 200
    assert as_role(broker, keys, "admin", "GET",
                   f"/admin/v2/namespaces/{ns}/permissions").json() == {"plain": ["produce"]}
    assert as_role(broker, keys, "admin", "GET",
                   f"/admin/v2/namespaces/{ns}/deduplication").json() is True
    assert boss("DELETE", f"/admin/v2/persistent/{ns}/single") == 204
    # Nothing outside its tenant.
    other = f"public/other-{uuid.uuid4().hex[:6]}"
    assert boss("PUT", f"/admin/v2/namespaces/{other}") == 403
    assert boss("GET", "/admin/v2/namespaces/public") == 403
    assert boss("POST", "/admin/v2/namespaces/public/default/permissions/x", ["produce"]) == 403
    assert boss("PUT", "/admin/v2/persistent/public/default/boss-topic") == 403
    # The tenant itself is the superuser's (Pulsar's TenantsBase): not even its admin
    # may read it, change its admin roles or delete it.
    for method, body in (("GET", None), ("POST", {"adminRoles": [BOSS, "friend"]}),
                         ("DELETE", None)):
        assert boss(method, f"/admin/v2/tenants/{tenant}", body) == 403
    assert boss("GET", "/admin/v2/tenants") == 403
    assert boss("PUT", "/admin/v2/clusters/elsewhere", {}) == 403
    assert as_role(broker, keys, "admin", "GET", f"/admin/v2/tenants/{tenant}").json()[
        "adminRoles"] == [BOSS]


async def test_a_tenant_admin_produces_and_consumes_in_its_tenant_only(
    broker: EmbeddedBroker, keys: Keys, tenant: str
) -> None:
    ns = f"{tenant}/ns"
    assert as_role(broker, keys, BOSS, "PUT", f"/admin/v2/namespaces/{ns}").status == 204
    topic = f"persistent://{ns}/t"
    async with client(broker, keys, BOSS) as c:
        consumer = await c.subscribe(topic, "s")
        await (await c.create_producer(topic)).send(b"mine")
        assert (await consumer.receive()).value == b"mine"
        assert topic in await c._lookup.get_topics_of_namespace(ns)
        outside = "persistent://public/default/boss-outside"
        with pytest.raises(AuthorizationError):
            await c.create_producer(outside)
        with pytest.raises(AuthorizationError):
            await c.subscribe(outside, "s")
        with pytest.raises(AuthorizationError):
            await c._lookup.get_broker(outside)


def test_official_client_tenant_admin_and_plain_role(
    broker: EmbeddedBroker, keys: Keys, tenant: str
) -> None:
    ns = f"{tenant}/ns"
    assert as_role(broker, keys, BOSS, "PUT", f"/admin/v2/namespaces/{ns}").status == 204
    assert as_role(broker, keys, BOSS, "POST", f"/admin/v2/namespaces/{ns}/permissions/plain",
                   ["produce"]).status == 204
    topic = f"persistent://{ns}/official"
    boss = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(
        keys.token(BOSS)), logger=quiet_logger(), operation_timeout_seconds=5)
    plain = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(
        keys.token("plain")), logger=quiet_logger(), operation_timeout_seconds=5)
    try:
        consumer = boss.subscribe(topic, "s")
        plain.create_producer(topic).send(b"granted")
        assert consumer.receive(timeout_millis=10_000).data() == b"granted"
        with pytest.raises(pulsar.PulsarException):  # plain may only produce
            plain.subscribe(topic, "p")
        # and plain administers nothing, even where it may produce
        for method, path in (("PUT", f"/admin/v2/persistent/{ns}/x"),
                             ("POST", f"/admin/v2/namespaces/{ns}/deduplication"),
                             ("GET", f"/admin/v2/namespaces/{ns}")):
            assert as_role(broker, keys, "plain", method, path, True).status == 403
    finally:
        boss.close()
        plain.close()


def test_admin_roles_changed_by_the_superuser(
    broker: EmbeddedBroker, keys: Keys, tenant: str
) -> None:
    ns = f"{tenant}/ns"
    assert as_role(broker, keys, "heir", "PUT", f"/admin/v2/namespaces/{ns}").status == 403
    assert as_role(broker, keys, "admin", "POST", f"/admin/v2/tenants/{tenant}",
                   {"adminRoles": ["heir"], "allowedClusters": ["standalone"]}).status == 204
    assert as_role(broker, keys, "heir", "PUT", f"/admin/v2/namespaces/{ns}").status == 204
    assert as_role(broker, keys, BOSS, "DELETE", f"/admin/v2/namespaces/{ns}").status == 403


def test_tenant_admins_survive_a_restart(keys: Keys, tmp_path: object) -> None:
    with EmbeddedBroker(data_dir=tmp_path, token_secret_key=keys.url,  # type: ignore[arg-type]
                        **SETTINGS) as b:  # type: ignore[arg-type]
        assert as_role(b, keys, "admin", "PUT", "/admin/v2/tenants/kept",
                       {"adminRoles": [BOSS], "allowedClusters": ["standalone"]}).status == 204
        b.restart()
        assert as_role(b, keys, BOSS, "PUT", "/admin/v2/namespaces/kept/ns").status == 204
