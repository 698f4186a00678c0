"""The bridge end to end: a real lab's Slurm places pods that live in the fake Kubernetes API server.

Demo 1 of the seed: a pod → a placeholder job → RUNNING on the node Slurm chose → the pod bound to that
node, carrying the job-id label and the Slurm-node annotation, and ``squeue`` agreeing. Then both
lifecycles: the pod deleted → its job cancelled; the job cancelled in Slurm (``scancel``) → the pod deleted
with an Event saying so. On 26.05 (EXTERNAL_JOB) and 24.11 (the batch placeholder).

The Slurm node is a dynamic node of the lab's ``dyn`` partition under a reservation of its own (other
tests' jobs cannot take it); the pod names the reservation by annotation, as the policy allows.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from bridge.actions import JOB_ID_ANNOTATION, SLURM_NODE_ANNOTATION
from bridge.requests import PREFIX
from lab import Lab
from testkit.bridge_lab import (
    NODE,
    bridge_pod,
    bridge_process,
    k8s_node,
    placed,
    reserved_node,
    running_bridge,
    squeue,
)
from testkit.fake_kube import TOKEN, FakeKube, serve_kube, write_kubeconfig
from testkit.tools import eventually

log = logging.getLogger(__name__)


@pytest.mark.parametrize(("flavor", "version"), [("26.05", "v0.0.45"), ("24.11", "v0.0.42")])
async def test_demo_1_a_pod_placed_by_slurm_and_both_lifecycles(
    flavor: str, version: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    lab: Lab = request.getfixturevalue("lab_2605" if flavor == "26.05" else "lab_2411")  # that one only
    with reserved_node(lab, NODE):
        async with running_bridge(lab, version, tmp_path) as (fake, bridge):
            # 1. a pod is placed where Slurm runs its placeholder job
            created = fake.put("pods", bridge_pod("trainer"))

            def bound() -> dict[str, Any] | None:
                p = fake.get("pods", "team-a", "trainer")
                return p if p is not None and p["spec"].get("nodeName") else None

            placed = await eventually(bound, 60.0, "the pod to be bound", 0.2)
            job_id = placed["metadata"]["annotations"][JOB_ID_ANNOTATION]
            assert placed["spec"]["nodeName"] == NODE
            assert placed["metadata"]["annotations"][SLURM_NODE_ANNOTATION] == NODE
            assert squeue(lab, job_id) == f"{job_id}|RUNNING|{NODE}"  # Slurm and the pod agree

            def told() -> bool:  # the Event follows the binding
                reasons = [e["reason"] for e in fake.events_for("team-a", "trainer")]
                return reasons[:2] == ["SlurmSubmitted", "SlurmBound"]

            await eventually(told, 10.0, "the SlurmSubmitted and SlurmBound Events", 0.1)
            latency = bridge.stats.last_bind_latency
            assert latency is not None
            log.info("%s: Slurm RUNNING → bound in %.2f s", flavor, latency)
            print(f"{flavor}: Slurm RUNNING -> bound {latency:.2f} s")

            # 2. the pod deleted → its job cancelled
            fake.remove("pods", "team-a", "trainer")
            await eventually(lambda: squeue(lab, job_id) == "", 30.0, f"job {job_id} to be cancelled", 0.5)
            assert created["metadata"]["uid"]

            # 3. the job cancelled in Slurm → the pod deleted, with an Event
            fake.put("pods", bridge_pod("trainer-2"))

            def bound2() -> dict[str, Any] | None:
                p = fake.get("pods", "team-a", "trainer-2")
                return p if p is not None and p["spec"].get("nodeName") else None

            second = await eventually(bound2, 60.0, "the second pod to be bound", 0.2)
            lab.run(["scancel", second["metadata"]["annotations"][JOB_ID_ANNOTATION]])
            await eventually(
                lambda: fake.get("pods", "team-a", "trainer-2") is None,
                30.0,
                "the pod of a cancelled job to go",
                0.2,
            )
            ended = [e for e in fake.events_for("team-a", "trainer-2") if e["reason"] == "SlurmJobEnded"]
            assert ended and "CANCELLED" in ended[0]["message"]
            assert not bridge.stats.errors, bridge.stats.errors


async def test_the_console_script_places_a_pod_and_exports_the_bridges_metrics(
    lab_2605: Lab, tmp_path: Path
) -> None:
    """``slurm-keda bridge``: the real console script, configured by flags, a policy file and a kubeconfig."""
    import subprocess

    import aiohttp

    from testkit.tools import promtool_path

    fake = FakeKube(token=TOKEN)
    fake.put("nodes", k8s_node(NODE))
    with reserved_node(lab_2605, NODE):
        async with serve_kube(fake) as url:
            kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
            async with bridge_process(
                lab_2605, tmp_path, kubeconfig, NODE, "--bridge-instance", "console"
            ) as (
                _,
                port,
            ):
                fake.put("pods", bridge_pod("console"))

                def bound() -> bool:
                    p = fake.get("pods", "team-a", "console")
                    return bool(p and p["spec"].get("nodeName") == NODE)

                await eventually(bound, 60.0, f"the pod to be bound (log in {tmp_path})", 0.2)

                async def counted() -> str | None:  # the binding is counted once its Event and label follow
                    async with (
                        aiohttp.ClientSession() as http,
                        http.get(f"http://127.0.0.1:{port}/metrics") as r,
                    ):
                        text = await r.text()
                    return text if 'slurm_bridge_actions_total{action="bind"} 1.0' in text else None

                body = await eventually(counted, 10.0, "the binding counted in /metrics", 0.2)
                assert "slurm_bridge_bind_latency_seconds " in body
                out = subprocess.run(
                    [promtool_path(), "check", "metrics"], input=body.encode(), capture_output=True
                )
                assert out.returncode == 0, out.stdout + out.stderr
                job_id = fake.get("pods", "team-a", "console")["metadata"]["annotations"][JOB_ID_ANNOTATION]  # type: ignore[index]
                fake.remove("pods", "team-a", "console")
                await eventually(lambda: squeue(lab_2605, job_id) == "", 30.0, "the job to be cancelled", 0.5)


def pod_with(
    name: str,
    annotations: dict[str, str],
    requests: dict[str, str] | None = None,
    reservation: str | None = NODE,
    **spec: Any,
) -> dict[str, Any]:
    p = bridge_pod(name, reservation)
    p["metadata"]["annotations"].update(annotations)
    if requests is not None:
        p["spec"]["containers"][0]["resources"] = {"requests": requests}
    p["spec"].update(spec)
    return p


def jobs_named(lab: Lab, name: str) -> list[str]:
    out = lab.run(["squeue", "-h", "-n", f"k8s:team-a/{name}", "-o", "%i|%T|%r"], check=False)
    return [line for line in out.splitlines() if line.strip()]


def condition(fake: FakeKube, name: str) -> str:
    p = fake.get("pods", "team-a", name) or {}
    conditions = {c["type"]: c for c in p.get("status", {}).get("conditions", [])}
    return str(conditions.get("PodScheduled", {}).get("message", ""))


def events(fake: FakeKube, name: str, reason: str) -> list[str]:
    return [e["message"] for e in fake.events_for("team-a", name) if e["reason"] == reason]


def bound_to(fake: FakeKube, name: str) -> str | None:
    p = fake.get("pods", "team-a", name)
    return p["spec"].get("nodeName") if p else None


async def test_waiting_refusals_bad_input_restart_and_time_limit(lab_2605: Lab, tmp_path: Path) -> None:
    """On 26.05: a pod Slurm holds back shows Slurm's reason; policy violations and absurd requests are
    refused with an Event and never submitted; a pod naming its node is left alone; a job Slurm refuses is
    reported once per backoff; a bridge killed between submit and bind is replaced with no second job; a
    job hitting its time limit deletes its pod."""
    lab = lab_2605
    second = f"{NODE}-2"
    doc = {
        "namespaces": {
            "team-a": {"user_id": 0, "partitions": ["dyn", "nosuch"], "reservations": [NODE, second]}
        }
    }
    nodes = (NODE, second)
    with reserved_node(lab, NODE), reserved_node(lab, second):
        async with running_bridge(lab, "v0.0.45", tmp_path, policy=doc, nodes=nodes) as (fake, bridge):
            # a 1-minute job on the second node (its limit lowered to 0 below, once the held pod has said why
            # it waits: Slurm ends it TIMEOUT at its next time-limit check, within 30 s, while the rest runs)
            fake.put("pods", pod_with("short", {PREFIX + "time-limit": "1"}, reservation=second))
            await eventually(lambda: bound_to(fake, "short") == second, 60.0, "the short pod bound", 0.2)
            (short_job,) = jobs_named(lab, "short")
            short_id = short_job.split("|")[0]
            assert lab.run(["squeue", "-h", "-j", short_id, "-o", "%l"]).strip() == "1:00"
            # waiting: the second node is taken (exclusively), so this one pends and says why
            fake.put("pods", pod_with("held", {}, reservation=second))

            def held() -> str | None:
                # a fresh job shows "pending" (reason None) until slurmctld's next scheduling pass names one
                text = condition(fake, "held")
                named = any(r in text for r in ("Resources", "Priority", "Reservation"))
                return text if text.startswith("Slurm job ") and named else None

            message = await eventually(held, 30.0, "Slurm's reason on the held pod", 0.2)
            log.info("held pod: %s", message)
            lab.run(["scontrol", "update", f"jobid={short_id}", "timelimit=0"])

            # refusals — an absurd request, a misspelt annotation, another user: an Event each, no job
            fake.put("pods", pod_with("greedy", {}, {"cpu": "1e6"}))
            fake.put("pods", pod_with("typo", {PREFIX + "acount": "x"}))
            fake.put("pods", pod_with("root", {PREFIX + "user": "1001"}))
            for name, why in (
                ("greedy", "resources beyond any node"),
                ("typo", "unknown annotation"),
                ("root", "cannot choose another"),
            ):
                await eventually(
                    lambda n=name, w=why: any(w in m for m in events(fake, n, "SlurmRefused")),  # type: ignore[misc]
                    15.0,
                    f"the refusal of {name}",
                    0.2,
                )
                assert jobs_named(lab, name) == []
            # a pod that already names its node is not the bridge's to place
            fake.put("pods", pod_with("placed", {}, nodeName="c1"))
            # a partition the policy allows but Slurm does not know: Slurm refuses, reported once per backoff
            fake.put("pods", pod_with("lost", {PREFIX + "partition": "nosuch"}, reservation=None))
            (text,) = await eventually(
                lambda: events(fake, "lost", "SlurmSubmitFailed"), 15.0, "Slurm's refusal", 0.2
            )
            assert "Invalid partition name specified" in text
            await asyncio.sleep(3.0)  # several passes, inside the first 10 s backoff
            assert len(events(fake, "lost", "SlurmSubmitFailed")) == 1

            # a bridge killed between submit and bind
            fake.fail_always("POST", r"/binding$", 500)
            fake.put("pods", pod_with("restart", {}))
            await eventually(
                lambda: bridge.stats.errors[("bind", "http_500")] >= 1, 30.0, "a failed binding", 0.2
            )
        fake.heal()
        async with running_bridge(lab, "v0.0.45", tmp_path, policy=doc, fake=fake):  # the same instance id
            await eventually(
                lambda: bound_to(fake, "restart") == NODE, 30.0, "the replacement to bind it", 0.2
            )
            assert len(jobs_named(lab, "restart")) == 1, jobs_named(lab, "restart")  # no second job
            assert fake.events_for("team-a", "placed") == [] and bound_to(fake, "placed") == "c1"

            # the time limit: the job ends TIMEOUT and its pod is deleted, the Event naming the cause
            await eventually(
                lambda: fake.get("pods", "team-a", "short") is None, 90.0, "the timed-out pod to go", 0.5
            )
            ended = events(fake, "short", "SlurmJobEnded")
            assert ended and "TIMEOUT" in ended[0], ended
            # and the held pod gets the node it waited for
            await eventually(lambda: bound_to(fake, "held") == second, 60.0, "the held pod to be bound", 0.5)


async def test_missing_kubernetes_data_never_cancels_and_a_dead_kubelet_frees_the_node(
    lab_2605: Lab, tmp_path: Path
) -> None:
    """On 26.05: while the Kubernetes API is down the bridge cannot know a pod is gone, so it cancels nothing;
    once it can list again it cancels the orphan. A pod stuck Terminating on a dead kubelet frees its Slurm
    job ``terminating_grace`` after its grace period."""
    lab = lab_2605
    with reserved_node(lab, NODE):
        async with running_bridge(lab, "v0.0.45", tmp_path, terminating_grace=2.0) as (fake, bridge):
            fake.put("pods", bridge_pod("kept"))
            await eventually(lambda: bound_to(fake, "kept") == NODE, 60.0, "the pod bound", 0.2)
            job_id = fake.get("pods", "team-a", "kept")["metadata"]["annotations"][JOB_ID_ANNOTATION]  # type: ignore[index]
            fake.down = True  # the API server unreachable: watches break, lists fail
            fake.close_watches()
            await eventually(
                lambda: not bridge.pods.synced, 10.0, "the pod cache to be marked incomplete", 0.1
            )
            fake.remove("pods", "team-a", "kept")  # gone, but the bridge cannot see it
            passes = bridge.passes
            await eventually(lambda: bridge.passes >= passes + 2, 20.0, "two passes without pod data", 0.2)
            assert squeue(lab, job_id) == f"{job_id}|RUNNING|{NODE}"  # nothing cancelled on missing data
            fake.down = False
            await eventually(lambda: squeue(lab, job_id) == "", 30.0, "the orphaned job to be cancelled", 0.5)

            fake.put("pods", bridge_pod("stuck"))
            await eventually(lambda: bound_to(fake, "stuck") == NODE, 60.0, "the second pod bound", 0.2)
            stuck_job = fake.get("pods", "team-a", "stuck")["metadata"]["annotations"][JOB_ID_ANNOTATION]  # type: ignore[index]
            fake.kill_kubelet(NODE)
            fake.delete("pods", "team-a", "stuck", grace=1)  # Terminating, and nothing will finish it
            assert fake.get("pods", "team-a", "stuck")["metadata"]["deletionTimestamp"]  # type: ignore[index]
            await eventually(
                lambda: squeue(lab, stuck_job) == "", 30.0, "the stuck pod's job to be cancelled", 0.5
            )
            assert (
                fake.get("pods", "team-a", "stuck") is not None
            )  # still Terminating: Slurm freed the node anyway


async def test_a_forbidden_binding_backs_off_says_why_once_and_releases_the_job(
    lab_2605: Lab, tmp_path: Path
) -> None:
    """``pods/binding`` missing from the RBAC: the bridge retried ~2 times a second while the job held its
    node. Now: retries back off (2 s, 4 s, ...), one SlurmBindFailed Event says why, and past the bind
    deadline the job is released (its admin comment marked first) instead of holding the node — and the pod,
    the user's only copy, is kept and gets a new job, bound once the API server allows it."""
    lab = lab_2605
    deadline = 8.0
    with reserved_node(lab, NODE):
        async with running_bridge(lab, "v0.0.45", tmp_path, bind_deadline=deadline) as (fake, bridge):
            fake.fail_always("POST", r"/pods/[^/]+/binding$", 403)
            fake.put("pods", bridge_pod("unbindable"))

            def job_id() -> str | None:  # never bound: its job id is in the submission's Event only
                said = [e["message"] for e in fake.events_for("team-a", "unbindable")]
                return next((m.split()[2] for m in said if m.startswith("Slurm job ")), None)

            jid = await eventually(job_id, 60.0, "the SlurmSubmitted Event (bindings are refused)", 0.1)
            await eventually(
                lambda: squeue(lab, jid).split("|")[1:2] == ["RUNNING"], 60.0, "the job to start", 0.1
            )
            await eventually(lambda: bridge.stats.released == 1, deadline + 30, "the job to be released", 0.1)
            fake.heal()  # the RBAC mended: a new job's binding (a poll and a start away, > 1 s) succeeds
            tries = bridge.stats.errors[("bind", "http_403")]
            # 2 s, 4 s, 8 s...: at most 4 attempts within the 8 s deadline (about 16 at 2 a second before)
            assert 1 <= tries <= 5, tries
            print(f"bindings forbidden, {deadline:g} s deadline: {tries} tries, then released")
            reasons = [e["reason"] for e in fake.events_for("team-a", "unbindable")]
            assert reasons.count("SlurmBindFailed") == 1, reasons
            await eventually(lambda: squeue(lab, jid) == "", 30.0, "the released job to end", 0.5)
            bound = await eventually(lambda: placed(fake, "unbindable"), 60.0, "the pod bound again", 0.2)
            assert bound["metadata"]["annotations"][JOB_ID_ANNOTATION] != jid
            reasons = [e["reason"] for e in fake.events_for("team-a", "unbindable")]
            assert reasons.count("SlurmSubmitted") == 2 and "SlurmJobEnded" not in reasons, reasons
            assert bridge.stats.errors[("bind", "http_403")] == tries  # none after the mend
