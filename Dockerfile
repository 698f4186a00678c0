# slurm-keda: one process — exporter, KEDA external scaler, bridge. Runs as a non-root user.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter exporter
COPY autoscaler autoscaler
COPY bridge bridge
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --no-create-home slurmkeda
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001
EXPOSE 9341 9342
ENTRYPOINT ["slurm-keda"]
CMD ["serve"]
