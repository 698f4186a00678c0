"""Nodes shared by Kubernetes and Slurm (bridge/sharednodes.py): the default scheduler's pods tainted off,
a cordon drains the Slurm node and an uncordon resumes it (only the bridge's own drain), a Slurm drain
taints the Kubernetes node until it is resumed; nothing on stale data; the bridge's pods tolerate the
managed taint."""

from __future__ import annotations

from msgspec.structs import replace

from bridge.actions import Submit, plan
from bridge.pods import Node
from bridge.sharednodes import (
    CORDON_REASON,
    DRAINED_TAINT,
    MANAGED_TAINT,
    DrainSlurmNode,
    NodeAction,
    ResumeSlurmNode,
    SetTaints,
    shared_node_actions,
)
from exporter.model import Node as SlurmNode
from exporter.model import Snapshot
from testkit.builders import NOW, OPTIONS, k8s_node, pod, snapshot, world

MANAGED = {"key": MANAGED_TAINT, "value": "true", "effect": "NoSchedule"}
DRAINED = {"key": DRAINED_TAINT, "value": "true", "effect": "NoSchedule"}


def slurm(*nodes: SlurmNode, age: float = 1.0) -> Snapshot:
    return replace(snapshot(age=age), nodes=nodes)


def act(snap: Snapshot, *nodes: Node) -> list[NodeAction]:
    return shared_node_actions(
        snap, list(nodes), node_label="slurm-keda.io/bridge", now=NOW, max_data_age=30.0
    )


def idle(name: str = "c1", flags: tuple[str, ...] = (), reason: str = "") -> SlurmNode:
    return SlurmNode(name=name, state="IDLE", partitions=("cpu",), flags=flags, reason=reason)


def test_a_shared_node_gets_the_managed_taint_once() -> None:
    (action,) = act(slurm(idle()), k8s_node("c1"))
    assert isinstance(action, SetTaints) and action.taints == ((MANAGED_TAINT, "true", "NoSchedule"),)
    assert act(slurm(idle()), k8s_node("c1", taints=[MANAGED])) == []
    assert act(slurm(idle()), k8s_node("c1", bridge=False)) == []  # not the bridge's node
    assert act(slurm(idle("c2")), k8s_node("c1")) == []  # no Slurm node for it
    stale = slurm(idle(), age=31.0)
    assert act(stale, k8s_node("c1"), k8s_node("c1", cordoned=True)) == []


def test_a_cordon_drains_the_slurm_node_and_an_uncordon_resumes_only_our_drain() -> None:
    cordoned = k8s_node("c1", cordoned=True, taints=[MANAGED])
    (drain,) = act(slurm(idle()), cordoned)
    assert drain == DrainSlurmNode("c1", CORDON_REASON.format(node="c1"))
    ours = idle(flags=("DRAIN",), reason=CORDON_REASON.format(node="c1"))
    assert act(slurm(ours), cordoned) == []  # drained already: nothing more
    (resume,) = act(slurm(ours), k8s_node("c1", taints=[MANAGED]))
    assert isinstance(resume, ResumeSlurmNode) and resume.node == "c1"
    admins = idle(flags=("DRAIN",), reason="bad DIMM")
    (taint,) = act(slurm(admins), k8s_node("c1", taints=[MANAGED]))  # an admin's drain is not resumed
    assert isinstance(taint, SetTaints) and (DRAINED_TAINT, "true", "NoSchedule") in taint.taints
    assert "bad DIMM" in taint.why


def test_a_slurm_drain_taints_the_kubernetes_node_until_resumed() -> None:
    drained = idle(flags=("DRAIN",), reason="maintenance")
    (taint,) = act(slurm(drained), k8s_node("c1", taints=[MANAGED]))
    assert isinstance(taint, SetTaints) and set(taint.taints) == {
        (MANAGED_TAINT, "true", "NoSchedule"),
        (DRAINED_TAINT, "true", "NoSchedule"),
    }
    assert act(slurm(drained), k8s_node("c1", taints=[MANAGED, DRAINED])) == []
    (untaint,) = act(slurm(idle()), k8s_node("c1", taints=[MANAGED, DRAINED]))
    assert isinstance(untaint, SetTaints) and untaint.taints == ((MANAGED_TAINT, "true", "NoSchedule"),)
    # the node Slinky names: the Kubernetes node k8s-7 is Slurm's c1
    (named,) = act(
        slurm(drained), k8s_node("k8s-7", taints=[MANAGED], **{"slinky.slurm.net/slurm-nodename": "c1"})
    )
    assert isinstance(named, SetTaints) and named.node == "k8s-7"


def test_the_bridges_pods_tolerate_the_managed_taint_but_not_a_drain() -> None:
    nodes = [k8s_node(n, taints=[MANAGED]) for n in ("c1", "c2", "c3")]
    (action,) = plan(world(pods=[pod()], nodes=nodes), OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ()
    nodes[0] = k8s_node("c1", taints=[MANAGED, DRAINED])
    (action,) = plan(world(pods=[pod()], nodes=nodes), OPTIONS)
    assert isinstance(action, Submit) and action.excluded_nodes == ("c1",)
