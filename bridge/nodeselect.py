"""Kubernetes' node selectors, matched against a node as kube-scheduler matches them
(``component-helpers/scheduling/corev1/nodeaffinity``). Pure. Used for a pod's required node affinity
and a persistent volume's node affinity alike.

Terms are ORed, inside a term every expression and field ANDed; a null or empty term, or one Kubernetes
cannot parse, matches nothing. Operators: ``In``, ``NotIn`` (also true without the label), ``Exists``,
``DoesNotExist``, ``Gt``/``Lt`` (the label and the one value both int64, compared strictly; no label or
not an integer → false); ``matchFields``: ``In``/``NotIn`` with exactly one value, and a node's only
field is ``metadata.name`` (any other key reads as an empty value, as in Kubernetes' field selectors).
Not checked: whether keys and values are valid label syntax (the API server refuses such pods).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .pods import Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

__all__ = ["LabelIndex", "expression_matches", "selector_matches", "term_matches"]

_INT64 = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64_MAX = (1 << 63) - 1


def _int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: None when it fails."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def expression_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool | None:
    """One label requirement against a node's labels; None when Kubernetes would not parse it."""
    op, values, has = req.operator, req.values, req.key in labels
    if not req.key:
        return None
    if op in ("In", "NotIn"):
        if not values:
            return None
        inside = has and labels[req.key] in values
        return inside if op == "In" else not inside
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return has if op == "Exists" else not has
    if op in ("Gt", "Lt"):
        bound = _int64(values[0]) if len(values) == 1 else None
        if bound is None:
            return None
        value = _int64(labels[req.key]) if has else None
        if value is None:
            return False
        return value > bound if op == "Gt" else value < bound
    return None


def _field_matches(req: NodeSelectorRequirement, name: str) -> bool | None:
    if req.operator not in ("In", "NotIn") or len(req.values) != 1:
        return None
    have = name if req.key == "metadata.name" else ""
    equal = have == req.values[0]
    return equal if req.operator == "In" else not equal


def term_matches(term: NodeSelectorTerm, node: Node) -> bool:
    """One term: every expression and field holds (an empty or unparsable term: False)."""
    if not term.matchExpressions and not term.matchFields:
        return False
    results = [expression_matches(r, node.metadata.labels) for r in term.matchExpressions]
    results += [_field_matches(r, node.metadata.name) for r in term.matchFields]
    return None not in results and all(results)


def selector_matches(selector: NodeSelector, node: Node) -> bool:
    """Any term matches (no terms: nothing matches)."""
    return any(term_matches(t, node) for t in selector.nodeSelectorTerms)


class LabelIndex:
    """Many nodes, indexed by their labels and names, so that one selector is matched against all of them
    with set operations (:meth:`selector_nodes`) instead of node by node — same answers as
    :func:`selector_matches`."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.by_value: dict[str, dict[str, set[str]]] = {}
        """Label key → value → the nodes with it."""
        names = []
        for node in nodes:
            name = node.metadata.name
            names.append(name)
            for key, value in node.metadata.labels.items():
                self.by_value.setdefault(key, {}).setdefault(value, set()).add(name)
        self.all = frozenset(names)

    def _having(self, key: str) -> set[str]:
        return set().union(*self.by_value.get(key, {}).values())

    def expression_nodes(self, req: NodeSelectorRequirement) -> set[str] | None:
        """The nodes one label requirement matches; None when Kubernetes would not parse it."""
        op, values, key = req.operator, req.values, req.key
        if not key:
            return None
        if op in ("In", "NotIn"):
            if not values:
                return None
            by_value = self.by_value.get(key, {})
            inside = set().union(*(by_value.get(v, set()) for v in values))
            return inside if op == "In" else set(self.all - inside)
        if op in ("Exists", "DoesNotExist"):
            if values:
                return None
            having = self._having(key)
            return having if op == "Exists" else set(self.all - having)
        if op in ("Gt", "Lt"):
            bound = _int64(values[0]) if len(values) == 1 else None
            if bound is None:
                return None
            out: set[str] = set()
            for text, nodes in self.by_value.get(key, {}).items():
                value = _int64(text)
                if value is not None and (value > bound if op == "Gt" else value < bound):
                    out |= nodes
            return out
        return None

    def _field_nodes(self, req: NodeSelectorRequirement) -> set[str] | None:
        if req.operator not in ("In", "NotIn") or len(req.values) != 1:
            return None
        wanted = req.values[0]
        if req.key == "metadata.name":
            equal = {wanted} & self.all
        else:
            equal = set(self.all) if wanted == "" else set()
        return set(equal) if req.operator == "In" else set(self.all - equal)

    def term_nodes(self, term: NodeSelectorTerm) -> set[str]:
        if not term.matchExpressions and not term.matchFields:
            return set()
        parts = [self.expression_nodes(r) for r in term.matchExpressions]
        parts += [self._field_nodes(r) for r in term.matchFields]
        if any(p is None for p in parts):
            return set()
        return set(self.all).intersection(*(p for p in parts if p is not None))

    def selector_nodes(self, selector: NodeSelector) -> set[str]:
        """The nodes ``selector`` matches (:func:`selector_matches` of each)."""
        return set().union(*(self.term_nodes(t) for t in selector.nodeSelectorTerms))

    def labels_nodes(self, wanted: Mapping[str, str]) -> set[str]:
        """The nodes carrying every label of ``wanted`` with its value (a ``nodeSelector``)."""
        out = set(self.all)
        for key, value in wanted.items():
            out &= self.by_value.get(key, {}).get(value, set())
        return out
