"""PIP-106's configuration: consumer options from a dict, a TOML or a JSON file, the
backoffs named ``"module:Class"`` with parameters; every mistake is a
ConsumerConfigError naming the key and the problem. Files are real files."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from magnetar.client import (
    Client,
    ConsumerConfigError,
    DeadLetterPolicy,
    MultiplierRedeliveryBackoff,
    consumer_options,
    load_consumer_options,
)

TOML = """\
subscription_type = "shared"
ack_timeout = 10.0
receiver_queue_size = 50
properties = { team = "billing" }

[negative_ack_redelivery_backoff]
class = "magnetar.client:MultiplierRedeliveryBackoff"
params = { min_delay = 1.0, max_delay = 8.0, multiplier = 2 }

[ack_timeout_redelivery_backoff]
class = "magnetar.client.backoff:MultiplierRedeliveryBackoff"
params = { min_delay = 0.5 }

[dead_letter_policy]
max_redeliver_count = 5
initial_subscription_name = "audit"
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_toml_file_gives_subscribe_arguments(tmp_path: Path) -> None:
    opts = load_consumer_options(_write(tmp_path, "consumer.toml", TOML))
    nack = opts.pop("negative_ack_redelivery_backoff")
    assert isinstance(nack, MultiplierRedeliveryBackoff)
    assert (nack.min_delay, nack.max_delay, nack.multiplier) == (1.0, 8.0, 2)
    assert [nack.next_delay(n) for n in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    ack = opts.pop("ack_timeout_redelivery_backoff")
    assert isinstance(ack, MultiplierRedeliveryBackoff) and ack.min_delay == 0.5
    assert opts == {
        "subscription_type": "shared", "ack_timeout": 10.0, "receiver_queue_size": 50,
        "properties": {"team": "billing"},
        "dead_letter_policy": DeadLetterPolicy(5, initial_subscription_name="audit"),
    }


def test_json_file_section_and_topic_keys(tmp_path: Path) -> None:
    doc = {"app": {"consumer": {
        "topic": ["a", "b"], "subscription": "s", "negative_ack_redelivery_delay": None,
        "negative_ack_redelivery_backoff": "magnetar.client:MultiplierRedeliveryBackoff",
        "retry_enable": True,
    }}}
    path = tmp_path / "conf.json"
    path.write_text(json.dumps(doc))
    opts = load_consumer_options(path, section="app.consumer")
    assert opts["topic"] == ["a", "b"] and opts["subscription"] == "s"
    assert opts["retry_enable"] is True and opts["negative_ack_redelivery_delay"] is None
    assert repr(opts["negative_ack_redelivery_backoff"]) == repr(MultiplierRedeliveryBackoff())


def test_dict_may_hold_objects_and_user_classes(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_backoffs.py").write_text(textwrap.dedent("""\
        from magnetar.client import RedeliveryBackoff

        class Fixed(RedeliveryBackoff):
            def __init__(self, seconds):
                self.seconds = seconds

            def next_delay(self, redelivery_count):
                return self.seconds
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    backoff = MultiplierRedeliveryBackoff(2.0, 4.0)
    listener = print
    opts = consumer_options({
        "negative_ack_redelivery_backoff": backoff,
        "ack_timeout_redelivery_backoff": {"class": "my_backoffs:Fixed",
                                           "params": {"seconds": 3}},
        "ack_timeout": 5,
        "message_listener": listener,
    })
    assert opts["negative_ack_redelivery_backoff"] is backoff
    assert opts["ack_timeout_redelivery_backoff"].next_delay(7) == 3
    assert opts["message_listener"] is listener


@pytest.mark.parametrize(
    ("config", "key", "problem"),
    [
        ({"ack_timout": 1.0}, "ack_timout", "did you mean 'ack_timeout'"),
        ({"negative_ack_redelivery_backoff": {"class": "no_such_module_xyz:B"}},
         "negative_ack_redelivery_backoff", "cannot import module 'no_such_module_xyz'"),
        ({"negative_ack_redelivery_backoff": {"class": "magnetar.client:NoSuchBackoff"}},
         "negative_ack_redelivery_backoff", "has no 'NoSuchBackoff'"),
        ({"negative_ack_redelivery_backoff": {"class": "magnetar.client:Client"}},
         "negative_ack_redelivery_backoff", "is not a RedeliveryBackoff class"),
        ({"ack_timeout_redelivery_backoff": {"params": {"min_delay": 1}}},
         "ack_timeout_redelivery_backoff", "missing 'class'"),
        ({"negative_ack_redelivery_backoff": "MultiplierRedeliveryBackoff"},
         "negative_ack_redelivery_backoff", "'module:Class'"),
        ({"negative_ack_redelivery_backoff": {
            "class": "magnetar.client:MultiplierRedeliveryBackoff", "params": {"minimum": 1}}},
         "negative_ack_redelivery_backoff", "unexpected keyword argument 'minimum'"),
        ({"negative_ack_redelivery_backoff": {
            "class": "magnetar.client:MultiplierRedeliveryBackoff",
            "params": {"min_delay": 9, "max_delay": 1}}},
         "negative_ack_redelivery_backoff", "min_delay <= max_delay"),
        ({"negative_ack_redelivery_backoff": {
            "class": "magnetar.client:MultiplierRedeliveryBackoff", "params": [1, 2]}},
         "negative_ack_redelivery_backoff", "'params' must be a table"),
        ({"negative_ack_redelivery_backoff": {
            "class": "magnetar.client:MultiplierRedeliveryBackoff", "args": {}}},
         "negative_ack_redelivery_backoff", "unknown field(s) ['args']"),
        ({"ack_timeout": "10s"}, "ack_timeout", "expected a number of seconds"),
        ({"ack_timeout": -1}, "ack_timeout", "must not be negative"),
        ({"receiver_queue_size": 1.5}, "receiver_queue_size", "expected an integer"),
        ({"durable": "yes"}, "durable", "expected true or false"),
        ({"subscription_type": "round_robin"}, "subscription_type", "must be one of"),
        ({"properties": {"a": 1}}, "properties", "table of strings"),
        ({"topic": []}, "topic", "non-empty list"),
        ({"dead_letter_policy": {"max_redeliver_count": 0}}, "dead_letter_policy",
         "max_redeliver_count must be an integer > 0"),
        ({"dead_letter_policy": {"max_redeliver": 3}}, "dead_letter_policy",
         "unexpected keyword argument 'max_redeliver'"),
        ({"schema": "string"}, "schema", "cannot come from a configuration"),
        ({"negative_ack_redelivery_delay": 1.0,
          "negative_ack_redelivery_backoff": "magnetar.client:MultiplierRedeliveryBackoff"},
         "negative_ack_redelivery_backoff", "not both"),
    ],
)
def test_bad_configurations_name_the_key(config: dict[str, object], key: str,
                                         problem: str) -> None:
    with pytest.raises(ConsumerConfigError) as info:
        consumer_options(config)
    message = str(info.value)
    assert message.startswith(f"{key}: ")
    assert problem in message
    assert isinstance(info.value, ValueError)


def test_bad_files_name_the_file(tmp_path: Path) -> None:
    broken = _write(tmp_path, "broken.toml", "ack_timeout = = 1\n")
    with pytest.raises(ConsumerConfigError, match=r"broken\.toml: does not parse"):
        load_consumer_options(broken)
    yaml = _write(tmp_path, "consumer.yaml", "ack_timeout: 1\n")
    with pytest.raises(ConsumerConfigError, match=r"\.toml or \.json"):
        load_consumer_options(yaml)
    good = _write(tmp_path, "c.toml", "[consumer]\nack_timeout = 1\n")
    with pytest.raises(ConsumerConfigError, match=r"has no table \[pulsar.consumer\]"):
        load_consumer_options(good, section="pulsar.consumer")
    wrong = _write(tmp_path, "w.toml", 'durable = "no"\n')
    with pytest.raises(ConsumerConfigError, match=r"w\.toml: durable: expected true or false"):
        load_consumer_options(wrong)
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    with pytest.raises(ConsumerConfigError, match="is a table"):
        load_consumer_options(listing)


async def test_subscribe_with_loaded_options(mclient: Client, tmp_path: Path) -> None:
    """The loaded options subscribe as they are, and the backoff from the file decides
    the nack delays."""
    opts = load_consumer_options(_write(tmp_path, "consumer.toml", TOML))
    topic = f"persistent://public/default/conf-{uuid.uuid4().hex[:10]}"
    consumer = await mclient.subscribe(topic, "s", **opts)
    conf = consumer.conf
    assert conf.receiver_queue_size == 50 and conf.ack_timeout == 10.0
    assert conf.dead_letter_policy == DeadLetterPolicy(5, initial_subscription_name="audit")
    sub = next(iter(consumer._subs.values()))
    assert [sub._nacks.delay_for(n) for n in (0, 1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    await consumer.close()
