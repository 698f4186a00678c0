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

Time stays linear in the body whatever its shape: a scan that finds no element boundary is not
retried until the unconsumed bytes have doubled, and the text before the array is kept in a
growing ``bytearray``. Size is bounded: one element larger than ``max_element_bytes``, or an
envelope (the text around the array) larger than ``max_envelope_bytes``, raises
:class:`~exporter.errors.TooLargeError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, NamedTuple, NoReturn, TypeVar

import numpy as np
import numpy.typing as npt

from .errors import NotJSONError, TooLargeError, TruncatedError

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
Buffer = bytes | memoryview


class _Brackets:
    """Structural brackets of one scanned region: absolute positions, classes, depth after each."""

    __slots__ = ("cls", "depth", "pos")

    def __init__(
        self, pos: npt.NDArray[np.int64], cls: npt.NDArray[np.int8], depth: npt.NDArray[np.int64]
    ) -> None:
        self.pos = pos
        self.cls = cls
        self.depth = depth


def _scan(
    buf: Buffer | bytearray, start: int, end: int, depth0: int, in_string0: bool, backslashes0: int = 0
) -> tuple[_Brackets, bool]:
    """Find the brackets outside strings in ``buf[start:end]``.

    ``depth0``/``in_string0`` are the state at ``start``, ``backslashes0`` the length of the run of
    backslashes just before it (scanned earlier: a quote at ``start`` is escaped when it is odd); else
    ``buf[end-1]`` must not be a backslash (the caller holds a trailing backslash run back). Returns the
    brackets and whether ``end`` is inside a string.
    """
    arr = np.frombuffer(buf, dtype=np.uint8, count=end - start, offset=start)
    classes = _CLASS[arr]
    idx = np.flatnonzero(classes)
    cls = classes[idx]
    if (cls == _BACKSLASH).any() or (backslashes0 and arr.size and arr[0] == 0x22):
        quote_idx = idx[cls == _QUOTE]
        escaped_candidates = quote_idx[
            ((quote_idx > 0) & (arr[quote_idx - 1] == 0x5C)) | ((quote_idx == 0) & (backslashes0 > 0))
        ]
        drop: list[int] = []
        for q in escaped_candidates.tolist():
            run = 0
            j = q - 1
            while j >= 0 and arr[j] == 0x5C:
                run += 1
                j -= 1
            if j < 0:
                run += backslashes0
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


def _array_pieces(pieces: Sequence[Buffer]) -> list[Buffer]:
    """``[``, the pieces with leading separators/whitespace dropped, ``]``."""
    out: list[Buffer] = [b"["]
    skipping = True
    for piece in pieces:
        if skipping:
            first = 0
            while first < len(piece) and piece[first] in _WS_COMMA:
                first += 1
            if first == len(piece):
                continue
            piece = memoryview(piece)[first:]
            skipping = False
        out.append(piece)
    out.append(b"]")
    return out


def _trailing_backslashes(piece: Buffer, before: int) -> int:
    """The length of the run of backslashes ending ``piece``, continuing ``before`` if it is all of them."""
    n = len(piece)
    end = n
    while end > 0 and piece[end - 1] == 0x5C:
        end -= 1
    return before + n if end == 0 else n - end


def _scan_end(buf: bytes | bytearray, start: int) -> int:
    """End of the region safe to scan: hold back a trailing run of backslashes."""
    end = len(buf)
    while end > start and buf[end - 1] == 0x5C:
        end -= 1
    return end


_KEY_BEFORE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*$')
_FIRST_KEY = re.compile(rb'\s*"(?:[^"\\]|\\.)*"\s*:')

T = TypeVar("T")

MAX_ELEMENT_BYTES = 16 << 20
"""Default cap on one array element: a Slurm job record is a few KiB (tens of KiB for a job on
thousands of nodes)."""
MAX_ENVELOPE_BYTES = 16 << 20
"""Default cap on the text around the array (``meta``, ``errors``, ``warnings``, ...)."""
SCAN_STEP_BYTES = 64 << 10
"""Most bytes one :meth:`ArrayCutter.feed` scans on the slow path (the rest waits as :attr:`backlog`):
64 KiB of nothing but brackets take the scan ~5 ms, a 256 KiB chunk of them 20 ms."""


class Cut(NamedTuple):
    """A run of complete array elements cut from the stream."""

    raw: tuple[Buffer, ...]
    """The exact stream bytes this cut consumed (separators included), as pieces, so that the raws
    of consecutive cuts plus the cutter's leftover are the stream again (see :meth:`ArrayCutter.rewind`).
    The pieces begin with separators/whitespace and end with an element's ``}`` (or whitespace)."""
    proven: bool
    """True when found by the structural scan (a real boundary); False for a fast separator cut,
    which the decoder proves: a cut that is not an element boundary cannot decode as an array."""

    def array(self) -> bytes:
        """The elements as one JSON array, ``b"[{...},{...}]"``, ready for a decoder (one copy)."""
        return b"".join(_array_pieces(self.raw))

    def array_size(self) -> int:
        return sum(len(p) for p in _array_pieces(self.raw))

    def write_array(self, dst: memoryview) -> int:
        """Write :meth:`array` into ``dst`` (e.g. shared memory); return the bytes written."""
        at = 0
        for piece in _array_pieces(self.raw):
            dst[at : at + len(piece)] = piece
            at += len(piece)
        return at


class ArrayCutter:
    """Cut the array under top-level ``key`` of a streamed JSON object into :class:`Cut` batches.

    Fast path: once the structural scan has found two elements, the exact bytes between them
    (``}``, separator, ``{`` and the first key) are learnt; later cuts use ``bytes.rfind`` of that
    separator and are returned unproven. If such a cut fails to decode, hand its bytes (and those of
    any later cut) to :meth:`rewind`, which cuts them again by scan.

    Slow path (no separator learnt yet, or none in the bytes waiting): the bytes are scanned as they
    arrive, from the state the scan left (depth, inside a string, a trailing run of backslashes), at most
    ``scan_step_bytes`` per :meth:`feed` — never the size of an element, which may reach
    ``max_element_bytes``. What is left is :attr:`backlog`: ``feed(b"")`` scans the next step, so a
    caller on an event loop yields between steps; :meth:`finish` scans the rest.
    """

    def __init__(
        self,
        key: bytes,
        *,
        min_batch_bytes: int = 512 << 10,
        max_element_bytes: int = MAX_ELEMENT_BYTES,
        max_envelope_bytes: int = MAX_ENVELOPE_BYTES,
        scan_step_bytes: int = SCAN_STEP_BYTES,
    ) -> None:
        self._key = key
        self._min_batch = min_batch_bytes
        self._scan_step = scan_step_bytes
        self._max_element = max_element_bytes
        self._max_envelope = max_envelope_bytes
        self._text = bytearray()
        """Head mode: the body so far."""
        self._buf: Buffer = b""
        """Array mode: the unconsumed start (begins at an element boundary), then ``_pending``."""
        self._pending: list[Buffer] = []
        self._pending_len = 0
        self._mode = "head"  # head -> array -> tail
        self._scan_pos = 0
        self._depth = 0
        self._in_string = False
        self._head = b""
        self._tail: list[bytes] = []
        self._tail_len = 0
        self._separator: bytes | None = None
        self._scanning = False
        """Array mode, slow path: every chunk is scanned as it arrives (see the class doc)."""
        self._reset_scan()
        self.bytes_seen = 0
        """Bytes fed so far."""
        self.elements = 0
        """Array elements cut so far by proven cuts (unproven cuts are not counted)."""
        self.rewinds = 0
        """Times an unproven cut failed and the bytes were cut again by scan."""
        self.bytes_scanned = 0
        """Bytes examined by structural scans and separator searches: a small multiple of
        :attr:`bytes_seen`, whatever the shape of the body."""

    def _reset_scan(self) -> None:
        """Forget the slow path's scan: the unconsumed bytes begin at an element boundary, unscanned."""
        self._sc_pos = 0
        """Bytes of the unconsumed stream (``_buf`` then ``_pending``) scanned so far."""
        self._sc_depth = 2
        self._sc_in_string = False
        self._sc_backslashes = 0
        self._sc_first_close = -1
        """Just after the first element's ``}`` scanned since the last cut (-1: none)."""
        self._sc_last_close = 0
        """Just after the last element's ``}`` scanned since the last cut (0: none)."""
        self._sc_closes = 0
        self._sc_array_end = -1
        """Where the array's ``]`` is, once scanned (-1: not yet)."""
        self._forget_scanned_pieces()

    def _forget_scanned_pieces(self) -> None:
        """After any change to ``_buf`` or ``_pending`` but an append: the scan resumes from the first
        piece (which pieces it has wholly scanned is known again after one pass over them)."""
        self._sc_piece = 0
        """Index in ``(_buf, *_pending)`` of the first piece not wholly scanned (or before it)."""
        self._sc_piece_at = 0
        """Where that piece begins in the unconsumed stream."""

    @property
    def found_array(self) -> bool:
        """True once the ``[`` of ``key``'s array has been seen."""
        return self._mode != "head"

    @property
    def slow(self) -> bool:
        """True while every byte fed is scanned (before the array, or on the slow path): feed such bytes
        in steps of about ``scan_step_bytes``, yielding between them."""
        return self._mode == "head" or (self._mode == "array" and (self._scanning or self._separator is None))

    @property
    def backlog(self) -> int:
        """Bytes the slow path has yet to scan (``feed(b"")`` scans the next step of them)."""
        if (
            self._mode != "array"
            or not (self._scanning or self._separator is None)
            or self._sc_array_end >= 0
        ):
            return 0
        return len(self._buf) + self._pending_len - self._sc_pos

    def feed(self, chunk: bytes) -> list[Cut]:
        """Add a chunk of the body; return the cuts it allows (possibly none)."""
        self.bytes_seen += len(chunk)
        if self._mode == "tail":
            self._add_tail(chunk)
            return []
        if self._mode == "head":
            self._text += chunk
            self._find_array()
            if self._mode != "array":
                self._check_envelope(len(self._text))
                return []
            self._check_envelope(len(self._head))
        elif chunk:
            self._pending.append(chunk)
            self._pending_len += len(chunk)
        if self._scanning or self._separator is None:
            return self._scan_cut(final=False)
        if len(self._buf) + self._pending_len < self._min_batch:
            return []
        cut = self._fast_cut(self._separator)
        if cut is not None:
            return [cut]
        self._scanning = True  # no separator in the waiting bytes: a long element, or a lookalike
        return self._scan_cut(final=False)

    def finish(self) -> tuple[bytes, list[Cut]]:
        """Mark the end of the body; return the envelope (array emptied) and the last cuts.

        Without the array (an error answer, or ``key`` not an array) the envelope is the whole
        body: see :attr:`found_array`."""
        if self._mode == "head":
            self._find_array()
        if self._mode == "head":
            if self._depth != 0 or self._in_string or not self._text.strip():
                raise TruncatedError(f"body ended inside the JSON document ({self.bytes_seen} bytes)")
            return bytes(self._text), []
        cuts: list[Cut] = []
        if self._mode == "array":
            cuts = self._scan_cut(final=True)
        envelope = self._head + b"".join(self._tail)
        self._tail = []
        return envelope, cuts

    def rewind(self, raw: Iterable[Buffer]) -> list[Cut]:
        """Put back the bytes of failed unproven cut(s) and cut them again by the structural scan.

        ``raw`` must be the pieces of the failed cut's ``raw`` and of every cut made after it, in
        order; together with what the cutter still holds they are the rest of the stream."""
        self.rewinds += 1
        rest = self._tail if self._mode == "tail" else [self._buf, *self._pending]
        self._buf = b"".join((*raw, *rest))
        self._pending, self._pending_len = [], 0
        self._tail, self._tail_len = [], 0
        self._mode = "array"
        self._scanning = True
        self._reset_scan()
        return self._scan_cut(final=False, at_least=1)

    # -- internals ---------------------------------------------------------------------------

    def _check_envelope(self, size: int) -> None:
        if size > self._max_envelope:
            raise TooLargeError(
                f'more than {self._max_envelope >> 20} MiB of text around the "{self._key.decode()}" array'
            )

    def _add_tail(self, chunk: Buffer) -> None:
        self._tail.append(bytes(chunk))
        self._tail_len += len(chunk)
        self._check_envelope(len(self._head) + self._tail_len)

    def _find_array(self) -> None:
        """In head mode: scan for the ``[`` that opens ``key``'s array at depth 1."""
        buf = self._text
        end = _scan_end(buf, self._scan_pos)
        if end <= self._scan_pos:
            return
        self.bytes_scanned += end - self._scan_pos
        br, self._in_string = _scan(buf, self._scan_pos, end, self._depth, self._in_string)
        if br.pos.size and (br.depth < 0).any():
            raise NotJSONError("unbalanced brackets in the response body")
        opens = np.flatnonzero((br.cls == _OPEN_ARR) & (br.depth == 2))
        for i in opens.tolist():
            p = int(br.pos[i])
            m = _KEY_BEFORE.search(buf, max(0, p - 256), p)
            if m is not None and m.group(1) == self._key:
                self._head = bytes(buf[: p + 1])
                self._buf = bytes(buf[p + 1 :])
                self._text = bytearray()
                self._mode = "array"
                self._reset_scan()
                return
        self._scan_pos = end
        if br.depth.size:
            self._depth = int(br.depth[-1])

    def _fast_cut(self, sep: bytes) -> Cut | None:
        """Cut at the last separator found inside one piece (newest first), copying each byte once."""
        pieces: list[Buffer] = [self._buf, *self._pending]
        for k in range(len(pieces) - 1, -1, -1):
            piece = pieces[k]
            self.bytes_scanned += len(piece)
            q = (piece if isinstance(piece, bytes) else bytes(piece)).rfind(sep)
            if q < 0 or (k == 0 and q == 0):
                continue
            view = memoryview(piece)
            taken = (*pieces[:k], view[: q + 1])
            self._buf = view[q + 1 :]
            self._pending = [memoryview(p) for p in pieces[k + 1 :]]
            self._pending_len = sum(len(p) for p in self._pending)
            self._reset_scan()
            return Cut(taken, False)
        return None

    def _scan_new(self, budget: int | None) -> None:
        """Scan the unconsumed bytes not scanned yet (at most ``budget``, None: all), piece by piece, up to
        the array's ``]``."""
        k, offset = self._sc_piece, self._sc_piece_at
        left = budget
        pending = self._pending
        while k <= len(pending):
            piece = pending[k - 1] if k else self._buf
            n = len(piece)
            if self._sc_array_end >= 0 or left == 0:
                return
            if offset + n <= self._sc_pos:
                offset += n
                k += 1
                self._sc_piece, self._sc_piece_at = k, offset
                continue
            start = self._sc_pos - offset
            n = n if left is None else min(n, start + left)
            if left is not None:
                left -= n - start
            self.bytes_scanned += n - start
            br, in_string = _scan(piece, start, n, self._sc_depth, self._sc_in_string, self._sc_backslashes)
            mine = (br.cls == _CLOSE_OBJ) & (br.depth == 2)
            ends = np.flatnonzero((br.cls == _CLOSE_ARR) & (br.depth == 1))
            stop = n
            if ends.size:
                stop = int(br.pos[ends[0]])
                mine &= br.pos < stop
                self._sc_array_end = offset + stop
            closes = br.pos[mine]
            if closes.size:
                longest = int(np.diff(closes, prepend=self._sc_last_close - offset - 1).max())
                if longest > self._max_element:
                    self._too_large()
                if self._sc_first_close < 0:
                    self._sc_first_close = offset + int(closes[0]) + 1
                self._sc_last_close = offset + int(closes[-1]) + 1
                self._sc_closes += int(closes.size)
            self._sc_pos = offset + stop
            if ends.size:
                return
            if br.depth.size:
                self._sc_depth = int(br.depth[-1])
            self._sc_in_string = in_string
            self._sc_backslashes = _trailing_backslashes(memoryview(piece)[start:n], self._sc_backslashes)
            if self._sc_pos - self._sc_last_close > self._max_element:
                self._too_large()
            offset += len(piece)
            k += 1
            if self._sc_pos == offset:  # wholly scanned: the next scan starts after it
                self._sc_piece, self._sc_piece_at = k, offset

    def _too_large(self) -> NoReturn:
        raise TooLargeError(
            f'one element of the "{self._key.decode()}" array is larger than'
            f" {self._max_element >> 20} MiB (--max-record-bytes)"
        )

    def _take(self, upto: int) -> tuple[Buffer, ...]:
        """Remove the first ``upto`` unconsumed bytes; return them as pieces (no copy)."""
        taken: list[Buffer] = []
        rest: list[Buffer] = []
        offset = 0
        for piece in (self._buf, *self._pending):
            n = len(piece)
            if offset + n <= upto:
                taken.append(piece)
            elif offset >= upto:
                rest.append(piece)
            else:
                view = memoryview(piece)
                taken.append(view[: upto - offset])
                rest.append(view[upto - offset :])
            offset += n
        self._buf = rest[0] if rest else b""
        self._pending = rest[1:]
        self._pending_len = sum(len(p) for p in self._pending)
        self._forget_scanned_pieces()
        return tuple(taken)

    def _between(self, a: int, b: int) -> bytes:
        """The unconsumed bytes from ``a`` to ``b`` (a copy)."""
        out: list[Buffer] = []
        offset = 0
        for piece in (self._buf, *self._pending):
            n = len(piece)
            lo, hi = max(a, offset), min(b, offset + n)
            if lo < hi:
                out.append(memoryview(piece)[lo - offset : hi - offset])
            offset += n
        return b"".join(out)

    def _scan_cut(self, *, final: bool, at_least: int | None = None) -> list[Cut]:
        """Slow path: scan what arrived, cut the complete elements once a batch's worth (``at_least``
        bytes, default the minimum batch) or the whole array is there. Scans one step unless ``final``."""
        self._scan_new(None if final else self._scan_step)
        end = self._sc_array_end
        if end >= 0:
            gap = self._between(self._sc_last_close, end)
            if gap.strip(_WS_COMMA):
                raise NotJSONError(f'unexpected text in the "{self._key.decode()}" array: {gap[:40]!r}')
            if self._sc_closes:
                cuts = [self._proven_cut(end)]
            else:
                cuts = []
                self._take(end)  # separators only: nothing to decode
            rest = (self._buf, *self._pending)
            self._mode = "tail"
            self._tail, self._tail_len = [], 0
            self._add_tail(b"".join(rest))
            self._buf, self._pending, self._pending_len = b"", [], 0
            self._reset_scan()
            return cuts
        if final:
            raise TruncatedError(
                f'body ended inside the "{self._key.decode()}" array '
                f"({self.bytes_seen} bytes, {self.elements} elements read)"
            )
        if not self._sc_closes or self._sc_last_close < (self._min_batch if at_least is None else at_least):
            return []
        cut = self._proven_cut(self._sc_last_close)
        if self._separator is not None:
            self._scanning = False  # back to the fast path (its cuts reset the scan)
        return [cut]

    def _proven_cut(self, upto: int) -> Cut:
        """The scanned elements up to ``upto`` (just after an element's ``}``, or the array's end) as a
        proven cut; learns the separator from its first two elements; rebases the scan state."""
        closes = self._sc_closes
        first = self._sc_first_close
        raw = self._take(upto)
        if self._separator is None and closes >= 2:
            joined = b"".join(raw)
            self._learn_separator(joined, first - 1)
            raw = (joined,)
        self.elements += closes
        self._sc_pos -= upto
        self._sc_array_end = self._sc_array_end - upto if self._sc_array_end >= 0 else -1
        self._sc_first_close, self._sc_last_close, self._sc_closes = -1, 0, 0
        return Cut(raw, True)

    def _learn_separator(self, buf: bytes, close: int) -> None:
        """Remember the exact bytes from an element's ``}`` through the next element's first key."""
        nxt = close + 1
        while nxt < len(buf) and buf[nxt] in _WS_COMMA:
            nxt += 1
        if nxt < len(buf) and buf[nxt] == ord("{"):
            m = _FIRST_KEY.match(buf, nxt + 1)
            if m is not None:
                self._separator = buf[close : m.end()]


class StreamingArrayDecoder(Generic[T]):
    """Decode the array under top-level ``key`` of a streamed JSON object, batch by batch, in the
    calling thread .

    ``decode_batch`` turns ``b"[{...},{...}]"`` into items; it must raise :class:`NotJSONError` or
    :class:`TruncatedError` for text that is not a complete JSON array (and may raise anything
    else, e.g. a shape error, which is passed on).

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
        min_batch_bytes: int = 512 << 10,
        max_element_bytes: int = MAX_ELEMENT_BYTES,
        max_envelope_bytes: int = MAX_ENVELOPE_BYTES,
        scan_step_bytes: int = SCAN_STEP_BYTES,
    ) -> None:
        self.cutter = ArrayCutter(
            key,
            min_batch_bytes=min_batch_bytes,
            max_element_bytes=max_element_bytes,
            max_envelope_bytes=max_envelope_bytes,
            scan_step_bytes=scan_step_bytes,
        )
        self._decode = decode_batch

    @property
    def found_array(self) -> bool:
        return self.cutter.found_array

    @property
    def bytes_seen(self) -> int:
        return self.cutter.bytes_seen

    @property
    def backlog(self) -> int:
        """Bytes not scanned yet (:attr:`ArrayCutter.backlog`); ``feed(b"")`` scans the next step."""
        return self.cutter.backlog

    @property
    def slow(self) -> bool:
        """:attr:`ArrayCutter.slow`."""
        return self.cutter.slow

    def feed(self, chunk: bytes) -> list[T]:
        """Add a chunk of the body; return the items it completes (possibly none)."""
        return self._decode_cuts(self.cutter.feed(chunk))

    def finish(self) -> tuple[bytes, list[T]]:
        """Mark the end of the body; return the envelope (array emptied) and the last items."""
        envelope, cuts = self.cutter.finish()
        return envelope, self._decode_cuts(cuts)

    def _decode_cuts(self, cuts: list[Cut]) -> list[T]:
        out: list[T] = []
        for i, cut in enumerate(cuts):
            try:
                out += self._decode(cut.array())
            except (NotJSONError, TruncatedError):
                if cut.proven:
                    raise
                out += self._decode_cuts(self.cutter.rewind([r for c in cuts[i:] for r in c.raw]))
                break
        return out


def decode_whole(body: bytes, key: bytes, decode_batch: Callable[[bytes], list[T]]) -> tuple[bytes, list[T]]:
    """Decode a complete body in one go (small payloads, tests)."""
    dec = StreamingArrayDecoder(key, decode_batch, min_batch_bytes=1 << 62)
    items = dec.feed(body)
    envelope, more = dec.finish()
    return envelope, items + more
