"""slurm-keda exporter: slurmrestd client, version adapters, snapshot model, poller, collector, HTTP."""

__version__ = "0.1.0"
