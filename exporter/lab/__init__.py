"""A real local Slurm lab (slurmctld, slurmd, slurmrestd from Debian packages) for tests and recordings."""

from exporter.lab.errors import LabError, LabNotRunningError
from exporter.lab.flavors import FLAVORS, Flavor
from exporter.lab.lab import Lab, LabStatus, NodeRecord

__all__ = ["FLAVORS", "Flavor", "Lab", "LabError", "LabNotRunningError", "LabStatus", "NodeRecord"]
