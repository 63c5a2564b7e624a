"""The authorization walk: a role with no grant anywhere sends every command of the
protocol, and every admin route, at a topic another role owns (with data, a
subscription with a cursor and a schema) and at topics and namespaces that do not
exist; each is refused (AuthorizationError, or the error Pulsar gives there) or
harmless, and nothing changes, on disk or as the superuser sees it through admin. The
role is the admin of a tenant of its own, which must give it nothing elsewhere.

Commands are enumerated from ``BaseCommand.Type`` and the broker's handler table, and
routes from the admin application's router: a command or route added without a case
here fails the walk. Authentication on (tokens), authorization on, namespaces and
partitioned topics created on first use (``allow_auto_namespace_creation``,
``default_partitions``) so that any leak would leave something behind.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from admin_http import http

from magnetar.broker.session.connection import _HANDLERS
from magnetar.protocol.frames import encode_command, encode_payload_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import Keys, admin, bearer
from .wire import TokenPeer, answer_of

T = BaseCommand.Type
E = pb.ServerError  # type: ignore[attr-defined]

# Sent by the broker only: the walk does not send them, and the broker must have no
# handler for them (asserted below).
SERVER_TO_CLIENT: dict[int, str] = {
    T.CONNECTED: "answers CONNECT",
    T.SEND_RECEIPT: "answers SEND",
    T.SEND_ERROR: "answers SEND",
    T.MESSAGE: "dispatch to a consumer",
    T.SUCCESS: "answers a request",
    T.ERROR: "answers a request",
    T.PRODUCER_SUCCESS: "answers PRODUCER",
    T.PARTITIONED_METADATA_RESPONSE: "answers PARTITIONED_METADATA",
    T.LOOKUP_RESPONSE: "answers LOOKUP",
    T.CONSUMER_STATS_RESPONSE: "answers CONSUMER_STATS",
    T.REACHED_END_OF_TOPIC: "tells a consumer its topic is terminated",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "answers GET_LAST_MESSAGE_ID",
    T.ACTIVE_CONSUMER_CHANGE: "tells a failover consumer it became (in)active",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "answers GET_TOPICS_OF_NAMESPACE",
    T.GET_SCHEMA_RESPONSE: "answers GET_SCHEMA",
    T.AUTH_CHALLENGE: "asks for fresh credentials",
    T.ACK_RESPONSE: "answers an ACK with a request id",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "answers GET_OR_CREATE_SCHEMA",
    T.TOPIC_MIGRATED: "tells a client its topic moved to another cluster",
    T.REQUEST_RECEIPT: "PIP-371: forwards a reply to the requesting producer",
}

# Pulsar's command numbers this protocol build does not know (transactions 50-61,
# topic list watches 64-67): frames of these types are refused as unsupported.
UNKNOWN_TYPES = tuple(n for n in range(42, 69) if n not in T.values())

MALLORY = "mallory"
OWNER = "owner"
SUB = "owned-sub"


@dataclass
class Case:
    """Frames one fresh connection of the no-grant role sends, and what may come back:
    an answer to each request of ``refused`` whose error is one of its codes; SUCCESS
    only for ``successes``; SEND_ERROR for ``send_errors``; nothing else (no MESSAGE,
    no receipt, no producer). ``closes``: the broker closes the connection."""

    label: str
    frames: list[bytes]
    refused: dict[int, set[int]] = field(default_factory=dict)
    successes: set[int] = field(default_factory=set)
    send_errors: int = 0
    closes: bool = False


@dataclass
class Place:
    owned: str  # the owner's topic: entries, subscription SUB, schema
    namespace: str  # the owner's namespace
    targets: tuple[str, ...]  # every topic the walk aims at
    namespaces: tuple[str, ...]
    first_entry: pb.MessageIdData


def cmd(**kwargs: Any) -> bytes:
    kind = kwargs.pop("type")
    return encode_command(BaseCommand(type=kind, **kwargs))


JSON_SCHEMA = pb.Schema(name="rec", type=pb.Schema.Json,
                        schema_data=b'{"type":"record","name":"R","fields":[]}')
OTHER_SCHEMA = pb.Schema(name="s", type=pb.Schema.String, schema_data=b"")

AUTHZ = {E.AuthorizationError}


def refused_producer(topic: str, producer_id: int = 1) -> bytes:
    return cmd(type=T.PRODUCER, producer=pb.CommandProducer(
        topic=topic, producer_id=producer_id, request_id=100 + producer_id,
        schema=JSON_SCHEMA, initial_subscription_name="mallory-initial",
        producer_access_mode=pb.ExclusiveWithFencing))


def refused_subscribe(topic: str, sub: str = SUB, consumer_id: int = 1) -> bytes:
    return cmd(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription=sub, subType=pb.CommandSubscribe.Exclusive,
        consumer_id=consumer_id, request_id=200 + consumer_id,
        initialPosition=pb.CommandSubscribe.Earliest, force_topic_creation=True))


# ------------------------------------------------------------ the cases per command


def connect_cases(p: Place, keys: Keys) -> list[Case]:
    again = cmd(type=T.CONNECT, connect=pb.CommandConnect(
        client_version="again", protocol_version=21, auth_method_name="token",
        auth_data=keys.token("admin").encode()))
    return [Case("a second CONNECT, with a superuser's token", [again],
                 refused={0: {E.NotAllowedError}})]


def ping_cases(p: Place, keys: Keys) -> list[Case]:
    return [Case("PING", [cmd(type=T.PING, ping=pb.CommandPing())])]


def pong_cases(p: Place, keys: Keys) -> list[Case]:
    return [Case("PONG", [cmd(type=T.PONG, pong=pb.CommandPong())])]


def lookup_cases(p: Place, keys: Keys) -> list[Case]:
    return [
        Case(f"LOOKUP {t} authoritative={a}", [cmd(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(
            topic=t, request_id=1, authoritative=a))], refused={1: AUTHZ})
        for t in p.targets for a in (False, True)
    ]


def partitioned_metadata_cases(p: Place, keys: Keys) -> list[Case]:
    return [
        Case(f"PARTITIONED_METADATA {t}", [cmd(
            type=T.PARTITIONED_METADATA, partitionMetadata=pb.CommandPartitionedTopicMetadata(
                topic=t, request_id=1, metadata_auto_creation_enabled=True))],
             refused={1: AUTHZ})
        for t in p.targets
    ]


def get_topics_cases(p: Place, keys: Keys) -> list[Case]:
    names = (*p.namespaces, "public", "", "public/default/extra")
    return [
        Case(f"GET_TOPICS_OF_NAMESPACE {ns!r} mode={mode}", [cmd(
            type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
                namespace=ns, request_id=1, mode=mode))], refused={1: AUTHZ})
        for ns in names for mode in (pb.CommandGetTopicsOfNamespace.ALL,)
    ]


def producer_cases(p: Place, keys: Keys) -> list[Case]:
    return [Case(f"PRODUCER {t}", [refused_producer(t)], refused={101: AUTHZ})
            for t in p.targets]


def send_cases(p: Place, keys: Keys) -> list[Case]:
    def send(seq: int) -> bytes:
        command = BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=seq))
        metadata = pb.MessageMetadata(producer_name="mallory", sequence_id=seq, publish_time=1)
        return encode_payload_command(command, metadata.SerializeToString(), b"forged")

    return [Case(f"SEND after a refused PRODUCER on {t}", [refused_producer(t), send(0), send(1)],
                 refused={101: AUTHZ}, send_errors=2) for t in p.targets]


def close_producer_cases(p: Place, keys: Keys) -> list[Case]:
    close = cmd(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
        producer_id=1, request_id=2))
    return [Case(f"CLOSE_PRODUCER after a refused PRODUCER on {p.owned}",
                 [refused_producer(p.owned), close], refused={101: AUTHZ}, successes={2})]


def subscribe_cases(p: Place, keys: Keys) -> list[Case]:
    cases = [Case(f"SUBSCRIBE {t} {s}", [refused_subscribe(t, s)], refused={201: AUTHZ})
             for t in p.targets for s in (SUB, "mallory-sub")]
    reader = cmd(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=p.owned, subscription="reader-mallory", subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1, request_id=201, durable=False, start_message_id=p.first_entry,
        schema=OTHER_SCHEMA, read_compacted=True))
    cases.append(Case("SUBSCRIBE a non-durable reader with a schema", [reader],
                      refused={201: AUTHZ}))
    return cases


def _after_refused_subscribe(p: Place, label: str, *frames: bytes, **expect: Any) -> Case:
    refused = {201: AUTHZ, **expect.pop("refused", {})}
    return Case(f"{label} after a refused SUBSCRIBE", [refused_subscribe(p.owned), *frames],
                refused=refused, **expect)


def flow_cases(p: Place, keys: Keys) -> list[Case]:
    flow = cmd(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=1000))
    return [_after_refused_subscribe(p, "FLOW", flow)]


def ack_cases(p: Place, keys: Keys) -> list[Case]:
    def ack(kind: int, request_id: int | None) -> bytes:
        body = pb.CommandAck(consumer_id=1, ack_type=kind, message_id=[p.first_entry])
        if request_id is not None:
            body.request_id = request_id
        return cmd(type=T.ACK, ack=body)

    return [
        _after_refused_subscribe(p, "ACK individual", ack(pb.CommandAck.Individual, None)),
        _after_refused_subscribe(p, "ACK cumulative with a request id",
                                 ack(pb.CommandAck.Cumulative, 3),
                                 refused={3: {E.ConsumerNotFound}}),
    ]


def redeliver_cases(p: Place, keys: Keys) -> list[Case]:
    again = cmd(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                redeliverUnacknowledgedMessages=pb.CommandRedeliverUnacknowledgedMessages(
                    consumer_id=1, message_ids=[p.first_entry]))
    return [_after_refused_subscribe(p, "REDELIVER_UNACKNOWLEDGED_MESSAGES", again)]


def unsubscribe_cases(p: Place, keys: Keys) -> list[Case]:
    gone = cmd(type=T.UNSUBSCRIBE, unsubscribe=pb.CommandUnsubscribe(
        consumer_id=1, request_id=3, force=True))
    return [_after_refused_subscribe(p, "UNSUBSCRIBE", gone, refused={3: {E.ConsumerNotFound}})]


def close_consumer_cases(p: Place, keys: Keys) -> list[Case]:
    close = cmd(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(
        consumer_id=1, request_id=3))
    return [_after_refused_subscribe(p, "CLOSE_CONSUMER", close, successes={3})]


def seek_cases(p: Place, keys: Keys) -> list[Case]:
    by_id = cmd(type=T.SEEK, seek=pb.CommandSeek(consumer_id=1, request_id=3,
                                                  message_id=p.first_entry))
    by_time = cmd(type=T.SEEK, seek=pb.CommandSeek(consumer_id=1, request_id=4,
                                                    message_publish_time=1))
    return [_after_refused_subscribe(p, "SEEK", by_id, by_time,
                                     refused={3: {E.ConsumerNotFound}, 4: {E.ConsumerNotFound}})]


def last_message_id_cases(p: Place, keys: Keys) -> list[Case]:
    ask = cmd(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=pb.CommandGetLastMessageId(
        consumer_id=1, request_id=3))
    return [_after_refused_subscribe(p, "GET_LAST_MESSAGE_ID", ask,
                                     refused={3: {E.ConsumerNotFound}})]


def consumer_stats_cases(p: Place, keys: Keys) -> list[Case]:
    ask = cmd(type=T.CONSUMER_STATS, consumerStats=pb.CommandConsumerStats(
        consumer_id=1, request_id=3))
    return [_after_refused_subscribe(p, "CONSUMER_STATS", ask, refused={3: {E.ConsumerNotFound}})]


def get_schema_cases(p: Place, keys: Keys) -> list[Case]:
    return [
        Case(f"GET_SCHEMA {t} version={v!r}", [cmd(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
            request_id=1, topic=t, **({} if v is None else {"schema_version": v})))],
             refused={1: AUTHZ})
        for t in p.targets for v in (None, bytes(8))
    ]


def get_or_create_schema_cases(p: Place, keys: Keys) -> list[Case]:
    return [
        Case(f"GET_OR_CREATE_SCHEMA {t} {s.type}", [cmd(
            type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
                request_id=1, topic=t, schema=s))], refused={1: AUTHZ})
        for t in p.targets for s in (JSON_SCHEMA, OTHER_SCHEMA)
    ]


def auth_response_cases(p: Place, keys: Keys) -> list[Case]:
    def respond(role: str) -> bytes:
        return cmd(type=T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse(
            protocol_version=21, response=pb.AuthData(
                auth_method_name="token", auth_data=keys.token(role).encode())))

    return [
        # Fresh credentials of the same role are taken, and grant nothing.
        Case("AUTH_RESPONSE of its own role, then PRODUCER",
             [respond(MALLORY), refused_producer(p.owned)], refused={101: AUTHZ}),
        # Another role's (even a superuser's) ends the connection.
        Case("AUTH_RESPONSE of a superuser, then PRODUCER",
             [respond("admin"), refused_producer(p.owned)],
             refused={(1 << 64) - 1: {E.AuthenticationError}}, closes=True),
    ]


CASES: dict[int, Callable[[Place, Keys], list[Case]]] = {
    T.CONNECT: connect_cases,
    T.PING: ping_cases,
    T.PONG: pong_cases,
    T.LOOKUP: lookup_cases,
    T.PARTITIONED_METADATA: partitioned_metadata_cases,
    T.GET_TOPICS_OF_NAMESPACE: get_topics_cases,
    T.PRODUCER: producer_cases,
    T.SEND: send_cases,
    T.CLOSE_PRODUCER: close_producer_cases,
    T.SUBSCRIBE: subscribe_cases,
    T.FLOW: flow_cases,
    T.ACK: ack_cases,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: redeliver_cases,
    T.UNSUBSCRIBE: unsubscribe_cases,
    T.CLOSE_CONSUMER: close_consumer_cases,
    T.SEEK: seek_cases,
    T.GET_LAST_MESSAGE_ID: last_message_id_cases,
    T.CONSUMER_STATS: consumer_stats_cases,
    T.GET_SCHEMA: get_schema_cases,
    T.GET_OR_CREATE_SCHEMA: get_or_create_schema_cases,
    T.AUTH_RESPONSE: auth_response_cases,
}


# ------------------------------------------------------------ the broker and its state


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        token_secret_key=keys.url, admin=True, authentication_enabled=True,
        authorization_enabled=True, superuser_roles="admin",
        allow_auto_namespace_creation=True, default_partitions=2,
    ) as b:
        yield b


def publish(peer: TokenPeer, seq: int) -> pb.MessageIdData:
    command = BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=seq))
    metadata = pb.MessageMetadata(producer_name="owner-p", sequence_id=seq, publish_time=1)
    peer.sock.sendall(encode_payload_command(command, metadata.SerializeToString(), b"m%d" % seq))
    while True:
        frame = peer.next_frame()
        if frame.command.type == T.SEND_RECEIPT:
            return frame.command.send_receipt.message_id
        assert frame.command.type not in (T.SEND_ERROR, T.ERROR), frame.command


@pytest.fixture(scope="module")
def place(broker: EmbeddedBroker, keys: Keys) -> Place:
    """The owner's namespace and topic: three entries, a schema, and a subscription
    whose cursor is past the first entry."""
    ns = f"public/walk-{uuid.uuid4().hex[:8]}"
    assert admin(broker, keys, "PUT", f"/admin/v2/namespaces/{ns}").status == 204
    # The walker administers a tenant of its own: that gives it nothing elsewhere.
    assert admin(broker, keys, "PUT", f"/admin/v2/tenants/{MALLORY}-{uuid.uuid4().hex[:6]}",
                 {"adminRoles": [MALLORY], "allowedClusters": ["standalone"]}).status == 204
    assert admin(broker, keys, "POST", f"/admin/v2/namespaces/{ns}/permissions/{OWNER}",
                 ["produce", "consume"]).status == 204
    owned = f"persistent://{ns}/owned"
    assert admin(broker, keys, "PUT", f"/admin/v2/persistent/{ns}/owned").status == 204
    owner = TokenPeer(broker.port, keys.token(OWNER))
    attached = owner.request(BaseCommand(type=T.PRODUCER, producer=pb.CommandProducer(
        topic=owned, producer_id=1, request_id=1, producer_name="owner-p", schema=JSON_SCHEMA)), 1)
    assert attached.command.type == T.PRODUCER_SUCCESS, attached.command
    ids = [publish(owner, seq) for seq in range(3)]
    subscribed = owner.request(BaseCommand(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=owned, subscription=SUB, subType=pb.CommandSubscribe.Shared, consumer_id=1,
        request_id=2, initialPosition=pb.CommandSubscribe.Earliest)), 2)
    assert subscribed.command.type == T.SUCCESS, subscribed.command
    acked = owner.request(BaseCommand(type=T.ACK, ack=pb.CommandAck(
        consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[ids[0]], request_id=3)), 3)
    assert not acked.command.ackResponse.HasField("error"), acked.command
    for request_id, close in ((4, BaseCommand(type=T.CLOSE_CONSUMER, close_consumer=pb.
                                              CommandCloseConsumer(consumer_id=1, request_id=4))),
                              (5, BaseCommand(type=T.CLOSE_PRODUCER, close_producer=pb.
                                              CommandCloseProducer(producer_id=1, request_id=5)))):
        assert owner.request(close, request_id).command.type == T.SUCCESS
    owner.close()
    tag = uuid.uuid4().hex[:6]
    targets = (
        owned,
        f"persistent://{ns}/owned-partition-{tag}-partition-0",
        f"persistent://{ns}/fresh-{tag}",
        f"non-persistent://{ns}/fresh-{tag}",
        f"persistent://public/default/fresh-{tag}",
        f"persistent://newtenant-{tag}/newns/fresh",
        f"persistent://public/newns-{tag}/fresh",
    )
    namespaces = (ns, "public/default", f"public/newns-{tag}", f"newtenant-{tag}/newns")
    return Place(owned, ns, targets, namespaces, ids[0])


def disk(broker: EmbeddedBroker) -> dict[str, str]:
    """Every file and directory under the data directory: a file with its digest.
    A ledger's ``synced`` record is left out: it follows the segment's fdatasyncs on
    its own time (at most each second), and any new entry shows in the segment."""
    root = Path(broker.data_dir)
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.name == "synced":
            continue
        out[str(path.relative_to(root))] = (
            "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        )
    return out


def admin_view(broker: EmbeddedBroker, keys: Keys, p: Place) -> dict[str, Any]:
    """What the superuser sees of the place (and of the broker's namespaces)."""
    local = p.owned[len("persistent://"):]
    paths = [
        "/admin/v2/tenants", "/admin/v2/namespaces/public",
        f"/admin/v2/persistent/{p.namespace}", f"/admin/v2/non-persistent/{p.namespace}",
        f"/admin/v2/persistent/{p.namespace}/partitioned", "/admin/v2/persistent/public/default",
        f"/admin/v2/namespaces/{p.namespace}/permissions",
        f"/admin/v2/persistent/{local}/permissions",
        f"/admin/v2/persistent/{local}/subscriptions",
        f"/admin/v2/persistent/{local}/lastMessageId",
        f"/admin/v2/schemas/{local}/schemas",
    ]
    view: dict[str, Any] = {}
    for path in paths:
        reply = admin(broker, keys, "GET", path)
        view[path] = (reply.status, reply.json() if reply.status == 200 else None)
    stats = admin(broker, keys, "GET", f"/admin/v2/persistent/{local}/stats").json()
    view["backlogs"] = {name: sub["msgBacklog"] for name, sub in stats["subscriptions"].items()}
    view["producers"] = len(stats["publishers"])
    return view


def differences(before: tuple[dict[str, str], Any], after: tuple[dict[str, str], Any]) -> list[str]:
    """What changed between two ``settled`` snapshots, one line each."""
    out = []
    for label, old, new in (("disk", before[0], after[0]), ("admin", before[1], after[1])):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                out.append(f"{label} {key}: {old.get(key)!r} -> {new.get(key)!r}")
    return out


def settled(broker: EmbeddedBroker, keys: Keys, p: Place) -> tuple[dict[str, str], Any]:
    """Disk and admin view, once two reads in a row agree (a cursor flush or a
    ledger's bookkeeping may still be on its way after the setup)."""
    last = (disk(broker), admin_view(broker, keys, p))
    for _ in range(50):
        time.sleep(0.1)
        now = (disk(broker), admin_view(broker, keys, p))
        if now == last:
            return now
        last = now
    return last


# ------------------------------------------------------------ the walk


def test_every_command_type_is_walked_or_named_server_to_client() -> None:
    every = set(T.values())
    assert not set(CASES) & set(SERVER_TO_CLIENT)
    assert set(CASES) | set(SERVER_TO_CLIENT) == every, (
        "commands neither walked nor named server-to-client: "
        + ", ".join(T.Name(t) for t in every - set(CASES) - set(SERVER_TO_CLIENT))
    )
    handled = set(_HANDLERS)
    assert handled <= set(CASES), [T.Name(t) for t in handled - set(CASES)]
    # CLOSE_PRODUCER, CLOSE_CONSUMER, PING and PONG go both ways and are walked.
    assert not handled & set(SERVER_TO_CLIENT), [T.Name(t) for t in handled & set(SERVER_TO_CLIENT)]


def check(case: Case, frames: list[Any], closed: bool) -> list[str]:
    """What is wrong with the broker's answers to ``case`` (nothing: [])."""
    problems = []
    answered: dict[int, int | None] = {}
    send_errors = 0
    for frame in frames:
        kind = frame.command.type
        if kind == T.SEND_ERROR:
            send_errors += 1
            continue
        answer = answer_of(frame)
        if answer is None:
            problems.append(f"unexpected {T.Name(kind)}: {frame.command}")
            continue
        request_id, error = answer
        answered[request_id] = error
        if error is None and not (kind == T.SUCCESS and request_id in case.successes):
            problems.append(f"request {request_id} not refused: {frame.command}")
    for request_id, codes in case.refused.items():
        if request_id not in answered:
            problems.append(f"request {request_id} unanswered")
        elif answered[request_id] not in codes:
            problems.append(f"request {request_id} answered {answered[request_id]}, "
                            f"expected one of {sorted(codes)}")
    if send_errors != case.send_errors:
        problems.append(f"{send_errors} SEND_ERRORs, expected {case.send_errors}")
    if closed != case.closes:
        problems.append("connection closed" if closed else "connection left open")
    return problems


def test_a_role_without_grants_is_refused_every_command_and_changes_nothing(
    broker: EmbeddedBroker, keys: Keys, place: Place
) -> None:
    before = settled(broker, keys, place)
    cases = [case for kind in sorted(CASES) for case in CASES[kind](place, keys)]
    cases += [Case(f"unknown command type {n}", [_unknown_type_frame(n)],
                   refused={0: {E.NotAllowedError}}) for n in UNKNOWN_TYPES]
    failures: list[str] = []
    for case in cases:
        peer = TokenPeer(broker.port, keys.token(MALLORY))
        wanted = set(case.refused) | case.successes
        frames, closed = peer.exchange(case.frames, wanted)
        peer.close()
        failures += [f"{case.label}: {problem}" for problem in check(case, frames, closed)]
    assert not failures, "\n".join(failures)
    changed = differences(before, settled(broker, keys, place))
    assert not changed, "\n".join(changed)


def _unknown_type_frame(number: int) -> bytes:
    """A frame whose command type is ``number`` (field 1, a varint) and nothing else."""
    command = bytes([0x08, number])
    size = len(command)
    return (4 + size).to_bytes(4, "big") + size.to_bytes(4, "big") + command


# ------------------------------------------------------------ the admin routes

# Values for the variables of the route templates; a template with another variable
# fails the walk (tell it what to aim at).
ROUTE_VALUES = {
    "domain": "persistent",
    "tenant": "public",
    "cluster": "standalone",
    "role": MALLORY,  # grants to itself
    "sub": SUB,
    "version": "0",
    "count": "1",
    "timestamp": "0",
    "seconds": "0",
    "position": "1",
    "stat": "metrics",  # /broker-stats/{stat}
}
# Open to anyone while ``authenticate_metrics_endpoint`` is off, as in Pulsar.
PUBLIC_ROUTES = {"/metrics", "/metrics/"}
_VARIABLE = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")


def routes(broker: EmbeddedBroker) -> list[tuple[str, str]]:
    """(method, template) of every route of the running admin application."""
    assert broker.server is not None and broker.server.admin is not None
    server = broker.server.admin.server
    assert server is not None, "the admin application loads on its first request"
    out = []
    for route in server.app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        template = info.get("formatter") or info.get("path")
        assert template, f"route without a path: {route}"
        out.append((route.method, template))
    return sorted(set(out))


def test_a_role_without_grants_is_refused_every_admin_route_and_changes_nothing(
    broker: EmbeddedBroker, keys: Keys, place: Place
) -> None:
    before = settled(broker, keys, place)  # its admin requests load the application
    values = {**ROUTE_VALUES, "namespace": place.namespace.split("/")[1],
              "topic": place.owned.rsplit("/", 1)[1]}
    table = routes(broker)
    unknown = {v for _, t in table for v in _VARIABLE.findall(t)} - set(values)
    assert not unknown, f"route variables without a value: {sorted(unknown)}"
    assert {"POST", "PUT", "DELETE", "GET"} <= {m for m, _ in table}
    failures = []
    for method, template in table:
        path = _VARIABLE.sub(lambda m: values[m.group(1)], template)
        body = None if method in ("GET", "HEAD", "DELETE") else {"x": 1}
        public = template in PUBLIC_ROUTES
        for who, headers, refused in (
            ("no-grant role", bearer(keys.token(MALLORY)), 403),
            ("no credentials", {}, 401),
            ("another key's token", bearer(_foreign_token()), 401),
        ):
            status = http(broker, method, path, body, headers=headers).status
            expected = 200 if public else refused
            if status != expected:
                failures.append(f"{method} {template} ({who}): {status}, expected {expected}")
    assert not failures, "\n".join(failures)
    changed = differences(before, settled(broker, keys, place))
    assert not changed, "\n".join(changed)


def _foreign_token() -> str:
    from magnetar.broker.auth.tokens import create_secret_key, create_token

    return create_token("admin", secret_key=create_secret_key())
