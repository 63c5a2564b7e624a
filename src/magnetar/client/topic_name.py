"""Topic names as the client needs them: :mod:`magnetar.protocol.topic_name`'s, kept
importable from here."""

from magnetar.protocol.topic_name import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    PARTITION_SUFFIX,
    complete_topic_name,
    domain_of,
    namespace_of,
    partition_index,
    partition_name,
    partitioned_base,
    pattern_namespace,
)

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "PARTITION_SUFFIX",
    "complete_topic_name",
    "domain_of",
    "namespace_of",
    "partition_index",
    "partition_name",
    "partitioned_base",
    "pattern_namespace",
]
