"""``/shares`` (v0.0.40+; ``sshare -l``) → :class:`exporter.model.Share` records. Pure.

Shape differences (recorded on 24.11 and 26.05):

* v0.0.40 gives ``effective_usage`` and ``fairshare.factor``/``level`` as bare numbers, and an association
  without usage a ``level`` of ``Infinity`` — not JSON (RFC 8259 has no infinities): such tokens are read
  as infinite before decoding.
* v0.0.41+ wrap them in ``{"set", "infinite", "number"}``; v0.0.41–v0.0.42 say an infinite level with
  ``infinite: true``, v0.0.43+ with a number of 2^64 (``set: true``).
* ``shares.number`` of ``root`` is unset; its level is NO_VAL in v0.0.40–v0.0.41, unset later.
* An account's row carries a fair-share factor of 0 that ``sshare`` does not print (Fair Tree computes it
  for users only): None here.

A user's row names the user in ``name`` and its account in ``parent``; an account's row names the account
and its parent account. :func:`convert_shares` turns both into (account, user, parent).
"""

from __future__ import annotations

import math
import re

import msgspec
from msgspec import UNSET, Struct, UnsetType

from exporter.model import Envelope, Share

from . import _common as c

__all__ = ["decode_shares"]

INFINITE_LEVEL = 2.0**63
"""A level at or above this is Slurm's way of saying infinite (26.05 sends 2^64 with ``set: true``)."""
NO_VAL = 4294967294.0
"""Slurm's "no value" (0xfffffffe): ``root``'s level in v0.0.40/v0.0.41 (unset in v0.0.42+)."""


class F(Struct, gc=False):
    """Slurm's optional number, floating."""

    set: bool = False
    infinite: bool = False
    number: float = 0.0


def _value(x: F | float | None) -> float | None:
    if x is None:
        return None
    if isinstance(x, F):
        if x.infinite:
            return math.inf
        return x.number if x.set else None
    return float(x)


class RawFairshare(Struct, gc=False):
    factor: F | float | None = None
    level: F | float | None = None


class RawShare(Struct, gc=False):
    name: str = ""
    parent: str = ""
    partition: str | None = None
    shares: F | None = None
    shares_normalized: F | None = None
    usage: float = 0.0
    usage_normalized: F | float | None = None
    effective_usage: F | float | None = None
    fairshare: RawFairshare | None = None
    type: list[str] | None = None


class RawShareList(Struct, gc=False):
    shares: list[RawShare] | None = None


class RawSharesAnswer(Struct, gc=False):
    shares: RawShareList | UnsetType = UNSET
    meta: c.RawMeta | None = None
    errors: list[c.RawError] | None = None
    warnings: list[c.RawWarning] | None = None


_DECODER = msgspec.json.Decoder(RawSharesAnswer)
_BARE_INFINITY = re.compile(rb"(:\s*)(-?)Infinity(?=\s*[,}\]])")


def decode_shares(body: bytes) -> tuple[list[Share], Envelope]:
    """The ``/shares`` answer of any v0.0.40+ version; raises :mod:`exporter.errors` errors like the
    other endpoints (a missing ``shares`` field with ``errors[]`` says why)."""
    if b"Infinity" in body:
        body = _BARE_INFINITY.sub(rb'\1{"infinite": true}', body)
    listed, env = c.answer_data(c.decode(_DECODER, body, "shares"), "shares", "shares")
    return c.guarded("shares", "share", lambda: convert_shares(listed.shares or [])), env


def convert_shares(rows: list[RawShare]) -> list[Share]:
    """Rows → shares: (account, user, parent) from each row's type, name and parent."""
    parent_of = {r.name: r.parent for r in rows if not _is_user(r)}
    out = []
    for r in rows:
        user = _is_user(r)
        account = r.parent if user else r.name
        level = _value(r.fairshare.level) if r.fairshare is not None else None
        if level == NO_VAL:
            level = None
        elif level is not None and level >= INFINITE_LEVEL:
            level = math.inf
        factor = _value(r.fairshare.factor) if r.fairshare is not None and user else None
        shares = _value(r.shares)
        out.append(
            Share(
                account=account,
                user=r.name if user else "",
                parent=parent_of.get(account, "") if user else r.parent,
                partition=r.partition or "",
                raw_shares=None if shares is None or math.isinf(shares) else int(shares),
                normalized_shares=_value(r.shares_normalized),
                raw_usage=float(r.usage),
                normalized_usage=_value(r.usage_normalized),
                effective_usage=_value(r.effective_usage),
                fairshare=factor,
                level_fs=level,
            )
        )
    return out


def _is_user(r: RawShare) -> bool:
    return "USER" in (r.type or ())
