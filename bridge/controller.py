"""The bridge controller: watches the bridge's pods and the nodes, and on every new snapshot or change asks
:func:`bridge.actions.plan` what to do and does it — Slurm writes through the slurmrestd client, Kubernetes
writes through :class:`bridge.kube.Kube`. All Slurm reads come from the poller's snapshot (``source``),
which keeps jobs fresh incrementally (:mod:`exporter.jobsync`) and is asked to poll soon after every
write; Slurm is written through the process's one session (its client and negotiated API version).

One action per pod (or job) is in flight at a time; a failed action is counted by kind, logged, and
tried again on a later pass (the plan is recomputed from the world, not from a queue of intents). Writes
that would only repeat themselves — the same waiting message, the same refusal — are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.backoff import Backoff
from exporter.errors import SlurmError
from exporter.logs import Conditions
from exporter.model import Snapshot, wall_time
from exporter.session import SlurmSession
from exporter.source import PolledSource

from .actions import (
    JOB_ID_ANNOTATION,
    JOB_ID_LABEL,
    JOBS_FAILED,
    NODES_ANNOTATION,
    RANK_ANNOTATION,
    SCHEDULING_GATED,
    SLURM_NODE_ANNOTATION,
    UNSCHEDULABLE,
    Action,
    AdmissionKey,
    Bind,
    BridgeOptions,
    Cancel,
    DeletePod,
    Exclude,
    GroupStatus,
    Label,
    PrepareVolume,
    Refuse,
    Submit,
    Submitted,
    Waiting,
    World,
    bound_job_id,
    plan,
)
from .feasible import NodeUse, usage_split
from .informer import Informer, cache_families, cache_lines
from .kube import Kube, KubeError, retry_after_families
from .owners import Owner, OwnerKey
from .placement import Placements
from .pods import Namespace, Node, Pod, PodGroup, SchedulingGroup, created_at
from .requests import RELEASE_UNBOUND, JobRequest, Refusal, released_comment
from .sharednodes import DrainSlurmNode, NodeAction, ResumeSlurmNode, SetTaints, shared_node_actions
from .slurm import cancel_job, exclude_nodes, set_admin_comment, submit_job, update_node
from .volumes import Claim, PersistentVolume, StorageClass, Volumes

__all__ = ["Bridge", "BridgeStats"]

log = logging.getLogger(__name__)

RECHECK = 5.0
"""Seconds between passes when nothing changes (deadlines such as a pod stuck Terminating still pass)."""
MISSING_CRD_RECHECK = 300.0
"""Seconds between looks for the PodGroup CRD while the API server has none (said once in the log)."""
BIND_BACKOFF = Backoff(2.0, 60.0)
"""After a pod's binding (its job-id patch, or the Binding itself) fails: wait 2 s before trying again,
doubling to at most 60 s, until ``BridgeOptions.bind_deadline`` — then the job is released."""
SUBMIT_BACKOFF = Backoff(10.0, 300.0)
"""After Slurm refuses a pod's job: wait 10 s before submitting it again, doubling to at most 300 s (one
Event per attempt, not one per pass)."""
CANCEL_FOLLOW_UPS = (1.0, 3.0, 8.0)
"""Seconds after cancelling a job at which the bridge polls again: `Bridge._poll_after_cancel`."""


@dataclass
class BridgeStats:
    """What the bridge did, for its metrics."""

    done: Counter[str] = field(default_factory=Counter)
    """Actions applied, by kind (submit, bind, cancel, delete, waiting, refuse)."""
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Failed actions by (action, error kind)."""
    pods: Counter[str] = field(default_factory=Counter)
    """Bridge pods by phase in the last pass: waiting, bound, refused."""
    bind_latency_sum: float = 0.0
    bind_latency_count: int = 0
    last_bind_latency: float | None = None
    oldest_waiting_created: float | None = None
    """Creation time (epoch seconds) of the oldest pod still waiting at the last pass; None when none."""
    bind_backoff: int = 0
    """Pods whose binding failed and that wait for their next attempt."""
    released: int = 0
    """Running jobs released (cancelled) because their pod could not be bound within the deadline."""
    placements_judged: int = 0
    """Placement verdicts computed rather than kept from an earlier pass (:mod:`bridge.placement`)."""

    def families(self) -> Iterable[Metric]:
        pods = GaugeMetricFamily(
            "slurm_bridge_pods",
            "Pods naming the bridge as scheduler, by phase, at its last pass: waiting (for their Slurm job "
            "or gang), unschedulable (no node may take them: nothing submitted), gated (scheduling gates), "
            "failed_jobs (their jobs failed too often before placement), bound, refused",
            labels=["phase"],
        )
        for phase in PHASES:
            pods.add_metric([phase], self.pods[phase])
        yield pods
        oldest = GaugeMetricFamily(
            "slurm_bridge_oldest_waiting_pod_created_timestamp_seconds",
            "Creation time of the oldest pod waiting for Slurm at the last pass (absent when none waits)",
        )
        if self.oldest_waiting_created is not None:
            oldest.add_metric([], self.oldest_waiting_created)
        yield oldest
        done = CounterMetricFamily(
            "slurm_bridge_actions", "Actions the bridge applied, by action", labels=["action"]
        )
        fixed = ("submit", "bind", "cancel", "delete", "waiting", "refuse")
        for action in (*fixed, *sorted(set(self.done) - set(fixed))):
            done.add_metric([action], self.done[action])
        yield done
        errors = CounterMetricFamily(
            "slurm_bridge_errors",
            "Bridge actions that failed, by action and error kind",
            labels=["action", "kind"],
        )
        for (action, kind), n in sorted(self.errors.items()):
            errors.add_metric([action, kind], n)
        yield errors
        yield GaugeMetricFamily(
            "slurm_bridge_bind_backoff_pods",
            "Pods whose binding to the node Slurm chose failed and that wait (backing off) for the next try",
            value=self.bind_backoff,
        )
        released = CounterMetricFamily(
            "slurm_bridge_unbindable_jobs_released",
            "Running Slurm jobs cancelled because their pod could not be bound within --bridge-bind-deadline",
        )
        released.add_metric([], self.released)
        yield released
        judged = CounterMetricFamily(
            "slurm_bridge_placement_verdicts",
            "Where-may-this-pod-run verdicts computed over a partition's nodes (the rest were kept from an "
            "earlier pass: nothing they depend on changed)",
        )
        judged.add_metric([], self.placements_judged)
        yield judged
        latency = GaugeMetricFamily(
            "slurm_bridge_bind_latency_seconds",
            "Seconds from the Slurm job's start (RUNNING) to the pod's binding, for the last binding",
        )
        if self.last_bind_latency is not None:
            latency.add_metric([], self.last_bind_latency)
        yield latency
        total = CounterMetricFamily(
            "slurm_bridge_bind_latency_seconds_sum_total",
            "Sum of Slurm-RUNNING to bound seconds over all bindings",
        )
        total.add_metric([], self.bind_latency_sum)
        yield total
        count = CounterMetricFamily("slurm_bridge_bindings", "Pods bound to the node Slurm chose")
        count.add_metric([], self.bind_latency_count)
        yield count


