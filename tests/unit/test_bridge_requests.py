"""The bridge's pure core: quantities, a pod's effective request, which pods it takes, pod → job request
under the namespace policy (the security property: nothing in a pod changes whom its job runs as), and
the job/submit body per API version."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.jobdesc import PLACEHOLDER_SCRIPT, placeholder_kind, submit_body
from bridge.pods import Container, QuantityError, Resources, decode_pod, effective_request, parse_quantity
from bridge.policy import Policy, PolicyError, load_policy, parse_policy
from bridge.requests import PREFIX, JobRequest, Refusal, admit, parse_admin_comment
from bridge.slurm import exclude_nodes, parse_submit_answer
from exporter.client import ClientConfig, SlurmClient, TokenSource
from exporter.errors import ShapeError, SlurmError, SlurmReportedError
from testkit.budget import examples
from testkit.builders import pod_doc
from testkit.paths import SHARED
from testkit.tools import serve_app

POLICY = parse_policy(
    {
        "namespaces": {
            "team-a": {
                "user_id": 1001,
                "group_id": 1001,
                "accounts": ["proj1", "proj2"],
                "qos": ["normal", "high"],
                "partitions": ["cpu", "gpu"],
                "reservations": ["maint"],
            },
            "team-b": {"user_id": 2002, "partitions": ["cpu"], "allow_shared_nodes": True},
        }
    }
)
BRIDGE = {"scheduler_name": "slurm-bridge", "own_namespace": "slurm-keda", "policy": POLICY}


def pod(
    namespace: str = "team-a",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> Any:
    if containers is None:
        containers = [{"name": "main", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]
    doc = pod_doc(
        "trainer-0",
        namespace,
        uid="5c1e-uid",
        annotations=annotations or {},
        labels=labels or {},
        containers=containers,
        spec=spec,
    )
    return decode_pod(json.dumps(doc))


def request(p: Any) -> JobRequest:
    got = admit(p, **BRIDGE)
    assert isinstance(got, JobRequest), got
    return got


def refusal(p: Any) -> str:
    got = admit(p, **BRIDGE)
    assert isinstance(got, Refusal), got
    return got.reason


# -- quantities and effective requests ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("1Gi", 1 << 30),
        ("1.5Gi", 3 << 29),
        ("128Mi", 128 << 20),
        ("1G", 10**9),
        ("1e3", 1000),
        ("12E-1", Fraction(6, 5)),
        ("100k", 100_000),
        (".5", Fraction(1, 2)),
        ("7n", Fraction(7, 10**9)),
    ],
)
def test_quantities_are_exact(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "one", "1 Gi", "1GB", "-1", "1e999", "0x10", "1Gi1", "9" * 70, "١٢"])
def test_bad_quantities_are_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **kw: Any) -> Container:
    return Container(resources=Resources(requests=requests or {}, limits=limits or {}), **kw)


def test_effective_request_counts_as_kubernetes_does() -> None:
    app = [c({"cpu": "1"}), c({"cpu": "500m"}, {"cpu": "2"})]  # the larger of request and limit: 1 + 2
    assert effective_request(app, [], {}, "cpu") == 3
    assert effective_request(app, [c({"cpu": "4"})], {}, "cpu") == 4  # a one-shot init container larger
    assert effective_request(app, [c({"cpu": "1"})], {}, "cpu") == 3
    sidecar = c({"cpu": "1"}, restartPolicy="Always")
    assert effective_request(app, [sidecar], {}, "cpu") == 4  # a sidecar runs beside the app
    # an init container after the sidecar runs beside it: 1 + 3 = 4 > 3 + 1? equal; make it larger
    assert effective_request(app, [sidecar, c({"cpu": "5"})], {}, "cpu") == 6
    assert effective_request(app, [], {"cpu": "250m"}, "cpu") == Fraction(13, 4)  # pod overhead
    assert effective_request([c(limits={"memory": "1Gi"})], [], {}, "memory") == 1 << 30  # a limit alone


# -- which pods ------------------------------------------------------------------------------------


def test_which_pods_are_taken_ignored_or_refused() -> None:
    assert admit(pod(schedulerName="default-scheduler"), **BRIDGE) is None
    assert admit(pod(nodeName="n1"), **BRIDGE) is None
    assert "kube-system" in refusal(pod("kube-system"))
    assert "slurm-keda" in refusal(pod("slurm-keda"))  # the bridge's own namespace
    assert "not managed" in refusal(pod("team-z"))
    mirror = pod(annotations={"kubernetes.io/config.mirror": "x"})
    assert "mirror" in refusal(mirror)
    owned = json.loads(
        json.dumps({"metadata": {"namespace": "team-a", "ownerReferences": [{"kind": "DaemonSet"}]}})
    )
    owned["spec"] = {"schedulerName": "slurm-bridge"}
    assert "DaemonSet" in refusal(decode_pod(json.dumps(owned)))


# -- pod → job request -------------------------------------------------------------------------------


def test_defaults_come_from_the_policy_and_resources_round_up() -> None:
    r = request(pod())
    assert (r.user_id, r.group_id) == (1001, 1001)
    assert (r.partition, r.account, r.qos, r.reservation) == ("cpu", "proj1", "normal", None)
    assert (r.cpus, r.memory_mib, r.gpus, r.time_limit_minutes) == (2, 1024, 0, None)
    assert r.exclusive is True
    assert r.name == "k8s:team-a/trainer-0"
    no_requests = request(pod(containers=[{"name": "x"}]))
    assert (no_requests.cpus, no_requests.memory_mib) == (1, None)


def test_annotations_choose_inside_the_policy() -> None:
    r = request(
        pod(
            annotations={
                PREFIX + "partition": "gpu",
                PREFIX + "account": "proj2",
                PREFIX + "qos": "high",
                PREFIX + "reservation": "maint",
                PREFIX + "constraint": "a100&ib",
                PREFIX + "licenses": "matlab:2,ansys",
                PREFIX + "wckey": "exp7",
                PREFIX + "time-limit": "1-02:30:00",
            },
            containers=[{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "8"}}}],
        )
    )
    assert (r.partition, r.account, r.qos, r.reservation) == ("gpu", "proj2", "high", "maint")
    assert (r.constraints, r.licenses, r.wckey) == ("a100&ib", "matlab:2,ansys", "exp7")
    assert r.time_limit_minutes == 24 * 60 + 150
    assert (r.cpus, r.gpus) == (8, 2)


SLINKY = "slurmjob.slinky.slurm.net/"


def test_schedmds_annotations_choose_the_same_inside_the_policy() -> None:
    """A manifest written for SchedMD's slurm-bridge works unchanged: its ``slurmjob.slinky.slurm.net/*``
    annotations mean what ours do, under the same namespace policy."""
    r = request(
        pod(
            annotations={
                SLINKY + "partition": "gpu",
                SLINKY + "account": "proj2",
                SLINKY + "qos": "high",
                SLINKY + "reservation": "maint",
                SLINKY + "constraints": "a100&ib",
                SLINKY + "licenses": "matlab:2",
                SLINKY + "wckey": "exp7",
                SLINKY + "timelimit": "7",
                SLINKY + "user-id": "1001",
                SLINKY + "group-id": "1001",
                SLINKY + "job-name": "anything",
                PREFIX + "account": "proj2",  # the same choice in both spellings
            }
        )
    )
    assert (r.partition, r.account, r.qos, r.reservation) == ("gpu", "proj2", "high", "maint")
    assert (r.constraints, r.licenses, r.wckey, r.time_limit_minutes) == ("a100&ib", "matlab:2", "exp7", 7)
    assert r.exclusive and (r.user_id, r.group_id) == (1001, 1001)
    shared = admit(pod("team-b", annotations={SLINKY + "exclusive": "false"}), **BRIDGE)
    assert isinstance(shared, JobRequest) and not shared.exclusive
    kept = admit(pod("team-b", annotations={SLINKY + "exclusive": "yes"}), **BRIDGE)
    assert isinstance(kept, JobRequest) and kept.exclusive


@pytest.mark.parametrize(
    ("annotations", "why"),
    [
        ({SLINKY + "partition": "debug"}, "partition 'debug' is not allowed"),
        ({SLINKY + "user-id": "0"}, "run as the uid and gid its policy sets"),
        ({SLINKY + "group-id": "0"}, "run as the uid and gid its policy sets"),
        ({SLINKY + "exclusive": "false"}, "may not share nodes"),  # team-a's policy does not allow it
        ({SLINKY + "account": "proj1", PREFIX + "account": "proj2"}, "disagree"),
        ({SLINKY + "cpu-per-task": "4"}, "from the pod's resource requests"),
        ({SLINKY + "gres": "gpu:2"}, "from the pod's resource requests"),
        ({SLINKY + "nodes": "2"}, "unknown annotation slurmjob.slinky.slurm.net/nodes"),
        ({SLINKY + "timelimit": "forever"}, "is not a Slurm time limit"),
    ],
)
def test_schedmds_annotations_outside_the_policy_refuse_the_pod(
    annotations: dict[str, str], why: str
) -> None:
    got = admit(pod(annotations=annotations), **BRIDGE)
    assert isinstance(got, Refusal) and why in got.reason, got


def test_time_limit_from_the_deadline_when_no_annotation() -> None:
    assert request(pod(activeDeadlineSeconds=90)).time_limit_minutes == 2


@pytest.mark.parametrize(
    ("annotation", "value", "why"),
    [
        ("partition", "debug", "partition 'debug' is not allowed"),
        ("account", "proj3", "account 'proj3' is not allowed"),
        ("account", "proj1 ", "is not allowed"),  # no trimming into an allowed name
        ("qos", "admin", "QOS 'admin' is not allowed"),
        ("reservation", "other", "reservation 'other' is not allowed"),
        ("share-node", "true", "may not share nodes"),
        ("share-node", "yes", "must be true or false"),
        ("time-limit", "forever", "not a Slurm time limit"),
        ("time-limit", "0", "between 1 minute and a year"),
        ("constraint", "a100;rm -rf", "not a valid Slurm constraint"),
        ("licenses", "x:y:z", "not a valid Slurm licenses"),
        ("partiton", "gpu", "unknown annotation slurm-keda.io/partiton"),  # a typo is not ignored
    ],
)
def test_annotations_outside_the_policy_or_malformed_refuse_the_pod(
    annotation: str, value: str, why: str
) -> None:
    assert why in refusal(pod(annotations={PREFIX + annotation: value}))


@pytest.mark.parametrize(
    "resources",
    [
        {"cpu": "1e6"},
        {"memory": "2Ei"},
        {"nvidia.com/gpu": "5000"},
        {"nvidia.com/gpu": "500m"},
        {"cpu": "lots"},
    ],
)
def test_absurd_or_malformed_resources_refuse_the_pod(resources: dict[str, str]) -> None:
    reason = refusal(pod(containers=[{"name": "m", "resources": {"requests": resources}}]))
    assert "resources" in reason


# -- whom the job runs as: nothing in the pod changes it ----------------------------------------------


@pytest.mark.parametrize(
    "annotations",
    [
        {PREFIX + "user": "0"},
        {PREFIX + "user": "root"},
        {PREFIX + "user": "2002"},  # team-b's uid
        {PREFIX + "user": "1001 "},
    ],
)
def test_a_pod_naming_another_user_is_refused(annotations: dict[str, str]) -> None:
    if annotations[PREFIX + "user"].strip() == "1001":
        assert request(pod(annotations=annotations)).user_id == 1001  # naming its own uid is harmless
        return
    assert "cannot choose another" in refusal(pod(annotations=annotations))


def test_the_user_name_alone_is_refused() -> None:
    assert "cannot choose another" in refusal(pod(annotations={PREFIX + "user": "alice"}))


_KEYS = st.sampled_from(
    [PREFIX + k for k in ("user", "User", "uid", "user_id", "account", "partition", "group", "namespace")]
    + ["slurm-keda.io.user", "user", "slurm.schedmd.com/user", "kubernetes.io/user"]
)


@settings(max_examples=examples(500), derandomize=True, database=None, deadline=None)
@given(
    namespace=st.sampled_from(["team-a", "team-b"]),
    annotations=st.dictionaries(
        _KEYS, st.sampled_from(["0", "root", "1001", "2002", "proj1", "cpu", ""]), max_size=4
    ),
    labels=st.dictionaries(_KEYS, st.sampled_from(["0", "2002", "root"]), max_size=3),
    name=st.sampled_from(["trainer-0", "team-b", "root", "kube-system"]),
)
def test_no_annotation_label_or_name_makes_a_job_run_as_another_uid(
    namespace: str, annotations: dict[str, str], labels: dict[str, str], name: str
) -> None:
    meta = {"name": name, "namespace": namespace, "uid": "u", "annotations": annotations, "labels": labels}
    doc = {"metadata": meta, "spec": {"schedulerName": "slurm-bridge", "containers": [{"name": "m"}]}}
    p = decode_pod(json.dumps(doc))
    got = admit(p, **BRIDGE)
    policy = POLICY.of(namespace)
    assert policy is not None
    if isinstance(got, JobRequest):
        assert (got.user_id, got.group_id) == (policy.user_id, policy.group_id)
        body = submit_body(got, "v0.0.45", instance="i")["job"]
        assert body["user_id"] == str(policy.user_id)
        assert ("group_id" in body) == (policy.group_id is not None)


# -- namespaces chosen by label ------------------------------------------------------------------------

SELECTED = parse_policy(
    {
        "namespaces": {"team-a": {"user_id": 1001, "partitions": ["cpu"]}},
        "namespace_selectors": [
            {"selector": "tenant=ml,env in (prod,dev)", "user_id": 3003, "partitions": ["gpu"]},
            {"selector": "tenant", "user_id": 4004, "partitions": ["cpu"]},
        ],
    }
)


def test_namespaces_chosen_by_label_take_the_first_matching_policy() -> None:
    def uid(ns: str, labels: dict[str, str] | None) -> int | None:
        got = admit(
            pod(ns),
            scheduler_name="slurm-bridge",
            own_namespace="x",
            policy=SELECTED,
            namespace_labels=labels,
        )
        return got.user_id if isinstance(got, JobRequest) else None

    assert uid("ml-prod", {"tenant": "ml", "env": "prod"}) == 3003
    assert uid("ml-qa", {"tenant": "ml", "env": "qa"}) == 4004  # the second selector: tenant exists
    assert uid("other", {"team": "x"}) is None  # not selected: refused as unmanaged
    assert uid("other", None) is None
    assert uid("team-a", {"tenant": "ml", "env": "prod"}) == 1001  # listed by name: its own entry wins
    got = SELECTED.of("ml-prod", {"tenant": "ml", "env": "prod"})
    assert got is not None and got.namespace == "ml-prod"


@pytest.mark.parametrize(
    ("selectors", "why"),
    [
        ([{"user_id": 1, "partitions": ["cpu"]}], "selector: required"),
        ([{"selector": "", "user_id": 1, "partitions": ["cpu"]}], "would select every namespace"),
        ([{"selector": "a b", "user_id": 1, "partitions": ["cpu"]}], "not a label selector requirement"),
        ([{"selector": "a=b", "partitions": ["cpu"]}], "user_id: required"),
        ({"selector": "a=b"}, "is a list"),
    ],
)
def test_bad_namespace_selectors_name_the_problem(selectors: Any, why: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_policy({"namespace_selectors": selectors})
    assert why in str(e.value)


# -- the policy file -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ([], "a mapping of 'namespaces' and/or 'namespace_selectors'"),
        ({"namespaces": {"Team_A": {"user_id": 1, "partitions": ["cpu"]}}}, "not a Kubernetes namespace"),
        ({"namespaces": {"a": {"partitions": ["cpu"]}}}, "user_id: required"),
        ({"namespaces": {"a": {"user_id": -1, "partitions": ["cpu"]}}}, "an integer id"),
        ({"namespaces": {"a": {"user_id": True, "partitions": ["cpu"]}}}, "an integer id"),
        ({"namespaces": {"a": {"user_id": 1}}}, "at least one partition"),
        ({"namespaces": {"a": {"user_id": 1, "partitions": ["cpu,gpu"]}}}, "a list of Slurm names"),
        (
            {"namespaces": {"a": {"user_id": 1, "partitions": ["cpu"], "users": ["x"]}}},
            "unknown key(s) users",
        ),
        ({"namespaces": {"a": {"user_id": 1, "partitions": ["cpu", "cpu"]}}}, "listed twice"),
    ],
)
def test_bad_policies_name_the_problem(doc: Any, why: str) -> None:
    with pytest.raises(PolicyError, match=None) as e:
        parse_policy(doc)
    assert why in str(e.value)


def test_policy_file(tmp_path: Path) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text("namespaces:\n  ml:\n    user_id: 1500\n    partitions: gpu\n")
    assert load_policy(f) == Policy(
        {"ml": POLICY.namespaces["team-b"].__class__("ml", 1500, partitions=("gpu",))}
    )
    f.write_text("namespaces: [")
    with pytest.raises(PolicyError, match="is not YAML"):
        load_policy(f)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")


# -- the job/submit body ----------------------------------------------------------------------------


def test_external_placeholder_where_the_api_has_it_batch_before() -> None:
    assert [placeholder_kind(v) for v in ("v0.0.40", "v0.0.42", "v0.0.43", "v0.0.45")] == [
        "batch",
        "batch",
        "external",
        "external",
    ]
    with pytest.raises(ValueError, match=r"v0\.0\.40 or later"):
        placeholder_kind("v0.0.38")
    r = request(pod(annotations={PREFIX + "time-limit": "30"}))
    new = submit_body(r, "v0.0.45", instance="cluster-a", excluded_nodes=["c3"])["job"]
    assert new["flags"] == ["EXTERNAL_JOB"] and "script" not in new
    assert new["shared"] == ["none"]  # exclusive, as sbatch --exclusive sets it
    assert new["excluded_nodes"] == ["c3"] and "required_nodes" not in new
    assert new["time_limit"] == {"set": True, "infinite": False, "number": 30}
    assert new["memory_per_node"]["number"] == 1024 and new["cpus_per_task"] == 2
    assert parse_admin_comment(new["admin_comment"]) == (
        "cluster-a",
        [("team-a", "trainer-0", "5c1e-uid")],
        None,
        None,
    )
    old = submit_body(r, "v0.0.42", instance="cluster-a")["job"]
    assert old["script"] == PLACEHOLDER_SCRIPT and "flags" not in old and old["shared"] == ["none"]
    oldest = submit_body(r, "v0.0.40", instance="cluster-a")["job"]
    assert oldest["exclusive"] == ["true"] and "shared" not in oldest
    shared = request(pod("team-b", annotations={PREFIX + "share-node": "true"}))
    assert "shared" not in submit_body(shared, "v0.0.45", instance="x")["job"]


def test_admin_comments_of_others_are_not_ours() -> None:
    assert parse_admin_comment("") is None
    assert parse_admin_comment("maintenance job") is None
    assert parse_admin_comment('{"slurm-keda": {"pods": 3}}') is None


@pytest.mark.skipif(not (SHARED / "slurm-openapi").is_dir(), reason="../shared/slurm-openapi absent")
@pytest.mark.parametrize(
    ("spec", "version"),
    [("26.05.5", "v0.0.45"), ("26.05.5", "v0.0.43"), ("24.11.5", "v0.0.42"), ("24.11.5", "v0.0.40")],
)
def test_submit_bodies_match_slurmrestds_schema(spec: str, version: str) -> None:
    import jsonschema

    doc = json.loads((SHARED / "slurm-openapi" / f"slurmrestd-{spec}.json").read_text())
    schema = {"$ref": f"#/components/schemas/{version}_job_submit_req", "components": doc["components"]}
    r = request(pod(annotations={PREFIX + "time-limit": "30", PREFIX + "constraint": "x"}))
    jsonschema.validate(submit_body(r, version, instance="i", excluded_nodes=["c1"]), schema)


def test_submit_answers() -> None:
    assert parse_submit_answer(b'{"job_id": 42, "errors": [], "warnings": []}') == 42
    with pytest.raises(SlurmReportedError, match="Invalid partition"):
        parse_submit_answer(b'{"job_id": 0, "errors": [{"description": "Invalid partition name specified"}]}')
    with pytest.raises(ShapeError):
        parse_submit_answer(b'{"errors": []}')


# -- placement rules Slurm cannot honour ------------------------------------------------------------

SPREAD = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "labelSelector": {}}
HOST_ANTI = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}


def test_a_spread_that_must_hold_is_refused_and_a_preferred_one_accepted() -> None:
    assert "DoNotSchedule" in refusal(
        pod(topologySpreadConstraints=[{**SPREAD, "whenUnsatisfiable": "DoNotSchedule"}])
    )
    request(pod(topologySpreadConstraints=[{**SPREAD, "whenUnsatisfiable": "ScheduleAnyway"}]))


def test_required_pod_affinity_is_refused_and_hostname_anti_affinity_honoured_on_a_node_of_its_own() -> None:
    near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [HOST_ANTI]}}
    assert refusal(pod(affinity=near)).startswith("required podAffinity")
    apart = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [HOST_ANTI]}}
    request(pod(affinity=apart))  # an exclusive job has its node alone
    shared = pod("team-b", affinity=apart, annotations={PREFIX + "share-node": "true"})
    assert "only one pod per node" in refusal(shared)
    zone = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**HOST_ANTI, "topologyKey": "zone"}]
        }
    }
    assert "required podAntiAffinity on zone" in refusal(pod(affinity=zone))
    preferred = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": HOST_ANTI}]
        }
    }
    request(pod(affinity=preferred))


# -- a pending job's excluded nodes, answered as slurmrestd 26.05 and 24.11 answered in the labs -------------

_META = {"plugin": {"type": "openapi/slurmctld", "data_parser": "data_parser/v0.0.45"}}
UPDATE_ANSWERS = {
    # a pending job updated: 200, "results": null
    1: (200, {"results": None, "meta": _META, "errors": [], "warnings": []}),
    # a job that started meanwhile: 422, error 2073
    2: (
        422,
        {
            "results": None,
            "meta": _META,
            "errors": [
                {
                    "description": "Job update requested failed",
                    "error_number": 2073,
                    "error": "Job is no longer pending execution",
                    "source": "slurm_update_job2()",
                }
            ],
            "warnings": [],
        },
    ),
    # a job slurmctld does not know: 404, error 2017
    3: (
        404,
        {
            "errors": [
                {
                    "description": "Invalid JobID=3 rejected",
                    "error_number": 2017,
                    "error": "Invalid job id specified",
                    "source": "op_handler_job",
                }
            ],
            "warnings": [],
            "meta": _META,
        },
    ),
    # anything else is an error
    4: (
        500,
        {
            "errors": [
                {
                    "description": "Job update requested failed",
                    "error_number": 2010,
                    "error": "Access/permission denied",
                }
            ],
            "meta": _META,
        },
    ),
}


_META_42 = {"plugin": {"type": "openapi/slurmctld", "data_parser": "data_parser/v0.0.42"}}
_STRING_WARNING = {
    "description": "Expected OpenAPI type=array (Slurm type=list) but got OpenAPI type=string (Slurm "
    'type=string): "c2"',
    "source": "#/excluded_nodes/",
}
UPDATE_ANSWERS_2411 = {
    # 24.11 (v0.0.42; v0.0.40 and v0.0.41 alike): the string is taken, with a warning; "" clears too
    1: (200, {"results": None, "meta": _META_42, "errors": [], "warnings": [_STRING_WARNING]}),
    # a job that started meanwhile: HTTP 500 (26.05: 422), the same error 2073
    2: (
        500,
        {
            "results": None,
            "meta": _META_42,
            "errors": [
                {
                    "description": "Job update requested failed",
                    "error_number": 2073,
                    "error": "Job is no longer pending execution",
                    "source": "slurm_update_job2()",
                }
            ],
            "warnings": [_STRING_WARNING],
        },
    ),
    3: (
        404,
        {
            "results": None,
            "meta": _META_42,
            "errors": [
                {
                    "description": "Job update requested failed",
                    "error_number": 2017,
                    "error": "Invalid job id specified",
                    "source": "slurm_update_job2()",
                }
            ],
            "warnings": [_STRING_WARNING],
        },
    ),
    4: UPDATE_ANSWERS[4],
}


@pytest.mark.parametrize(
    ("version", "answers"), [("v0.0.45", UPDATE_ANSWERS), ("v0.0.42", UPDATE_ANSWERS_2411)]
)
async def test_a_pending_jobs_excluded_nodes_are_updated_as_slurmrestd_answers(
    version: str, answers: dict[int, tuple[int, dict[str, Any]]]
) -> None:
    sent: list[dict[str, Any]] = []

    async def update(request: web.Request) -> web.Response:
        sent.append(await request.json())
        status, body = answers[int(request.match_info["job"])]
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post(f"/slurm/{version}/job/{{job}}", update)
    async with (
        serve_app(app) as url,
        SlurmClient(ClientConfig(base_url=url, token=TokenSource(token="t"), retries=0)) as client,
    ):
        assert await exclude_nodes(client, version, 1, ["c2", "c3"]) is True
        assert await exclude_nodes(client, version, 1, []) is True
        assert await exclude_nodes(client, version, 2, ["c2"]) is False  # started: nothing to update
        assert await exclude_nodes(client, version, 3, ["c2"]) is False  # gone
        with pytest.raises(SlurmError, match="permission denied"):
            await exclude_nodes(client, version, 4, ["c2"])
    # a comma-separated string: "" clears ExcNodeList, where an empty list would leave it as it was
    assert sent[:2] == [{"excluded_nodes": "c2,c3"}, {"excluded_nodes": ""}]
