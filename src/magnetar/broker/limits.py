"""Broker-wide limits on connections: how many the broker holds, and how many one
client address holds (Pulsar's brokerMaxConnections and brokerMaxConnectionsPerIp)."""

from __future__ import annotations


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
