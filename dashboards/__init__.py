"""Grafana dashboards and Prometheus rules for slurm-keda's metrics, as code.

``definitions`` (dashboards) and ``rules`` (alerting and recording rules) are the sources; ``make dashboards``
writes the JSON and YAML next to them; ``render`` draws a dashboard's panels to PNG from a Prometheus.
"""
