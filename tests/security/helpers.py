"""Helpers of the security tests: keys and certificates on real files, admin requests
with a role's token."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import trustme
from admin_http import Reply, as_json, http

from magnetar.broker.auth.tokens import create_token
from magnetar.testing import EmbeddedBroker


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


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def as_role(broker: EmbeddedBroker, keys: Keys, role: str, method: str, path: str,
            body: object = None) -> Reply:
    """``method path`` on the broker's admin port with a token of ``role``; the body as
    JSON."""
    return http(broker, method, path, as_json(body), headers=bearer(keys.token(role)))


def admin(broker: EmbeddedBroker, keys: Keys, method: str, path: str,
          body: object = None) -> Reply:
    return as_role(broker, keys, "admin", method, path, body)
