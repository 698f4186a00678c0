"""Types of the compiled per-record loops (``_scan.c``)."""

from collections.abc import Callable, Iterable
from typing import Any

def scan(
    jobs: Iterable[Any],
    fields: tuple[Any, ...],
    pending: str,
    unsettled: frozenset[str],
    settle: Callable[[Any], str],
    every: bool,
    others: list[Any] | None,
    ids: dict[Any, int],
    ordinal: bool,
    /,
) -> tuple[bytearray, bytearray, bytearray]: ...
def key_facts(
    keys: list[tuple[Any, ...]],
    start: int,
    partition_ids: dict[Any, int],
    reason_ids: dict[Any, int],
    feature_ids: dict[Any, int],
    request_ids: dict[Any, int],
    request_at: int,
    /,
) -> (
    tuple[
        bytearray,
        bytearray,
        bytearray,
        bytearray,
        bytearray,
        bytearray,
        bytearray,
        bytearray,
        list[tuple[Any, ...]],
        bytearray,
        bytearray,
        bytearray,
    ]
    | None
): ...
