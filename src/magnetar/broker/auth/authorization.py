"""Authorization, as Pulsar's PulsarAuthorizationProvider: superuser roles may do
anything; a tenant's admin roles (its TenantInfo's ``adminRoles``) may do anything in
that tenant, as Pulsar's provider falls back to tenant-admin access for every topic
operation; other roles may produce to or consume from a topic when its namespace, or
the topic itself, grants them that action.

Grants live in the namespace's policies file (shared with other namespace policies)
under ``auth_policies``, in the shape of Pulsar's namespace Policies::

    {"namespace_auth": {"role": ["produce", "consume"]},
     "destination_auth": {"persistent://t/ns/topic": {"role": ["consume"]}}}

A grant on a partitioned topic covers its partitions. Loop thread only; each
namespace's file is read once and kept (only this class writes these keys).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from magnetar.protocol.topic_name import TopicName
from magnetar.storage.metadata import NamespacePolicies

POLICY_NAME = "auth_policies"
PRODUCE = "produce"
CONSUME = "consume"
# Pulsar's AuthAction values: magnetar has no functions, sources, sinks or packages.
ACTIONS = (PRODUCE, CONSUME)
UNSUPPORTED_ACTIONS = ("functions", "sources", "sinks", "packages")

Grants = dict[str, list[str]]  # role -> actions


class UnsupportedAction(ValueError):
    """An action Pulsar knows that magnetar does not implement."""


def check_actions(actions: Iterable[Any]) -> list[str]:
    """The actions of a grant request, checked; ValueError names a bad one."""
    out: list[str] = []
    for action in actions:
        if action in UNSUPPORTED_ACTIONS:
            raise UnsupportedAction(f"the {action} action is not supported by magnetar")
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
        if action not in out:
            out.append(action)
    return sorted(out)


class AuthorizationService:
    def __init__(
        self,
        superuser_roles: Iterable[str],
        data_dir: Path,
        on_namespace_written: Callable[[str, str], None] | None = None,
        tenant_admins: Callable[[str], Collection[str]] = lambda tenant: (),
    ) -> None:
        self.superusers = frozenset(r for r in superuser_roles if r)
        self._tenant_admins = tenant_admins  # a tenant's adminRoles (none if no tenant)
        self._data_dir = Path(data_dir)
        self._on_namespace_written = on_namespace_written
        self._cache: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------ checks

    def is_superuser(self, role: str | None) -> bool:
        return role is not None and role in self.superusers

    def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        """A superuser, or one of ``tenant``'s admin roles (Pulsar's
        validateTenantAdminAccess): it may administer everything in the tenant."""
        if role is None:
            return False
        return role in self.superusers or role in self._tenant_admins(tenant)

    def allowed(self, role: str | None, topic: TopicName, action: str) -> bool:
        """May ``role`` do ``action`` on ``topic`` (a superuser may do anything, a
        tenant admin anything in its tenant)."""
        if role is None:
            return False
        if self.is_tenant_admin(role, topic.tenant):
            return True
        policies = self._policies(topic.tenant, topic.namespace)
        if action in policies["namespace_auth"].get(role, ()):
            return True
        topics = policies["destination_auth"]
        return any(action in topics.get(name, {}).get(role, ()) for name in _names_of(topic))

    def can_produce(self, role: str | None, topic: TopicName) -> bool:
        return self.allowed(role, topic, PRODUCE)

    def can_consume(self, role: str | None, topic: TopicName) -> bool:
        return self.allowed(role, topic, CONSUME)

    def can_list_topics(self, role: str | None, tenant: str, namespace: str) -> bool:
        """As Pulsar's GET_TOPICS namespace operation: a superuser or tenant admin, or
        a role granted produce or consume on the namespace itself (a topic's grant is
        not enough)."""
        if role is None:
            return False
        if self.is_tenant_admin(role, tenant):
            return True
        granted = self._policies(tenant, namespace)["namespace_auth"].get(role, ())
        return PRODUCE in granted or CONSUME in granted

    def can_lookup(self, role: str | None, topic: TopicName) -> bool:
        """As Pulsar's canLookup: whoever may produce or consume may look a topic up."""
        return self.can_produce(role, topic) or self.can_consume(role, topic)

    # ------------------------------------------------------------ grants

    def namespace_permissions(self, tenant: str, namespace: str) -> Grants:
        return {r: list(a) for r, a in self._policies(tenant, namespace)["namespace_auth"].items()}

    def topic_permissions(self, topic: TopicName) -> Grants:
        """The namespace's grants merged with the topic's own, as Pulsar's
        getPermissionsOnTopic answers."""
        policies = self._policies(topic.tenant, topic.namespace)
        merged: dict[str, set[str]] = {r: set(a) for r, a in policies["namespace_auth"].items()}
        for name in _names_of(topic):
            for role, actions in policies["destination_auth"].get(name, {}).items():
                merged.setdefault(role, set()).update(actions)
        return {role: sorted(actions) for role, actions in merged.items()}

    def topic_own_permissions(self, topic: TopicName) -> Grants:
        policies = self._policies(topic.tenant, topic.namespace)
        return dict(policies["destination_auth"].get(str(topic), {}))

    def grant_namespace(
        self, tenant: str, namespace: str, role: str, actions: list[str]
    ) -> None:
        def change(policies: dict[str, Any]) -> None:
            policies["namespace_auth"][role] = check_actions(actions)

        self._update(tenant, namespace, change)

    def revoke_namespace(self, tenant: str, namespace: str, role: str) -> None:
        self._update(tenant, namespace, lambda p: p["namespace_auth"].pop(role, None))

    def grant_topic(self, topic: TopicName, role: str, actions: list[str]) -> None:
        def change(policies: dict[str, Any]) -> None:
            policies["destination_auth"].setdefault(str(topic), {})[role] = check_actions(
                actions
            )

        self._update(topic.tenant, topic.namespace, change)

    def revoke_topic(self, topic: TopicName, role: str) -> bool:
        """Remove the topic's own grant to ``role``; False if it had none."""
        name = str(topic)
        if role not in self._policies(topic.tenant, topic.namespace)["destination_auth"].get(
            name, {}
        ):
            return False

        def change(policies: dict[str, Any]) -> None:
            grants = policies["destination_auth"].get(name, {})
            grants.pop(role, None)
            if not grants:
                policies["destination_auth"].pop(name, None)

        self._update(topic.tenant, topic.namespace, change)
        return True

    def forget_namespace(self, tenant: str, namespace: str) -> None:
        """The namespace was deleted (its policies file with it): drop what is cached."""
        self._cache.pop(f"{tenant}/{namespace}", None)

    # ------------------------------------------------------------ storage

    def _path(self, tenant: str, namespace: str) -> Path:
        return NamespacePolicies.path_for(self._data_dir, tenant, namespace)

    def _policies(self, tenant: str, namespace: str) -> dict[str, Any]:
        key = f"{tenant}/{namespace}"
        cached = self._cache.get(key)
        if cached is None:
            doc = NamespacePolicies.load(self._path(tenant, namespace)).policies
            cached = self._cache[key] = _normalized(doc.get(POLICY_NAME))
        return cached

    def _update(
        self, tenant: str, namespace: str, change: Callable[[dict[str, Any]], object]
    ) -> None:
        """Apply ``change`` to the namespace's grants, persisted before they apply (a
        failed write changes nothing)."""
        current = NamespacePolicies.load(self._path(tenant, namespace))
        policies = dict(current.policies)
        grants = _normalized(policies.get(POLICY_NAME))
        change(grants)
        policies[POLICY_NAME] = grants
        NamespacePolicies(current.path, policies).save()
        self._cache[f"{tenant}/{namespace}"] = grants
        if self._on_namespace_written is not None:
            self._on_namespace_written(tenant, namespace)


def _names_of(topic: TopicName) -> tuple[str, ...]:
    """The names a grant for ``topic`` may be under: its own, and its partitioned
    topic's when it is a partition."""
    if topic.partition_index >= 0:
        return (str(topic), str(topic.partitioned_base))
    return (str(topic),)


def _normalized(doc: object) -> dict[str, Any]:
    """The grants of a file (a hand-edited bad shape counts as no grants)."""
    out: dict[str, Any] = {"namespace_auth": {}, "destination_auth": {}}
    if not isinstance(doc, dict):
        return out
    namespace_auth = doc.get("namespace_auth")
    if isinstance(namespace_auth, dict):
        out["namespace_auth"] = _grants(namespace_auth)
    topics = doc.get("destination_auth")
    if isinstance(topics, dict):
        out["destination_auth"] = {
            str(name): _grants(grants)
            for name, grants in topics.items()
            if isinstance(grants, dict)
        }
    return out


def _grants(doc: dict[Any, Any]) -> Grants:
    return {
        str(role): [a for a in actions if a in ACTIONS]
        for role, actions in doc.items()
        if isinstance(actions, list)
    }
