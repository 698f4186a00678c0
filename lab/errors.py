"""The lab's one exception type: every failure carries a one-line, actionable message."""

from __future__ import annotations


class LabError(Exception):
    """A lab operation failed; ``str(err)`` is a single line meant for a human (CLI prints it as is)."""


class LabNotRunningError(LabError):
    """The lab is not up (no live slurmctld of this lab)."""
