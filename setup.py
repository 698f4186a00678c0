"""The one compiled module; everything else about the package is in pyproject.toml.

``autoscaler.demand._bestfit``: the demand model's bounded best fit in C (``autoscaler/demand/packing.py``:
the same answer, ~50× faster on queues of all-different job shapes). Optional: where no C compiler is,
the build goes on without it and the model runs the Python one.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "autoscaler.demand._bestfit",
            ["autoscaler/demand/_bestfit.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
