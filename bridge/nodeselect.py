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
from collections.abc import Mapping

from .pods import Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

__all__ = ["expression_matches", "selector_matches", "term_matches"]

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
