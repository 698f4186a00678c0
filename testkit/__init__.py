"""What the tests and the benchmarks share: builders of records, pods and snapshots; the fakes (a stateful
Kubernetes API server, a slurmrestd answering recorded payloads, a fault-injecting proxy, raw loopback
servers); KEDA's side of the external scaler protocol; test PKI; the lab fixtures and comparisons with
Slurm's own tools. Never imported by the product (it is not in the wheel)."""
