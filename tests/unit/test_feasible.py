"""Which nodes a pod may be bound to (bridge.feasible, bridge.nodeselect, bridge.volumes), case by case
against kube-scheduler's documented semantics, plus properties."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.feasible import (
    NO_AFFINITY,
    NOT_READY,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    NodeUse,
    feasible,
    node_reasons,
    node_usage,
    quantity_units,
    tolerates,
    units,
    usage_split,
)
from bridge.pods import Node, Pod, QuantityError, parse_quantity
from bridge.volumes import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    UNBOUND_IMMEDIATE,
    ZONE_CONFLICT,
    Claim,
    PersistentVolume,
    StorageClass,
    Volumes,
)
from testkit.budget import examples

NO_VOLUMES = Volumes()


def affinity_matches(p: Pod, n: Node) -> bool:
    """Whether ``p``'s node selector and required node affinity let it onto ``n``."""
    return NO_AFFINITY not in node_reasons(p, n, NodeUse(), NO_VOLUMES)


def pod(spec: dict[str, Any] | None = None, name: str = "p", **meta: Any) -> Pod:
    spec = {"containers": [{"name": "c"}], **(spec or {})}
    return msgspec.convert({"metadata": {"name": name, "namespace": "ns", **meta}, "spec": spec}, Pod)


def node(
    name: str = "n1",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    allocatable: dict[str, str] | None = None,
    unschedulable: bool = False,
) -> Node:
    doc = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", **(allocatable or {})}},
    }
    return msgspec.convert(doc, Node)


def requiring(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


# -- node selector and required node affinity --------------------------------------------------------

LABELS = {"zone": "a", "gpus": "8", "big": "yes"}


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        (expr("zone", "In", "a", "b"), True),
        (expr("zone", "In", "b"), False),
        (expr("missing", "In", "a"), False),
        (expr("zone", "NotIn", "b"), True),
        (expr("zone", "NotIn", "a"), False),
        (expr("missing", "NotIn", "a"), True),  # NotIn holds without the label
        (expr("big", "Exists"), True),
        (expr("missing", "Exists"), False),
        (expr("missing", "DoesNotExist"), True),
        (expr("big", "DoesNotExist"), False),
        (expr("gpus", "Gt", "4"), True),
        (expr("gpus", "Gt", "8"), False),  # strictly greater
        (expr("gpus", "Lt", "9"), True),
        (expr("gpus", "Lt", "8"), False),
        (expr("gpus", "Gt", "-1"), True),
        (expr("zone", "Gt", "1"), False),  # the label is not an integer
        (expr("missing", "Lt", "100"), False),  # no label
        (expr("gpus", "Gt", "4", "5"), False),  # Gt takes exactly one value: unparsable, matches nothing
        (expr("gpus", "Gt", "four"), False),
        (expr("gpus", "Gt", "99999999999999999999"), False),  # beyond int64
        (expr("zone", "In"), False),  # In without values: unparsable
        (expr("big", "Exists", "yes"), False),  # Exists with values: unparsable
        (expr("zone", "Matches", "a"), False),  # no such operator
        ({"matchExpressions": [], "matchFields": []}, False),  # an empty term matches nothing
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}, False),
        ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}, False),
        ({"matchFields": [{"key": "metadata.name", "operator": "Exists", "values": []}]}, False),
        ({"matchFields": [{"key": "spec.podCIDR", "operator": "NotIn", "values": ["x"]}]}, True),
        (  # AND inside a term: expressions and fields
            {
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}],
            },
            False,
        ),
        (
            {
                "matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a"]},
                    {"key": "gpus", "operator": "Gt", "values": ["7"]},
                ]
            },
            True,
        ),
    ],
)
def test_a_required_term_matches_as_kubernetes_matches_it(term: dict[str, Any], matches: bool) -> None:
    assert affinity_matches(pod(requiring(term)), node(labels=LABELS)) is matches


def test_terms_are_ored_and_a_bad_term_does_not_spoil_a_good_one() -> None:
    n = node(labels=LABELS)
    assert affinity_matches(pod(requiring(expr("zone", "In", "b"), expr("zone", "In", "a"))), n)
    assert affinity_matches(pod(requiring(expr("zone", "In"), expr("big", "Exists"))), n)
    assert not affinity_matches(pod(requiring(expr("zone", "In", "b"), expr("big", "DoesNotExist"))), n)
    assert not affinity_matches(pod(requiring()), n)  # no terms at all: nothing matches


