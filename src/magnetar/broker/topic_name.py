"""Topic names: ``persistent://tenant/ns/local``, ``non-persistent://...``, short names;
and the rule every name that becomes a file name obeys (:func:`name_problem`), wherever
it comes from (the binary protocol, the admin API)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from magnetar.storage.store import MAX_QUOTED_NAME, too_long_for_a_file

PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_.=:\-]+$")
_LOCAL_FORBIDDEN = re.compile(r"[\x00-\x1f/]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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


class InvalidTopicName(ValueError):
    """The name cannot denote a Pulsar topic; the message says why."""


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        if not name or not name.strip():
            raise InvalidTopicName("topic name is empty")
        if "://" in name:
            domain, _, rest = name.partition("://")
            if domain not in ("persistent", "non-persistent"):
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
                domain, tenant, namespace, local = "persistent", "public", "default", name
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
        match = _PARTITION_RE.match(self.local)
        return int(match.group(2)) if match else -1

    @property
    def partitioned_base(self) -> TopicName:
        match = _PARTITION_RE.match(self.local)
        if not match:
            return self
        return TopicName(self.domain, self.tenant, self.namespace, match.group(1))

    def partition(self, index: int) -> TopicName:
        return TopicName(
            self.domain, self.tenant, self.namespace, f"{self.local}{PARTITION_SUFFIX}{index}"
        )

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"
