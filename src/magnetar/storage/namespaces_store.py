"""Where tenants and namespaces are kept in the data directory.

::

    root/tenants/<tenant>.json                       a tenant: admin roles, allowed clusters
    root/namespaces/<tenant>/<namespace>/namespace.json   a namespace exists
    root/namespaces/<tenant>/<namespace>/policies.json    its policies (NamespacePolicies)

A namespace exists when its ``namespace.json`` does; its directory is the one its
policies already live in, so deleting a namespace deletes its policies with it. Each
file is replaced atomically. Names are plain Pulsar names (the caller checked them).

Data directories written before namespaces were registered hold topics (and maybe
policies) in namespaces that have no ``namespace.json``: :func:`namespaces_in_use`
finds them so that the broker can register them rather than lose sight of them.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.protocol.topic_name import DOMAINS
from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import atomic_write, fsync_dir
from magnetar.storage.metadata import NAMESPACES_DIR, POLICIES_FILE
from magnetar.storage.store import PARTITIONED_DIR

TENANTS_DIR = "tenants"
NAMESPACE_FILE = "namespace.json"
FORMAT_VERSION = 1


@dataclass
class TenantInfo:
    """Pulsar's TenantInfo: who administers the tenant and where it may live."""

    admin_roles: list[str] = field(default_factory=list)
    allowed_clusters: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "adminRoles": list(self.admin_roles),
            "allowedClusters": list(self.allowed_clusters),
        }

    @classmethod
    def from_json(cls, doc: object) -> TenantInfo:
        """Parse Pulsar's JSON shape; ValueError names what is wrong."""
        if not isinstance(doc, dict):
            raise ValueError("the tenant info must be a JSON object")
        return cls(
            _strings(doc.get("adminRoles", []), "adminRoles"),
            _strings(doc.get("allowedClusters", []), "allowedClusters"),
        )


def _strings(value: object, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{key} must be a list of strings")
    return list(value)


class NamespacesStore:
    """The tenant and namespace files under a data directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._tenants = self.root / TENANTS_DIR
        self._namespaces = self.root / NAMESPACES_DIR

    # ------------------------------------------------------------ reading

    def load_tenants(self) -> dict[str, TenantInfo]:
        tenants: dict[str, TenantInfo] = {}
        if not self._tenants.is_dir():
            return tenants
        for entry in sorted(self._tenants.iterdir()):
            if not entry.is_file() or entry.suffix != ".json":
                continue  # e.g. a .tmp left by a crash mid-write
            try:
                tenants[entry.stem] = TenantInfo.from_json(json.loads(entry.read_bytes()))
            except ValueError as exc:
                raise StorageCorruption(f"{entry}: not a valid tenant file: {exc}") from exc
        return tenants

    def load_namespaces(self) -> set[str]:
        """``tenant/namespace`` of every registered namespace."""
        return {
            f"{tenant}/{namespace}"
            for tenant, namespace, directory in _two_levels(self._namespaces)
            if (directory / NAMESPACE_FILE).is_file()
        }

    def namespaces_in_use(self) -> set[str]:
        """``tenant/namespace`` of every namespace that holds a persistent topic, a
        partitioned topic or policies on disk, registered or not."""
        found: set[str] = set()
        for base in [self.root / domain for domain in DOMAINS] + [self.root / PARTITIONED_DIR]:
            for tenant, namespace, directory in _two_levels(base):
                if any(directory.iterdir()):  # a deleted topic's namespace may be empty
                    found.add(f"{tenant}/{namespace}")
        for tenant, namespace, directory in _two_levels(self._namespaces):
            if (directory / POLICIES_FILE).is_file():
                found.add(f"{tenant}/{namespace}")
        return found

    # ------------------------------------------------------------ writing

    def save_tenant(self, tenant: str, info: TenantInfo) -> None:
        self._tenants.mkdir(parents=True, exist_ok=True)
        atomic_write(self._tenants / f"{tenant}.json", json.dumps(info.to_json()).encode())

    def delete_tenant(self, tenant: str) -> None:
        path = self._tenants / f"{tenant}.json"
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self._tenants)
        _remove_empty(self._namespaces / tenant)

    def save_namespace(self, tenant: str, namespace: str) -> None:
        directory = self._namespaces / tenant / namespace
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write(directory / NAMESPACE_FILE, json.dumps({"version": FORMAT_VERSION}).encode())

    def delete_namespace(self, tenant: str, namespace: str) -> None:
        """Remove the namespace with its policies, and the empty directories its
        deleted topics left (so that no later start takes it for one in use)."""
        directory = self._namespaces / tenant / namespace
        if directory.exists():
            # The marker first: a crash part way leaves a namespace that is gone.
            marker = directory / NAMESPACE_FILE
            if marker.exists():
                marker.unlink()
                fsync_dir(directory)
            shutil.rmtree(directory)
            fsync_dir(directory.parent)
        for base in [self.root / domain for domain in DOMAINS] + [self.root / PARTITIONED_DIR]:
            _remove_empty(base / tenant / namespace)
            _remove_empty(base / tenant)


def _two_levels(base: Path) -> list[tuple[str, str, Path]]:
    """(tenant, namespace, directory) for each directory two levels below ``base``."""
    found: list[tuple[str, str, Path]] = []
    if not base.is_dir():
        return found
    for tenant in sorted(base.iterdir()):
        if tenant.is_dir():
            found.extend(
                (tenant.name, namespace.name, namespace)
                for namespace in sorted(tenant.iterdir())
                if namespace.is_dir()
            )
    return found


def _remove_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:  # absent, or not empty: either way there is nothing to do
        return
    fsync_dir(directory.parent)
