"""(snapshot, pods, nodes) → what the bridge does next. Pure: the controller applies the actions.

The bridge's jobs are found by their ``admin_comment`` (this instance's id and the pod's uid,
:meth:`bridge.requests.JobRequest.admin_comment`), so the plan is rebuilt from Slurm and Kubernetes alone
after a restart. One pass of :func:`plan`:

* **a pod waiting to be placed** — gated (``spec.schedulingGates``): wait, as kube-scheduler does. No
  job: submit one (nodes whose kubelet cannot take the pod are excluded, never required) — unless Slurm
  would refuse it (every node of the partition ruled out: :meth:`_Context.refused`), then the pod waits
  Unschedulable with kube-scheduler's message and is submitted once a node fits; pending job: mirror
  Slurm's reason and expected start into the pod (and follow Kubernetes' exclusions; with no node left,
  release the job); running job: bind the pod to the Kubernetes node of the job's Slurm node (or release
  the job, to be placed again, if Kubernetes rules that node out). Job ended before binding: an
  ``scancel``, its deadline or time limit (:data:`VERDICTS`) deletes the pod, saying why; a failure of the
  cluster (node failure, boot failure...) or the bridge's own release places it again — at most
  ``failed_job_limit`` failed jobs, then the pod waits with the reason.
* **a bound pod** — job ended (completed, cancelled, timed out, node failure, preempted...) or vanished
  from Slurm: delete the pod, naming the cause (unless the pod finished: it stays, as a Job's record); job
  not RUNNING on the pod's node (suspended, requeued, moved): delete the pod (``SlurmJobStopped``) — Slurm
  may hand the node to another job; pod finished: cancel the job; pod being deleted: cancel the job once
  the pod is gone, or once it is still Terminating ``terminating_grace`` seconds after its
  ``deletionTimestamp`` (the end of its grace period): a dead kubelet never finishes it, and Slurm would
  keep the node forever.
* **a gang** (:mod:`bridge.groups`) — once ``size`` members exist, one job of ``size`` nodes for the
  lowest-ranked (their requests merged, :func:`bridge.requests.gang_request`); while it pends every
  member shows its reason; once it runs, member of rank *r* is bound to the *r*-th node of the job's host
  list (the admin comment lists the members in rank order, so the mapping survives a restart). A member
  that fails or is deleted before the gang runs cancels the job, and the rest are submitted again, once,
  when the group is whole; after it runs, as for one pod: any member ending cancels the job, the job
  ending deletes every member. PodGroup members beyond ``minMember`` are placed alone once the gang runs.
* **a job without its pod** (the pod list being complete) — cancel it. Duplicate jobs for one pod: all but
  the newest are cancelled.

**Missing data never leads to an action**: unless the snapshot's jobs and nodes were fetched within
``max_data_age`` seconds, the plan is empty — no cancel, no delete, no submit. A submission this process
made is remembered (``submitted``) until a snapshot fetched after it shows the job, so no pod is
submitted twice in between.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from exporter.model import Job, Snapshot
from exporter.slurmtext import hostlist_expand, hosts

from .feasible import NodeUse, lacks_room, node_reasons, remembered_asks
from .groups import (
    POD_GROUP_LABEL,
    SCHEDULING_GROUP,
    GroupError,
    GroupKey,
    Membership,
    group_size,
    is_basic,
    membership,
)
from .owners import Inherited, Owner, OwnerKey, inherited, with_inherited
from .placement import PartitionNodes, Placement, Placements
from .podgroups import group_status
from .pods import Node, Pod, PodGroup
from .policy import Policy
from .requests import (
    RELEASE_MOVED,
    AdminComment,
    JobRequest,
    Refusal,
    admit,
    gang_request,
    parse_admin_comment,
    released_comment,
)
from .volumes import Volumes, VolumeStep, claims_problem, volume_steps

__all__ = [
    "JOB_ID_ANNOTATION",
    "JOB_ID_LABEL",
    "NODES_ANNOTATION",
    "RANK_ANNOTATION",
    "SLURM_NODE_ANNOTATION",
    "Bind",
    "BridgeOptions",
    "Cancel",
    "DeletePod",
    "Exclude",
    "GroupStatus",
    "Label",
    "PrepareVolume",
    "Refuse",
    "Submit",
    "Submitted",
    "Waiting",
    "World",
    "bound_job_id",
    "plan",
]

JOB_ID_ANNOTATION = "slurm-keda.io/job-id"
"""Annotation the bridge's binding puts on a pod, in the same write as its node (the API server merges a
Binding's annotations into the pod): its Slurm job id — a pod bound without it is someone else's."""
JOB_ID_LABEL = JOB_ID_ANNOTATION
"""Label the bridge puts on a pod once it is bound, for selectors (``kubectl get pods -l``)."""
SLURM_NODE_ANNOTATION = "slurm-keda.io/slurm-node"
"""Annotation the bridge puts on a pod it bound: the Slurm node it runs on."""
RANK_ANNOTATION = "slurm-keda.io/rank"
"""Annotation on a bound gang member: its rank (0 = leader / index 0, on the first node of the job)."""
NODES_ANNOTATION = "slurm-keda.io/nodes"
"""Annotation on a bound gang member: the gang job's whole Slurm host list."""
ASLEEP_FLAGS = frozenset({"POWERED_DOWN", "POWERING_UP", "POWER_DOWN", "POWERING_DOWN"})
"""Slurm node flags of a node in power saving: without a Kubernetes node it is not excluded (resumed, a
NodeSet gives it one)."""
ENDED = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
    | {"OUT_OF_MEMORY"}
)
VERDICTS = frozenset({"CANCELLED", "DEADLINE", "TIMEOUT"})
"""A job that ended so before its pods were bound is a verdict on them — an ``scancel`` (not the
bridge's own release), the job's ``--deadline`` or time limit passed: the pods are deleted, saying why.
Any other end before binding (``NODE_FAIL``, ``BOOT_FAIL``, ``FAILED``, ``PREEMPTED``...) is the
cluster's failure, not the user's: the pods are submitted again, at most ``failed_job_limit`` jobs."""


