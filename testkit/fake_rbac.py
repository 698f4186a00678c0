"""RBAC for the fake API server: a request is allowed when a rule of a Role or ClusterRole bound to its
service account allows it, and refused 403 Forbidden otherwise — with kube-apiserver's own message — so a
test can hold the shipped manifests' RBAC against what the bridge asks.

What the real authorizer does (``plugin/pkg/auth/authorizer/rbac``: ``RuleAllows``, ``appliesTo``; the
verbs of ``apiserver/pkg/endpoints/request.RequestInfoFactory``) and this one too: the HTTP method and path
give the verb — GET of a name ``get``, of a collection ``list``, ``?watch`` ``watch``; POST ``create``; PUT
``update``; PATCH ``patch``; DELETE ``delete`` (``deletecollection`` without a name) — the API group, the
resource (``pods/binding`` for a subresource), the namespace and the name. A rule allows it when its verbs,
apiGroups and resources name them (or ``*``) and its ``resourceNames`` are empty or hold the name (a
request without a name, a create or a list, never matches a rule with resourceNames). ClusterRoleBindings
apply everywhere, RoleBindings in their namespace only. Differences: only service-account subjects, no
aggregated ClusterRoles, no ``nonResourceURLs``, no escalation checks on writes of RBAC objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Rbac", "RequestInfo", "request_info"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class RequestInfo:
    verb: str
    group: str
    resource: str
    """The plural, ``plural/subresource`` for a subresource."""
    namespace: str
    name: str


def request_info(
    method: str, group: str, plural: str, namespace: str, name: str, sub: str, watch: bool
) -> RequestInfo:
    """The RBAC attributes of one request (see the module docstring)."""
    if method == "GET":
        verb = "watch" if watch else "get" if name else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return RequestInfo(verb, group, f"{plural}/{sub}" if sub else plural, namespace, name)


def _has(values: Iterable[str], wanted: str) -> bool:
    values = list(values or ())
    return "*" in values or wanted in values


def rule_allows(rule: Obj, info: RequestInfo) -> bool:
    """Whether one PolicyRule allows the request (``RuleAllows`` for resource requests)."""
    if not (_has(rule.get("verbs", ()), info.verb) and _has(rule.get("apiGroups", ()), info.group)):
        return False
    resources = list(rule.get("resources") or ())
    sub = info.resource.partition("/")[2]
    if not (_has(resources, info.resource) or (sub and f"*/{sub}" in resources)):
        return False
    names = list(rule.get("resourceNames") or ())
    return not names or info.name in names


class Rbac:
    """The rules bound to one service account, from Role/ClusterRole/(Cluster)RoleBinding objects."""

    def __init__(self, objects: Iterable[Obj], namespace: str, service_account: str) -> None:
        self.user = f"system:serviceaccount:{namespace}:{service_account}"
        objs = [o for o in objects if isinstance(o, dict)]
        roles = {
            (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o.get("rules") or []
            for o in objs
            if o.get("kind") in ("Role", "ClusterRole")
        }
        self.cluster_rules: list[Obj] = []
        """Rules that apply in every namespace and at the cluster scope."""
        self.namespace_rules: dict[str, list[Obj]] = {}
        for b in objs:
            if b.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            if not any(
                s.get("kind") == "ServiceAccount"
                and s.get("name") == service_account
                and s.get("namespace", b["metadata"].get("namespace")) == namespace
                for s in b.get("subjects") or []
            ):
                continue
            ref = b["roleRef"]
            where = b["metadata"].get("namespace", "") if b["kind"] == "RoleBinding" else ""
            rules = roles.get((ref["kind"], where if ref["kind"] == "Role" else "", ref["name"]), [])
            if b["kind"] == "ClusterRoleBinding":
                self.cluster_rules.extend(rules)
            else:
                self.namespace_rules.setdefault(where, []).extend(rules)

    def allows(self, info: RequestInfo) -> bool:
        rules = [*self.cluster_rules, *self.namespace_rules.get(info.namespace, [])]
        return any(rule_allows(r, info) for r in rules)

    def forbidden(self, info: RequestInfo) -> str:
        """kube-apiserver's message for a refused request (``NewForbidden`` + ``forbiddenMessage``)."""
        plural = info.resource.partition("/")[0]
        qualified = f"{plural}.{info.group}" if info.group else plural
        what = f'{qualified} "{info.name}"' if info.name else qualified
        where = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
        return (
            f'{what} is forbidden: User "{self.user}" cannot {info.verb} resource "{info.resource}" in API '
            f'group "{info.group}" {where}'
        )
