"""Topic names: :mod:`magnetar.protocol.topic_name`'s, kept importable from here."""

from magnetar.protocol.topic_name import PARTITION_SUFFIX, InvalidTopicName, TopicName, name_problem

__all__ = ["PARTITION_SUFFIX", "InvalidTopicName", "TopicName", "name_problem"]