AdmissionKey = tuple[str, str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], int | None]
"""(pod uid, resourceVersion, its namespace's labels, the annotations and deadline it inherits from its
owners): what an admission depends on besides the options."""


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
    submit_lanes: int = 4
    """Submissions in flight at once (each still waits for a slot of ``--max-concurrency``)."""
    pod_groups: bool = True
    """Watch coscheduling PodGroups (their CRD installed) for the ``minMember`` of pod-group gangs."""
    bind_deadline: float = 300.0
    """Seconds a running job's pod may keep failing to be bound (binding forbidden, webhook refusing...)
    before the job is released (cancelled) rather than holding its node; retries back off meanwhile."""
    shared_nodes: bool = False
    """Keep Kubernetes and Slurm agreeing on the shared nodes (:mod:`bridge.sharednodes`): the default
    scheduler's pods tainted off, a cordon drains the Slurm node, a Slurm drain taints the Kubernetes node."""
    failed_job_limit: int = 3
    """Jobs of one pod (or gang) that may fail before it is placed — a node failing, a boot failure, a
    binding that never succeeded — before the bridge stops submitting it: the pod then stays Pending with
    the reason (until Slurm forgets the failed jobs, ``MinJobAge``, or the pod is replaced)."""


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
    pod_groups: Mapping[tuple[str, str], int] | str | None = None
    """``(namespace, name)`` → ``minMember`` of every PodGroup; None while they are not listed."""
    scheduling_groups: Mapping[tuple[str, str], int | None] | str | None = None
    """``(namespace, name)`` → gang ``minCount`` (None: basic policy) of every Kubernetes PodGroup
    (``scheduling.k8s.io/v1alpha2``); None while they are not listed; a text saying why they are off."""
    pod_group_objects: Mapping[tuple[str, str], PodGroup] = field(default_factory=dict)
    """``(namespace, name)`` → the PodGroup, for the status the bridge keeps (:mod:`bridge.podgroups`)."""
    admissions: MutableMapping[AdmissionKey, JobRequest | Refusal | None] | None = None
    """A memo of admissions the caller keeps between passes (the same options each time), or None."""
    asks: MutableMapping[tuple[str, str], dict[str, int]] | None = None
    """A memo of pods' requests by (uid, resourceVersion) the caller keeps between passes, or None."""
    usage: Mapping[str, NodeUse] = field(default_factory=dict)
    """Kubernetes node → what the pods bound to it request, every pod's
    (:func:`bridge.feasible.node_usage`): whether a pod fits when it is bound."""
    others_usage: Mapping[str, NodeUse] = field(default_factory=dict)
    """The same for the pods Slurm does not know (not the bridge's: DaemonSets, the slurmd pod...): which
    nodes a job excludes. The bridge's own pods' room is their jobs' in Slurm, which Slurm gives back
    when they end — excluding a node they fill would keep a job off it for good."""
    volumes: Volumes = field(default_factory=Volumes)
    """The claims, volumes and storage classes (:mod:`bridge.volumes`)."""
    placements: Placements | None = None
    """Verdicts the caller keeps between passes (:mod:`bridge.placement`), or None: judged afresh."""
    owners: Mapping[OwnerKey, Owner] = field(default_factory=dict)
    """Jobs, JobSets, LeaderWorkerSets and PodGroups whose job annotations (and a Job's deadline) their
    pods inherit (:mod:`bridge.owners`)."""

    @property
    def jobs_as_of(self) -> float:
        """The snapshot holds every job submitted before this: a submission made later may be missing."""
        return self.snapshot.jobs_as_of


