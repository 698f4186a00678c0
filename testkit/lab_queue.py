"""A long queue in a lab, for the benchmarks at scale: held jobs submitted from inside the lab."""

from __future__ import annotations

import contextlib
import time

from lab import Lab


def count_jobs(lab: Lab, *args: str) -> int:
    """Jobs ``squeue`` lists with ``args``."""
    return len(lab.run(["squeue", "-h", "-o", "%i", *args], check=False).split())


def fill_held(lab: Lab, n: int, name: str, partition: str = "cpu", user: str = "root") -> None:
    """Bring the lab to ``n`` held jobs named ``name`` owned by ``user`` (``sbatch -H --uid`` in four loops
    inside the lab; those already there are kept, other users' of that name cancelled)."""
    lab.run(
        [
            "sh",
            "-c",
            f"squeue -h -n {name} -o '%i %u' | awk '$2 != \"{user}\" {{print $1}}' | xargs -r scancel",
        ]
    )
    have = count_jobs(lab, "-n", name, "-u", user)
    if have >= n:
        print(f"queue: {have} held {name} jobs already there")
        return
    t = time.perf_counter()
    missing = n - have
    loops = 4
    script = " & ".join(
        f"(i=0; while [ $i -lt {missing // loops + (1 if k < missing % loops else 0)} ]; do"
        f" sbatch -H --uid={user} -p {partition} -J {name} -o /dev/null --wrap true >/dev/null || exit 1;"
        " i=$((i+1)); done)"
        for k in range(loops)
    )
    lab.run(["sh", "-c", script + " ; wait"], timeout=3600)
    took = time.perf_counter() - t
    print(f"queue: {count_jobs(lab, '-n', name)} held jobs of {user} ({missing} submitted in {took:.0f} s)")


def reserve_new_nodes(
    lab: Lab,
    names: list[str],
    reservation: str,
    *,
    cpus: int,
    memory_mb: int,
    minutes: int,
    users: str = "root",
) -> None:
    """Dynamic nodes ``names`` (re-created) under the reservation ``reservation`` for ``users`` (its jobs
    cancelled, it re-created). Right after they register slurmctld may call them busy for a while: retried."""
    lab.run(["scancel", f"--reservation={reservation}"], check=False)
    lab.run(["scontrol", "delete", f"ReservationName={reservation}"], check=False)
    for name in names:
        with contextlib.suppress(Exception):
            lab.remove_node(name)
        lab.add_node(name, dynamic=True, cpus=cpus, memory_mb=memory_mb)
    create = [
        *("scontrol", "create", "reservation", f"ReservationName={reservation}", f"Nodes={','.join(names)}"),
        *(f"Users={users}", "StartTime=now", f"Duration={minutes}"),
    ]
    for attempt in range(40):
        result = lab.run_raw(create)
        if result.returncode == 0:
            return
        if attempt == 39:
            raise RuntimeError(result.stdout + result.stderr)
        time.sleep(0.5)
