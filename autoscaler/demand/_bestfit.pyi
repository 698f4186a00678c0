"""Types of the compiled bounded best fit (``_bestfit.c``)."""

from collections.abc import Iterable, Sequence

def best_fit(
    order: Sequence[tuple[tuple[int, int, int, int], int]],
    runs: Iterable[Sequence[int]],
    cap: tuple[int, int, int],
    open_new: bool,
    /,
) -> tuple[int, list[int]]: ...
def best_fit_columns(
    nodes: object,
    cpus: object,
    memory: object,
    gpus: object,
    jobs: object,
    runs: Iterable[Sequence[int]],
    cap: tuple[int, int, int],
    open_new: bool,
    /,
) -> tuple[int, list[int]]: ...