@dataclass(frozen=True)
class Submit:
    """Submit ``request`` — one pod's job, or a gang's (``pod``/``uid`` its leader, ``group`` its name)."""

    pod: str
    uid: str
    request: JobRequest
    excluded_nodes: tuple[str, ...]
    group: str | None = None
    placement: str = ""
    """Which nodes Kubernetes' rules leave (:meth:`bridge.feasible.Feasibility.summary`), for the Event."""

    @property
    def uids(self) -> tuple[str, ...]:
        """Every pod the job is for."""
        return tuple(uid for _, _, uid in self.request.members) or (self.uid,)


@dataclass(frozen=True)
class Bind:
    pod: str
    uid: str
    job_id: int
    node: str
    """The Kubernetes node."""
    slurm_node: str
    rank: int = 0
    """The pod's rank in its gang: it runs on the rank-th node of ``job_nodes``."""
    job_nodes: str = ""
    """A gang's whole Slurm host list (empty for a pod placed alone)."""
    job_start: float | None = None
    """When Slurm started the job (epoch seconds), for the bind latency."""
    wait_for: str = ""
    """Why the pod cannot be bound yet: no room on the node (``Insufficient cpu``: pods Kubernetes still
    counts there, e.g. one Terminating), or its claims' volumes not bound yet. The binding waits — as a
    failed one does, until ``bind_deadline``."""
    admin_comment: str = field(default="", compare=False)
    """The job's admin comment: marked :data:`RELEASE_UNBOUND` before the job is released at the deadline
    (:class:`Cancel`)."""


@dataclass(frozen=True)
class PrepareVolume:
    """Before binding ``pod``: pre-bind a volume to its claim, or name the node on the claim
    (:class:`bridge.volumes.VolumeStep`)."""

    pod: str
    uid: str
    step: VolumeStep


UNSCHEDULABLE = "Unschedulable"
"""The PodScheduled reason (and ``FailedScheduling`` Event) when no node may take the pod."""
SCHEDULING_GATED = "SchedulingGated"
"""The PodScheduled reason of a pod with scheduling gates, as kube-scheduler sets it."""
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
JOBS_INCOMPLETE = (
    "Slurm's job list is partly invalid (records dropped as impossible): this pod's job may be among "
    "them, so nothing is submitted until it is whole"
)
JOBS_FAILED = "SlurmJobFailed"
"""The PodScheduled reason of a pod whose jobs failed ``failed_job_limit`` times before it was placed."""


@dataclass(frozen=True)
class GroupStatus:
    """Set a PodGroup's status (its ``status`` subresource) to ``status``."""

    namespace: str
    name: str
    status: Mapping[str, Any]


@dataclass(frozen=True)
class Exclude:
    """Set a pending job's excluded nodes to ``nodes`` (Kubernetes changed after the submission: a node
    tainted, cordoned, added or its room taken; or freed again)."""

    job_id: int
    nodes: tuple[str, ...]
    pod: str
    why: str
    uids: tuple[str, ...] = ()
    """The pods of the job (told in an Event)."""


@dataclass(frozen=True)
class Waiting:
    pod: str
    uid: str
    message: str
    reason: str = "SlurmPending"
    """The pod's PodScheduled=False reason: ``SlurmPending`` (its job waits in Slurm's queue, or for the
    rest of its gang), :data:`UNSCHEDULABLE` (no node may take it: nothing is submitted),
    :data:`SCHEDULING_GATED`, :data:`JOBS_FAILED`."""


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
    release: str = ""
    """Non-empty when the bridge cancels the job to place its pods again (:data:`RELEASE_MOVED`,
    :data:`RELEASE_UNBOUND`): the job's admin comment is first replaced by :attr:`admin_comment`, which
    says so — so that a restarted bridge, too, reads the end as its own release and not as an
    ``scancel``."""
    admin_comment: str = ""


@dataclass(frozen=True)
class DeletePod:
    pod: str
    uid: str
    why: str
    event: str = "SlurmJobEnded"
    """The Event's reason: ``SlurmJobEnded``, or ``SlurmJobStopped`` (the job is suspended, requeued or
    runs elsewhere: the pod must not run on)."""


@dataclass(frozen=True)
class Label:
    """Put the job-id label on a pod bound with only the annotation (labelling after the binding failed)."""

    pod: str
    uid: str
    job_id: str


Action = Submit | Bind | PrepareVolume | Exclude | Waiting | Refuse | Cancel | DeletePod | Label | GroupStatus


def bound_job_id(pod: Pod) -> str | None:
    """The Slurm job id of a pod the bridge bound (its annotation; the label of a pod bound before the
    annotation was written); None for a pod bound by someone else."""
    return pod.metadata.annotations.get(JOB_ID_ANNOTATION) or pod.metadata.labels.get(JOB_ID_LABEL)


