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
        devices:                 # extended resources a pod may request → the Slurm GRES they become
          nvidia.com/mig-1g.5gb: gpu:1g.5gb

Namespaces may also be chosen by their labels, one policy for every namespace a selector matches (a
namespace listed by name uses its own entry; the first matching selector wins otherwise)::

    namespace_selectors:
      - selector: "slurm-keda.io/tenant=ml,env in (prod,dev)"   # a Kubernetes label selector
        user_id: 1001
        partitions: [gpu]

Only namespaces listed or selected here are managed. Nothing in a pod — annotation, label, name — can
change the uid or gid; an annotation naming a user, or an account / QOS / partition / reservation outside its
namespace's lists, refuses the pod (see :mod:`bridge.requests`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = ["NamespacePolicy", "Policy", "PolicyError", "load_policy", "parse_policy"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}", re.ASCII)
"""A Slurm account / QOS / partition / reservation name (no list separators, no spaces)."""
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)
_KEYS = frozenset(
    {"user_id", "group_id", "accounts", "qos", "partitions", "reservations", "allow_shared_nodes", "devices"}
)
_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
"""An extended resource name: a domain, ``/``, a name (``nvidia.com/mig-1g.5gb``)."""
_GRES = re.compile(r"[A-Za-z0-9_]{1,64}(:[A-Za-z0-9_.-]{1,64})?", re.ASCII)
"""A Slurm generic resource, ``name`` or ``name:type`` (``gpu:1g.5gb``)."""
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
    devices: tuple[tuple[str, str], ...] = ()
    """(extended resource, the Slurm GRES — ``name`` or ``name:type`` — a pod's request for it becomes):
    MIG profiles, typed GPUs, other devices; ``nvidia.com/gpu`` and ``amd.com/gpu`` are ``gpu`` already."""


LabelMatcher = Callable[[Mapping[str, str]], bool]


@dataclass(frozen=True)
class Selected:
    """A policy for every namespace whose labels match ``selector`` (its ``namespace`` field is unused)."""

    selector: str
    matches: LabelMatcher = field(compare=False)
    policy: NamespacePolicy


@dataclass(frozen=True)
class Policy:
    namespaces: dict[str, NamespacePolicy] = field(default_factory=dict)
    selectors: tuple[Selected, ...] = ()

    def of(self, namespace: str, labels: Mapping[str, str] | None = None) -> NamespacePolicy | None:
        """The policy of ``namespace``: its own entry, else the first selector its ``labels`` match."""
        own = self.namespaces.get(namespace)
        if own is not None or labels is None:
            return own
        for chosen in self.selectors:
            if chosen.matches(labels):
                return replace(chosen.policy, namespace=namespace)
        return None


_DNS = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_NAME_PART = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY = rf"(?:{_DNS}(?:\.{_DNS})*/)?{_NAME_PART}"
"""A label key: an optional DNS-subdomain prefix and ``/``, then a name."""
_VALUE = rf"(?:{_NAME_PART})?"


def _requirement(text: str) -> LabelMatcher:
    t = text.strip()
    values_list = rf"{_VALUE}(?:\s*,\s*{_VALUE})*"
    if m := re.fullmatch(
        rf"(?P<key>{_KEY})\s+(?P<op>in|notin)\s+\(\s*(?P<values>{values_list})\s*\)", t, re.ASCII
    ):
        key, wanted = m["key"], m["op"] == "in"
        values = frozenset(v.strip() for v in m["values"].split(","))
        return lambda labels: (key in labels and labels[key] in values) == wanted
    if m := re.fullmatch(rf"(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})", t, re.ASCII):
        key, equal, value = m["key"], m["op"] != "!=", m["value"]
        return lambda labels: (labels.get(key) == value) == equal
    if m := re.fullmatch(rf"!\s*(?P<key>{_KEY})", t, re.ASCII):
        key = m["key"]
        return lambda labels: key not in labels
    if re.fullmatch(_KEY, t, re.ASCII):
        return lambda labels: t in labels
    raise ValueError(f"{text.strip()[:80]!r} is not a label selector requirement")


