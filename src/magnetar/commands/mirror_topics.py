"""What ``magnetar mirror`` copies, and making room for it on the target.

The source's topics are found through its admin REST API: the binary protocol's
GET_TOPICS_OF_NAMESPACE cannot list tenants or namespaces, and the REST API also
answers the schema of each version a message names (``mirror_pipe`` asks it). Only
persistent topics are copied; system topics (local names starting ``__``) are not.

On the target, a partitioned topic must exist with the source's partition count
before anything is produced (a producer would otherwise create it unpartitioned).
With the target's admin URL the mirror creates what is missing (tenant, namespace,
partitioned topic); without it, it checks through the binary protocol and says
what to create.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

from magnetar.commands.rest import AdminError, RestClient
from magnetar.protocol.topic_name import (
    complete_topic_name,
    namespace_of,
    partition_index,
    partition_name,
    partitioned_base,
)

if TYPE_CHECKING:
    from magnetar.client import Client


class MirrorError(Exception):
    """A reason the mirror cannot go on, said in one line."""


@dataclass(frozen=True)
class SourceTopic:
    name: str  # persistent://tenant/namespace/local
    partitions: int  # 0: not partitioned

    @property
    def namespace(self) -> str:
        return namespace_of(self.name)

    def partition_names(self) -> list[str]:
        if not self.partitions:
            return [self.name]
        return [partition_name(self.name, i) for i in range(self.partitions)]


@dataclass
class Filters:
    tenants: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)  # tenant/namespace
    topics: list[str] = field(default_factory=list)  # complete names

    @property
    def everything(self) -> bool:
        return not (self.tenants or self.namespaces or self.topics)


def check_namespace(text: str) -> str:
    parts = text.split("/")
    if len(parts) != 2 or not all(parts):
        raise MirrorError(f"namespace {text!r} is not tenant/namespace")
    return text


def check_topic(text: str) -> str:
    try:
        name = complete_topic_name(text)
    except ValueError as exc:
        raise MirrorError(str(exc)) from None
    if not name.startswith("persistent://"):
        raise MirrorError(f"{name}: only persistent topics can be mirrored")
    if partition_index(name) >= 0:
        raise MirrorError(f"{name}: name the partitioned topic, not one partition")
    return name


def _path(name: str) -> str:
    """``/admin/v2/persistent/{tenant}/{namespace}/{local}`` of a complete name."""
    tenant, namespace, local = name.partition("://")[2].split("/", 2)
    return f"/admin/v2/persistent/{quote(tenant)}/{quote(namespace)}/{quote(local, safe='')}"


def _get(rest: RestClient, path: str) -> object:
    try:
        return rest.call("GET", path).json()
    except AdminError as exc:
        raise MirrorError(f"source admin API, GET {path}: {exc}") from None


def _names(doc: object) -> list[str]:
    return [str(item) for item in doc] if isinstance(doc, list) else []


def _topics_of(rest: RestClient, namespace: str) -> list[SourceTopic]:
    tenant, ns = namespace.split("/")
    base = f"/admin/v2/persistent/{quote(tenant)}/{quote(ns)}"
    partitioned = set(_names(_get(rest, base + "/partitioned")))
    found = [SourceTopic(name, _partition_count(rest, name)) for name in sorted(partitioned)]
    for name in sorted(_names(_get(rest, base))):
        if partitioned_base(name) in partitioned and partition_index(name) >= 0:
            continue  # a partition of a partitioned topic listed above
        found.append(SourceTopic(name, 0))
    return [t for t in found if not t.name.rsplit("/", 1)[1].startswith("__")]


def _partition_count(rest: RestClient, name: str) -> int:
    doc = _get(rest, _path(name) + "/partitions")
    return int(doc.get("partitions", 0)) if isinstance(doc, dict) else 0


def discover(rest: RestClient, filters: Filters) -> list[SourceTopic]:
    """The source topics the filters name (every topic when there are none), by name."""
    namespaces: list[str] = list(filters.namespaces)
    tenants = list(filters.tenants)
    if filters.everything:
        tenants = _names(_get(rest, "/admin/v2/tenants"))
    for tenant in tenants:
        namespaces += _names(_get(rest, f"/admin/v2/namespaces/{quote(tenant)}"))
    found: dict[str, SourceTopic] = {}
    for namespace in dict.fromkeys(namespaces):
        for topic in _topics_of(rest, namespace):
            found[topic.name] = topic
    for name in filters.topics:
        if name in found:
            continue
        listed = {t.name: t for t in _topics_of(rest, namespace_of(name))}
        if name not in listed:
            raise MirrorError(f"{name}: no such topic on the source")
        found[name] = listed[name]
    return [found[name] for name in sorted(found)]


# ------------------------------------------------------------------ the target


def _exists(rest: RestClient, path: str) -> bool:
    try:
        rest.call("GET", path)
    except AdminError as exc:
        if exc.status == 404:
            return False
        raise MirrorError(f"target admin API, GET {path}: {exc}") from None
    return True


def _create(rest: RestClient, path: str, body: object = None) -> None:
    try:
        rest.call("PUT", path, body)
    except AdminError as exc:
        if exc.status != 409:  # 409: made meanwhile, by someone else
            raise MirrorError(f"target admin API, PUT {path}: {exc}") from None


def _prepare_namespace(rest: RestClient, namespace: str) -> None:
    tenant, ns = namespace.split("/")
    if not _exists(rest, f"/admin/v2/tenants/{quote(tenant)}"):
        clusters = _names(rest.call("GET", "/admin/v2/clusters").json())
        _create(rest, f"/admin/v2/tenants/{quote(tenant)}",
                {"adminRoles": [], "allowedClusters": clusters})
    if namespace not in _names(rest.call("GET", f"/admin/v2/namespaces/{quote(tenant)}").json()):
        _create(rest, f"/admin/v2/namespaces/{quote(tenant)}/{quote(ns)}")


def prepare_target_admin(rest: RestClient, topics: Iterable[SourceTopic]) -> None:
    """Create on the target, through its admin API, each namespace and partitioned
    topic that is missing; a partition count that differs is an error."""
    topics = list(topics)
    try:
        for namespace in dict.fromkeys(t.namespace for t in topics):
            _prepare_namespace(rest, namespace)
        for topic in topics:
            if not topic.partitions:
                continue
            path = _path(topic.name) + "/partitions"
            doc = rest.call("GET", path).json()
            have = int(doc.get("partitions", 0)) if isinstance(doc, dict) else 0
            if have == 0:
                _create(rest, path, topic.partitions)
            elif have != topic.partitions:
                raise MirrorError(f"{topic.name} has {topic.partitions} partitions on the "
                                  f"source and {have} on the target")
    except AdminError as exc:
        raise MirrorError(f"target admin API: {exc}") from None


async def check_target(client: Client, topics: Iterable[SourceTopic]) -> None:
    """Without the target's admin API: each topic must be partitioned there as on the
    source (a partitioned topic cannot be made through the binary protocol)."""
    for topic in topics:
        names = await client.get_topic_partitions(topic.name)
        have = 0 if names == [topic.name] else len(names)
        if have == topic.partitions:
            continue
        if topic.partitions:
            raise MirrorError(
                f"{topic.name} has {topic.partitions} partitions on the source and {have} "
                "on the target: create it there so, or give --to-admin-url"
            )
        raise MirrorError(f"{topic.name} is not partitioned on the source but has {have} "
                          "partitions on the target")


async def discover_async(rest: RestClient, filters: Filters) -> list[SourceTopic]:
    return await asyncio.to_thread(discover, rest, filters)
