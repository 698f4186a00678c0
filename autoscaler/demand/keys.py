"""What the demand model groups a pending job by: :data:`JobKey` (made by
:func:`autoscaler.demand.queue.scan`). Pure."""

from __future__ import annotations

from typing import Any

from autoscaler.demand.sizing import Request

__all__ = ["REQUEST", "JobKey", "request_of"]

JobKey = tuple[Any, ...]
"""What :func:`~autoscaler.demand.queue.scan` groups a pending job by: ``(partitions, reason, features,
tasks, array, who, *request)``.

``reason``: Slurm's, or for a job Slurm has not classified yet (reason in ``UNSETTLED``), bound to a
reservation or to named nodes, the one its own fields show (:func:`autoscaler.eligibility.settled_reason`);
``features``: its ``--constraint``; ``tasks``: ``Job.task_count`` (an array record stands for its
pending tasks); ``array``: None outside an array, the ``array_job_id`` for a record of an array without
a ``%N`` throttle, else ``(array_job_id, array_task_id, array_task_string, array_max_tasks)`` (records
of a throttled array count together only as job by job would: the allowance is handed out in order);
``who``: the job's ``(qos, account, user)`` where limits that depend on what runs are enforced
(:meth:`autoscaler.limits.JobLimits.budgets`) or with ``users`` (``scan``: some pending job shares nodes
only with its own user's, ``--exclusive=user|mcs``), else None;
``request``: the fields of :class:`~autoscaler.demand.sizing.Request`, in order, from :data:`REQUEST` on
(one flat tuple per job in the hot loop — a nested one doubles
the objects the garbage collector walks; made a typed ``Request`` once per distinct key that gets sized:
:func:`request_of`)."""

REQUEST = 6
"""Where the request's fields start in a :data:`JobKey`."""


def request_of(key: JobKey) -> Request:
    """The typed request of a :data:`JobKey`."""
    return tuple.__new__(Request, key[REQUEST:])
