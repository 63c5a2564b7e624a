"""The authorization checks the command handlers make, with Pulsar's words. Each
returns at once when authorization is off (the service holds no AuthorizationService),
and none is on a per-message path: PRODUCER (and its initial subscription), SUBSCRIBE,
LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, SEEK, GET_LAST_MESSAGE_ID,
GET_SCHEMA, GET_OR_CREATE_SCHEMA, and the acks that carry a PIP-371 reply.
tests/security/test_authorization_walk.py sends every command with a role that has
no grant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.auth.authorization import CONSUME, PRODUCE
from magnetar.broker.policies.namespaces import NamespaceNotFound
from magnetar.broker.session.handlers.errors import CommandError
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.session.context import Session
    from magnetar.broker.session.peer import AnyConnection

_WHAT = {PRODUCE: "Publish", CONSUME: "subscribe"}


def refusal(cnx: AnyConnection, topic: TopicName, action: str, what: str = "") -> str | None:
    """Why ``cnx``'s role may not do ``action`` on ``topic`` (None: it may)."""
    authorization = cnx.authorization
    if authorization is None or authorization.allowed(cnx.role, topic, action):
        return None
    return f"Client is not authorized to {what or _WHAT[action]} (role {cnx.role!r} on {topic})"


def require(cnx: AnyConnection, topic: TopicName, action: str, what: str = "") -> None:
    """CommandError AuthorizationError unless ``cnx``'s role may do ``action``."""
    why = refusal(cnx, topic, action, what)
    if why is not None:
        raise CommandError(pb.AuthorizationError, why)


def require_namespace(cnx: Session, topic: TopicName) -> None:
    """CommandError TopicNotFound when the topic's tenant or namespace does not exist
    (and using it would not create it): Pulsar answers so before any authorization
    check, whoever asks."""
    try:
        cnx.service.namespaces.check(topic.namespace_name)
    except NamespaceNotFound as exc:
        raise CommandError(pb.TopicNotFound, str(exc)) from None


def require_producer(cnx: Session, topic: TopicName, initial_subscription: str) -> None:
    """PRODUCER's check: produce, and consume too when it asks for an initial
    subscription (PIP-124), as Pulsar checks SUBSCRIBE for it: a role that may only
    produce would otherwise create a subscription that holds the topic's entries."""
    require_namespace(cnx, topic)
    require(cnx, topic, PRODUCE)
    if initial_subscription:
        require(cnx, topic, CONSUME, f"subscribe (initial subscription {initial_subscription!r})")


def require_subscribe(cnx: Session, topic: TopicName) -> None:
    """SUBSCRIBE's check: an existing namespace (TopicNotFound), then consume."""
    require_namespace(cnx, topic)
    require(cnx, topic, CONSUME)


def list_topics_refusal(cnx: AnyConnection, namespace: str) -> str | None:
    """Why GET_TOPICS_OF_NAMESPACE of ``namespace`` ("tenant/ns") is refused (None: it
    is not)."""
    authorization = cnx.authorization
    if authorization is None:
        return None
    tenant, _, local = namespace.partition("/")
    if tenant and local and "/" not in local \
            and authorization.can_list_topics(cnx.role, tenant, local):
        return None
    return (f"Client is not authorized to GetTopicsOfNamespace "
            f"(role {cnx.role!r} on {namespace})")


def lookup_refusal(cnx: AnyConnection, topic: str, what: str) -> str | None:
    """Why a lookup of ``topic`` is refused: the role may neither produce nor consume
    (as Pulsar's canLookup). An invalid name is left to the lookup to answer."""
    authorization = cnx.authorization
    if authorization is None:
        return None
    try:
        name = TopicName.parse(topic)
    except InvalidTopicName:
        return None
    if authorization.can_lookup(cnx.role, name):
        return None
    return f"Client is not authorized to {what} (role {cnx.role!r} on {name})"