class Bridge:
    """Run with :meth:`run` (a supervised task); :meth:`reconcile` is one pass (tests call it)."""

    def __init__(
        self,
        source: PolledSource,
        session: SlurmSession,
        kube: Kube,
        options: BridgeOptions,
        *,
        clock: Callable[[], float] = wall_time,
    ) -> None:
        self.source = source
        self.session = session
        self.kube = kube
        self.options = options
        self._clock = clock
        self.conditions = Conditions(log)
        """Lasting failures of the caches, said once when they start, change and end."""
        cache = functools.partial(Informer, conditions=self.conditions)
        self.pods: Informer[Pod] = cache(
            "bridge pods",
            lambda: kube.list_pods(options.scheduler_name),
            lambda since: kube.watch_pods(options.scheduler_name, since),
            lambda p: p.metadata.uid,
        )
        self.nodes: Informer[Node] = cache(
            "nodes", kube.list_nodes, lambda since: kube.watch_nodes(since), lambda n: n.metadata.name
        )
        self.assigned: Informer[Pod] = cache(
            "assigned pods",
            kube.list_assigned_pods,
            lambda since: kube.watch_assigned_pods(since),
            lambda p: p.metadata.uid,
        )
        """Every pod bound to a node and not finished, whoever scheduled it: the room left on each node."""
        self.claims: Informer[Claim] = cache(
            "persistent volume claims",
            kube.list_claims,
            lambda since: kube.watch_claims(since),
            lambda c: f"{c.metadata.namespace}/{c.metadata.name}",
        )
        self.volumes: Informer[PersistentVolume] = cache(
            "persistent volumes",
            kube.list_volumes,
            lambda since: kube.watch_volumes(since),
            lambda v: v.metadata.name,
        )
        self.storage_classes: Informer[StorageClass] = cache(
            "storage classes",
            kube.list_storage_classes,
            lambda since: kube.watch_storage_classes(since),
            lambda c: c.metadata.name,
        )
        self.namespaces: Informer[Namespace] | None = None
        """Namespaces and their labels, watched only when the policy selects namespaces by label."""
        if options.policy.selectors:
            self.namespaces = cache(
                "namespaces",
                kube.list_namespaces,
                lambda since: kube.watch_namespaces(since),
                lambda n: n.metadata.name,
            )
        self.pod_groups: Informer[PodGroup] | None = None
        """Coscheduling PodGroups (their ``minMember``), watched unless ``options.pod_groups`` is off."""
        if options.pod_groups:
            self.pod_groups = cache(
                "pod groups",
                kube.list_pod_groups,
                lambda since: kube.watch_pod_groups(since),
                _object_key,
                missing_recheck=MISSING_CRD_RECHECK,
            )
        self.scheduling_groups: Informer[SchedulingGroup] = cache(
            "kubernetes podgroups",
            kube.list_scheduling_groups,
            lambda since: kube.watch_scheduling_groups(since),
            _object_key,
            missing_recheck=MISSING_CRD_RECHECK,
        )
        """Kubernetes' own PodGroups (1.36, ``scheduling.k8s.io/v1alpha2``): the gangs of
        ``spec.schedulingGroup`` pods."""
        self.jobs: Informer[Owner] = cache(
            "jobs", kube.list_jobs, lambda since: kube.watch_jobs(since), _object_key
        )
        """Jobs, whose job annotations and ``activeDeadlineSeconds`` their pods inherit."""
        self.jobsets: Informer[Owner] = cache(
            "jobsets",
            kube.list_jobsets,
            lambda since: kube.watch_jobsets(since),
            _object_key,
            missing_recheck=MISSING_CRD_RECHECK,
        )
        self.leader_worker_sets: Informer[Owner] = cache(
            "leaderworkersets",
            kube.list_leader_worker_sets,
            lambda since: kube.watch_leader_worker_sets(since),
            _object_key,
            missing_recheck=MISSING_CRD_RECHECK,
        )
        self._owners_of: tuple[tuple[int, ...], dict[OwnerKey, Owner]] | None = None
        """(the owner caches' :attr:`~bridge.informer.Informer.changes`, the owners by key)."""
        self.submitted: dict[str, Submitted] = {}
        self.stats = BridgeStats()
        self._said: dict[str, str] = {}
        self._refused_until: dict[str, tuple[float, int]] = {}
        """Pod uid → (no submission before, refusals so far) after Slurm refused its job."""
        self._bind_failed: dict[str, _BindFailure] = {}
        """Pod uid → its failed bindings (for the backoff and the deadline)."""
        self._admissions: dict[AdmissionKey, JobRequest | Refusal | None] = {}
        self._asks: dict[tuple[str, str], dict[str, int]] = {}
        """(pod uid, resourceVersion) → what a bound pod requests (:func:`bridge.feasible.node_usage`)."""
        self._placements = Placements()
        """Placement verdicts kept between passes (:mod:`bridge.placement`)."""
        self._usage_of: tuple[int, dict[str, NodeUse], dict[str, NodeUse]] | None = None
        """(the assigned-pod cache's :attr:`~bridge.informer.Informer.changes`, every bound pod's usage per
        node, that of the pods not the bridge's): tallied again only when that cache changed."""
        self._node_writes: dict[str, str] = {}
        """Shared nodes' writes done: node-taint key → the resourceVersion written from; drain / resume key →
        when (epoch seconds) — not repeated before the caches could show them."""
        self._labelled: dict[str, str] = {}
        """Pod uid → the job id this process labelled it with (the watch may not have shown it yet)."""
        self._busy: set[str] = set()
        self._submissions = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._follow_ups: list[asyncio.TimerHandle] = []
        self.since = 0.0
        """When :meth:`run` last started (epoch seconds)."""
        self.passes = 0
        """Reconcile passes run, including those that did nothing because data was missing."""
        self.running = False
        """Whether :meth:`run` runs (on the Lease's holder)."""

    def caches(self) -> list[Informer[Any]]:
        """Every cache the bridge keeps of Kubernetes objects."""
        every: list[Informer[Any] | None] = [
            self.pods,
            self.nodes,
            self.assigned,
            self.claims,
            self.volumes,
            self.storage_classes,
            self.namespaces,
            self.pod_groups,
            self.scheduling_groups,
            self.jobs,
            self.jobsets,
            self.leader_worker_sets,
        ]
        return [c for c in every if c is not None]

    def cache_families(self) -> Iterable[Metric]:
        """Each cache's state while the bridge runs (nothing on a standby replica: it keeps none)."""
        if not self.running:
            return []
        return [*cache_families(self.caches()), *retry_after_families(self.kube.gate)]

    def status_lines(self, now: float) -> list[str]:
        """The status page's lines: whether the bridge runs, and each cache that is not a current copy."""
        if not self.running:
            return ["bridge: not running here (another replica holds the Lease, or none is taken yet)"]
        return cache_lines(self.caches(), now)

    async def run(self) -> None:
        """Watch and reconcile forever (cancel to stop). Nothing is done until a /jobs listing requested
        after this start: a new leader's last snapshot may predate its predecessor's last submissions."""
        self.since = self._clock()
        self.running = True
        self.source.poll_soon()
        watchers = [
            asyncio.create_task(self.pods.run(), name="bridge-pod-informer"),
            asyncio.create_task(self.nodes.run(), name="bridge-node-informer"),
            asyncio.create_task(self.assigned.run(), name="bridge-assigned-pod-informer"),
            asyncio.create_task(self.claims.run(), name="bridge-claim-informer"),
            asyncio.create_task(self.volumes.run(), name="bridge-volume-informer"),
            asyncio.create_task(self.storage_classes.run(), name="bridge-storageclass-informer"),
            asyncio.create_task(self.jobs.run(), name="bridge-job-informer"),
            asyncio.create_task(self.scheduling_groups.run(), name="bridge-k8s-podgroup-informer"),
            asyncio.create_task(self.jobsets.run(), name="bridge-jobset-informer"),
            asyncio.create_task(self.leader_worker_sets.run(), name="bridge-lws-informer"),
        ]
        if self.namespaces is not None:
            watchers.append(asyncio.create_task(self.namespaces.run(), name="bridge-namespace-informer"))
        if self.pod_groups is not None:
            watchers.append(asyncio.create_task(self.pod_groups.run(), name="bridge-podgroup-informer"))
        try:
            seen: Snapshot | None = None
            while True:
                await self._next_change(seen)
                seen = self.source.snapshot
                await self.reconcile()
        finally:
            self.running = False
            for handle in self._follow_ups:
                handle.cancel()
            for t in [*watchers, *self._tasks]:
                t.cancel()
            await asyncio.gather(*watchers, *self._tasks, return_exceptions=True)

    def _poll_after_cancel(self) -> None:
        """A poll now and :data:`CANCEL_FOLLOW_UPS` later: the jobs a cancelled job's nodes go to start at
        slurmctld's pass after that job has completed (its epilog run), which the poll right after the
        cancel is too early to see — else a waiting pod is bound a whole poll interval later."""
        self.source.poll_soon()
        for handle in self._follow_ups:
            handle.cancel()
        loop = asyncio.get_running_loop()
        self._follow_ups = [loop.call_later(after, self.source.poll_soon) for after in CANCEL_FOLLOW_UPS]

    async def _next_change(self, seen: Snapshot | None) -> None:
        waits = [
            asyncio.ensure_future(self.source.wait_next(seen)),
            asyncio.ensure_future(self.pods.wait_change()),
            asyncio.ensure_future(self.nodes.wait_change()),
            asyncio.ensure_future(self.assigned.wait_change()),
            asyncio.ensure_future(self.claims.wait_change()),
        ]
        try:
            await asyncio.wait(waits, timeout=RECHECK, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        await asyncio.sleep(0.05)  # let a burst of changes land in one pass

    def _usage(self) -> tuple[dict[str, NodeUse], dict[str, NodeUse]]:
        """What the pods bound to each node request — every pod's, and that of the pods not the bridge's
        (:func:`bridge.feasible.usage_split`) — as of the assigned-pod cache now."""
        known = self._usage_of
        if known is None or known[0] != self.assigned.changes:
            name = self.options.scheduler_name
            every, others = usage_split(
                self.assigned.objects.values(), lambda p: p.spec.schedulerName != name, self._asks
            )
            known = self._usage_of = (self.assigned.changes, every, others)
        return known[1], known[2]

    async def reconcile(self) -> list[Action]:
        """One pass: plan on the current world and start each action not already in flight. Nothing is
        done before the node, assigned-pod and storage caches are complete and a snapshot exists (a node's
        room or a claim's volume unknown would place a pod where the kubelet refuses it)."""
        self.passes += 1
        snap = self.source.snapshot
        if snap is None or self.session.api_version is None:
            return []
        placement = (self.nodes, self.assigned, self.claims, self.volumes, self.storage_classes)
        if not all(informer.synced for informer in placement):
            return []
        if self.namespaces is not None and not self.namespaces.synced:
            return []  # a selected namespace would look unmanaged
        if not all(i.synced or i.missing for i in (self.jobs, self.jobsets, self.leader_worker_sets)):
            return []  # a pod would be judged without what its workload's annotations ask
        if snap.jobs_as_of < self.since:
            return []  # a listing from before this run (another replica may have submitted since)
        now = self._clock()
        usage, others_usage = self._usage()
        world = World(
            snap,
            list(self.pods.objects.values()),
            list(self.nodes.objects.values()),
            now,
            dict(self.submitted),
            pods_complete=self.pods.synced,
            namespaces={n.metadata.name: n.metadata.labels for n in self.namespaces.objects.values()}
            if self.namespaces is not None
            else {},
            pod_groups=self._pod_group_sizes(),
            scheduling_groups=self._scheduling_group_sizes(),
            pod_group_objects={
                (g.metadata.namespace, g.metadata.name): g for g in self.pod_groups.objects.values()
            }
            if self.pod_groups is not None and self.pod_groups.synced
            else {},
            admissions=self._admissions,
            asks=self._asks,
            usage=usage,
            others_usage=others_usage,
            placements=self._placements,
            owners=self._owners(),
            volumes=Volumes(
                claims={(c.metadata.namespace, c.metadata.name): c for c in self.claims.objects.values()},
                volumes=dict(self.volumes.objects),
                classes=dict(self.storage_classes.objects),
            ),
        )
        self.submitted = {uid: s for uid, s in self.submitted.items() if s.at > world.jobs_as_of - 60}
        actions = plan(world, self.options)
        self.stats.placements_judged = self._placements.judged
        live = {p.metadata.uid for p in world.pods}
        for memo in (self._said, self._refused_until, self._bind_failed, self._labelled):  # pods gone
            for uid in [u for u in memo if u not in live]:
                del memo[uid]
        current = {(p.metadata.uid, p.metadata.resourceVersion) for p in world.pods}
        for stale in [k for k in self._admissions if k[:2] not in current]:  # older versions, gone pods
            del self._admissions[stale]
        bound = {(p.metadata.uid, p.metadata.resourceVersion) for p in self.assigned.objects.values()}
        for gone in [k for k in self._asks if k not in bound and k not in current]:
            del self._asks[gone]
        self._count_pods(world, actions)
        self.stats.bind_backoff = sum(1 for f in self._bind_failed.values() if f.retry_at > now)
        for action in actions:
            if isinstance(action, Bind) and (failed := self._bind_failed.get(action.uid)) is not None:
                if failed.job_id != action.job_id:  # another job now: a fresh start
                    del self._bind_failed[action.uid]
                elif now - failed.first >= self.options.bind_deadline:
                    why = _release_reason(failed, self.options.bind_deadline)
                    marked = (
                        released_comment(action.admin_comment, RELEASE_UNBOUND)
                        if action.admin_comment
                        else ""
                    )
                    action = Cancel(action.job_id, why, action.pod, RELEASE_UNBOUND, marked)
                elif failed.retry_at > now:
                    continue
            key = _busy_key(action)
            if key in self._busy:
                continue
            if isinstance(action, Submit) and self._refused_until.get(action.uid, (0.0, 0))[0] > now:
                continue
            self._start(action, key)
        if self.options.shared_nodes:
            self._share_nodes(world)
        return actions

    def _share_nodes(self, world: World) -> None:
        """Start the node actions that make Kubernetes and Slurm agree on the shared nodes
        (:mod:`bridge.sharednodes`), one per node at a time."""
        node_actions = shared_node_actions(
            world.snapshot,
            world.nodes,
            node_label=self.options.node_label,
            now=world.now,
            max_data_age=self.options.max_data_age,
        )
        snap = world.snapshot
        nodes_as_of = snap.requested_at.get("nodes", snap.fetched_at.get("nodes", 0.0))
        for node_action in node_actions:
            key = _busy_key(node_action)
            if key in self._busy:
                continue
            written = self._node_writes.get(key)
            if isinstance(node_action, SetTaints) and written == node_action.version:
                continue  # written from this version: the cache has not shown the result yet
            if (
                not isinstance(node_action, SetTaints)
                and written is not None
                and float(written) >= nodes_as_of
            ):
                continue  # drained / resumed after the snapshot's nodes were read
            self._start(node_action, key)

    def _start(self, action: Action | NodeAction, key: str) -> None:
        """Apply ``action`` in a task of its own, ``key`` busy until it is done."""
        self._busy.add(key)
        task = asyncio.create_task(self._apply(action, key), name=f"bridge-{type(action).__name__.lower()}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _owners(self) -> dict[OwnerKey, Owner]:
        """Every Job, JobSet, LeaderWorkerSet and PodGroup by (kind, namespace, name): what pods inherit
        (:mod:`bridge.owners`); gathered again only when one of their caches changed."""
        caches: list[tuple[str, Informer[Any]]] = [
            ("Job", self.jobs),
            ("JobSet", self.jobsets),
            ("LeaderWorkerSet", self.leader_worker_sets),
        ]
        if self.pod_groups is not None:
            caches.append(("PodGroup", self.pod_groups))
        mark = tuple(cache.changes for _, cache in caches)
        if self._owners_of is None or self._owners_of[0] != mark:
            owners: dict[OwnerKey, Owner] = {}
            for kind, cache in caches:
                for obj in cache.objects.values():
                    meta = obj.metadata
                    owners[(kind, meta.namespace, meta.name)] = (
                        obj if isinstance(obj, Owner) else Owner(metadata=meta)
                    )
            self._owners_of = (mark, owners)
        return self._owners_of[1]

    def _scheduling_group_sizes(self) -> dict[tuple[str, str], int | None] | str | None:
        """``(namespace, name) → minCount`` (None: basic policy) of Kubernetes' PodGroups; None while not
        listed yet; why they are off."""
        informer = self.scheduling_groups
        if informer.missing:
            return (
                "Kubernetes PodGroups are off: the API has no scheduling.k8s.io/v1alpha2 podgroups "
                "(Kubernetes 1.36 with the GenericWorkload feature gate)"
            )
        if not informer.synced:
            return None
        return {(g.metadata.namespace, g.metadata.name): g.min_count for g in informer.objects.values()}

    def _pod_group_sizes(self) -> dict[tuple[str, str], int] | str | None:
        """``(namespace, name) → minMember``; None while not listed yet; why PodGroups are off."""
        informer = self.pod_groups
        if informer is None:
            return "PodGroups are off (--no-bridge-pod-groups)"
        if informer.missing:
            return (
                "PodGroups are off: the Kubernetes API has no scheduling.x-k8s.io/v1alpha1 podgroups "
                "(the scheduler-plugins PodGroup CRD is not installed)"
            )
        if not informer.synced:
            return None
        return {(g.metadata.namespace, g.metadata.name): g.spec.minMember for g in informer.objects.values()}

    async def settle(self) -> None:
        """Wait for every action started so far (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _count_pods(self, world: World, actions: list[Action]) -> None:
        refused = {a.uid for a in actions if isinstance(a, Refuse)}
        held = {
            a.uid: WAITING_PHASES[a.reason]
            for a in actions
            if isinstance(a, Waiting) and a.reason in WAITING_PHASES
        }
        pods: Counter[str] = Counter()
        oldest: float | None = None
        for p in world.pods:
            if p.spec.nodeName:
                pods["bound"] += bound_job_id(p) is not None
            elif p.metadata.uid in refused:
                pods["refused"] += 1
            elif not p.terminal:
                pods[held.get(p.metadata.uid, "waiting")] += 1
                created = created_at(p)
                if created is not None and (oldest is None or created < oldest):
                    oldest = created
        self.stats.pods = pods
        self.stats.oldest_waiting_created = oldest

    def _pod(self, uid: str) -> Pod | None:
        return self.pods.objects.get(uid)

    async def _apply(self, action: Action | NodeAction, key: str) -> None:
        kind = _name(action)
        try:
            applied = await self._do(action)
            if applied:
                self.stats.done[kind] += 1
        except (SlurmError, KubeError) as e:
            if not (isinstance(e, KubeError) and e.reason == NOT_YET):  # waiting is not an error
                self.stats.errors[(kind, e.kind)] += 1
            if isinstance(action, Bind) and isinstance(e, KubeError):
                await self._bind_failure(action, e)
            else:
                log.warning("bridge: %s failed: %s", kind, e)
        except Exception:  # a bug must not stop the bridge; the next pass tries again
            self.stats.errors[(kind, "internal")] += 1
            log.exception("bridge: %s failed unexpectedly", kind)
        finally:
            self._busy.discard(key)

    async def _do(self, action: Action | NodeAction) -> bool:
        version = self.session.api_version
        assert version is not None
        if isinstance(action, SetTaints):
            taints = [{"key": k, "value": v, "effect": e} for k, v, e in action.taints]
            await self.kube.set_node_taints(action.node, action.version, taints)
            self._node_writes[_busy_key(action)] = action.version
            log.info("bridge: node %s taints set (%s)", action.node, action.why)
            return True
        if isinstance(action, DrainSlurmNode):
            await update_node(self.session.client, version, action.node, "DRAIN", action.reason)
            self._node_writes[_busy_key(action)] = str(self._clock())
            log.info("bridge: Slurm node %s drained: %s", action.node, action.reason)
            self.source.poll_soon()
            return True
        if isinstance(action, ResumeSlurmNode):
            await update_node(self.session.client, version, action.node, "RESUME")
            self._node_writes[_busy_key(action)] = str(self._clock())
            log.info("bridge: Slurm node %s resumed: %s", action.node, action.why)
            self.source.poll_soon()
            return True
        if isinstance(action, Submit):
            pod = self._pod(action.uid)
            try:
                self._submissions += 1
                job_id = await submit_job(
                    self.session.client,
                    version,
                    action.request,
                    instance=self.options.instance,
                    excluded_nodes=action.excluded_nodes,
                    lane=self._submissions % self.options.submit_lanes,
                )
            except SlurmError as e:
                refusals = self._refused_until.get(action.uid, (0.0, 0))[1] + 1
                self._refused_until[action.uid] = (
                    self._clock() + SUBMIT_BACKOFF.delay(refusals - 1),
                    refusals,
                )
                if pod is not None:
                    await self._tell(pod, "SlurmSubmitFailed", f"Slurm refused the job: {e}", warning=True)
                raise
            self._refused_until.pop(action.uid, None)
            for uid in action.uids:
                self.submitted[uid] = Submitted(job_id, self._clock())
            self.source.poll_soon()  # an incremental read: /jobs/state and the few jobs that moved
            partition = action.request.partition
            if action.group is None:
                log.info("bridge: pod %s → Slurm job %d (partition %s)", action.pod, job_id, partition)
                text = f"Slurm job {job_id} submitted to partition {partition}"
            else:
                n = action.request.nodes
                log.info(
                    "bridge: %s → Slurm job %d (%d nodes, partition %s)", action.group, job_id, n, partition
                )
                text = f"Slurm job {job_id} submitted to partition {partition} for {action.group} ({n} nodes)"
            if action.excluded_nodes and action.placement:  # why Slurm may not use some nodes
                text += f"; Kubernetes: {action.placement}"
            for uid in action.uids:
                member = self._pod(uid)
                if member is not None:
                    await self.kube.event(member, "SlurmSubmitted", text)
            return True
        if isinstance(action, Waiting | Refuse):
            pod = self._pod(action.uid)
            text = action.message if isinstance(action, Waiting) else action.reason
            if pod is None or self._said.get(action.uid) == text:
                return False
            if isinstance(action, Refuse):
                await self._tell(pod, "SlurmRefused", text, warning=True)
            elif action.reason == UNSCHEDULABLE:  # as kube-scheduler says it: condition and Event
                await self.kube.unschedulable(pod, UNSCHEDULABLE, text)
                await self.kube.event(pod, "FailedScheduling", text, warning=True)
            elif action.reason == JOBS_FAILED:
                await self.kube.unschedulable(pod, JOBS_FAILED, text)
                await self.kube.event(pod, JOBS_FAILED, text, warning=True)
            else:
                await self.kube.unschedulable(pod, action.reason, text)
            self._said[action.uid] = text
            return True
        if isinstance(action, Bind):
            pod = self._pod(action.uid)
            if pod is None:
                return False
            if action.wait_for:  # waits like a failed binding: backoff, then released at the deadline
                raise KubeError(f"not yet: {action.wait_for}", reason=NOT_YET)
            # the job id in the binding's own write: a pod bound without it would look like someone else's
            notes = {JOB_ID_ANNOTATION: str(action.job_id), SLURM_NODE_ANNOTATION: action.slurm_node}
            if action.job_nodes:  # a gang member: its rank and the whole allocation
                notes |= {RANK_ANNOTATION: str(action.rank), NODES_ANNOTATION: action.job_nodes}
            await self.kube.bind(pod, action.node, notes)
            started = action.job_start
            if started:
                latency = max(0.0, self._clock() - started)
                self.stats.last_bind_latency = latency
                self.stats.bind_latency_sum += latency
                self.stats.bind_latency_count += 1
            log.info(
                "bridge: pod %s bound to %s (Slurm job %d on %s)",
                action.pod,
                action.node,
                action.job_id,
                action.slurm_node,
            )
            await self.kube.event(
                pod,
                "SlurmBound",
                f"Slurm job {action.job_id} runs on {action.slurm_node}; bound to {action.node}",
            )
            self._said.pop(action.uid, None)
            self._bind_failed.pop(action.uid, None)
            await self._label(pod, str(action.job_id))  # after the binding: selectors only
            return True
        if isinstance(action, PrepareVolume):
            step = action.step
            if step.volume is not None:
                await self.kube.prebind_volume(
                    step.volume, step.volume_version, step.namespace, step.claim, step.claim_uid
                )
                text = f"volume {step.volume} on {step.node} pre-bound to claim {step.claim}"
            else:
                await self.kube.select_node(step.namespace, step.claim, step.claim_uid, step.node)
                text = f"claim {step.claim}: its volume is to be provisioned on {step.node}"
            log.info("bridge: pod %s: %s", action.pod, text)
            pod = self._pod(action.uid)
            if pod is not None:
                await self.kube.event(pod, "SlurmVolumeSelected", text)
            return True
        if isinstance(action, Label):
            pod = self._pod(action.uid)
            if pod is None or self._labelled.get(action.uid) == action.job_id:
                return False
            await self._label(pod, action.job_id)
            return True
        if isinstance(action, GroupStatus):
            await self.kube.pod_group_status(action.namespace, action.name, dict(action.status))
            return True
        if isinstance(action, Exclude):
            done = await exclude_nodes(self.session.client, version, action.job_id, action.nodes)
            if done:
                log.info(
                    "bridge: Slurm job %d now excludes %s (pod %s; Kubernetes: %s)",
                    action.job_id,
                    ",".join(action.nodes) or "no node",
                    action.pod,
                    action.why,
                )
                self.source.poll_soon()
                shown = ",".join(action.nodes) or "no node"
                for uid in action.uids:
                    if (pod := self._pod(uid)) is not None:
                        text = f"Slurm job {action.job_id} now excludes {shown}; Kubernetes: {action.why}"
                        await self.kube.event(pod, "SlurmExcluded", text)
            return done
        if isinstance(action, Cancel):
            if action.release and action.admin_comment:  # says "the bridge's release", for any later reader
                known = await set_admin_comment(
                    self.session.client, version, action.job_id, action.admin_comment
                )
                if not known:
                    self.source.poll_soon()
                    return False  # ended or gone meanwhile: nothing to release
            cancelled = await cancel_job(self.session.client, version, action.job_id)
            if action.why.startswith(RELEASED):
                self.stats.released += cancelled
            log.info(
                "bridge: cancel Slurm job %d: %s%s",
                action.job_id,
                action.why,
                "" if cancelled else " (already gone)",
            )
            self._poll_after_cancel()
            return cancelled
        if isinstance(action, DeletePod):
            pod = self._pod(action.uid)
            if pod is None:
                return False
            await self._tell(pod, action.event, action.why, warning=True)
            deleted = await self.kube.delete_pod(pod)
            log.info("bridge: delete pod %s: %s", action.pod, action.why)
            return deleted
        raise AssertionError(f"unknown action {action!r}")

    async def _label(self, pod: Pod, job_id: str) -> None:
        """Put the job-id label on a bound pod; a failure is logged and counted (``label``), and the next
        pass tries again (:class:`bridge.actions.Label`) — the binding itself stands. A pod deleted
        meanwhile (404: its owner deleted it right after the binding) needs no label: no error."""
        try:
            if not await self.kube.mark(pod, {JOB_ID_LABEL: job_id}, {}):
                return  # gone: nothing to label
        except KubeError as e:
            self.stats.errors[("label", e.kind)] += 1
            log.warning("bridge: label pod %s/%s: %s", pod.metadata.namespace, pod.metadata.name, e)
            return
        self._labelled[pod.metadata.uid] = job_id

    async def _bind_failure(self, action: Bind, error: KubeError) -> None:
        """Back off the pod's next binding; the first failure is said in one Event (and the log), later
        ones only counted (the log says it again at most every minute)."""
        now = self._clock()
        failed = self._bind_failed.get(action.uid)
        if failed is None or failed.job_id != action.job_id:
            failed = self._bind_failed[action.uid] = _BindFailure(action.job_id, now)
        failed.count += 1
        failed.retry_at = now + BIND_BACKOFF.delay(failed.count - 1)
        failed.error = str(error)
        if failed.count == 1 or now - failed.logged >= 60.0:
            failed.logged = now
            log.warning(
                "bridge: cannot bind pod %s to %s (Slurm job %d), attempt %d, next in %.0f s, job released "
                "after %.0f s: %s",
                action.pod,
                action.node,
                action.job_id,
                failed.count,
                failed.retry_at - now,
                self.options.bind_deadline,
                error,
            )
        pod = self._pod(action.uid)
        if failed.count == 1 and pod is not None:
            text = (
                f"cannot bind the pod to {action.node}, where Slurm job {action.job_id} runs: {error}; "
                f"retrying with backoff, the job is released after {self.options.bind_deadline:.0f} s"
            )
            with contextlib.suppress(KubeError):  # the Event may be forbidden as well: counted, logged above
                await self._tell(pod, "SlurmBindFailed", text, warning=True)

    async def _tell(self, pod: Pod, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event and, for a pod not yet bound, the PodScheduled=False message."""
        await self.kube.event(pod, reason, message, warning=warning)
        if not pod.spec.nodeName:
            with contextlib.suppress(KubeError):  # the pod may be gone already
                await self.kube.unschedulable(pod, reason, message)


PHASES = ("waiting", "unschedulable", "gated", "failed_jobs", "bound", "refused")
"""``slurm_bridge_pods``' phases."""
WAITING_PHASES = {UNSCHEDULABLE: "unschedulable", SCHEDULING_GATED: "gated", JOBS_FAILED: "failed_jobs"}
"""A waiting pod's PodScheduled reason → its phase."""
NOT_YET = "NotYet"
"""The reason of a binding that waits (room on the node, its claims' volumes): retried like a failed one,
released at the deadline, but not counted as an error."""
RELEASED = "released: "
"""How a Cancel that releases an unbindable pod's job begins its reason."""


@dataclass
class _BindFailure:
    """A pod's failed bindings to one job's node."""

    job_id: int
    first: float
    """When the first binding failed, epoch seconds."""
    count: int = 0
    retry_at: float = 0.0
    logged: float = 0.0
    error: str = ""


def _release_reason(failed: _BindFailure, deadline: float) -> str:
    return (
        f"{RELEASED}its pod could not be bound for {deadline:.0f} s ({failed.count} attempts; last: "
        f"{failed.error})"
    )


def _object_key(obj: PodGroup | SchedulingGroup | Owner) -> str:
    """A workload or group object's cache key: its uid, else namespace/name; "" (not stored) for one with
    neither."""
    meta = obj.metadata
    return meta.uid or (f"{meta.namespace}/{meta.name}" if meta.name else "")


def _name(action: Action | NodeAction) -> str:
    return {
        SetTaints: "node_taints",
        DrainSlurmNode: "slurm_drain",
        ResumeSlurmNode: "slurm_resume",
        Submit: "submit",
        Bind: "bind",
        Cancel: "cancel",
        DeletePod: "delete",
        Label: "label",
        PrepareVolume: "volume",
        Exclude: "exclude",
        GroupStatus: "group_status",
        Waiting: "waiting",
        Refuse: "refuse",
    }[type(action)]


def _busy_key(action: Action | NodeAction) -> str:
    if isinstance(action, SetTaints | DrainSlurmNode | ResumeSlurmNode):
        return f"{type(action).__name__}:{action.node}"
    if isinstance(action, Cancel | Exclude):
        return f"job:{action.job_id}"
    if isinstance(action, PrepareVolume):
        return f"claim:{action.step.namespace}/{action.step.claim}"
    if isinstance(action, GroupStatus):
        return f"podgroup:{action.namespace}/{action.name}"
    if isinstance(action, Submit) and action.group is not None:
        return f"group:{action.group}"  # its leader may change between passes
    return f"pod:{action.uid}"
