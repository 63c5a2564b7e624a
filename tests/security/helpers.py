"""Helpers of the security tests: keys and certificates on real files, admin requests."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import trustme

from magnetar.broker.auth.tokens import create_token


def quiet() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@dataclass
class Keys:
    secret: bytes
    secret_file: Path

    @property
    def url(self) -> str:
        return f"file://{self.secret_file}"

    def token(self, role: str, expires_in: int | None = None) -> str:
        return create_token(role, secret_key=self.secret, expires_in=expires_in)


@dataclass
class Pki:
    ca_file: Path  # the CA clients trust
    cert_file: Path  # the broker's chain
    key_file: Path
    folder: Path
    ca: trustme.CA

    def client_cert(self, cn: str) -> tuple[Path, Path]:
        """(certificate, key) PEM files of a client certificate whose CN is ``cn``."""
        issued = self.ca.issue_cert(f"{cn}.clients.test", common_name=cn)
        cert = self.folder / f"{cn}-{uuid.uuid4().hex[:6]}.crt"
        key = cert.with_suffix(".key")
        cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        key.write_bytes(issued.private_key_pem.bytes())
        return cert, key


@dataclass
class Reply:
    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    url: str,
    method: str = "GET",
    body: object = None,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> Reply:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return Reply(response.status, response.read().decode())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.read().decode())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
