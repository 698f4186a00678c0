"""KEDA's side of the external scaler protocol, in Python: the client every scaler test and the scale
harness use (one channel, the RPCs of ``autoscaler/externalscaler.proto``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import grpc.aio

from autoscaler._proto import externalscaler_pb2 as pb
from autoscaler.grpc_scaler import SERVICE_NAME

TIMEOUT = 10.0
"""Seconds allowed for one unary call."""


class KedaClient:
    """What KEDA's Go client does, in Python: one channel, the four RPCs of ``externalscaler.proto``."""

    def __init__(self, channel: grpc.aio.Channel, name: str = "slurm-cpu", namespace: str = "slurm") -> None:
        self.channel = channel
        self.name, self.namespace = name, namespace

        def path(rpc: str) -> str:
            return f"/{SERVICE_NAME}/{rpc}"

        ser = pb.ScaledObjectRef.SerializeToString
        self._is_active = channel.unary_unary(path("IsActive"), ser, pb.IsActiveResponse.FromString)
        self._stream = channel.unary_stream(path("StreamIsActive"), ser, pb.IsActiveResponse.FromString)
        self._spec = channel.unary_unary(path("GetMetricSpec"), ser, pb.GetMetricSpecResponse.FromString)
        self._spec_stream = channel.unary_stream(
            path("StreamMetricSpec"), ser, pb.GetMetricSpecResponse.FromString
        )
        self._metrics = channel.unary_unary(
            path("GetMetrics"), pb.GetMetricsRequest.SerializeToString, pb.GetMetricsResponse.FromString
        )

    def ref(self, meta: Mapping[str, str]) -> pb.ScaledObjectRef:
        """The ScaledObject KEDA names in every request, with its trigger metadata."""
        return pb.ScaledObjectRef(name=self.name, namespace=self.namespace, scalerMetadata=dict(meta))

    async def is_active(self, meta: Mapping[str, str]) -> bool:
        resp: pb.IsActiveResponse = await self._is_active(self.ref(meta), timeout=TIMEOUT)
        return resp.result

    async def metric_spec(self, meta: Mapping[str, str]) -> pb.GetMetricSpecResponse:
        resp: pb.GetMetricSpecResponse = await self._spec(self.ref(meta), timeout=TIMEOUT)
        return resp

    async def metrics(self, meta: Mapping[str, str], metric_name: str = "") -> pb.GetMetricsResponse:
        req = pb.GetMetricsRequest(scaledObjectRef=self.ref(meta), metricName=metric_name)
        resp: pb.GetMetricsResponse = await self._metrics(req, timeout=TIMEOUT)
        return resp

    def stream_is_active(self, meta: Mapping[str, str]) -> Any:
        return self._stream(self.ref(meta))

    def stream_metric_spec(self, meta: Mapping[str, str]) -> Any:
        return self._spec_stream(self.ref(meta), timeout=TIMEOUT)


@contextlib.asynccontextmanager
async def connect(port: int, creds: grpc.ChannelCredentials | None = None) -> AsyncIterator[KedaClient]:
    target = f"127.0.0.1:{port}"
    channel = grpc.aio.insecure_channel(target) if creds is None else grpc.aio.secure_channel(target, creds)
    try:
        yield KedaClient(channel)
    finally:
        await channel.close(None)