def _time(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M UTC") if epoch else ""


def _said(job: Job) -> str:
    """`` (reason)`` of a job that has one (Slurm's ``None`` is none), else ""."""
    return f" ({job.reason})" if job.reason and job.reason != "None" else ""


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
            self.by_slurm.setdefault(n.slurm_name, n)
        self._label = options.node_label

    def usable(self, slurm_node: str) -> Node | None:
        """The Kubernetes node for ``slurm_node`` if it is labelled for the bridge, schedulable and Ready."""
        n = self.by_slurm.get(slurm_node)
        if n is None or n.spec.unschedulable or not n.ready:
            return None
        return n if n.labelled_for(self._label) else None


def _fresh(world: World, options: BridgeOptions) -> bool:
    fetched = world.snapshot.fetched_at
    return all(e in fetched and world.now - fetched[e] <= options.max_data_age for e in ("jobs", "nodes"))


def plan(world: World, options: BridgeOptions) -> list[Action]:
    """The actions for one look at the world (empty when the Slurm data is stale); see the module doc."""
    if not _fresh(world, options):
        return []
    snap = world.snapshot
    ours: dict[str, list[Job]] = {}
    comments: dict[int, AdminComment] = {}
    group_jobs: dict[str, list[Job]] = {}
    for job in snap.jobs:
        parsed = parse_admin_comment(job.admin_comment) if job.admin_comment else None
        if parsed is not None and parsed.instance == options.instance:
            comments[job.job_id] = parsed
            if parsed.group is not None:
                group_jobs.setdefault(parsed.group, []).append(job)
            for _, _, uid in parsed.pods:
                ours.setdefault(uid, []).append(job)
    actions: list[Action] = []
    current: dict[str, Job] = {}
    for uid, jobs in ours.items():
        live = sorted((j for j in jobs if j.state not in ENDED), key=lambda j: j.job_id)
        for extra in live[:-1]:
            actions.append(Cancel(extra.job_id, "a newer job holds the same pod"))
        current[uid] = live[-1] if live else max(jobs, key=lambda j: j.job_id)
    # a submission newer than the snapshot's jobs: not visible yet; an older one the snapshot lacks is gone
    jobs_seen_at = world.jobs_as_of
    ctx = _Context(
        world,
        _Nodes(world.nodes, options),
        current,
        comments,
        {uid for uid, s in world.submitted.items() if s.at > jobs_seen_at},
        group_jobs,
        world.placements if world.placements is not None else Placements(),
        ours,
        options,
    )
    ctx.placements.begin()
    groups: dict[GroupKey, list[_Member]] = {}
    seen_uids = set()
    for pod in world.pods:
        uid, key = pod.metadata.uid, pod.key
        seen_uids.add(uid)
        held = current.get(uid)
        if pod.spec.nodeName:
            actions += _bound(pod, held, world, options)
            continue
        if pod.terminal or pod.metadata.deletionTimestamp:
            if held is not None and held.state not in ENDED:  # e.g. a gang member that failed while pending
                why = f"pod {key} {pod.status.phase.lower() if pod.terminal else 'is being deleted'}"
                actions.append(Cancel(held.job_id, why + " before it was placed", key))
            continue
        got = _admitted(pod, world, options)
        if got is None:
            continue
        if pod.spec.schedulingGates and (held is None or held.state in ENDED):
            actions.append(Waiting(key, uid, GATED_MESSAGE, SCHEDULING_GATED))  # as kube-scheduler
            continue
        if isinstance(got, Refusal):
            actions.append(Refuse(key, uid, got.reason))
            continue
        try:
            member = membership(pod)
        except GroupError as e:
            actions.append(Refuse(key, uid, str(e)))
            continue
        if member is not None and is_basic(member, world.scheduling_groups):
            member = None  # a Kubernetes PodGroup of the basic policy: each pod on its own
        if member is None:
            actions += _single(pod, got, held, ctx)
        else:
            groups.setdefault(member.group, []).append(_Member(member, pod, got))
    for group, members in sorted(groups.items()):
        actions += _gang(group, sorted(members, key=lambda m: m.membership.order()), ctx)
    actions += _group_statuses(world, group_jobs)
    if world.pods_complete:
        for uid, job in current.items():
            if uid not in seen_uids and job.state not in ENDED:
                actions.append(Cancel(job.job_id, "its pod is gone"))
    cancelled: set[int] = set()
    unique = []
    for action in actions:  # one cancel per job (a gang's members may each ask for it)
        if isinstance(action, Cancel):
            if action.job_id in cancelled:
                continue
            cancelled.add(action.job_id)
        unique.append(action)
    return unique


def _admitted(pod: Pod, world: World, options: BridgeOptions) -> JobRequest | Refusal | None:
    """:func:`bridge.requests.admit` of the pod with what it inherits from its owners
    (:mod:`bridge.owners`), remembered in ``world.admissions`` per pod version and inheritance (parsing
    1,000 pods' quantities on every pass cost 0.2 s of the event loop)."""
    labels = world.namespaces.get(pod.metadata.namespace)
    cache = world.admissions
    heir = inherited(pod, world.owners) if world.owners else Inherited()
    key: AdmissionKey = (
        pod.metadata.uid,
        pod.metadata.resourceVersion,
        tuple(sorted(labels.items())) if labels else (),
        tuple(sorted(heir.annotations.items())),
        heir.deadline_seconds,
    )
    if cache is not None and key in cache:
        return cache[key]
    got = admit(
        with_inherited(pod, heir),
        scheduler_name=options.scheduler_name,
        own_namespace=options.own_namespace,
        policy=options.policy,
        namespace_labels=labels,
    )
    if cache is not None and pod.metadata.resourceVersion:
        cache[key] = got
    return got


@dataclass(frozen=True)
class _Member:
    membership: Membership
    pod: Pod
    request: JobRequest


@dataclass(frozen=True)
class _Context:
    """What one pass knows, shared by the per-pod and per-gang rules."""

    world: World
    nodes: _Nodes
    current: Mapping[str, Job]
    """Pod uid → its newest live job (else its newest ended one)."""
    comments: Mapping[int, AdminComment]
    submitting: set[str]
    """Pod uids with a submission not yet visible in the snapshot."""
    group_jobs: Mapping[str, list[Job]]
    """A gang's name → its jobs."""
    placements: Placements
    """Verdicts kept between passes (the caller's), else this pass's."""
    history: Mapping[str, list[Job]]
    """Pod uid → every job of it Slurm still lists (ended ones too)."""
    options: BridgeOptions
    partitions: dict[str, PartitionNodes] = field(default_factory=dict)
    """Partition → its nodes as this pass judges them."""

    def asks(self, pod: Pod) -> dict[str, int]:
        """:func:`bridge.feasible.pod_asks`, parsed once per pod version (the caller's memo)."""
        return remembered_asks(pod, self.world.asks)

    def partition(self, name: str) -> PartitionNodes:
        if (known := self.partitions.get(name)) is None:
            nodes = self.nodes
            slurm = {
                n.name: nodes.by_slurm.get(n.name) for n in self.world.snapshot.nodes if name in n.partitions
            }
            usable = [k8s.metadata.name for s in slurm if (k8s := nodes.usable(s)) is not None]
            asleep = frozenset(
                n.name
                for n in self.world.snapshot.nodes
                if name in n.partitions and not ASLEEP_FLAGS.isdisjoint(n.flags)
            )
            known = self.placements.partition(name, slurm, usable, self.world.others_usage, asleep)
            self.partitions[name] = known
        return known

    def placement(self, pods: Sequence[Pod], partition: str) -> Placement:
        """Where ``pods`` (one pod, or a gang's members) may run among the Kubernetes nodes of
        ``partition``'s Slurm nodes, and which Slurm nodes its job excludes (:mod:`bridge.placement`; a
        node not usable by the bridge is ruled out as not ready)."""
        asks = [self.asks(p) for p in pods]
        return self.placements.place(self.partition(partition), pods, asks, self.world.volumes)

    @property
    def jobs_incomplete(self) -> bool:
        """Job records were dropped from the snapshot as invalid (:attr:`exporter.model.Snapshot.dropped`):
        a pod without a job in it may have one among them — no submission (nor a deletion) rests on its
        absence."""
        return bool(self.world.snapshot.dropped.get("jobs"))

    def refused(self, place: Placement, nodes: int) -> bool:
        """Whether Slurm must refuse a job of ``nodes`` nodes placed so: the partition has at least that
        many Slurm nodes, but fewer are left once the excluded ones are taken away ("Requested node
        configuration is not available": the job ends FAILED at once). A partition with fewer nodes than the
        job needs — none at all, a NodeSet that can grow — takes the job, which pends (PartitionConfig,
        PartitionNodeLimit) and asks the autoscaler for nodes. Seen on the 26.05 lab (``docs/bridge.md``)."""
        if place.verdict.blocked is not None:
            return True
        return 0 < nodes <= place.size and place.left < nodes

    def release(self, job: Job, why: str, pod: str | None, kind: str = RELEASE_MOVED) -> Cancel:
        """Cancel ``job`` to place its pods again, its admin comment first marked so (:class:`Cancel`)."""
        text = job.admin_comment
        marked = released_comment(text, kind) if text else ""
        return Cancel(job.job_id, why, pod, kind, marked)

    def past_failures(self, jobs: Sequence[Job]) -> list[Job]:
        """The jobs of ``jobs`` that ended before their pods were placed, the bridge's moves not counted
        (see :data:`VERDICTS`)."""
        out = []
        for j in jobs:
            if j.state in ENDED:
                comment = self.comments.get(j.job_id)
                if comment is None or comment.release != RELEASE_MOVED:
                    out.append(j)
        return out

    def ended(self, job: Job, jobs: Sequence[Job], what: str) -> tuple[str, str] | None:
        """A unit's newest ``job`` ended before it was placed (``jobs``: all of its jobs Slurm lists):
        ("delete", why) for a verdict (:data:`VERDICTS`), ("wait", why) once ``failed_job_limit`` jobs
        failed, None to place it again."""
        comment = self.comments.get(job.job_id)
        released = comment is not None and comment.release is not None
        said = _said(job)
        if job.state in VERDICTS and not released:
            return "delete", f"Slurm job {job.job_id} of {what} ended {job.state}{said} before it was placed"
        failed = self.past_failures(jobs)
        limit = self.options.failed_job_limit
        if len(failed) >= limit:
            return "wait", (
                f"{len(failed)} Slurm jobs of {what} ended before it could be placed (last: job "
                f"{failed[-1].job_id} {failed[-1].state}{said}); not submitted again while Slurm lists them"
            )
        return None

    def to_bind(
        self, pod: Pod, job: Job, node: Node, slurm_node: str, what: str, rank: int | None = None
    ) -> list[Action]:
        """``pod``'s job runs on ``slurm_node`` (``node`` in Kubernetes): bind it — after the writes its
        claims need (:func:`bridge.volumes.volume_steps`), and once the node has room — or release the job
        when Kubernetes can never run the pod there. ``rank``: a gang member's."""
        key, uid = pod.key, pod.metadata.uid
        never, no_room = self.binding_problem(pod, node)
        if never:
            why = f"Slurm placed {what} on {slurm_node}, where Kubernetes cannot run {key}: {never}"
            return [self.release(job, why, key)]
        steps, waits = volume_steps(pod, node, self.world.volumes) if not no_room else ([], [])
        wait_for = "; ".join([no_room, *waits] if no_room else waits)
        gang = (rank, job.nodes) if rank is not None else (0, "")
        bind = Bind(
            key,
            uid,
            job.job_id,
            node.metadata.name,
            slurm_node,
            *gang,
            job.start_time,
            wait_for,
            job.admin_comment,
        )
        return [*(PrepareVolume(key, uid, step) for step in steps), bind]

    def exclusions(self, pods: Sequence[Pod], job: Job, partition: str, key: str) -> list[Action]:
        """An :class:`Exclude` when the pending ``job``'s excluded nodes are not what ``pods`` need now;
        its release when no node is left for them (Slurm would refuse the update)."""
        if job.state != "PENDING":
            return []
        place = self.placement(pods, partition)
        if place.verdict.blocked is not None:  # a claim went missing: the job starts, the binding waits
            return []
        if self.refused(place, len(pods)):
            why = f"no node may take its pods any more (Kubernetes: {place.summary})"
            return [self.release(job, why, key)]
        wanted = place.excluded
        try:
            have: tuple[str, ...] | None = tuple(sorted(hostlist_expand(job.excluded_nodes)))
        except ValueError:
            have = None  # not a host list Slurm would write: set it again
        if wanted == have:
            return []
        uids = tuple(p.metadata.uid for p in pods)
        return [Exclude(job.job_id, wanted, key, place.summary, uids)]

    def binding_problem(self, pod: Pod, node: Node) -> tuple[str, str]:
        """Whether ``pod`` may be bound to ``node`` now: ("", "") yes; (why not, "") never on this node
        (a taint, the node's labels, a volume): the job is released; ("", no room) not yet (what pods
        bound there request): the binding waits."""
        world = self.world
        problem = claims_problem(pod, world.volumes)
        if problem is not None:
            return problem, ""
        use = world.usage.get(node.metadata.name, NodeUse())
        asks = self.asks(pod)
        reasons = node_reasons(pod, node, use, world.volumes, asks)
        if not reasons:
            return "", ""
        hard = [r for r in reasons if not lacks_room(r)]
        return ", ".join(hard), ", ".join(r for r in reasons if lacks_room(r))


def _single(pod: Pod, request: JobRequest, job: Job | None, ctx: _Context) -> list[Action]:
    key, uid = pod.key, pod.metadata.uid
    if job is not None and job.state in ENDED:
        if uid in ctx.submitting:
            return []
        outcome = ctx.ended(job, ctx.history.get(uid, [job]), f"pod {key}")
        if outcome is not None:
            verdict, why = outcome
            if verdict == "delete":
                return [DeletePod(key, uid, why)]
            return [Waiting(key, uid, why, JOBS_FAILED)]
        job = None  # the cluster failed it, or the bridge released it: placed again
    if job is None:
        if uid in ctx.submitting:
            return []
        if ctx.jobs_incomplete:
            return [Waiting(key, uid, JOBS_INCOMPLETE)]
        place = ctx.placement([pod], request.partition)
        if ctx.refused(place, 1):  # a claim missing or not bound, or no node left: Slurm would refuse it
            return [Waiting(key, uid, place.summary, UNSCHEDULABLE)]
        return [Submit(key, uid, request, place.excluded, placement=place.summary)]
    if job.state == "RUNNING" and job.nodes:
        slurm_node = hostlist_expand(job.nodes, limit=2)[0]
        k8s = ctx.nodes.usable(slurm_node)
        if k8s is None:
            why = f"Slurm placed it on {slurm_node}, whose Kubernetes node is gone, cordoned or not ready"
            return [ctx.release(job, why, key)]
        return ctx.to_bind(pod, job, k8s, slurm_node, "it")
    return [*ctx.exclusions([pod], job, request.partition, key), Waiting(key, uid, waiting_message(job))]


def _gang(group: GroupKey, members: list[_Member], ctx: _Context) -> list[Action]:
    """The unplaced members of one gang (in rank order): submit them as one job once enough exist, mirror
    its pending reason, bind each member to its rank's node once it runs."""
    name = str(group)
    size = group_size(members[0].membership, ctx.world.pod_groups, ctx.world.scheduling_groups)
    if isinstance(size, str):
        return [Waiting(m.pod.key, m.pod.metadata.uid, f"{name}: {size}") for m in members]
    uids = [m.pod.metadata.uid for m in members]
    gang_jobs = ctx.group_jobs.get(name, [])  # also those whose members are all bound already
    live = max((j for j in gang_jobs if j.state not in ENDED), key=lambda j: j.job_id, default=None)
    if live is not None:
        return _gang_job(group, live, members, ctx)
    waiting = set(uids)
    if waiting & ctx.submitting:
        return []
    # the jobs of the gang as it is now (a job of a member that left was cancelled for it: history)
    whole = [j for j in gang_jobs if {uid for _, _, uid in ctx.comments[j.job_id].pods} <= waiting]
    if whole:
        newest = max(whole, key=lambda j: j.job_id)
        outcome = ctx.ended(newest, whole, name)
        if outcome is not None:
            verdict, why = outcome
            in_job = {uid for _, _, uid in ctx.comments[newest.job_id].pods}
            hit = [m for m in members if m.pod.metadata.uid in in_job]
            if verdict == "delete":
                return [DeletePod(m.pod.key, m.pod.metadata.uid, why) for m in hit]
            return [Waiting(m.pod.key, m.pod.metadata.uid, why, JOBS_FAILED) for m in hit]
    ready = [m for m in members if m.pod.metadata.uid in waiting]
    if len(ready) < size:
        text = f"{name}: {len(ready)} of {size} pods exist; the group is submitted once all do"
        return [Waiting(m.pod.key, m.pod.metadata.uid, text) for m in ready]
    if ctx.jobs_incomplete:
        return [Waiting(m.pod.key, m.pod.metadata.uid, f"{name}: {JOBS_INCOMPLETE}") for m in ready]
    request = gang_request([m.request for m in ready[:size]], name)
    if isinstance(request, Refusal):
        return [Refuse(m.pod.key, m.pod.metadata.uid, request.reason) for m in ready]
    place = ctx.placement([m.pod for m in ready[:size]], request.partition)
    if ctx.refused(place, size):
        text = f"{name}: {place.summary}"
        return [Waiting(m.pod.key, m.pod.metadata.uid, text, UNSCHEDULABLE) for m in ready]
    leader = ready[0].pod
    uid = leader.metadata.uid
    return [Submit(leader.key, uid, request, place.excluded, group=name, placement=place.summary)]


def _gang_job(group: GroupKey, job: Job, members: list[_Member], ctx: _Context) -> list[Action]:
    """A gang whose job is live: wait with Slurm's reason, or bind member of rank r to the r-th node."""
    in_job = [uid for _, _, uid in ctx.comments[job.job_id].pods]
    actions: list[Action] = []
    hosts = hostlist_expand(job.nodes, limit=len(in_job) + 1) if job.state == "RUNNING" and job.nodes else []
    for m in members:
        key, uid = m.pod.key, m.pod.metadata.uid
        if uid not in in_job:  # a PodGroup's pods beyond minMember: placed alone once the gang runs
            if hosts and group.kind in ("PodGroup", SCHEDULING_GROUP):
                actions += _single(m.pod, m.request, ctx.current.get(uid), ctx)
            else:
                text = f"{group}: waiting for the group's Slurm job {job.job_id}"
                actions.append(Waiting(key, uid, text + (" to end" if hosts else "")))
            continue
        rank = in_job.index(uid)
        if not hosts:
            actions.append(Waiting(key, uid, waiting_message(job) + f" ({group}, {len(in_job)} nodes)"))
            continue
        if rank >= len(hosts):
            actions.append(Waiting(key, uid, f"Slurm job {job.job_id} runs on fewer nodes than members"))
            continue
        k8s = ctx.nodes.usable(hosts[rank])
        if k8s is None:
            why = (
                f"Slurm placed {group} on {hosts[rank]}, whose Kubernetes node is gone, cordoned or not ready"
            )
            return [ctx.release(job, why, key)]
        bind = ctx.to_bind(m.pod, job, k8s, hosts[rank], str(group), rank)
        if isinstance(bind[0], Cancel):
            return bind
        actions += bind
    placed = [m for m in members if m.pod.metadata.uid in in_job]
    if not hosts and placed and len(placed) == len(in_job):  # the whole gang pends: its exclusions
        pods = sorted((m.pod for m in placed), key=lambda p: in_job.index(p.metadata.uid))
        actions = ctx.exclusions(pods, job, placed[0].request.partition, pods[0].key) + actions
    return actions


def _bound(pod: Pod, job: Job | None, world: World, options: BridgeOptions) -> list[Action]:
    key, uid = pod.key, pod.metadata.uid
    label = bound_job_id(pod)
    if label is None:
        return []  # bound by someone else
    actions = _bound_job(pod, label, job, world, options)
    if actions or pod.terminal or pod.metadata.deletionTimestamp:
        return actions  # a pod done or going away needs no label
    if pod.metadata.labels.get(JOB_ID_LABEL) == label:
        return actions
    return [Label(key, uid, label)]


def _bound_job(pod: Pod, label: str, job: Job | None, world: World, options: BridgeOptions) -> list[Action]:
    key, uid = pod.key, pod.metadata.uid
    if job is None:
        submitted = world.submitted.get(uid)
        if submitted is not None and submitted.at > world.jobs_as_of:
            return []
        if world.snapshot.dropped.get("jobs"):
            return []  # its record may be among those dropped as invalid: absence proves nothing
        return [DeletePod(key, uid, f"Slurm job {label} is gone from Slurm")]
    if job.state in ENDED:
        if pod.metadata.deletionTimestamp or pod.terminal:
            return []  # going, or finished: its record stays (a Job counts its succeeded pods)
        why = f"Slurm job {job.job_id} ended: {job.state}" + (
            f" ({job.reason})" if job.reason != "None" else ""
        )
        return [DeletePod(key, uid, why)]
    if pod.terminal:
        return [Cancel(job.job_id, f"pod {key} {pod.status.phase.lower()}", key)]
    deleting = _parse_time(pod.metadata.deletionTimestamp)  # when the grace period ends
    if deleting is not None:
        if world.now >= deleting + options.terminating_grace:
            return [Cancel(job.job_id, f"pod {key} stuck Terminating (its node's kubelet is gone?)", key)]
        return []
    stopped = _not_running_here(pod, job)
    if stopped:
        return [DeletePod(key, uid, stopped, "SlurmJobStopped")]
    return []


def _not_running_here(pod: Pod, job: Job) -> str:
    """Why a bound pod may not run on: its job is not RUNNING (SUSPENDED, PENDING again after a requeue...)
    or runs on other nodes than the pod's; "" when it runs there. The node is the pod's Slurm-node
    annotation (pods bound before it was written are judged by the state alone)."""
    said = _said(job)
    if job.state != "RUNNING":
        return f"Slurm job {job.job_id} is {job.state}{said}: its pod may run only while the job runs"
    here = pod.metadata.annotations.get(SLURM_NODE_ANNOTATION)
    running_on = hosts(job.nodes) if here and job.nodes else ()  # () also for a list it cannot read
    if running_on and here not in running_on:
        return f"Slurm job {job.job_id} runs on {job.nodes}, no longer on {here}"
    return ""


def _group_statuses(world: World, group_jobs: Mapping[str, list[Job]]) -> list[Action]:
    """The PodGroups whose status is not what their bridge pods and Slurm job say
    (:mod:`bridge.podgroups`)."""
    members: dict[tuple[str, str], list[Pod]] = {}
    for pod in world.pods:
        if (name := pod.metadata.labels.get(POD_GROUP_LABEL)) is not None:
            members.setdefault((pod.metadata.namespace, name), []).append(pod)
    out: list[Action] = []
    for (ns, name), pods in sorted(members.items()):
        group = world.pod_group_objects.get((ns, name))
        if group is None:
            continue
        jobs = group_jobs.get(str(GroupKey(ns, "PodGroup", name)), [])
        job = max(jobs, key=lambda j: j.job_id, default=None)
        status = group_status(group, sorted(pods, key=lambda p: p.metadata.name), job)
        if status is not None:
            out.append(GroupStatus(ns, name, status))
    return out
