# syntax=docker/dockerfile:1
# slurm-keda: exporter, KEDA external scaler and bridge in one process, as a non-root user.
# No Docker engine runs where this is developed: tests/unit/test_packaging.py builds the wheel exactly as the
# build stage does and checks what the final stage installs (see README, "Image").
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The build stage compiles the demand model's C modules (setup.py: autoscaler/demand/_bestfit.c and _scan.c):
# the full image of the same Python and Debian release has gcc and Python's headers; only the wheels reach the
# final image.
ARG BUILD_IMAGE=python:3.11-bookworm

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY slurm_keda slurm_keda
COPY exporter exporter
COPY autoscaler autoscaler
COPY bridge bridge
COPY dashboards dashboards
# Only the product's packages are copied: the local Slurm lab (lab/), the tests and the benchmarks are
# development tools beside them (.dockerignore keeps a checkout's built modules out). Every dependency has a
# binary wheel for linux/amd64 and arm64.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin slurmkeda
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001:10001
EXPOSE 9341 9342
# /healthz answers while the process runs (plain HTTP on the default port; with --web-config-file TLS,
# rely on the Kubernetes probes of deploy/ instead)
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9341/healthz', timeout=4)"]
ENTRYPOINT ["slurm-keda"]
CMD ["serve"]
