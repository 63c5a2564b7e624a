"""The admin API with authentication on: 401 without credentials or with bad ones
(Pulsar's {"reason": ...} body), 403 for a role that may not do it, superusers may do
anything, /metrics stays open unless told otherwise."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import http

from magnetar.testing import EmbeddedBroker

from .helpers import Keys, bearer


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        admin=True,
        authentication_enabled=True,
        authorization_enabled=True,
        superuser_roles="admin, ops",
        token_secret_key=keys.url,
    ) as b:
        yield b


def test_no_credentials_is_401_with_a_reason(broker: EmbeddedBroker) -> None:
    reply = http(f"{broker.admin_url}/admin/v2/persistent/public/default")
    assert reply.status == 401
    assert reply.json()["reason"] == "Authentication required"


@pytest.mark.parametrize(
    "header",
    ["Bearer not-a-token", "Bearer ", "Basic " + base64.b64encode(b"u:p").decode(), "Digest x"],
)
def test_bad_credentials_are_401(broker: EmbeddedBroker, header: str) -> None:
    reply = http(
        f"{broker.admin_url}/admin/v2/persistent/public/default",
        headers={"Authorization": header},
    )
    assert reply.status == 401
    assert reply.json()["reason"]


def test_a_superuser_may_do_anything(broker: EmbeddedBroker, keys: Keys, topic: str) -> None:
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    assert http(broker.admin_url + path, "PUT", headers=bearer(keys.token("ops"))).status == 204
    listed = http(
        f"{broker.admin_url}/admin/v2/persistent/public/default",
        headers=bearer(keys.token("admin")),
    )
    assert listed.status == 200 and topic in listed.json()


def test_another_role_gets_403(broker: EmbeddedBroker, keys: Keys, topic: str) -> None:
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    reply = http(broker.admin_url + path, "PUT", headers=bearer(keys.token("mallory")))
    assert reply.status == 403
    assert "mallory" in reply.json()["reason"]
    stats = http(broker.admin_url + path + "/stats", headers=bearer(keys.token("mallory")))
    assert stats.status == 403  # no permission on the topic: not even its stats


def test_metrics_stay_open_by_default(broker: EmbeddedBroker) -> None:
    assert http(f"{broker.admin_url}/metrics").status == 200


def test_metrics_can_require_credentials(keys: Keys, tmp_path: Path) -> None:
    with EmbeddedBroker(
        admin=True,
        authentication_enabled=True,
        authenticate_metrics_endpoint=True,
        token_secret_key=keys.url,
    ) as broker:
        assert http(f"{broker.admin_url}/metrics").status == 401
        assert http(f"{broker.admin_url}/metrics", headers=bearer(keys.token("x"))).status == 200
        # Authentication on, authorization off: any authenticated role may use the API.
        listed = http(
            f"{broker.admin_url}/admin/v2/persistent/public/default",
            headers=bearer(keys.token("anyone")),
        )
        assert listed.status == 200


def test_a_role_with_consume_permission_may_read_a_topic_but_not_change_it(
    broker: EmbeddedBroker, keys: Keys, topic: str
) -> None:
    admin = bearer(keys.token("admin"))
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    assert http(broker.admin_url + path, "PUT", headers=admin).status == 204
    grant = "/admin/v2/namespaces/public/default/permissions/reader-role"
    granted = http(broker.admin_url + grant, "POST", body=["consume"], headers=admin)
    assert granted.status in (200, 204)
    reader = bearer(keys.token("reader-role"))
    for read in ("/stats", "/internalStats", "/lastMessageId", "/subscriptions"):
        assert http(broker.admin_url + path + read, headers=reader).status == 200, read
    skip = http(broker.admin_url + path + "/subscription/s/skip_all", "POST", headers=reader)
    assert skip.status == 403
