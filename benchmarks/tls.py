"""Publish throughput over TLS (pulsar+ssl://) and over plain TCP, in the same run.

    .venv/bin/python benchmarks/tls.py [--messages 50000] [--size 100] [--rounds 3]
        [--batching]

One broker (a subprocess, fresh data directory) listens on both ports with a
certificate made by trustme; each round the official client publishes the same
messages to a fresh topic through each port, alternating (plain, tls, plain, tls, ...)
so that both see the same machine; the median of the rounds is printed for each, with
the ratio tls/plain. It is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pulsar
import trustme

from magnetar.testing import EmbeddedBroker
from magnetar.testing.embedded import free_port


def publish(client: pulsar.Client, topic: str, messages: int, size: int, batching: bool) -> float:
    """Messages per second, from the first send to the last receipt."""
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=5000,
        block_if_queue_full=True,
    )
    payload = b"x" * size
    for _ in range(200):  # warm-up: the topic loaded, the connection busy once
        producer.send(payload)
    done = threading.Event()
    acked = [0]

    def on_sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        acked[0] += 1
        if acked[0] == messages:
            done.set()

    start = time.perf_counter()
    for _ in range(messages):
        producer.send_async(payload, on_sent)
    producer.flush()
    if not done.wait(300):
        raise RuntimeError(f"only {acked[0]} of {messages} receipts came")
    elapsed = time.perf_counter() - start
    producer.close()
    return messages / elapsed


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(CA file, broker certificate chain, broker key) for localhost."""
    ca = trustme.CA()
    issued = ca.issue_cert("localhost", "127.0.0.1")
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert_file.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key_file))
    return ca_file, cert_file, key_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batching", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        ca_file, cert_file, key_file = certificates(Path(folder))
        tls_port = free_port()
        with EmbeddedBroker(
            data_dir=Path(folder) / "data", mode="subprocess", log_level="WARNING",
            tls_port=tls_port, tls_cert_file=str(cert_file), tls_key_file=str(key_file),
        ) as broker:
            logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
            clients = {
                "plain": pulsar.Client(broker.service_url, logger=logger),
                "tls": pulsar.Client(
                    f"pulsar+ssl://localhost:{tls_port}", logger=logger,
                    tls_trust_certs_file_path=str(ca_file), tls_validate_hostname=True,
                ),
            }
            rates: dict[str, list[float]] = {"plain": [], "tls": []}
            try:
                for round_ in range(args.rounds):
                    for mode, client in clients.items():
                        topic = f"persistent://public/default/bench-{mode}-{round_}"
                        rates[mode].append(
                            publish(client, topic, args.messages, args.size, args.batching)
                        )
            finally:
                for client in clients.values():
                    client.close()

    plain = statistics.median(rates["plain"])
    tls = statistics.median(rates["tls"])
    print(
        f"publish {args.messages} x {args.size} B, batching {'on' if args.batching else 'off'}, "
        f"{args.rounds} rounds (median), official client"
    )
    print(f"{'port':<6} {'msg/s':>10}   rounds")
    for mode, median in (("plain", plain), ("tls", tls)):
        rounds = " ".join(f"{rate:,.0f}" for rate in rates[mode])
        print(f"{mode:<6} {median:>10,.0f}   {rounds}")
    print(f"ratio tls/plain: {tls / plain:.3f}")


if __name__ == "__main__":
    main()
