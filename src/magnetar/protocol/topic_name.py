"""Topic names, the one home of Pulsar's naming rules for the broker, the client,
storage, admin, spark and the CLI: ``persistent://tenant/ns/local``,
``non-persistent://...``, short names (``x`` is in ``public/default``), partitions
(``x-partition-N``), namespaces, and the rule every name that becomes a file name
obeys (:func:`name_problem`), wherever it comes from (the binary protocol, the admin
API).

:class:`TopicName` is the strict parse the broker applies to what a client sends; the
string functions below it (:func:`complete_topic_name`, :func:`partition_name`, ...)
are the client's lighter completion of names it will send, which leaves judging them
to the broker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

DOMAINS = ("persistent", "non-persistent")
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
# Where a name given without a domain or namespace lives (Pulsar's default).
DEFAULT_NAMESPACE_PREFIX = f"persistent://{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/"
PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_.=:\-]+$")
_LOCAL_FORBIDDEN = re.compile(r"[\x00-\x1f/]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# A quoted name must fit in one file name (255 bytes on common file systems) with room
# for what storage adds to it: ".json" (partition counts, cursors) and "-partition-N".
MAX_QUOTED_NAME = 200


class InvalidTopicName(ValueError):
    """The name cannot denote a Pulsar topic; the message says why."""


def quote_name(name: str) -> str:
    """``name`` as one file name: percent-quoted (``/`` and odd characters become
    ``%xx``, and the names ``.`` and ``..`` get their dots quoted too), reversibly."""
    quoted = quote(name, safe="")
    if quoted in (".", ".."):
        quoted = quoted.replace(".", "%2E")
    return quoted


def too_long_for_a_file(name: str) -> str | None:
    """Why ``name`` (a topic's local name or a subscription's) cannot be stored, or None."""
    size = len(quote_name(name))
    if size <= MAX_QUOTED_NAME:
        return None
    return (
        f"{name[:40]!r}... is too long: it takes {size} bytes in a file name, "
        f"at most {MAX_QUOTED_NAME}"
    )


def name_problem(kind: str, name: str) -> str | None:
    """Why ``name`` cannot be a ``kind`` (tenant, namespace, topic, subscription) name
    the broker stores, or None: empty, a control character, text that is not Unicode
    (a lone surrogate), or too long for a file name. Judged before anything touches
    the file system; Pulsar's own rules on a tenant's or topic's characters are
    :meth:`TopicName.parse`'s."""
    if not name:
        return f"{kind} name is empty"
    control = _CONTROL.search(name)
    if control is not None:
        return (
            f"{kind} name {name[:40]!r} holds a control character "
            f"({control.group()!r} at {control.start()})"
        )
    try:
        name.encode()
    except UnicodeEncodeError as exc:
        return f"{kind} name {name[:40]!r} is not Unicode text (a lone surrogate at {exc.start})"
    too_long = too_long_for_a_file(name)
    return f"{kind} name {too_long}" if too_long else None


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """The name a client or an operator gave, checked; InvalidTopicName if it is
        not one. Names parsed lately are remembered: a producer's creation parses its
        topic's name four times (5 us each), and a TopicName never changes."""
        parsed = _PARSED.get(name)
        if parsed is None:
            parsed = cls._parse(name)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()  # that many names in a row: start over
            _PARSED[name] = parsed
        return parsed

    @classmethod
    def _parse(cls, name: str) -> TopicName:
        if not name or not name.strip():
            raise InvalidTopicName("topic name is empty")
        if "://" in name:
            domain, _, rest = name.partition("://")
            if domain not in DOMAINS:
                raise InvalidTopicName(
                    f"invalid topic domain {domain!r} in {name!r}: "
                    "expected persistent:// or non-persistent://"
                )
            parts = rest.split("/", 2)
            if len(parts) != 3:
                raise InvalidTopicName(
                    f"invalid topic name {name!r}: expected {domain}://tenant/namespace/topic"
                )
            tenant, namespace, local = parts
        else:
            parts = name.split("/")
            if len(parts) == 1:
                domain, tenant, namespace, local = (
                    "persistent", DEFAULT_TENANT, DEFAULT_NAMESPACE, name
                )
            elif len(parts) == 3:
                domain = "persistent"
                tenant, namespace, local = parts
            else:
                raise InvalidTopicName(
                    f"invalid short topic name {name!r}: use 'topic' or 'tenant/namespace/topic'"
                )
        for label, value in (("tenant", tenant), ("namespace", namespace)):
            if not _SEGMENT_RE.match(value) or value in (".", ".."):
                raise InvalidTopicName(f"invalid {label} {value!r} in topic name {name!r}")
            if len(value) > MAX_QUOTED_NAME:
                raise InvalidTopicName(
                    f"{label} of {len(value)} characters is too long (at most {MAX_QUOTED_NAME})"
                )
        if not local or _LOCAL_FORBIDDEN.search(local):
            raise InvalidTopicName(f"invalid local topic name {local!r} in {name!r}")
        too_long = too_long_for_a_file(local)
        if too_long:
            raise InvalidTopicName(f"topic name {too_long}")
        return cls(domain, tenant, namespace, local)

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        return partition_index(self.local)

    @property
    def partitioned_base(self) -> TopicName:
        match = _PARTITION_RE.match(self.local)
        if not match:
            return self
        return TopicName(self.domain, self.tenant, self.namespace, match.group(1))

    def partition(self, index: int) -> TopicName:
        return TopicName(
            self.domain, self.tenant, self.namespace, partition_name(self.local, index)
        )

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"


_PARSED: dict[str, TopicName] = {}
_PARSED_MAX = 10_000


def split_full_name(topic: str) -> tuple[str, str, str, str]:
    """``domain://tenant/namespace/local`` as its four parts (local may contain ``/``):
    storage's reading of a full name it keeps (every name the broker accepted splits);
    ValueError for anything else."""
    domain, sep, rest = topic.partition("://")
    parts = rest.split("/", 2)
    if not sep or domain not in DOMAINS or len(parts) != 3 or not parts[2]:
        raise ValueError(f"not a full topic name: {topic!r}")
    tenant, namespace, local = parts
    for part in (tenant, namespace):
        if not _SEGMENT_RE.fullmatch(part) or part in (".", ".."):
            raise ValueError(f"invalid tenant or namespace {part!r} in {topic!r}")
    return domain, tenant, namespace, local


def complete_topic_name(name: str) -> str:
    """``x`` → ``persistent://public/default/x``; ``t/ns/x`` → ``persistent://t/ns/x``."""
    if not name or not name.strip():
        raise InvalidTopicName("topic name is empty")
    if "://" in name:
        domain, _, rest = name.partition("://")
        if domain not in DOMAINS:
            raise InvalidTopicName(f"invalid topic domain {domain!r} in {name!r}")
        if rest.count("/") < 2:
            raise InvalidTopicName(
                f"invalid topic name {name!r}: expected {domain}://tenant/ns/topic"
            )
        return name
    parts = name.split("/")
    if len(parts) == 1:
        return DEFAULT_NAMESPACE_PREFIX + name
    if len(parts) == 3:
        return f"persistent://{name}"
    raise InvalidTopicName(
        f"invalid topic name {name!r}: use 'topic' or 'tenant/namespace/topic'"
    )


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
