"""The cloud partition's power log: which nodes slurmctld powered up (resumed) or down (suspended).

The lab's ``ResumeProgram``/``SuspendProgram`` (:func:`lab.conf.power_script`) only append one line
``<epoch seconds> <resume|suspend> <host list>`` to ``log/power.log``: the nodes of ``State=CLOUD`` that
slurmctld's own scheduler allocated to jobs (resume) or found idle for ``SuspendTime`` (suspend). No node
ever boots, so a resumed node stays POWERING_UP and its jobs CONFIGURING until ``ResumeTimeout``: the log is
Slurm's answer to "which nodes would this queue need", and a fresh ``lab up`` (which clears ``log/``) resets
it.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.slurmtext import hostlist_expand

__all__ = ["PowerEvent", "parse_power_log", "resumed_hosts"]


@dataclass(frozen=True)
class PowerEvent:
    """One call of ResumeProgram or SuspendProgram."""

    time: int
    """Epoch seconds (``date +%s`` in the script)."""
    action: str
    """``resume`` or ``suspend``."""
    hosts: tuple[str, ...]
    """The host list slurmctld passed, expanded."""


def parse_power_log(text: str) -> list[PowerEvent]:
    """Events of a power log, in order; a torn last line (the script is mid-write) is skipped."""
    events = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[0].isdigit() or parts[1] not in ("resume", "suspend"):
            continue
        try:
            hosts = tuple(hostlist_expand(parts[2]))
        except ValueError:
            continue
        events.append(PowerEvent(int(parts[0]), parts[1], hosts))
    return events


def resumed_hosts(events: list[PowerEvent]) -> set[str]:
    """Every node some ResumeProgram call named."""
    return {h for e in events if e.action == "resume" for h in e.hosts}
