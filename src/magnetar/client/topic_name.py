"""Topic names as the client needs them: completing short names, partitions, namespaces."""

from __future__ import annotations

import re

PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"


def complete_topic_name(name: str) -> str:
    """``x`` → ``persistent://public/default/x``; ``t/ns/x`` → ``persistent://t/ns/x``."""
    if not name or not name.strip():
        raise ValueError("topic name is empty")
    if "://" in name:
        domain, _, rest = name.partition("://")
        if domain not in ("persistent", "non-persistent"):
            raise ValueError(f"invalid topic domain {domain!r} in {name!r}")
        if rest.count("/") < 2:
            raise ValueError(f"invalid topic name {name!r}: expected {domain}://tenant/ns/topic")
        return name
    parts = name.split("/")
    if len(parts) == 1:
        return f"persistent://{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{name}"
    if len(parts) == 3:
        return f"persistent://{name}"
    raise ValueError(f"invalid topic name {name!r}: use 'topic' or 'tenant/namespace/topic'")


def partition_name(topic: str, index: int) -> str:
    return f"{topic}{PARTITION_SUFFIX}{index}"


def partition_index(topic: str) -> int:
    match = _PARTITION_RE.match(topic)
    return int(match.group(2)) if match else -1


def partitioned_base(topic: str) -> str:
    match = _PARTITION_RE.match(topic)
    return match.group(1) if match else topic


def namespace_of(topic: str) -> str:
    """``persistent://t/ns/x`` → ``t/ns``."""
    full = complete_topic_name(topic)
    rest = full.partition("://")[2]
    tenant, namespace, _ = rest.split("/", 2)
    return f"{tenant}/{namespace}"


def domain_of(topic: str) -> str:
    return complete_topic_name(topic).partition("://")[0]


def pattern_namespace(pattern: str) -> tuple[str, str]:
    """The ``(domain, tenant/namespace)`` a topics pattern lives in.

    A pattern must name its namespace literally (``persistent://public/default/foo-.*``);
    a pattern without a domain is taken to be in ``persistent://public/default``.
    """
    if "://" not in pattern:
        return "persistent", f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}"
    domain, _, rest = pattern.partition("://")
    parts = rest.split("/", 2)
    if len(parts) < 3 or any(c in parts[0] + parts[1] for c in "\\.*+?[](){}|^$"):
        raise ValueError(
            f"topics pattern {pattern!r} must name its tenant and namespace literally, "
            "e.g. 'persistent://public/default/prefix-.*'"
        )
    return domain, f"{parts[0]}/{parts[1]}"