def test_node_selector_needs_every_label_equal_and_combines_with_affinity() -> None:
    n = node(labels=LABELS)
    assert affinity_matches(pod({"nodeSelector": {"zone": "a", "big": "yes"}}), n)
    assert not affinity_matches(pod({"nodeSelector": {"zone": "a", "big": "no"}}), n)
    assert not affinity_matches(pod({"nodeSelector": {"other": ""}}), n)
    both = {"nodeSelector": {"zone": "a"}, **requiring(expr("gpus", "Lt", "4"))}
    assert not affinity_matches(pod(both), n)
    preferred_only = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": expr("zone", "In", "b")}
                ]
            }
        }
    }
    assert affinity_matches(pod(preferred_only), n)  # preferences never filter


# -- taints and tolerations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (
            {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
            ("gpu", "true", "NoSchedule"),
            True,
        ),
        (
            {"key": "gpu", "value": "true"},
            ("gpu", "true", "NoSchedule"),
            True,
        ),  # no operator: Equal; no effect: any
        ({"key": "gpu", "value": "false"}, ("gpu", "true", "NoSchedule"), False),
        ({"key": "gpu", "operator": "Exists"}, ("gpu", "anything", "NoExecute"), True),
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, ("gpu", "x", "NoSchedule"), False),
        ({"operator": "Exists"}, ("any", "x", "NoSchedule"), True),  # empty key + Exists: every taint
        ({"operator": "Exists", "effect": "NoSchedule"}, ("any", "x", "NoExecute"), False),
        ({"key": "other", "operator": "Exists"}, ("gpu", "", "NoSchedule"), False),
        ({"key": "gpu", "operator": "Gte", "value": "1"}, ("gpu", "1", "NoSchedule"), False),  # unknown op
        (  # tolerationSeconds does not matter for placement
            {"key": "maint", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
            ("maint", "", "NoExecute"),
            True,
        ),
    ],
)
def test_a_toleration_tolerates_as_kubernetes_says(
    toleration: dict[str, Any], taint: tuple[str, str, str], tolerated: bool
) -> None:
    p = pod({"tolerations": [toleration]})
    assert tolerates(p, *taint) is tolerated
    n = node(taints=[dict(zip(("key", "value", "effect"), taint, strict=True))])
    assert (node_reasons(p, n, NodeUse(), NO_VOLUMES) == []) is tolerated


def test_only_noschedule_and_noexecute_taints_filter() -> None:
    soft = node(taints=[{"key": "spot", "value": "1", "effect": "PreferNoSchedule"}])
    assert node_reasons(pod(), soft, NodeUse(), NO_VOLUMES) == []
    hard = node(taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
    assert node_reasons(pod(), hard, NodeUse(), NO_VOLUMES) == ["node(s) had untolerated taint {gpu: true}"]


def test_a_cordoned_node_takes_only_pods_tolerating_unschedulable() -> None:
    cordoned = node(unschedulable=True)
    assert node_reasons(pod(), cordoned, NodeUse(), NO_VOLUMES) == [UNSCHEDULABLE]
    tolerant = pod({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]})
    assert node_reasons(tolerant, cordoned, NodeUse(), NO_VOLUMES) == []


# -- resources ----------------------------------------------------------------------------------------


def asking(requests: dict[str, str], limits: dict[str, str] | None = None, **spec: Any) -> Pod:
    c = {"name": "c", "resources": {"requests": requests, "limits": limits or {}}}
    return pod({"containers": [c], **spec})


def bound(on: str, requests: dict[str, str], phase: str = "Running") -> Pod:
    c = {"name": "c", "resources": {"requests": requests}}
    doc = {
        "metadata": {"name": f"x-{on}"},
        "spec": {"nodeName": on, "containers": [c]},
        "status": {"phase": phase},
    }
    return msgspec.convert(doc, Pod)


