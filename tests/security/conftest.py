"""Fixtures of the security tests: a secret key, a key pair and a CA with the broker's
certificate (trustme), on real files."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trustme

from magnetar.broker.auth.tokens import create_key_pair, create_secret_key

from .helpers import Keys, Pki


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    secret = create_secret_key()
    path = tmp_path_factory.mktemp("keys") / "secret.key"
    path.write_bytes(secret)
    return Keys(secret, path)


@pytest.fixture(scope="session")
def key_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    private, public = create_key_pair("RS256")
    folder = tmp_path_factory.mktemp("pair")
    (folder / "private.der").write_bytes(private)
    (folder / "public.der").write_bytes(public)
    return folder / "private.der", folder / "public.der"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    ca_file = folder / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert_file = folder / "broker.crt"
    key_file = folder / "broker.key"
    cert_file.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(key_file))
    return Pki(ca_file, cert_file, key_file, folder, ca)


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/sec-{uuid.uuid4().hex[:10]}"
