"""(snapshot, pods, nodes) → what the bridge does next. Pure: the controller applies the actions.

The bridge's jobs are found by their ``admin_comment`` (this instance's id and the pod's uid,
:meth:`bridge.requests.JobRequest.admin_comment`), so the plan is rebuilt from Slurm and Kubernetes alone
after a restart. One pass of :func:`plan`:

* **a pod waiting to be placed** — no job: submit one (nodes whose kubelet cannot take the pod are
  excluded, never required); pending job: mirror Slurm's reason and expected start into the pod; running
  job: bind the pod to the Kubernetes node of the job's Slurm node (or cancel the job, and so resubmit,
  if that node is gone, cordoned or not ready); job ended before binding: delete the pod, saying why.
* **a bound pod** — job ended (completed, cancelled, timed out, node failure, preempted...): delete the
  pod, naming the cause; job vanished from Slurm: delete the pod; pod finished: cancel the job; pod being
  deleted: cancel the job once the pod is gone, or once it is still Terminating ``terminating_grace``
  seconds after its ``deletionTimestamp`` (the end of its grace period): a dead kubelet never finishes
  it, and Slurm would keep the node forever.
* **a job without its pod** (the pod list being complete) — cancel it. Duplicate jobs for one pod: all but
  the newest are cancelled.

**Missing data never leads to an action**: unless the snapshot's jobs and nodes were fetched within
``max_data_age`` seconds, the plan is empty — no cancel, no delete, no submit. A submission this process
made is remembered (``submitted``) until a snapshot fetched after it shows the job, so no pod is
submitted twice in between.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from exporter.model import Job, Snapshot
from exporter.slurmtext import hostlist_expand

from .pods import Node, Pod
from .policy import Policy
from .requests import JobRequest, Refusal, admit, parse_admin_comment

__all__ = [
    "JOB_ID_LABEL",
    "SLURM_NODE_ANNOTATION",
    "Bind",
    "BridgeOptions",
    "Cancel",
    "DeletePod",
    "Refuse",
    "Submit",
    "Submitted",
    "Waiting",
    "World",
    "plan",
]

JOB_ID_LABEL = "slurm-keda.io/job-id"
"""Label the bridge puts on a pod it bound: its Slurm job id."""
SLURM_NODE_ANNOTATION = "slurm-keda.io/slurm-node"
"""Annotation the bridge puts on a pod it bound: the Slurm node it runs on."""
SLINKY_NODE_LABEL = "slinky.slurm.net/slurm-nodename"
"""The Kubernetes node label naming its Slurm node (Slinky's); without it the names must match."""
ENDED = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
    | {"OUT_OF_MEMORY"}
)


@dataclass(frozen=True)
class BridgeOptions:
    """The bridge's settings that the plan depends on; durations in seconds."""

    instance: str
    """This bridge's id, written into every job's admin comment (two clusters' bridges never mix)."""
    policy: Policy
    scheduler_name: str = "slurm-bridge"
    own_namespace: str = "slurm-keda"
    node_label: str = "slurm-keda.io/bridge"
    """Only Kubernetes nodes carrying this label (any value but ``"false"``) take bridge pods."""
    max_data_age: float = 30.0
    terminating_grace: float = 30.0


@dataclass(frozen=True)
class Submitted:
    """A submission this process made, not yet seen in a snapshot."""

    job_id: int
    at: float


