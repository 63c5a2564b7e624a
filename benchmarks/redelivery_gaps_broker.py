"""Redelivery gaps of the official client under the broker's redelivery backoff.

    .venv/bin/python benchmarks/redelivery_gaps_broker.py [--redeliveries 6]
        [--min-ms 1000] [--multiplier 2] [--max-ms 8000] [--nack-delay-ms 100]
        [--set-by config|namespace|topic] [--subscription-type shared|key_shared]

The official ``pulsar`` client has no nack backoff, only a fixed delay
(``negative_ack_redelivery_delay_ms``, here 100 ms). The broker adds the backoff: a
message named in a redelivery request is held ``min(max, min * multiplier ** n)`` ms,
n being the redelivery count it was last delivered with. One message is negatively
acknowledged on every delivery; the gap is the time between two deliveries on the
client's monotonic clock, expected ``nack delay + backoff(n)``: 1.1, 2.1, 4.1, 8.1,
8.1, ... s for the default 1 s / 2x / 8 s.

A broker is started as a subprocess (fresh temporary data directory, default settings
otherwise). The policy is its configuration default (``--set-by config``, through
``MAGNETAR_REDELIVERY_BACKOFF_*``), or set through the admin REST API on the namespace
or the topic. It prints a table; it is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
import uuid

import pulsar

from magnetar.testing import EmbeddedBroker


def backoff_ms(args: argparse.Namespace, count: int) -> float:
    return float(min(args.max_ms, args.min_ms * args.multiplier**count))


def set_policy(broker: EmbeddedBroker, path: str, args: argparse.Namespace) -> None:
    body = {"minDelayMs": args.min_ms, "maxDelayMs": args.max_ms, "multiplier": args.multiplier}
    request = urllib.request.Request(
        f"{broker.admin_url}{path}/redeliveryBackoff",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204, response.status


def measure(broker: EmbeddedBroker, args: argparse.Namespace) -> list[tuple[int, float]]:
    """(redelivery count, monotonic time) of each delivery of the one message."""
    namespace = f"bench/gaps-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{namespace}/poison"
    broker.create_namespace(namespace)  # a topic's namespace must exist, as in Pulsar
    if args.set_by == "namespace":
        set_policy(broker, f"/admin/v2/namespaces/{namespace}", args)
    elif args.set_by == "topic":
        urllib.request.urlopen(
            urllib.request.Request(f"{broker.admin_url}/admin/v2/{topic.replace('://', '/')}",
                                   method="PUT"),
            timeout=10,
        ).close()
        set_policy(broker, f"/admin/v2/{topic.replace('://', '/')}", args)
    client = pulsar.Client(
        broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )
    try:
        kind = {"shared": pulsar.ConsumerType.Shared,
                "key_shared": pulsar.ConsumerType.KeyShared}[args.subscription_type]
        consumer = client.subscribe(
            topic, "gaps", consumer_type=kind,
            negative_ack_redelivery_delay_ms=args.nack_delay_ms,
        )
        client.create_producer(topic).send(b"poison", partition_key="k")
        deliveries = []
        timeout_ms = int(args.max_ms * 3 + args.nack_delay_ms + 10_000)
        for _ in range(args.redeliveries + 1):
            msg = consumer.receive(timeout_millis=timeout_ms)
            deliveries.append((msg.redelivery_count(), time.monotonic()))
            consumer.negative_acknowledge(msg)
        consumer.acknowledge(msg)
        return deliveries
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redeliveries", type=int, default=6)
    parser.add_argument("--min-ms", type=int, default=1000)
    parser.add_argument("--multiplier", type=float, default=2.0)
    parser.add_argument("--max-ms", type=int, default=8000)
    parser.add_argument("--nack-delay-ms", type=int, default=100)
    parser.add_argument("--set-by", choices=("config", "namespace", "topic"), default="config")
    parser.add_argument("--subscription-type", choices=("shared", "key_shared"),
                        default="shared")
    args = parser.parse_args()
    settings = {}
    if args.set_by == "config":
        settings = {
            "redelivery_backoff_min_ms": args.min_ms,
            "redelivery_backoff_max_ms": args.max_ms,
            "redelivery_backoff_multiplier": args.multiplier,
        }
    with EmbeddedBroker(mode="subprocess", admin=True, **settings) as broker:
        deliveries = measure(broker, args)
    print(
        f"official pulsar client {getattr(pulsar, '__version__', '?')}"
        f", {args.subscription_type}, fixed nack delay {args.nack_delay_ms} ms; broker backoff "
        f"{args.min_ms} ms x {args.multiplier:g} up to {args.max_ms} ms (set by {args.set_by})"
    )
    print(f"{'redelivery':>10} {'count':>5} {'expected s':>10} {'measured s':>10} {'excess ms':>9}")
    for index in range(1, len(deliveries)):
        previous_count, previous_at = deliveries[index - 1]
        count, at = deliveries[index]
        expected = (args.nack_delay_ms + backoff_ms(args, previous_count)) / 1000
        gap = at - previous_at
        print(f"{index:>10} {count:>5} {expected:>10.2f} {gap:>10.3f} "
              f"{(gap - expected) * 1000:>9.0f}")


if __name__ == "__main__":
    main()
