"""Pure JSON → :mod:`exporter.model` translation for every supported slurmrestd API version.

One module per API generation:

* :mod:`.v0038` — v0.0.38 (Slurm 22.05): plain numbers, string states.
* :mod:`.v0040` — v0.0.40 … v0.0.45 (Slurm 23.11 … 26.05): ``{set, infinite, number}`` numbers,
  list states; the few per-version differences are handled inside (see its module doc).

What does not depend on the generation lives in :mod:`._common`: the adapter class itself
(each generation plugs in a ``Schema`` of its decoders and converters), the envelope, /diag,
/licenses and /reservations structs and conversions, and the caches.

v0.0.37 and v0.0.39 are not supported (no recorded answers to verify against).

Usage::

    adapter = adapter_for("v0.0.45")
    jobs, env = adapter.jobs(body)          # body: the /slurm/v0.0.45/jobs answer, bytes

Every bad input raises a typed :mod:`exporter.errors` error: ``NotJSONError``,
``TruncatedError``, ``ShapeError`` (message names the JSON path), ``SlurmReportedError`` (the
data field is missing and ``errors[]`` says why); an unknown version raises ``VersionError``.
"""

from __future__ import annotations

from typing import Any, Protocol

from exporter import errors
from exporter.model import (
    Association,
    Diag,
    EndedJob,
    Envelope,
    Job,
    License,
    Node,
    Partition,
    QosLimits,
    Reservation,
    Share,
    SlurmConfig,
)

from . import v0038, v0040


class Adapter(Protocol):
    """Translator of one API version's answers into model records."""

    version: str

    def envelope(self, body: bytes, endpoint: str) -> Envelope:
        """``last_update``, ``errors[]``, ``warnings[]`` and meta of any endpoint's body."""
        ...

    def jobs(self, body: bytes) -> tuple[list[Job], Envelope]: ...

    def job_array(self, array_text: bytes) -> list[Job]:
        """Jobs from the bytes of a JSON array of job objects (``b"[{...},{...}]"``)."""
        ...

    def records(self, endpoint: str, array_text: bytes) -> list[Any]:
        """Records of ``endpoint`` (nodes, partitions, licenses, reservations) from the bytes of a JSON
        array of them, as :meth:`nodes` & co. translate them (the streamed path)."""
        ...

    def nodes(self, body: bytes) -> tuple[list[Node], Envelope]: ...

    def partitions(self, body: bytes) -> tuple[list[Partition], Envelope]: ...

    def diag(self, body: bytes) -> tuple[Diag, Envelope]: ...

    def licenses(self, body: bytes) -> tuple[list[License], Envelope]: ...

    def reservations(self, body: bytes) -> tuple[list[Reservation], Envelope]: ...

    def shares(self, body: bytes) -> tuple[list[Share], Envelope]:
        """``/shares`` (v0.0.40+)."""
        ...

    def slurmdb_jobs(self, body: bytes) -> tuple[list[EndedJob], Envelope]:
        """slurmdbd's job records (``/slurmdb/.../jobs``, v0.0.40+)."""
        ...

    def conf(self, body: bytes) -> tuple[SlurmConfig, Envelope]:
        """slurmctld's configuration (``/slurm/v0.0.45/conf``, 26.05+)."""
        ...

    def qos(self, body: bytes) -> tuple[list[QosLimits], Envelope]:
        """slurmdbd's QOS (``/slurmdb/.../qos``, v0.0.40+)."""
        ...

    def associations(self, body: bytes) -> tuple[list[Association], Envelope]:
        """slurmdbd's associations (``/slurmdb/.../associations``, v0.0.40+)."""
        ...


SUPPORTED_VERSIONS: tuple[str, ...] = (*v0038.VERSIONS, *v0040.VERSIONS)
"""Every API version this package translates, ascending."""

_ADAPTERS: dict[str, Adapter] = {}


def adapter_for(version: str) -> Adapter:
    """The (shared, thread-safe) adapter of ``version``; ``VersionError`` if unsupported."""
    hit = _ADAPTERS.get(version)
    if hit is not None:
        return hit
    adapter: Adapter
    if version in v0038.VERSIONS:
        adapter = v0038.Adapter038(version)
    elif version in v0040.VERSIONS:
        adapter = v0040.Adapter040(version)
    else:
        supported = ", ".join(SUPPORTED_VERSIONS)
        raise errors.VersionError(f"unsupported slurmrestd API version {version!r} (supported: {supported})")
    return _ADAPTERS.setdefault(version, adapter)


__all__ = ["SUPPORTED_VERSIONS", "Adapter", "adapter_for"]
