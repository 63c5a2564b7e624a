"""Broker-wide limits on connections: how many the broker holds, and how many one
client address holds (Pulsar's brokerMaxConnections and brokerMaxConnectionsPerIp);
how many bytes of partial frames connections hold before CONNECT has completed; and
how many bytes of publishes wait for their receipts (maxMessagePublishBufferSizeInMB)."""

from __future__ import annotations

from typing import Protocol


class Pausable(Protocol):
    def publish_buffer_drained(self) -> None: ...


class ConnectionLimits:
    """Admits connections up to ``max_connections`` in all and ``max_per_ip`` per
    client address (0: no limit); a connection admitted must be released once."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0  # connections turned away since start

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip`` and return None, or return why it is
        refused (and count nothing)."""
        if self.max_connections and self.total >= self.max_connections:
            self.refused += 1
            return (
                f"too many connections: the broker holds {self.total}, "
                f"its limit (max_connections {self.max_connections})"
            )
        held = self.per_ip.get(ip, 0)
        if self.max_per_ip and held >= self.max_per_ip:
            self.refused += 1
            return (
                f"too many connections from {ip}: it holds {held}, "
                f"the limit per address (max_connections_per_ip {self.max_per_ip})"
            )
        self.total += 1
        self.per_ip[ip] = held + 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        held = self.per_ip.get(ip, 0) - 1
        if held > 0:
            self.per_ip[ip] = held
        else:
            self.per_ip.pop(ip, None)


class UnauthenticatedBuffers:
    """Bytes of partial frames held by connections that have not completed CONNECT
    (nor authentication), all together. Such a peer has proven nothing, so what it
    may make the broker hold is one budget, ``limit`` bytes (0: none), whatever the
    number of connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self.peak = 0  # the most ever held at once
        self.refused = 0  # connections closed for taking the total past the limit

    def change(self, delta: int) -> bool:
        """A connection holds ``delta`` bytes more (or fewer); True if the total is
        now over the limit (the caller closes that connection and gives them back)."""
        total = self.bytes + delta
        self.bytes = total
        if total > self.peak:
            self.peak = total
        return 0 < self.limit < total

    def refusal(self, held: int) -> str:
        """Count a connection closed for the budget; why, for its ERROR and the log."""
        self.refused += 1
        return (
            f"connections that have not completed CONNECT hold {self.bytes} bytes of "
            f"partial frames, over max_unauthenticated_buffer_bytes ({self.limit}); "
            f"this one held {held}"
        )


class PublishBuffer:
    """Bytes of messages the broker has read from producers and not yet answered with
    a receipt, all connections together. Past ``limit`` (0: none) each connection
    that publishes is held (it stops being read); all held ones are told once the
    total is down to half of it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.resume_at = limit // 2
        self.bytes = 0
        self.peak = 0  # the most ever pending at once
        self.held: set[Pausable] = set()
        self.holds = 0  # connections held since start

    def add(self, size: int) -> bool:
        """Count ``size`` bytes pending; True if that is over the limit."""
        total = self.bytes + size
        self.bytes = total
        if total > self.peak:
            self.peak = total
        return 0 < self.limit < total

    def hold(self, cnx: Pausable) -> None:
        if cnx not in self.held:
            self.held.add(cnx)
            self.holds += 1

    def release(self, size: int) -> None:
        """``size`` bytes are receipted (or given up); once the total is down to
        half the limit, every held connection is told."""
        self.bytes -= size
        if self.held and self.bytes <= self.resume_at:
            held, self.held = self.held, set()
            for cnx in held:
                cnx.publish_buffer_drained()

    def forget(self, cnx: Pausable) -> None:
        self.held.discard(cnx)