@dataclass(frozen=True)
class World:
    """Everything one plan looks at."""

    snapshot: Snapshot
    pods: Sequence[Pod]
    """Every pod naming the bridge as its scheduler, bound or not."""
    nodes: Sequence[Node]
    """Every Kubernetes node."""
    now: float
    submitted: Mapping[str, Submitted] = field(default_factory=dict)
    """Pod uid → this process's submission not yet in the snapshot."""
    pods_complete: bool = True
    """The pod list is a full, current list (a synced watch): only then is a job's missing pod gone."""
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Namespace name → its labels (for the policy's namespace selectors; empty without selectors)."""


@dataclass(frozen=True)
class Submit:
    pod: str
    uid: str
    request: JobRequest
    excluded_nodes: tuple[str, ...]


@dataclass(frozen=True)
class Bind:
    pod: str
    uid: str
    job_id: int
    node: str
    """The Kubernetes node."""
    slurm_node: str


@dataclass(frozen=True)
class Waiting:
    pod: str
    uid: str
    message: str


@dataclass(frozen=True)
class Refuse:
    pod: str
    uid: str
    reason: str


@dataclass(frozen=True)
class Cancel:
    job_id: int
    why: str
    pod: str | None = None


@dataclass(frozen=True)
class DeletePod:
    pod: str
    uid: str
    why: str


Action = Submit | Bind | Waiting | Refuse | Cancel | DeletePod


def _time(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M UTC") if epoch else ""


def waiting_message(job: Job) -> str:
    """``Slurm job 1234: Priority, expected start 12:30 UTC`` — what ``kubectl describe pod`` shows."""
    text = f"Slurm job {job.job_id}: {job.state.lower()}"
    if job.reason and job.reason != "None":
        text = f"Slurm job {job.job_id}: {job.reason}"
    if job.start_time:
        text += f", expected start {_time(job.start_time)}"
    return text


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


class _Nodes:
    """Slurm node ↔ Kubernetes node, and which Kubernetes nodes may take bridge pods."""

    def __init__(self, nodes: Sequence[Node], options: BridgeOptions) -> None:
        self.by_slurm: dict[str, Node] = {}
        for n in nodes:
            name = n.metadata.labels.get(SLINKY_NODE_LABEL) or n.metadata.name
            self.by_slurm.setdefault(name, n)
        self._label = options.node_label

    def usable(self, slurm_node: str) -> Node | None:
        """The Kubernetes node for ``slurm_node`` if it is labelled for the bridge, schedulable and Ready."""
        n = self.by_slurm.get(slurm_node)
        if n is None or n.spec.unschedulable or not n.ready:
            return None
        if self._label and n.metadata.labels.get(self._label, "false") == "false":
            return None
        return n


def _fresh(world: World, options: BridgeOptions) -> bool:
    fetched = world.snapshot.fetched_at
    return all(e in fetched and world.now - fetched[e] <= options.max_data_age for e in ("jobs", "nodes"))


def plan(world: World, options: BridgeOptions) -> list[Action]:
    """The actions for one look at the world (empty when the Slurm data is stale); see the module doc."""
    if not _fresh(world, options):
        return []
    snap = world.snapshot
    jobs_seen_at = snap.fetched_at["jobs"]
    ours: dict[str, list[Job]] = {}
    for job in snap.jobs:
        parsed = parse_admin_comment(job.admin_comment) if job.admin_comment else None
        if parsed is not None and parsed[0] == options.instance:
            for _, _, uid in parsed[1]:
                ours.setdefault(uid, []).append(job)
    actions: list[Action] = []
    current: dict[str, Job] = {}
    for uid, jobs in ours.items():
        live = sorted((j for j in jobs if j.state not in ENDED), key=lambda j: j.job_id)
        for extra in live[:-1]:
            actions.append(Cancel(extra.job_id, "a newer job holds the same pod"))
        current[uid] = live[-1] if live else max(jobs, key=lambda j: j.job_id)
    # a submission newer than the snapshot's jobs: not visible yet; an older one the snapshot lacks is gone
    pending_submits = {uid for uid, s in world.submitted.items() if s.at > jobs_seen_at}
    nodes = _Nodes(world.nodes, options)
    seen_uids = set()
    for pod in world.pods:
        uid = pod.metadata.uid
        seen_uids.add(uid)
        held = current.get(uid)
        if pod.spec.nodeName:
            actions += _bound(pod, held, world, options)
        elif not (pod.terminal or pod.metadata.deletionTimestamp):
            labels = world.namespaces.get(pod.metadata.namespace)
            actions += _waiting(pod, held, uid in pending_submits, nodes, snap, options, labels)
    if world.pods_complete:
        for uid, job in current.items():
            if uid not in seen_uids and job.state not in ENDED:
                actions.append(Cancel(job.job_id, "its pod is gone"))
    return actions


def _waiting(
    pod: Pod,
    job: Job | None,
    submitting: bool,
    nodes: _Nodes,
    snap: Snapshot,
    options: BridgeOptions,
    namespace_labels: Mapping[str, str] | None,
) -> list[Action]:
    got = admit(
        pod,
        scheduler_name=options.scheduler_name,
        own_namespace=options.own_namespace,
        policy=options.policy,
        namespace_labels=namespace_labels,
    )
    if got is None:
        return []
    key, uid = pod.key, pod.metadata.uid
    if isinstance(got, Refusal):
        return [Refuse(key, uid, got.reason)]
    if job is None:
        if submitting:
            return []
        partition_nodes = [n.name for n in snap.nodes if got.partition in n.partitions]
        excluded = tuple(sorted(n for n in partition_nodes if nodes.usable(n) is None))
        return [Submit(key, uid, got, excluded)]
    if job.state in ENDED:
        why = f"Slurm job {job.job_id} ended {job.state} ({job.reason}) before the pod was placed"
        return [DeletePod(key, uid, why)]
    if job.state == "RUNNING" and job.nodes:
        slurm_node = hostlist_expand(job.nodes, limit=2)[0]
        k8s = nodes.usable(slurm_node)
        if k8s is None:
            why = f"Slurm placed it on {slurm_node}, whose Kubernetes node is gone, cordoned or not ready"
            return [Cancel(job.job_id, why, key)]
        return [Bind(key, uid, job.job_id, k8s.metadata.name, slurm_node)]
    return [Waiting(key, uid, waiting_message(job))]


def _bound(pod: Pod, job: Job | None, world: World, options: BridgeOptions) -> list[Action]:
    key, uid = pod.key, pod.metadata.uid
    label = pod.metadata.labels.get(JOB_ID_LABEL)
    if label is None:
        return []  # bound by someone else
    if job is None:
        submitted = world.submitted.get(uid)
        if submitted is not None and submitted.at > world.snapshot.fetched_at["jobs"]:
            return []
        return [DeletePod(key, uid, f"Slurm job {label} is gone from Slurm")]
    if job.state in ENDED:
        if pod.metadata.deletionTimestamp:
            return []
        why = f"Slurm job {job.job_id} ended: {job.state}" + (
            f" ({job.reason})" if job.reason != "None" else ""
        )
        return [DeletePod(key, uid, why)]
    if pod.terminal:
        return [Cancel(job.job_id, f"pod {key} {pod.status.phase.lower()}", key)]
    deleting = _parse_time(pod.metadata.deletionTimestamp)  # when the grace period ends
    if deleting is not None and world.now >= deleting + options.terminating_grace:
        return [Cancel(job.job_id, f"pod {key} stuck Terminating (its node's kubelet is gone?)", key)]
    return []
