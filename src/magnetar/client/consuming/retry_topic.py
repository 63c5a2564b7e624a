"""Retry topics: ``consumer.reconsume_later(msg, delay)``, as the Java client has it.

With ``subscribe(..., retry_enable=True)`` the consumer also subscribes to a retry
topic (``{topic}-{subscription}-RETRY`` after its first topic). ``reconsume_later``
publishes a copy of the message there, delivered ``delay`` seconds later, then
acknowledges the original. The copy counts its trips in ``RECONSUMETIMES``; once that
passes ``max_redeliver_count`` (16 unless a :class:`DeadLetterPolicy` says) the
message goes to the dead-letter topic instead. Copies carry the Java client's
properties: ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID`` (of the first delivery),
``RECONSUMETIMES`` and ``DELAY_TIME`` (milliseconds).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from magnetar.client.consuming.dead_letter import (
    DEFAULT_MAX_RECONSUME_TIMES,
    DELAY_TIME,
    RECONSUMETIMES,
    DeadLetterPolicy,
    LetterProducers,
    origin_properties,
)
from magnetar.client.message import Message


def retry_letter_policy(first_topic: str, subscription: str,
                        policy: DeadLetterPolicy | None) -> DeadLetterPolicy:
    """The dead-letter policy of a consumer with retries, its topic names filled in
    from its first topic (as the Java client's ConsumerBuilder does), so that every
    topic of the consumer, the retry topic included, shares one DLQ."""
    if policy is None:
        policy = DeadLetterPolicy(DEFAULT_MAX_RECONSUME_TIMES)
    return DeadLetterPolicy(
        policy.max_redeliver_count,
        policy.dead_letter_topic_for(first_topic, subscription),
        policy.retry_letter_topic_for(first_topic, subscription),
        policy.initial_subscription_name,
    )


def reconsume_properties(msg: Message, delay: float,
                         custom: Mapping[str, str] | None) -> tuple[dict[str, str], int]:
    """The properties of the next copy of ``msg`` and its ``RECONSUMETIMES``."""
    properties = origin_properties(msg)
    if custom:
        properties.update(custom)
    previous = properties.get(RECONSUMETIMES)
    try:
        times = int(previous) + 1 if previous is not None else 1
    except ValueError:
        raise ValueError(f"property {RECONSUMETIMES}={previous!r} is not a number") from None
    properties[RECONSUMETIMES] = str(times)
    properties[DELAY_TIME] = str(int(max(delay, 0.0) * 1000))
    return properties, times


async def reconsume_later(
    letters: LetterProducers,
    policy: DeadLetterPolicy,
    msg: Message,
    delay: float,
    custom_properties: Mapping[str, str] | None,
    acknowledge: Callable[[Message], Awaitable[None]],
) -> None:
    """Publish the next copy of ``msg`` (to the retry topic, or to the DLQ once it has
    come back too often), then acknowledge ``msg``."""
    assert policy.retry_letter_topic is not None and policy.dead_letter_topic is not None
    properties, times = reconsume_properties(msg, delay, custom_properties)
    if times > policy.max_redeliver_count:
        await letters.send(policy.dead_letter_topic, msg, properties, dead_letters=True)
    else:
        await letters.send(policy.retry_letter_topic, msg, properties, dead_letters=False,
                           deliver_after=delay if delay > 0 else None)
    await acknowledge(msg)
