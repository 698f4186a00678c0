"""Property-based fuzzing (hypothesis) of everything that reads outside input: the version adapters
(and what a decoded answer feeds: validation, metrics, demand), the streaming /jobs decoder, the
web-config file and trigger metadata. Only typed errors may escape, and what passes must be usable.

Examples are derandomised (the same inputs every run: CI stays deterministic) and there are more than
10,000 in all (see ``EXAMPLES``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.demand import Target, compute_demand
from autoscaler.targets import MetadataError, target_from_metadata
from exporter.collector import Cardinality, snapshot_families
from exporter.errors import ConfigError, SlurmError
from exporter.jsonsplit import StreamingArrayDecoder
from exporter.model import Snapshot
from exporter.validate import check_jobs, check_nodes
from exporter.versions import adapter_for
from exporter.webconfig import load_web_config
from testkit import budget
from testkit.paths import recorded_version_dirs
from testkit.tools import decode_to_dicts, recorded_snapshot

EXAMPLES = {
    "mutated answers": 120,  # x 6 endpoints x 8 recorded API versions = 5,760
    "raw bytes": 25,  # x 48 = 1,200
    "streaming": 800,
    "streaming garbage": 800,
    "web config": 1000,
    "metadata": 2500,
}


def fuzz(examples: int) -> settings:
    """Derandomised, no example database, no per-example deadline (CI machines are slow); ``examples`` as
    many as the run's budget allows (:mod:`testkit.budget`: all in ``make test-nightly``, a fifth in ``make
    test``, a 25th in ``make unit``)."""
    return settings(
        max_examples=budget.examples(examples, fuzzer=True),
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


ENDPOINTS = ("jobs", "nodes", "partitions", "diag", "licenses", "reservations")
VERSION_DIRS = [d for d in recorded_version_dirs() if all((d / f"{e}.json").exists() for e in ENDPOINTS)]
CASES = [(d, e) for d in VERSION_DIRS for e in ENDPOINTS]


def _case_id(case: tuple[Path, str]) -> str:
    return f"{case[0].name}-{case[1]}"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@cache
def _document(folder: Path, endpoint: str) -> Any:
    return json.loads((folder / f"{endpoint}.json").read_bytes())


@cache
def _base_snapshot(folder: Path) -> Snapshot:
    return recorded_snapshot(folder, folder.name)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``doc`` (keys and indexes)."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):  # the first elements stand for the rest
            out += _paths(v, (*prefix, i))
    return out


@cache
def _all_paths(folder: Path, endpoint: str) -> list[tuple[Any, ...]]:
    return _paths(_document(folder, endpoint))[1:]


def _mutate(doc: Any, path: tuple[Any, ...], action: str, value: Any) -> Any:
    """A copy of ``doc`` with the value at ``path`` deleted, replaced or (a list) emptied."""
    doc = json.loads(json.dumps(doc))
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "empty" and isinstance(parent[last], list | dict):
        parent[last] = type(parent[last])()
    else:
        parent[last] = value
    return doc


@st.composite
def mutated(draw: st.DrawFn, folder: Path, endpoint: str) -> bytes:
    doc = _document(folder, endpoint)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)[1:]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["delete", "replace", "replace", "empty"]))
        doc = _mutate(doc, path, action, draw(json_values))
    return json.dumps(doc).encode()


def _decode(folder: Path, endpoint: str, body: bytes) -> Any:
    """Decode ``body`` as the poller does, and check it; None when it fails with a typed error."""
    adapter = adapter_for(folder.name)
    try:
        if endpoint == "jobs":
            jobs, _ = adapter.jobs(body)
            return tuple(check_jobs(jobs)[0])
        if endpoint == "nodes":
            return tuple(check_nodes(adapter.nodes(body)[0])[0])
        parse = getattr(adapter, endpoint)
        data, _ = parse(body)
        return tuple(data) if isinstance(data, list) else data
    except SlurmError:
        return None


def _use(folder: Path, endpoint: str, data: Any) -> None:
    """What a decoded answer feeds: every metric family and the demand of every partition."""
    snap = msgspec.structs.replace(_base_snapshot(folder), **{endpoint: data})
    assert list(snapshot_families(snap, Cardinality(per_user=True, per_account=True, node_reasons=True)))
    compute_demand(snap, [Target(p.name, p.name) for p in snap.partitions])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_mutated_answers_fail_typed_or_work_downstream(case: tuple[Path, str]) -> None:
    folder, endpoint = case

    @fuzz(EXAMPLES["mutated answers"])
    @given(body=mutated(folder, endpoint))
    def check(body: bytes) -> None:
        data = _decode(folder, endpoint, body)
        if data is not None:
            _use(folder, endpoint, data)

    check()


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_raw_bytes_fail_typed(case: tuple[Path, str]) -> None:
    folder, endpoint = case
    real = (folder / f"{endpoint}.json").read_bytes()

    @fuzz(EXAMPLES["raw bytes"])
    @given(
        body=st.binary(max_size=300)
        | st.integers(0, len(real)).map(lambda n: real[:n])  # cut short anywhere
        | st.tuples(st.integers(0, len(real) - 1), st.binary(min_size=1, max_size=3)).map(
            lambda t: real[: t[0]] + t[1] + real[t[0] + len(t[1]) :]  # a few bytes overwritten
        )
    )
    def check(body: bytes) -> None:
        data = _decode(folder, endpoint, body)
        if data is not None:
            _use(folder, endpoint, data)

    check()


job_like = st.dictionaries(st.sampled_from(["job_id", "name", "x", "nested", "s"]), json_values, max_size=4)


@fuzz(EXAMPLES["streaming"])
@given(
    jobs=st.lists(job_like, max_size=8),
    before=st.dictionaries(st.sampled_from(["meta", "errors", "pad"]), json_values, max_size=2),
    after=st.dictionaries(st.sampled_from(["warnings", "last_update", "tail"]), json_values, max_size=2),
    indent=st.sampled_from([None, 0, 2]),
    chunks=st.lists(st.integers(1, 64), min_size=1, max_size=6),
    batch=st.sampled_from([1, 64, 4096]),
)
def test_streamed_jobs_are_cut_exactly_whatever_the_document(
    jobs: list[dict[str, Any]],
    before: dict[str, Any],
    after: dict[str, Any],
    indent: int | None,
    chunks: list[int],
    batch: int,
) -> None:
    body = json.dumps({**before, "jobs": jobs, **after}, indent=indent).encode()
    dec: StreamingArrayDecoder[object] = StreamingArrayDecoder(
        b"jobs", decode_to_dicts, min_batch_bytes=batch
    )
    got: list[object] = []
    at = k = 0
    while at < len(body):
        got += dec.feed(body[at : at + chunks[k % len(chunks)]])
        at += chunks[k % len(chunks)]
        k += 1
    envelope, rest = dec.finish()
    assert got + rest == jobs
    assert json.loads(envelope) == {**before, "jobs": [], **after}
    assert dec.cutter.bytes_scanned <= 8 * len(body) + 64


@fuzz(EXAMPLES["streaming garbage"])
@given(
    body=st.binary(max_size=200)
    | st.text(alphabet='{}[]",:\\ ajobs0', max_size=200).map(str.encode)
    | st.text(alphabet='{}[]",:\\ x1', max_size=100).map(lambda t: ('{"jobs": [' + t).encode()),
    chunk=st.integers(1, 50),
)
def test_streaming_garbage_fails_typed(body: bytes, chunk: int) -> None:
    dec: StreamingArrayDecoder[object] = StreamingArrayDecoder(
        b"jobs", decode_to_dicts, min_batch_bytes=16, max_element_bytes=1 << 16, max_envelope_bytes=1 << 16
    )
    try:
        for at in range(0, len(body), chunk):
            dec.feed(body[at : at + chunk])
        dec.finish()
    except SlurmError:
        pass


web_config_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.just("/etc/hostname"),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "tls_server_config",
                    "cert_file",
                    "key_file",
                    "client_auth_type",
                    "client_ca_file",
                    "min_version",
                    "cipher_suites",
                    "basic_auth_users",
                    "http_server_config",
                    "headers",
                    "alice",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)


@fuzz(EXAMPLES["web config"])
@given(doc=web_config_values | st.text(max_size=80))
def test_web_config_files_fail_with_a_config_error(
    doc: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.getbasetemp() / "web.yml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    try:
        load_web_config(path)
    except ConfigError as e:
        assert str(e)


metadata_keys = st.sampled_from(
    [
        *("partition", "nodeset", "nodeNames", "min", "max", "cpusPerNode", "memoryPerNode", "gpusPerNode"),
        "threadsPerCore",
        *("metricName", "partitionFromEnv", "scalerAddress", "unknown", "max_FromEnv"),
    ]
)
metadata_values = (
    st.text(max_size=40)
    | st.integers(-(1 << 70), 1 << 70).map(str)
    | st.sampled_from(["1e30", "١٢", "64Gi", "n[0-999999]", "c[1-3],g1", "9" * 400, "0x10", " 4 "])
)


@fuzz(EXAMPLES["metadata"])
@given(meta=st.dictionaries(metadata_keys, metadata_values, max_size=6))
def test_trigger_metadata_fails_with_a_metadata_error(meta: dict[str, str]) -> None:
    try:
        target = target_from_metadata(meta)
    except MetadataError as e:
        assert len(str(e)) < 600  # a bad value is quoted shortened, never whole
        return
    assert target.name
    compute_demand(_base_snapshot(VERSION_DIRS[-1]), [target])  # usable: its demand can be computed


def test_there_are_over_ten_thousand_examples() -> None:
    per_case = EXAMPLES["mutated answers"] + EXAMPLES["raw bytes"]
    rest = sum(v for k, v in EXAMPLES.items() if k not in ("mutated answers", "raw bytes"))
    total = per_case * len(CASES) + rest
    assert len(CASES) >= 36, [c[0] for c in CASES]
    assert total >= 10_000, total
