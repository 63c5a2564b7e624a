"""Leader election with a PIP-68 exclusive producer.

Run several copies against one broker (``make run``); exactly one of them is the
leader at a time. Each waits with access mode WaitForExclusive; when the leader
dies its connection closes, the broker promotes the next in line and bumps the
topic epoch, and the topic's history stays a non-interleaved sequence of reigns.

    python examples/leader_election.py --name alice
    python examples/leader_election.py --name bob      # in another terminal
    # kill alice: bob takes over within a moment
"""

from __future__ import annotations

import argparse
import sys
import time

import pulsar


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--topic", default="persistent://public/default/leader-election")
    parser.add_argument("--name", required=True, help="this contender's name")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between writes")
    parser.add_argument(
        "--count", type=int, default=0, help="writes before stepping down (0: forever)"
    )
    args = parser.parse_args()

    client = pulsar.Client(args.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    print(f"{args.name}: waiting to become leader", flush=True)
    producer = client.create_producer(
        args.topic,
        producer_name=args.name,
        access_mode=pulsar.ProducerAccessMode.WaitForExclusive,
    )
    print(f"LEADER {args.name}", flush=True)
    seq = 0
    try:
        while args.count == 0 or seq < args.count:
            producer.send(f"{args.name}:{seq}".encode())
            seq += 1
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        producer.close()
        client.close()
    print(f"{args.name}: stepped down after {seq} writes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