def test_usage_split_tallies_every_pod_and_the_counted_ones_in_one_walk() -> None:
    pods = [
        bound("n1", {"cpu": "1"}),
        bound("n1", {"cpu": "2", "memory": "1Gi"}),
        bound("n2", {"cpu": "3"}),
        bound("n2", {"cpu": "8"}, phase="Succeeded"),  # finished: no longer counts
    ]
    theirs = {id(pods[1]), id(pods[2])}
    every, others = usage_split(pods, lambda p: id(p) in theirs)
    assert every == node_usage(pods)
    assert every["n1"] == NodeUse({"cpu": 3000, "memory": 1 << 30}, 2)
    assert others == {"n1": NodeUse({"cpu": 2000, "memory": 1 << 30}, 1), "n2": NodeUse({"cpu": 3000}, 1)}
    assert usage_split(pods, lambda p: False)[1] == {}


def test_what_bound_pods_request_is_taken_from_allocatable() -> None:
    n = node(allocatable={"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"})
    others = [bound("n1", {"cpu": "3", "memory": "1Gi"}), bound("n2", {"cpu": "4"})]
    use = node_usage(others)["n1"]
    assert node_reasons(asking({"cpu": "1"}), n, use, NO_VOLUMES) == []
    assert node_reasons(asking({"cpu": "1001m"}), n, use, NO_VOLUMES) == ["Insufficient cpu"]
    assert node_reasons(asking({"memory": "7Gi"}), n, use, NO_VOLUMES) == []
    assert node_reasons(asking({"memory": "7Gi", "cpu": "2"}), n, use, NO_VOLUMES) == ["Insufficient cpu"]
    assert node_reasons(asking({"nvidia.com/gpu": "2"}), n, use, NO_VOLUMES) == []
    assert node_reasons(asking({"nvidia.com/gpu": "3"}), n, use, NO_VOLUMES) == [
        "Insufficient nvidia.com/gpu"
    ]
    assert node_reasons(asking({"example.com/fpga": "1"}), n, use, NO_VOLUMES) == [
        "Insufficient example.com/fpga"
    ]


def test_finished_pods_free_their_room_and_every_pod_takes_a_slot() -> None:
    use = node_usage(
        [bound("n1", {"cpu": "4"}, phase="Succeeded"), bound("n1", {"cpu": "4"}, phase="Failed")]
    )
    assert use == {}
    full = node(allocatable={"pods": "2"})
    two = node_usage([bound("n1", {}), bound("n1", {"cpu": "1"})])["n1"]
    assert two.pods == 2
    assert node_reasons(pod(), full, two, NO_VOLUMES) == [TOO_MANY_PODS]  # even a pod asking nothing


def test_a_request_is_the_request_not_the_limit_and_a_limit_alone_is_the_request() -> None:
    n = node(allocatable={"cpu": "2"})
    assert node_reasons(asking({"cpu": "1"}, {"cpu": "4"}), n, NodeUse(), NO_VOLUMES) == []
    assert node_reasons(asking({}, {"cpu": "3"}), n, NodeUse(), NO_VOLUMES) == ["Insufficient cpu"]


def test_init_containers_sidecars_and_overhead_count_as_kubernetes_counts_them() -> None:
    n = node(allocatable={"cpu": "4"})
    init = {"name": "i", "resources": {"requests": {"cpu": "4"}}}
    sidecar = {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    app = {"name": "c", "resources": {"requests": {"cpu": "3"}}}
    # a one-shot init container of 4 alone fits; after a sidecar of 1 it needs 5
    assert node_reasons(pod({"initContainers": [init], "containers": [app]}), n, NodeUse(), NO_VOLUMES) == []
    two = pod({"initContainers": [sidecar, init], "containers": [app]})
    assert node_reasons(two, n, NodeUse(), NO_VOLUMES) == ["Insufficient cpu"]
    over = pod({"containers": [app], "overhead": {"cpu": "1001m"}})
    assert node_reasons(over, n, NodeUse(), NO_VOLUMES) == ["Insufficient cpu"]


# -- volumes ------------------------------------------------------------------------------------------


def claim(name: str, cls: str | None = "local", volume: str = "", **spec: Any) -> Claim:
    doc = {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "storageClassName": cls,
            "volumeName": volume,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Gi"}},
            **spec,
        },
    }
    return msgspec.convert(doc, Claim)


