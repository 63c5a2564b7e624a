"""Tenants and namespaces: which exist, created and deleted as Pulsar's admin API does.

A topic lives in a namespace, and a producer, consumer or lookup on a topic whose
namespace does not exist fails with TopicNotFound, unless
``allow_auto_namespace_creation`` lets the first topic created in it create it (and
its tenant). A standalone Pulsar starts with ``public/default`` and ``pulsar/system``
(tenants ``public`` and ``pulsar``) and puts them back at each start if they were
deleted; so does this broker. Namespaces that hold topics on disk are registered at
each start too: a data directory written before namespaces were registered loses
nothing, and a deleted namespace (which must have been empty) does not come back.

Loop thread only; each change is on disk before it is visible.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from magnetar.storage.namespaces_store import NamespacesStore, TenantInfo

log = logging.getLogger("magnetar.broker")

CLUSTER = "standalone"  # the one cluster this broker is, as Pulsar standalone names it
DEFAULT_NAMESPACES = ("public/default", "pulsar/system")


class NamespaceNotFound(LookupError):
    """The namespace (or its tenant) does not exist."""

    def __init__(self, namespace: str) -> None:
        super().__init__(f"Namespace {namespace} not found")
        self.namespace = namespace


class TenantNotFound(LookupError):
    def __init__(self, tenant: str) -> None:
        super().__init__(f"Tenant {tenant} does not exist")
        self.tenant = tenant


class AlreadyExists(Exception):
    """The tenant or namespace to create exists already."""


class NotEmpty(Exception):
    """The tenant still has namespaces, or the namespace still has topics."""


class NamespaceRegistry:
    """The broker's tenants and namespaces, persisted under its data directory.

    ``topics_in(namespace)`` names the topics of a namespace (a namespace with any is
    not deleted); ``on_deleted(tenant, namespace)`` is told after a namespace is gone,
    so that holders of its policies can drop what they cached.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        auto_create: bool,
        topics_in: Callable[[str], list[str]],
        on_deleted: Callable[[str, str], None] = lambda tenant, namespace: None,
    ) -> None:
        self.store = NamespacesStore(data_dir)
        self.auto_create = auto_create
        self._topics_in = topics_in
        self._on_deleted = on_deleted
        self._tenants: dict[str, TenantInfo] = {}
        self._namespaces: set[str] = set()

    def load(self) -> None:
        """Read the registry, then register the default namespaces and those that
        hold topics or policies on disk (with their tenants) if they are missing."""
        self._tenants = self.store.load_tenants()
        self._namespaces = self.store.load_namespaces()
        for namespace in DEFAULT_NAMESPACES:
            if namespace not in self._namespaces:
                self._register(namespace, "a standalone broker has it", logging.DEBUG)
        for namespace in sorted(self.store.namespaces_in_use() - self._namespaces):
            self._register(namespace, "it holds data on disk")

    def _register(self, namespace: str, why: str, level: int = logging.INFO) -> None:
        tenant, _, local = namespace.partition("/")
        if tenant not in self._tenants:
            self._save_tenant(tenant, TenantInfo(allowed_clusters=[CLUSTER]))
        self.store.save_namespace(tenant, local)
        self._namespaces.add(namespace)
        log.log(level, "registered namespace %s (%s)", namespace, why)

    # ------------------------------------------------------------ checks

    def exists(self, namespace: str) -> bool:
        return namespace in self._namespaces

    def check(self, namespace: str) -> None:
        """Raise NamespaceNotFound unless a topic of ``namespace`` may be used: it
        exists, or using one would create it."""
        if namespace not in self._namespaces and not self.auto_create:
            raise NamespaceNotFound(namespace)

    def ensure(self, namespace: str) -> None:
        """Before a topic of ``namespace`` is created: create the namespace (and its
        tenant) if automatic creation allows, else raise NamespaceNotFound."""
        if namespace in self._namespaces:
            return
        if not self.auto_create:
            raise NamespaceNotFound(namespace)
        self._register(namespace, "allow_auto_namespace_creation")

    # ------------------------------------------------------------ tenants

    def tenants(self) -> list[str]:
        return sorted(self._tenants)

    def tenant(self, tenant: str) -> TenantInfo:
        try:
            return self._tenants[tenant]
        except KeyError:
            raise TenantNotFound(tenant) from None

    def admin_roles(self, tenant: str) -> list[str]:
        """The tenant's admin roles (none for a tenant that does not exist)."""
        info = self._tenants.get(tenant)
        return info.admin_roles if info is not None else []

    def create_tenant(self, tenant: str, info: TenantInfo) -> None:
        if tenant in self._tenants:
            raise AlreadyExists(f"Tenant {tenant} already exists")
        self._save_tenant(tenant, info)
        log.info("created tenant %s", tenant)

    def update_tenant(self, tenant: str, info: TenantInfo) -> None:
        self.tenant(tenant)
        self._save_tenant(tenant, info)

    def delete_tenant(self, tenant: str) -> None:
        self.tenant(tenant)
        if self.namespaces(tenant):
            raise NotEmpty("The tenant still has active namespaces")
        self.store.delete_tenant(tenant)
        del self._tenants[tenant]
        log.info("deleted tenant %s", tenant)

    def _save_tenant(self, tenant: str, info: TenantInfo) -> None:
        self.store.save_tenant(tenant, info)
        self._tenants[tenant] = info

    # ------------------------------------------------------------ namespaces

    def namespaces(self, tenant: str) -> list[str]:
        """``tenant/namespace`` of the tenant's namespaces (TenantNotFound if none)."""
        self.tenant(tenant)
        return sorted(ns for ns in self._namespaces if ns.partition("/")[0] == tenant)

    def create_namespace(self, namespace: str) -> None:
        tenant, _, local = namespace.partition("/")
        self.tenant(tenant)
        if namespace in self._namespaces:
            raise AlreadyExists(f"Namespace {namespace} already exists")
        self.store.save_namespace(tenant, local)
        self._namespaces.add(namespace)
        log.info("created namespace %s", namespace)

    def delete_namespace(self, namespace: str) -> None:
        if namespace not in self._namespaces:
            raise NamespaceNotFound(namespace)
        if self._topics_in(namespace):
            raise NotEmpty("Cannot delete non empty namespace")
        tenant, _, local = namespace.partition("/")
        self.store.delete_namespace(tenant, local)
        self._namespaces.discard(namespace)
        self._on_deleted(tenant, local)
        log.info("deleted namespace %s", namespace)
