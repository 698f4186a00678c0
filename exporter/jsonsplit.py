"""Cut a streamed JSON object into batches of the elements of one top-level array.

slurmrestd's ``/jobs`` answer is one object ``{"jobs": [ {...}, {...}, ... ], "meta": ..., ...}``
that reaches ~1 GB at 100k jobs. Decoding it whole would hold the body, and a full parse of it,
in memory at once and stall the event loop for seconds. :class:`StreamingArrayDecoder` is fed the body
chunk by chunk, cuts it into complete JSON arrays (``b"[{...},{...}]"``) of consecutive
elements, each of which a typed decoder can turn into model objects at once; the rest of the
object (the "envelope": ``meta``, ``errors``, ``last_update``, ...) is returned by :meth:`finish`
with the array emptied.

The scan is vectorised with numpy: a lookup table marks ``{ } [ ] " \\`` bytes, quotes preceded
by an odd run of backslashes are dropped, a running quote parity masks brackets inside strings,
and a cumulative sum gives each bracket's depth. Cuts are made only just after an element's
closing ``}`` at array depth, so every scan starts outside any string at a known depth.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from .errors import NotJSONError, TruncatedError

_OPEN_OBJ, _OPEN_ARR, _CLOSE_OBJ, _CLOSE_ARR, _QUOTE, _BACKSLASH = 1, 2, 3, 4, 5, 6
_CLASS = np.zeros(256, dtype=np.int8)
_CLASS[ord("{")] = _OPEN_OBJ
_CLASS[ord("[")] = _OPEN_ARR
_CLASS[ord("}")] = _CLOSE_OBJ
_CLASS[ord("]")] = _CLOSE_ARR
_CLASS[ord('"')] = _QUOTE
_CLASS[ord("\\")] = _BACKSLASH
_DELTA = np.array([0, 1, 1, -1, -1, 0, 0], dtype=np.int64)
_WS_COMMA = b" \t\r\n,"


class _Brackets:
    """Structural brackets of one scanned region: absolute positions, classes, depth after each."""

    __slots__ = ("cls", "depth", "pos")

    def __init__(
        self, pos: npt.NDArray[np.int64], cls: npt.NDArray[np.int8], depth: npt.NDArray[np.int64]
    ) -> None:
        self.pos = pos
        self.cls = cls
        self.depth = depth


def _scan(buf: bytes, start: int, end: int, depth0: int, in_string0: bool) -> tuple[_Brackets, bool]:
    """Find the brackets outside strings in ``buf[start:end]``.

    ``depth0``/``in_string0`` are the state at ``start``; ``buf[end-1]`` must not be a backslash
    (the caller holds a trailing backslash run back). Returns the brackets and whether ``end`` is
    inside a string.
    """
    arr = np.frombuffer(buf, dtype=np.uint8, count=end - start, offset=start)
    classes = _CLASS[arr]
    idx = np.flatnonzero(classes)
    cls = classes[idx]
    if (cls == _BACKSLASH).any():
        quote_idx = idx[cls == _QUOTE]
        escaped_candidates = quote_idx[(quote_idx > 0) & (arr[quote_idx - 1] == 0x5C)]
        drop: list[int] = []
        for q in escaped_candidates.tolist():
            run = 0
            j = q - 1
            while j >= 0 and arr[j] == 0x5C:
                run += 1
                j -= 1
            if run % 2:
                drop.append(q)
        keep = cls != _BACKSLASH
        if drop:
            keep &= ~np.isin(idx, np.asarray(drop, dtype=idx.dtype))
        idx = idx[keep]
        cls = cls[keep]
    is_quote = cls == _QUOTE
    quotes_before = np.cumsum(is_quote) - is_quote
    outside = ((quotes_before + int(in_string0)) & 1) == 0
    structural = outside & ~is_quote
    in_string_end = bool((int(is_quote.sum()) + int(in_string0)) & 1)
    b_idx = idx[structural]
    b_cls = cls[structural]
    depth = np.cumsum(_DELTA[b_cls]) + depth0
    return _Brackets(b_idx.astype(np.int64) + start, b_cls, depth), in_string_end


def _scan_end(buf: bytes, start: int) -> int:
    """End of the region safe to scan: hold back a trailing run of backslashes."""
    end = len(buf)
    while end > start and buf[end - 1] == 0x5C:
        end -= 1
    return end


_KEY_BEFORE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*$')
_FIRST_KEY = re.compile(rb'\s*"(?:[^"\\]|\\.)*"\s*:')

T = TypeVar("T")


class StreamingArrayDecoder(Generic[T]):
    """Decode the array under top-level ``key`` of a streamed JSON object, batch by batch.

    ``decode_batch`` turns ``b"[{...},{...}]"`` into items; it must raise :class:`NotJSONError` or
    :class:`TruncatedError` for text that is not a complete JSON array (and may raise anything
    else, e.g. a shape error, which is passed on).

    Fast path: once the first two elements have been found by the vectorised scan, the exact bytes
    between them (``}``, separator, ``{`` and the first key) are learnt; later cuts are found with
    ``bytes.rfind`` of that separator and proven by the decoder itself — a cut that is not an
    element boundary cannot decode as a JSON array. A failed proof falls back to the scan.

    Usage::

        dec = StreamingArrayDecoder(b"jobs", adapter.job_array)
        for chunk in body_chunks:
            items += dec.feed(chunk)
        envelope, last = dec.finish()     # envelope = the object with "jobs": []
    """

    def __init__(
        self,
        key: bytes,
        decode_batch: Callable[[bytes], list[T]],
        *,
        min_batch_bytes: int = 4 << 20,
    ) -> None:
        self._key = key
        self._decode = decode_batch
        self._min_batch = min_batch_bytes
        self._buf = b""
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._mode = "head"  # head -> array -> tail
        self._scan_pos = 0
        self._depth = 0
        self._in_string = False
        self._head = b""
        self._tail: list[bytes] = []
        self._separator: bytes | None = None
        self.bytes_seen = 0
        """Bytes fed so far."""
        self.items_decoded = 0
        """Array elements decoded so far."""
        self.fallback_scans = 0
        """Times the fast separator cut failed its proof and the full scan was used."""

    @property
    def found_array(self) -> bool:
        """True once the ``[`` of ``key``'s array has been seen."""
        return self._mode != "head"

    def feed(self, chunk: bytes) -> list[T]:
        """Add a chunk of the body; return the items it completes (possibly none)."""
        self.bytes_seen += len(chunk)
        if self._mode == "tail":
            self._tail.append(chunk)
            return []
        if self._mode == "head":
            self._buf = self._buf + chunk if self._buf else chunk
            self._find_array()
            if self._mode != "array":
                return []
        else:
            self._pending.append(chunk)
            self._pending_len += len(chunk)
        if len(self._buf) + self._pending_len < self._min_batch:
            return []
        self._join_pending()
        return self._cut(final=False)

    def finish(self) -> tuple[bytes, list[T]]:
        """Mark the end of the body; return the envelope (array emptied) and the last items.

        Without the array (an error answer, or ``key`` not an array) the envelope is the whole
        body: see :attr:`found_array`."""
        if self._mode == "head":
            self._find_array()
        if self._mode == "head":
            if self._depth != 0 or self._in_string or not self._buf.strip():
                raise TruncatedError(f"body ended inside the JSON document ({self.bytes_seen} bytes)")
            return self._buf, []
        items: list[T] = []
        if self._mode == "array":
            self._join_pending()
            items = self._cut(final=True)
        envelope = self._head + b"".join(self._tail)
        self._tail = []
        return envelope, items

    # -- internals ---------------------------------------------------------------------------

    def _join_pending(self) -> None:
        if self._pending:
            self._buf = b"".join((self._buf, *self._pending))
            self._pending = []
            self._pending_len = 0

    def _truncated(self) -> TruncatedError:
        return TruncatedError(
            f'body ended inside the "{self._key.decode()}" array '
            f"({self.bytes_seen} bytes, {self.items_decoded} elements read)"
        )

    def _find_array(self) -> None:
        """In head mode: scan for the ``[`` that opens ``key``'s array at depth 1."""
        buf = self._buf
        end = _scan_end(buf, self._scan_pos)
        if end <= self._scan_pos:
            return
        br, self._in_string = _scan(buf, self._scan_pos, end, self._depth, self._in_string)
        if br.pos.size and (br.depth < 0).any():
            raise NotJSONError("unbalanced brackets in the response body")
        opens = np.flatnonzero((br.cls == _OPEN_ARR) & (br.depth == 2))
        for i in opens.tolist():
            p = int(br.pos[i])
            m = _KEY_BEFORE.search(buf, max(0, p - 256), p)
            if m is not None and m.group(1) == self._key:
                self._head = buf[: p + 1]
                self._buf = buf[p + 1 :]
                self._mode = "array"
                return
        self._scan_pos = end
        if br.depth.size:
            self._depth = int(br.depth[-1])

    def _decode_span(self, buf: bytes, last: int) -> list[T]:
        """Decode the elements in ``buf[:last + 1]`` (``last`` = a closing ``}``)."""
        first = 0
        while first <= last and buf[first] in _WS_COMMA:
            first += 1
        items = self._decode(b"".join((b"[", buf[first : last + 1], b"]")))
        self.items_decoded += len(items)
        return items

    def _cut(self, *, final: bool) -> list[T]:
        """In array mode: decode every complete element; keep the partial one."""
        buf = self._buf
        if not final and self._separator is not None:
            p = buf.rfind(self._separator)
            if p > 0:
                try:
                    items = self._decode_span(buf, p)
                except (NotJSONError, TruncatedError):
                    self.fallback_scans += 1
                else:
                    self._buf = buf[p + 1 :]
                    return items
        return self._cut_by_scan(final=final)

    def _cut_by_scan(self, *, final: bool) -> list[T]:
        buf = self._buf
        end = _scan_end(buf, 0)
        br, _ = _scan(buf, 0, end, 2, False)
        close_idx = np.flatnonzero((br.cls == _CLOSE_OBJ) & (br.depth == 2))
        array_end = np.flatnonzero((br.cls == _CLOSE_ARR) & (br.depth == 1))
        limit = int(br.pos[array_end[0]]) if array_end.size else len(buf)
        close_pos = br.pos[close_idx]
        if array_end.size:
            close_pos = close_pos[close_pos < limit]
        if self._separator is None and close_pos.size >= 2:
            self._learn_separator(buf, int(close_pos[0]))
        items: list[T] = []
        rest_from = 0
        if close_pos.size:
            last = int(close_pos[-1])
            items = self._decode_span(buf, last)
            rest_from = last + 1
        if array_end.size:
            between = buf[rest_from:limit].strip(_WS_COMMA)
            if between:
                raise NotJSONError(f'unexpected text in the "{self._key.decode()}" array: {between[:40]!r}')
            self._mode = "tail"
            self._tail = [buf[limit:]]
            self._buf = b""
        else:
            self._buf = buf[rest_from:]
            if final:
                raise self._truncated()
        return items

    def _learn_separator(self, buf: bytes, close: int) -> None:
        """Remember the exact bytes from an element's ``}`` through the next element's first key."""
        nxt = close + 1
        while nxt < len(buf) and buf[nxt] in _WS_COMMA:
            nxt += 1
        if nxt < len(buf) and buf[nxt] == ord("{"):
            m = _FIRST_KEY.match(buf, nxt + 1)
            if m is not None:
                self._separator = buf[close : m.end()]


def decode_whole(body: bytes, key: bytes, decode_batch: Callable[[bytes], list[T]]) -> tuple[bytes, list[T]]:
    """Decode a complete body in one go (small payloads, tests)."""
    dec = StreamingArrayDecoder(key, decode_batch, min_batch_bytes=1 << 62)
    items = dec.feed(body)
    envelope, more = dec.finish()
    return envelope, items + more
