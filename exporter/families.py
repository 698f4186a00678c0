"""Small builders shared by the modules that turn data into metric families. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["labelled"]

LabelValues = TypeVar("LabelValues", bound=tuple[str, ...])


def labelled(
    kind: type[GaugeMetricFamily | CounterMetricFamily],
    name: str,
    doc: str,
    labels: list[str],
    values: Mapping[LabelValues, float],
) -> Metric:
    """One ``kind`` family whose series are ``values`` (label values in ``labels``' order → value), sorted
    by label values."""
    fam = kind(name, doc, labels=labels)
    for key, v in sorted(values.items()):
        fam.add_metric(list(key), float(v))
    return fam
