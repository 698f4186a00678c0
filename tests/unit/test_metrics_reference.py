"""The metrics reference (docs/metrics.md) is the contract: every family served from the recorded lab
answers (the golden ``/metrics`` of every API version, every cardinality flag on) and every accounting and
fair-share family
rendered from slurmdbd's recorded answers has its row, with its type and label names, and every row states
its cardinality (the ``series`` column)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from exporter.accounting import Accounting, accounting_families, record_ended
from exporter.fairshare import fairshare_families
from exporter.model import Snapshot
from exporter.versions.shares import decode_shares
from exporter.versions.slurmdb import decode_slurmdb_jobs
from testkit.paths import ROOT
from testkit.tools import registry_of

README = ROOT / "docs" / "metrics.md"
GOLDEN = sorted((ROOT / "tests" / "data" / "golden").glob("slurm-*/v0.0.*/metrics.openmetrics.txt"))
ACCOUNTING = ROOT / "tests" / "data" / "accounting" / "slurm-26.05.5" / "v0.0.45"
HISTOGRAM_LABELS = {"le"}


def readme_rows() -> dict[str, tuple[str, frozenset[str], str]]:
    """Family name → (type, label names, series) from every ``| family | type | labels | series |`` table."""
    rows: dict[str, tuple[str, frozenset[str], str]] = {}
    in_table = False
    for line in README.read_text().splitlines():
        if line.startswith("| family | type | labels | series |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            in_table = False
        if in_table and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            labels = frozenset(x.strip() for x in cells[2].split(",") if x.strip())
            for name in re.findall(r"`([a-z_:]+)`", cells[0]):
                rows[name] = (cells[1].replace(" ", ""), labels, cells[3])
    return rows


def served_families() -> dict[str, tuple[str, set[str]]]:
    """Family name → (OpenMetrics type, label names of its samples) over every source named above."""
    texts = [p.read_text() for p in GOLDEN]
    shares, _ = decode_shares((ACCOUNTING / "shares.json").read_bytes())
    jobs, _ = decode_slurmdb_jobs((ACCOUNTING / "slurmdb_jobs.json").read_bytes())
    acc = record_ended(Accounting(), jobs, keep_after=0.0)
    extra: Iterable[Metric] = [
        *fairshare_families(Snapshot(taken_at=0.0, api_version="v0.0.45", shares=tuple(shares))),
        *accounting_families(acc, per_account=True, per_user=True),
    ]
    texts.append(generate_openmetrics(registry_of(extra)).decode())
    found: dict[str, tuple[str, set[str]]] = {}
    for text in texts:
        for fam in parse_openmetrics(text):
            _, labels = found.setdefault(fam.name, (fam.type, set()))
            for s in fam.samples:
                labels.update(k for k in s.labels if k not in HISTOGRAM_LABELS)
    return found


def test_every_served_family_has_its_row_type_and_labels() -> None:
    assert GOLDEN, "no golden /metrics recorded"
    rows = readme_rows()
    served = served_families()
    assert len(served) > 100
    missing = sorted(n for n in served if n not in rows and f"{n}_total" not in rows)
    assert missing == [], f"families without a row in docs/metrics.md: {missing}"
    for name, (kind, labels) in served.items():
        row_type, row_labels, _ = rows.get(name) or rows[f"{name}_total"]
        assert row_type == kind, (name, row_type, kind)
        if labels:  # a family without samples in the recordings says nothing about its labels
            assert row_labels == labels, (name, sorted(row_labels), sorted(labels))


def test_every_row_states_its_cardinality() -> None:
    rows = readme_rows()
    assert len(rows) > 120
    assert [name for name, (_, _, series) in rows.items() if not series] == []
    for name, (_, labels, series) in rows.items():
        if not labels:
            assert series == "1", (name, series)  # no label: one series