def pv(
    name: str, on: str | None = None, cls: str = "local", size: str = "20Gi", **extra: Any
) -> PersistentVolume:
    spec: dict[str, Any] = {
        "storageClassName": cls,
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
    }
    if on is not None:
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [on]}]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    spec.update(extra.pop("spec", {}))
    return msgspec.convert(
        {"metadata": {"name": name, **extra}, "spec": spec, "status": {"phase": "Available"}},
        PersistentVolume,
    )


def sc(
    name: str,
    mode: str = "WaitForFirstConsumer",
    provisioner: str = "csi.example.com",
    zones: list[str] | None = None,
) -> StorageClass:
    doc: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode}
    if zones is not None:
        doc["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": zones}]}
        ]
    return msgspec.convert(doc, StorageClass)


def mounting(*claims: str) -> Pod:
    vols = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return pod({"volumes": vols})


def hostnode(name: str, zone: str = "a") -> Node:
    return node(name, labels={"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone})


NODES = [hostnode("n1", "a"), hostnode("n2", "a"), hostnode("n3", "b")]


def test_a_bound_volume_keeps_the_pod_to_the_nodes_of_its_node_affinity_and_zone() -> None:
    volumes = Volumes(
        claims={("ns", "data"): claim("data", volume="pv-1"), ("ns", "zoned"): claim("zoned", volume="pv-z")},
        volumes={
            "pv-1": pv("pv-1", on="n2"),
            "pv-z": pv("pv-z", labels={"topology.kubernetes.io/zone": "b__c"}),
        },
    )
    got = feasible([mounting("data")], NODES, {}, volumes)
    assert got.nodes == ("n2",) and got.reasons == {"n1": (NODE_CONFLICT,), "n3": (NODE_CONFLICT,)}
    got = feasible([mounting("zoned")], NODES, {}, volumes)
    assert got.nodes == ("n3",) and got.reasons["n1"] == (ZONE_CONFLICT,)


def test_an_unbound_wait_for_first_consumer_claim_goes_where_a_volume_is_or_can_be_made() -> None:
    claims = {("ns", "scratch"): claim("scratch", cls="local"), ("ns", "fast"): claim("fast", cls="zonal")}
    classes = {
        "local": sc("local", provisioner="kubernetes.io/no-provisioner"),
        "zonal": sc("zonal", zones=["b"]),
    }
    small = pv("pv-small", on="n1", size="5Gi")
    taken = pv("pv-taken", on="n3", spec={"claimRef": {"namespace": "ns", "name": "other"}})
    volumes = Volumes(
        claims=claims, volumes={"a": pv("pv-a", on="n2"), "s": small, "t": taken}, classes=classes
    )
    got = feasible([mounting("scratch")], NODES, {}, volumes)
    assert got.nodes == ("n2",)  # n1's volume is too small, n3's is another claim's
    assert got.reasons == {"n1": (BIND_CONFLICT,), "n3": (BIND_CONFLICT,)}
    assert feasible([mounting("fast")], NODES, {}, volumes).nodes == ("n3",)  # provisioned in zone b only
    anywhere = Volumes(claims=claims, classes={"zonal": sc("zonal")})
    assert feasible([mounting("fast")], NODES, {}, anywhere).nodes == ("n1", "n2", "n3")


@pytest.mark.parametrize(
    ("volumes", "why"),
    [
        (Volumes(), 'persistentvolumeclaim "data" not found'),
        (
            Volumes(
                claims={("ns", "data"): claim("data", cls="std")}, classes={"std": sc("std", "Immediate")}
            ),
            UNBOUND_IMMEDIATE,
        ),
        (Volumes(claims={("ns", "data"): claim("data", cls=None)}), UNBOUND_IMMEDIATE),
        (
            Volumes(claims={("ns", "data"): claim("data", cls="gone")}),
            'storageclass.storage.k8s.io "gone" not found',
        ),
        (
            Volumes(claims={("ns", "data"): claim("data", volume="pv-x")}),
            'persistentvolumeclaim "data" bound to non-existent persistentvolume "pv-x"',
        ),
    ],
)
def test_a_claim_that_is_missing_or_waits_for_binding_leaves_no_node(volumes: Volumes, why: str) -> None:
    got = feasible([mounting("data")], NODES, {}, volumes)
    assert got.nodes == () and got.blocked == why
    assert got.summary() == f"0/3 nodes are available: {why}."


def test_a_generic_ephemeral_volume_is_its_pods_claim() -> None:
    p = pod({"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]}, name="job-0")
    assert feasible([p], NODES, {}, Volumes()).blocked == 'persistentvolumeclaim "job-0-scratch" not found'
    made = Volumes(
        claims={("ns", "job-0-scratch"): claim("job-0-scratch", cls="zonal")},
        classes={"zonal": sc("zonal", zones=["a"])},
    )
    assert feasible([p], NODES, {}, made).nodes == ("n1", "n2")


# -- all together --------------------------------------------------------------------------------------


def test_the_summary_counts_nodes_per_reason_like_kube_scheduler() -> None:
    nodes = [
        node("a", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
        node("b", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
        node("c", allocatable={"cpu": "1"}),
        node("d", allocatable={"cpu": "1"}),
        node("e", allocatable={"cpu": "1"}),
        node("f"),
        node("g"),
    ]
    got = feasible([asking({"cpu": "2"})], nodes, {}, NO_VOLUMES, eligible=["a", "b", "c", "d", "e", "f"])
    assert got.nodes == ("f",)
    assert got.summary() == (
        "1/7 nodes are available: 1 node(s) were not ready or not labelled for the bridge,"
        " 2 node(s) had untolerated taint {gpu: true}, 3 Insufficient cpu."
    )
    assert got.reasons["g"] == (NOT_READY,)


def test_a_gang_gets_the_nodes_every_member_may_use() -> None:
    nodes = [
        node("a", labels={"rack": "1"}),
        node("b", labels={"rack": "2"}),
        node("c", labels={"rack": "1"}, allocatable={"cpu": "2"}),
    ]
    leader = pod({"nodeSelector": {"rack": "1"}}, name="l")
    worker = asking({"cpu": "4"})
    got = feasible([leader, worker], nodes, {}, NO_VOLUMES)
    assert got.nodes == ("a",)
    assert got.reasons == {"b": (NO_AFFINITY,), "c": ("Insufficient cpu",)}


# -- properties -----------------------------------------------------------------------------------------

_keys = st.sampled_from(["gpu", "zone", "spot", "maint", ""])
_values = st.sampled_from(["", "true", "a", "1"])
_effects = st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule", ""])
_taints = st.lists(
    st.fixed_dictionaries({"key": _keys.filter(bool), "value": _values, "effect": _effects.filter(bool)}),
    max_size=4,
)
_tolerations = st.lists(
    st.fixed_dictionaries(
        {
            "key": _keys,
            "operator": st.sampled_from(["Equal", "Exists", ""]),
            "value": _values,
            "effect": _effects,
        }
    ),
    max_size=3,
)
_exprs = st.lists(
    st.fixed_dictionaries(
        {
            "key": st.sampled_from(["zone", "gpus", "rack"]),
            "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
            "values": st.lists(st.sampled_from(["a", "b", "1", "8"]), max_size=2),
        }
    ),
    max_size=3,
)
_labels = st.dictionaries(st.sampled_from(["zone", "gpus", "rack"]), st.sampled_from(["a", "b", "1", "8"]))


@settings(max_examples=examples(300), deadline=None)
@given(taints=_taints, tolerations=_tolerations, extra=_tolerations)
def test_adding_a_toleration_never_removes_a_node(
    taints: list[dict[str, str]], tolerations: list[dict[str, str]], extra: list[dict[str, str]]
) -> None:
    n = node(taints=taints)
    before = node_reasons(pod({"tolerations": tolerations}), n, NodeUse(), NO_VOLUMES) == []
    after = node_reasons(pod({"tolerations": tolerations + extra}), n, NodeUse(), NO_VOLUMES) == []
    assert after or not before


@settings(max_examples=examples(300), deadline=None)
@given(
    terms=st.lists(_exprs.map(lambda e: {"matchExpressions": e}), max_size=3),
    labels=st.lists(_labels, min_size=1, max_size=5),
    taints=_taints,
    tolerations=_tolerations,
)
def test_a_node_ruled_out_for_any_reason_is_never_offered(
    terms: list[dict[str, Any]],
    labels: list[dict[str, str]],
    taints: list[dict[str, str]],
    tolerations: list[dict[str, str]],
) -> None:
    nodes = [node(f"n{i}", labels=lab, taints=taints if i % 2 else []) for i, lab in enumerate(labels)]
    p = pod({"tolerations": tolerations, **(requiring(*terms) if terms else {})})
    got = feasible([p], nodes, {}, NO_VOLUMES)
    for n in nodes:
        reasons = node_reasons(p, n, NodeUse(), NO_VOLUMES)
        assert (n.metadata.name in got.nodes) is (reasons == [])
        assert (not affinity_matches(p, n)) <= (n.metadata.name not in got.nodes)
    assert set(got.nodes).isdisjoint(got.reasons) and len(got.nodes) + len(got.reasons) == len(nodes)


@settings(max_examples=examples(200), deadline=None)
@given(
    terms=st.lists(_exprs.filter(bool).map(lambda e: {"matchExpressions": e}), min_size=1, max_size=3),
    more=_exprs.map(lambda e: {"matchExpressions": e}),
    labels=_labels,
)
def test_adding_a_term_never_removes_a_node_and_adding_an_expression_never_adds_one(
    terms: list[dict[str, Any]], more: dict[str, Any], labels: dict[str, str]
) -> None:
    n = node(labels=labels)
    base = affinity_matches(pod(requiring(*terms)), n)
    assert affinity_matches(pod(requiring(*terms, more)), n) or not base  # OR of terms
    narrowed = dict(terms[0])
    narrowed["matchExpressions"] = terms[0]["matchExpressions"] + more["matchExpressions"]
    one = affinity_matches(pod(requiring(terms[0])), n)
    assert not affinity_matches(pod(requiring(narrowed)), n) or one  # AND inside a non-empty term


_cpu = st.sampled_from(["", "500m", "1", "2", "3500m"])


@settings(max_examples=examples(300), deadline=None)
@given(
    labels=st.lists(_labels, min_size=1, max_size=6),
    cordoned=st.lists(st.booleans(), min_size=6, max_size=6),
    allocatable=st.lists(st.sampled_from(["1", "2", "4"]), min_size=6, max_size=6),
    used=st.lists(st.tuples(st.integers(0, 5), _cpu), max_size=8),
    selector=_labels,
    ask=_cpu,
    tolerations=_tolerations,
    fields=st.lists(st.sampled_from(["n0", "n1", "n9"]), max_size=1),
)
def test_the_indexed_verdict_is_node_reasons_node_by_node(
    labels: list[dict[str, str]],
    cordoned: list[bool],
    allocatable: list[str],
    used: list[tuple[int, str]],
    selector: dict[str, str],
    ask: str,
    tolerations: list[dict[str, str]],
    fields: list[str],
) -> None:
    nodes = [
        node(f"n{i}", labels=lab, unschedulable=cordoned[i], allocatable={"cpu": allocatable[i], "pods": "3"})
        for i, lab in enumerate(labels)
    ]
    bound_pods = [bound(f"n{i}", {"cpu": cpu} if cpu else {}) for i, cpu in used]
    usage = node_usage(bound_pods)
    spec: dict[str, Any] = {"nodeSelector": selector, "tolerations": tolerations}
    if fields:
        spec |= requiring({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": fields}]})
    p = pod({**spec, "containers": [{"name": "c", "resources": {"requests": {"cpu": ask} if ask else {}}}]})
    got = feasible([p], nodes, usage, NO_VOLUMES)
    for n in nodes:
        reasons = node_reasons(p, n, usage.get(n.metadata.name, NodeUse()), NO_VOLUMES)
        assert set(got.reasons.get(n.metadata.name, ())) == set(reasons)
        assert (n.metadata.name in got.nodes) is (reasons == [])


@settings(max_examples=examples(500), deadline=None)
@given(
    digits=st.integers(0, 10**12),
    suffix=st.sampled_from(["", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"]),
    resource=st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu"]),
)
def test_the_fast_quantity_path_is_the_exact_one(digits: int, suffix: str, resource: str) -> None:
    text = f"{digits}{suffix}"
    try:
        exact = units(resource, parse_quantity(text))
    except QuantityError:
        with pytest.raises(QuantityError):
            quantity_units(resource, text)
        return
    assert quantity_units(resource, text) == exact
