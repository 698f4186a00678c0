"""Kubernetes' placement rules in the bridge's pass: 1,000 pending pods × 1,000 nodes (labels, taints,
allocatable, 2,000 bound pods of others), one :func:`bridge.actions.plan` pass — every pod submitted with its
excluded nodes — timed for pods sharing one spec (a Job's replicas), ten specs, and every pod its own
(node selector and toleration differ pod to pod: the worst case, 1,000 × 1,000 node checks). Baseline in the
same run: the same pass with every node feasible for every pod and no other pods (the rules' floor cost).
Each case twice: judged afresh every pass (the first pass after a node or another pod changed), and with
the verdicts kept between passes (:mod:`bridge.placement`: the controller's steady state while nothing
they depend on changes).

Run: ``.venv/bin/python benchmarks/bench_placement.py [--pods 1000 --nodes 1000 --repeat 5]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit

from bridge.actions import Submit, World, plan
from bridge.feasible import node_usage
from bridge.placement import Placements
from bridge.pods import Pod, decode_node, decode_pod
from exporter.model import Node, Snapshot
from testkit.builders import NOW, OPTIONS, pod_doc


def nodes(n: int, rules: bool) -> tuple[list[Any], list[Node]]:
    k8s, slurm = [], []
    for i in range(n):
        name = f"n{i:04d}"
        labels = {"slurm-keda.io/bridge": "true", "rack": f"r{i % 20}", "kubernetes.io/hostname": name}
        taints = [{"key": "gpu", "value": "true", "effect": "NoSchedule"}] if rules and i % 10 == 0 else []
        doc = {
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
            },
        }
        k8s.append(decode_node(json.dumps(doc)))
        slurm.append(Node(name=name, state="IDLE", partitions=("cpu",)))
    return k8s, slurm


def pods(n: int, specs: int, rules: bool) -> list[Pod]:
    out = []
    for i in range(n):
        s = i % specs
        spec: dict[str, Any] = {}
        if rules:
            spec["nodeSelector"] = {"rack": f"r{s % 20}"} if s % 2 else {}
            spec["tolerations"] = [{"key": "gpu", "operator": "Exists"}] if s % 3 == 0 else []
        containers = [
            {"name": "m", "resources": {"requests": {"cpu": f"{1 + s % 4}", "memory": f"{1 + s}Gi"}}}
        ]
        doc = pod_doc(f"p{i}", uid=f"u{i}", containers=containers, spec=spec, status={"phase": "Pending"})
        doc["metadata"]["resourceVersion"] = "1"
        out.append(decode_pod(json.dumps(doc)))
    return out


def others(k8s: list[Any], per_node: int) -> list[Pod]:
    out = []
    for node in k8s:
        for j in range(per_node):
            name = f"ds-{node.metadata.name}-{j}"
            containers = [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]
            doc = pod_doc(name, "kube-system", uid=name, scheduler="default-scheduler", containers=containers)
            doc["spec"]["nodeName"] = node.metadata.name
            doc["status"] = {"phase": "Running"}
            doc["metadata"]["resourceVersion"] = "1"
            out.append(decode_pod(json.dumps(doc)))
    return out


def one_pass(world: World) -> tuple[float, int]:
    t0 = time.perf_counter()
    actions = plan(world, OPTIONS)
    elapsed = time.perf_counter() - t0
    return elapsed, sum(len(a.excluded_nodes) for a in actions if isinstance(a, Submit))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    rows = []
    for label, specs, rules in (
        ("baseline: no rules, one spec", 1, False),
        ("one spec", 1, True),
        ("ten specs", 10, True),
        ("every pod its own spec", args.pods, True),
    ):
        k8s, slurm = nodes(args.nodes, rules)
        bound = others(k8s, 2) if rules else []
        memo: dict[tuple[str, str], dict[str, int]] = {}
        usage = node_usage(bound, memo)
        snap = Snapshot(
            taken_at=NOW,
            api_version="v0.0.45",
            nodes=tuple(slurm),
            fetched_at={"jobs": NOW - 1, "nodes": NOW - 1, "partitions": NOW - 1},
        )
        pending = pods(args.pods, specs, rules)
        asks: dict[tuple[str, str], dict[str, int]] = {}  # kept between passes, as the controller keeps it
        for kept in (False, True):
            times, excluded = [], 0
            placements = Placements()
            admissions: dict[Any, Any] = {}  # kept, as the controller keeps it
            for i in range(args.repeat + 1):
                usage_t0 = time.perf_counter()
                usage = node_usage(bound, memo)
                usage_s = time.perf_counter() - usage_t0
                world = World(
                    snap,
                    pending,
                    k8s,
                    NOW,
                    usage=usage,
                    others_usage=usage,
                    admissions=admissions,
                    asks=asks,
                    placements=placements if kept else None,
                )
                elapsed, excluded = one_pass(world)
                if i:  # the first pass fills the memos (the kept case's judges everything): not counted
                    times.append(elapsed + usage_s)
            name = f"{label}, {'kept' if kept else 'afresh'}"
            rows.append((name, statistics.median(times), min(times), excluded))
    base = rows[0][1]
    what = f"{args.pods} pods × {args.nodes} nodes, {args.repeat} passes each"
    print(f"{what} (median, min; the usage of 2 other pods per node included)")
    print(f"{'case':<40} {'pass median':>12} {'min':>8} {'× baseline':>11} {'excluded (sum)':>15}")
    for label, median, low, excluded in rows:
        print(
            f"{label:<40} {median * 1000:10.1f} ms {low * 1000:6.1f} ms {median / base:10.2f}× {excluded:15d}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
