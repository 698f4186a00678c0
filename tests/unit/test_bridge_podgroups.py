"""A PodGroup's status as scheduler-plugins keeps it, from its bridge pods and its Slurm job."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from bridge.actions import GroupStatus, plan
from bridge.groups import POD_GROUP_LABEL
from bridge.podgroups import group_status
from bridge.pods import Pod, PodGroup, decode_pod
from exporter.model import Job
from testkit.builders import OPTIONS, pod_doc, world

SUBMITTED = 1_800_000_000.0


def member(name: str, phase: str = "Pending", node: str | None = None) -> Pod:
    doc = pod_doc(name, uid=f"u-{name}", labels={POD_GROUP_LABEL: "g"}, node=node, status={"phase": phase})
    doc["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "train", "controller": True}]
    return decode_pod(json.dumps(doc))


def group(min_member: int = 2, **status: Any) -> PodGroup:
    doc = {
        "metadata": {"name": "g", "namespace": "team-a"},
        "spec": {"minMember": min_member},
        "status": status,
    }
    return msgspec.convert(doc, PodGroup)


JOB = Job(job_id=9, state="PENDING", submit_time=SUBMITTED)


@pytest.mark.parametrize(
    ("pods", "job", "phase", "counts"),
    [
        ([member("a")], None, "Pending", (0, 0, 0, 0)),
        ([member("a"), member("b")], None, "PreScheduling", (0, 0, 0, 0)),
        ([member("a"), member("b")], JOB, "Scheduling", (0, 0, 0, 0)),
        ([member("a", "Pending", "c1"), member("b", "Pending", "c2")], JOB, "Scheduled", (2, 0, 0, 0)),
        ([member("a", "Running", "c1"), member("b", "Running", "c2")], JOB, "Running", (2, 2, 0, 0)),
        ([member("a", "Succeeded", "c1"), member("b", "Running", "c2")], JOB, "Running", (2, 1, 1, 0)),
        ([member("a", "Failed", "c1"), member("b", "Running", "c2")], JOB, "Failed", (2, 1, 0, 1)),
        ([member("a", "Succeeded", "c1"), member("b", "Succeeded", "c2")], JOB, "Finished", (2, 0, 2, 0)),
    ],
)
def test_the_phase_and_counts_follow_the_members(
    pods: list[Pod], job: Job | None, phase: str, counts: tuple[int, int, int, int]
) -> None:
    status = group_status(group(), pods, job)
    assert status is not None and status["phase"] == phase
    assert (status["scheduled"], status["running"], status["succeeded"], status["failed"]) == counts
    assert status["occupiedBy"] == "team-a/train"
    assert ("scheduleStartTime" in status) == (job is not None)


def test_nothing_is_written_twice_and_a_final_phase_stays() -> None:
    pods = [member("a"), member("b")]
    status = group_status(group(), pods, JOB)
    assert status is not None
    assert group_status(group(**status), pods, JOB) is None
    assert group_status(group(phase="Finished"), pods, JOB) is None


def test_the_plan_keeps_the_status_of_the_bridges_pod_groups() -> None:
    pods = [member("a"), member("b")]
    w = world(pods=pods, pod_groups={("team-a", "g"): 2}, pod_group_objects={("team-a", "g"): group()})
    statuses = [a for a in plan(w, OPTIONS) if isinstance(a, GroupStatus)]
    assert statuses == [
        GroupStatus(
            "team-a",
            "g",
            {
                "phase": "PreScheduling",
                "scheduled": 0,
                "running": 0,
                "succeeded": 0,
                "failed": 0,
                "occupiedBy": "team-a/train",
            },
        )
    ]