def parse_selector(text: str) -> LabelMatcher:
    """A Kubernetes label selector (``a=b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``,
    comma-separated, all must hold) as a predicate on a labels mapping; ``ValueError`` if malformed. An
    empty selector would select every namespace: refused."""
    parts = [p for p in re.split(r",(?![^()]*\))", text) if p.strip()]
    if not parts:
        raise ValueError("an empty selector would select every namespace")
    requirements = [_requirement(p) for p in parts]
    return lambda labels: all(r(labels) for r in requirements)


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
    if not isinstance(doc, dict) or not doc or set(doc) - {"namespaces", "namespace_selectors"}:
        raise PolicyError(f"{source}: a mapping of 'namespaces' and/or 'namespace_selectors'")
    raw = doc.get("namespaces") or {}
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: 'namespaces' maps namespace names to their policy")
    out: dict[str, NamespacePolicy] = {}
    for ns, entry in raw.items():
        where = f"{source}: namespaces.{ns}"
        if not isinstance(ns, str) or not _NAMESPACE.fullmatch(ns):
            raise PolicyError(f"{where}: not a Kubernetes namespace name")
        out[ns] = _entry(where, ns, entry, _KEYS)
    selected: list[Selected] = []
    raw_selectors = doc.get("namespace_selectors") or []
    if not isinstance(raw_selectors, list):
        raise PolicyError(f"{source}: 'namespace_selectors' is a list of policies with a 'selector'")
    for i, entry in enumerate(raw_selectors):
        where = f"{source}: namespace_selectors[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("selector"), str):
            raise PolicyError(f"{where}.selector: required, a label selector such as 'tenant=ml'")
        try:
            matches = parse_selector(entry["selector"])
        except ValueError as e:
            raise PolicyError(f"{where}.selector: {e}") from None
        selected.append(Selected(entry["selector"], matches, _entry(where, "", entry, _KEYS | {"selector"})))
    return Policy(out, tuple(selected))


def _entry(where: str, ns: str, entry: Any, keys: frozenset[str]) -> NamespacePolicy:
    if not isinstance(entry, dict):
        raise PolicyError(f"{where}: a mapping (user_id, accounts, qos, partitions, ...)")
    unknown = set(entry) - keys
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
    return NamespacePolicy(
        namespace=ns,
        user_id=_id(where, "user_id", entry["user_id"]),
        group_id=_id(where, "group_id", entry["group_id"]) if entry.get("group_id") is not None else None,
        accounts=_names(where, "accounts", entry.get("accounts")),
        qos=_names(where, "qos", entry.get("qos")),
        partitions=partitions,
        reservations=_names(where, "reservations", entry.get("reservations")),
        allow_shared_nodes=shared,
        devices=tuple(sorted(_devices(where, entry.get("devices")).items())),
    )


def _devices(where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PolicyError(f"{where}.devices: a mapping of extended resources to Slurm GRES")
    out: dict[str, str] = {}
    for resource, gres in value.items():
        if not isinstance(resource, str) or not _RESOURCE.fullmatch(resource):
            raise PolicyError(f"{where}.devices: {str(resource)[:64]!r} is not an extended resource name")
        if not isinstance(gres, str) or not _GRES.fullmatch(gres):
            raise PolicyError(f"{where}.devices.{resource}: a Slurm GRES, name or name:type (gpu:1g.5gb)")
        out[resource] = gres
    return out


def load_policy(path: Path) -> Policy:
    """Read and check the policy file; :class:`PolicyError` with one line naming the problem."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise PolicyError(f"cannot read bridge policy {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise PolicyError(f"bridge policy {path} is not YAML: {str(e).splitlines()[0]}") from None
    return parse_policy(doc, str(path))
