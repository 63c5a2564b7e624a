"""Topic names: parsing, the remembered parses, partitions."""

from __future__ import annotations

import pytest

from magnetar.protocol import topic_name
from magnetar.protocol.topic_name import InvalidTopicName, TopicName


def test_short_and_full_names_parse_to_the_same_topic() -> None:
    full = TopicName.parse("persistent://public/default/orders")
    assert TopicName.parse("orders") == full
    assert TopicName.parse("public/default/orders") == full
    assert str(full) == "persistent://public/default/orders"
    assert TopicName.parse("orders-partition-3").partition_index == 3


@pytest.mark.parametrize("bad", ["", "  ", "a/b", "http://t/ns/x", "persistent://t/n s/x",
                                 "persistent://t/ns/bad\x01", "persistent://t/ns"])
def test_a_wrong_name_is_refused_every_time(bad: str) -> None:
    for _ in range(3):  # a refusal is never remembered as a name
        with pytest.raises(InvalidTopicName):
            TopicName.parse(bad)
    assert bad not in topic_name._PARSED


def test_remembered_parses_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_name, "_PARSED", {})
    monkeypatch.setattr(topic_name, "_PARSED_MAX", 5)
    names = [f"persistent://public/default/t{i}" for i in range(12)]
    for name in names:
        assert str(TopicName.parse(name)) == name
        assert len(topic_name._PARSED) <= 5
    assert TopicName.parse(names[-1]) is TopicName.parse(names[-1])
