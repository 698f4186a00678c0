"""The scaling targets of ``serve`` and ``demand``: ``--target k=v,...`` flags, else the targets file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autoscaler.demand import Target
from autoscaler.targets import MetadataError, load_targets_file, target_from_metadata
from exporter.errors import ConfigError


def targets_from_flags(target_flags: Sequence[str], targets_file: Path | None) -> list[Target]:
    """``--target k=v,...`` flags, else the targets file, else [] (= one per partition). An item without
    ``=`` continues the previous value (``featuresPerNode=ib,nvme``).

    Raises :class:`ConfigError` naming the flag and key.
    """
    if target_flags:
        out = []
        for flag in target_flags:
            meta: dict[str, str] = {}
            last: str | None = None
            for item in flag.split(","):
                key, sep, value = item.partition("=")
                if not sep:
                    if last is None:
                        raise ConfigError(f"--target {flag!r}: {item!r} is not KEY=VALUE")
                    meta[last] += "," + item.strip()
                    continue
                last = key.strip()
                meta[last] = value.strip()
            try:
                out.append(target_from_metadata(meta))
            except MetadataError as e:
                raise ConfigError(f"--target {flag!r}: {e}") from None
        return out
    if targets_file is not None:
        try:
            return load_targets_file(targets_file)
        except ValueError as e:
            raise ConfigError(f"--autoscaler-targets-file: {e}") from None
    return []
