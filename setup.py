"""The compiled modules; everything else about the package is in pyproject.toml.

``autoscaler.demand._bestfit``: the demand model's bounded best fit in C (``autoscaler/demand/packing.py``:
the same answer, ~50× faster on queues of all-different job shapes). ``autoscaler.demand._scan``: its two
per-record loops in C (``queue.scan``, ``tables.KeyFacts.extend``: the same answer, what a first poll of
100,000 distinct jobs costs). Optional: where no C compiler is, the build goes on without them and the
model runs the Python ones.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "autoscaler.demand._bestfit",
            ["autoscaler/demand/_bestfit.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "autoscaler.demand._scan",
            ["autoscaler/demand/_scan.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
