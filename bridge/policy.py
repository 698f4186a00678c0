"""Who a namespace's Slurm jobs run as, and what its pods may ask for: the bridge's policy file. Pure
(the file is read once, at start; a bad file stops the bridge with one line naming the key).

::

    namespaces:
      team-a:
        user_id: 1001            # the Slurm job runs as this uid; required (0 only if written here)
        group_id: 1001           # optional
        accounts: [proj1, proj2] # an annotation may pick one of these; the first is the default
        qos: [normal, high]      # likewise (none listed: no QOS sent, Slurm's default applies)
        partitions: [cpu, gpu]   # likewise; at least one
        reservations: [maint]    # an annotation may name one of these; none by default
        allow_shared_nodes: false  # may a pod ask to share its node with other jobs

Only namespaces listed here are managed. Nothing in a pod — annotation, label, name — can change the
uid or gid; an annotation naming a user, or an account / QOS / partition / reservation outside its
namespace's lists, refuses the pod (see :mod:`bridge.requests`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["NamespacePolicy", "Policy", "PolicyError", "load_policy", "parse_policy"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}", re.ASCII)
"""A Slurm account / QOS / partition / reservation name (no list separators, no spaces)."""
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)
_KEYS = frozenset(
    {"user_id", "group_id", "accounts", "qos", "partitions", "reservations", "allow_shared_nodes"}
)
MAX_ID = (1 << 32) - 2
"""Largest uid/gid (``(uid_t)-1`` is "none")."""


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class NamespacePolicy:
    """What the pods of one namespace become in Slurm."""

    namespace: str
    user_id: int
    group_id: int | None = None
    accounts: tuple[str, ...] = ()
    qos: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    reservations: tuple[str, ...] = ()
    allow_shared_nodes: bool = False


@dataclass(frozen=True)
class Policy:
    namespaces: dict[str, NamespacePolicy] = field(default_factory=dict)

    def of(self, namespace: str) -> NamespacePolicy | None:
        return self.namespaces.get(namespace)


def _names(where: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and _NAME.fullmatch(v) for v in value):
        raise PolicyError(f"{where}.{key}: a list of Slurm names (letters, digits, _ . @ + -)")
    if len(set(value)) != len(value):
        raise PolicyError(f"{where}.{key}: a name is listed twice")
    return tuple(value)


def _id(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise PolicyError(f"{where}.{key}: an integer id from 0 to {MAX_ID}")
    return value


def parse_policy(doc: Any, source: str = "policy") -> Policy:
    """A :class:`Policy` from the parsed YAML document; :class:`PolicyError` names what is wrong."""
    if not isinstance(doc, dict) or set(doc) - {"namespaces"}:
        raise PolicyError(f"{source}: a mapping with one key, 'namespaces'")
    raw = doc.get("namespaces") or {}
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: 'namespaces' maps namespace names to their policy")
    out: dict[str, NamespacePolicy] = {}
    for ns, entry in raw.items():
        where = f"{source}: namespaces.{ns}"
        if not isinstance(ns, str) or not _NAMESPACE.fullmatch(ns):
            raise PolicyError(f"{where}: not a Kubernetes namespace name")
        if not isinstance(entry, dict):
            raise PolicyError(f"{where}: a mapping (user_id, accounts, qos, partitions, ...)")
        unknown = set(entry) - _KEYS
        if unknown:
            raise PolicyError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        if "user_id" not in entry:
            raise PolicyError(f"{where}.user_id: required (the uid its Slurm jobs run as)")
        partitions = _names(where, "partitions", entry.get("partitions"))
        if not partitions:
            raise PolicyError(f"{where}.partitions: at least one partition")
        shared = entry.get("allow_shared_nodes", False)
        if not isinstance(shared, bool):
            raise PolicyError(f"{where}.allow_shared_nodes: true or false")
        out[ns] = NamespacePolicy(
            namespace=ns,
            user_id=_id(where, "user_id", entry["user_id"]),
            group_id=_id(where, "group_id", entry["group_id"]) if entry.get("group_id") is not None else None,
            accounts=_names(where, "accounts", entry.get("accounts")),
            qos=_names(where, "qos", entry.get("qos")),
            partitions=partitions,
            reservations=_names(where, "reservations", entry.get("reservations")),
            allow_shared_nodes=shared,
        )
    return Policy(out)


def load_policy(path: Path) -> Policy:
    """Read and check the policy file; :class:`PolicyError` with one line naming the problem."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise PolicyError(f"cannot read bridge policy {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise PolicyError(f"bridge policy {path} is not YAML: {str(e).splitlines()[0]}") from None
    return parse_policy(doc, str(path))
