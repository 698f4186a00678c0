"""slurm-keda's composition root: the command line, the settings and the runtime that wires the exporter,
the autoscaler and the bridge over one Slurm session and one snapshot. Nothing below imports it."""
