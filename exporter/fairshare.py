"""Fair share by association (``/shares``: what ``sshare -l`` prints) → metric families. Pure.

One series per association row, labelled with the tree: ``account``, ``user`` (empty on an account's row),
``parent`` (the account's parent account) and ``partition`` (set only for per-partition associations).
Opt-in (``--metrics-fairshare``): the rows are as many as the associations (accounts × users).

* ``slurm_share_raw_shares`` — the shares configured (``RawShares``); none for ``root``.
* ``slurm_share_normalized_shares`` — their fraction among the siblings (``NormShares``).
* ``slurm_share_raw_usage`` — decayed usage, billing-TRES-seconds (``RawUsage``).
* ``slurm_share_normalized_usage`` / ``slurm_share_effective_usage`` — ``NormUsage`` / ``EffectvUsage``.
* ``slurm_share_fairshare_factor`` — 0–1, users' rows (``FairShare``).
* ``slurm_share_level_fs`` — Fair Tree's level fair share (``LevelFS``); ``+Inf`` without usage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from .model import Share, Snapshot

__all__ = ["fairshare_families"]

LABELS = ["account", "user", "parent", "partition"]

_FAMILIES: tuple[tuple[str, str, Callable[[Share], float | None]], ...] = (
    ("slurm_share_raw_shares", "Shares configured for the association (RawShares)", lambda s: s.raw_shares),
    (
        "slurm_share_normalized_shares",
        "The association's fraction of its parent's shares among its siblings (NormShares)",
        lambda s: s.normalized_shares,
    ),
    (
        "slurm_share_raw_usage",
        "The association's decayed usage in billing-TRES-seconds (RawUsage)",
        lambda s: s.raw_usage,
    ),
    (
        "slurm_share_normalized_usage",
        "The association's usage over the cluster's (NormUsage)",
        lambda s: s.normalized_usage,
    ),
    (
        "slurm_share_effective_usage",
        "The association's effective usage (EffectvUsage)",
        lambda s: s.effective_usage,
    ),
    (
        "slurm_share_fairshare_factor",
        "The user's fair-share factor, 0 to 1 (FairShare)",
        lambda s: s.fairshare,
    ),
    (
        "slurm_share_level_fs",
        "Fair Tree's level fair share of the association (LevelFS); +Inf while it has no usage",
        lambda s: s.level_fs,
    ),
)


def fairshare_families(snap: Snapshot) -> Iterable[Metric]:
    """The families above from ``snap.shares`` (empty families when Slurm keeps no accounting)."""
    for name, doc, value in _FAMILIES:
        fam = GaugeMetricFamily(name, doc, labels=LABELS)
        for share in snap.shares:
            v = value(share)
            if v is not None:
                fam.add_metric([share.account, share.user, share.parent, share.partition], float(v))
        yield fam
