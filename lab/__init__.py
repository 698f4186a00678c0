"""A real local Slurm lab (slurmctld, slurmd, slurmrestd from Debian packages) for tests and recordings."""

from lab.control import Lab, LabStatus, NodeRecord
from lab.errors import LabError, LabNotRunningError
from lab.flavors import FLAVORS, Flavor

__all__ = ["FLAVORS", "Flavor", "Lab", "LabError", "LabNotRunningError", "LabStatus", "NodeRecord"]
