"""keda/ manifests: valid against the real CRDs, consistent with each other and with slurm-keda's contract.

* **Schema**: each manifest is validated with ``jsonschema`` against the ``openAPIV3Schema`` of its CRD's
  served version (``../shared/schemas``), converted from Kubernetes' structural dialect
  (:func:`to_json_schema`): ``x-kubernetes-int-or-string`` → integer or string,
  ``x-kubernetes-preserve-unknown-fields`` → anything goes, ``nullable`` → also null, every other
  ``x-kubernetes-*`` key ignored, and unknown fields rejected as ``kubectl apply --validate=strict`` does (the
  API server would otherwise prune a misspelt field silently). ``metadata`` is checked against a small
  ObjectMeta schema (the API server validates it itself). CEL rules (``x-kubernetes-validations``) are
  evaluated by hand for the rules this file knows; an unknown rule fails.
* **Cross-references**: the scale target is the NodeSet CRD's group/version/kind with a ``scale``
  subresource; every ``authenticationRef`` names a TriggerAuthentication of keda/, whose parameters are ones
  KEDA reads from a TriggerAuthentication for that trigger type (``keda-scalers-schema.json``);
  prometheus / metrics-api metadata keys are KEDA's for that scaler; external-push metadata keys are
  exactly slurm-keda's contract.
* **Semantics**: replicas = desired (AverageValue, target 1, no HPA tolerance), scaling from zero, the
  safety settings; the Prometheus query run by ``promtool`` on sample series; the metrics-api
  ``valueLocation`` applied as KEDA applies it to a ``/metrics`` rendered by prometheus_client.
* **Not vacuous**: every check is run on broken copies and must fail.

Tests that need ``../shared`` skip when it is absent.
"""

from __future__ import annotations

import copy
import math
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from autoscaler.targets import KEDA_KEYS, KEYS
from testkit.paths import ROOT
from testkit.schemas import (
    SCHEMAS,
    Manifest,
    api_version,
    schema_for,
    served_version,
    to_json_schema,
)
from testkit.tools import promtool_path

KEDA_DIR = ROOT / "keda"

# ------------------------------------------------------------- slurm-keda's contract (autoscaler, issue 4)

CONTRACT_KEYS = KEYS
"""Trigger metadata keys slurm-keda's external scaler reads (the parser's own list)."""
KEDA_OWN_KEYS = KEDA_KEYS
"""KEDA's own external-scaler keys, which slurm-keda tolerates; any other key is INVALID_ARGUMENT."""
SCALER_ADDRESS = "slurm-keda.slurm.svc:9342"
METRICS_URL = "http://slurm-keda.slurm.svc:9341/metrics"
DESIRED = "slurm_autoscaler_desired_nodes"
DEMAND_FAMILIES = {
    DESIRED: ("target", "partition"),
    "slurm_autoscaler_busy_nodes": ("target", "partition"),
    "slurm_autoscaler_needed_nodes": ("target", "partition"),
    "slurm_autoscaler_pending_ignored_jobs": ("target", "partition", "reason"),
    "slurm_autoscaler_pending_eligible_jobs": ("target", "partition"),
}

# The example: Slurm partition `gpu`, NodeSet `slurm-gpu`, namespace `slurm`.
NAMESPACE, NODESET, PARTITION = "slurm", "slurm-gpu", "gpu"
EXPECTED_FILES = {
    "scaledobject-external-push.yaml": "ScaledObject",
    "scaledobject-prometheus.yaml": "ScaledObject",
    "scaledobject-metrics-api.yaml": "ScaledObject",
    "triggerauthentication-tls.yaml": "TriggerAuthentication",
}
CRD_FILES = {
    "ScaledObject": "keda.sh_scaledobjects.yaml",
    "TriggerAuthentication": "keda.sh_triggerauthentications.yaml",
    "NodeSet": "slinky.slurm.net_nodesets.yaml",
}

Params = Mapping[str, Mapping[str, Mapping[str, Any]]]
"""keda-scalers-schema.json as {trigger type: {parameter name: parameter}}."""

# ---------------------------------------------------------------------------------------------- loading


def load_documents() -> dict[str, list[Manifest]]:
    """The YAML documents of keda/*.yaml by file name."""
    return {
        path.name: [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        for path in sorted(KEDA_DIR.glob("*.yaml"))
    }


DOCUMENTS = load_documents()
MANIFESTS = {name: docs[0] for name, docs in DOCUMENTS.items() if docs}
SCALED_OBJECTS = {name: m for name, m in MANIFESTS.items() if m.get("kind") == "ScaledObject"}


def _with_trigger(*types: str) -> list[str]:
    """The ScaledObject files with a trigger of one of these types."""
    return sorted(f for f, so in SCALED_OBJECTS.items() if any(t["type"] in types for t in _triggers(so)))


def _triggers(so: Manifest) -> list[Manifest]:
    return list(so["spec"]["triggers"])


@pytest.fixture(scope="module")
def crds() -> dict[str, Manifest]:
    """The real CRDs by kind."""
    if not SCHEMAS.is_dir():
        pytest.skip(f"{SCHEMAS} is absent (the shared CRDs)")
    out = {}
    for kind, file in CRD_FILES.items():
        crd = yaml.safe_load((SCHEMAS / file).read_text())
        assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == kind, file
        out[kind] = crd
    return out


@pytest.fixture(scope="module")
def scaler_params() -> Params:
    """KEDA's per-scaler trigger parameters."""
    path = SCHEMAS / "keda-scalers-schema.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared KEDA scaler schema)")
    doc = yaml.safe_load(path.read_text())  # JSON is YAML
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for scaler in doc["scalers"]:
        assert scaler["type"] not in out, f"scaler type {scaler['type']} listed twice"
        out[scaler["type"]] = {p["name"]: p for p in scaler["parameters"]}
    return out


# ---------------------------------------------------------------------- structural schema → JSON Schema


# CEL rules (x-kubernetes-validations) this file can evaluate, by rule text with whitespace collapsed.
KNOWN_CEL: dict[str, Callable[[Any], bool]] = {
    "!has(self.minReplicaCount) || self.minReplicaCount <= "
    "(has(self.maxReplicaCount) ? self.maxReplicaCount : 100)": lambda s: (
        "minReplicaCount" not in s or s["minReplicaCount"] <= s.get("maxReplicaCount", 100)
    ),
}


def _rule(text: str) -> str:
    return " ".join(text.split())


def cel_rules(node: Any) -> Iterator[str]:
    """Every CEL rule anywhere in a schema."""
    if isinstance(node, dict):
        for rule in node.get("x-kubernetes-validations", []):
            yield _rule(rule["rule"])
        for value in node.values():
            yield from cel_rules(value)
    elif isinstance(node, list):
        for value in node:
            yield from cel_rules(value)


def cel_violations(node: Mapping[str, Any], obj: Any, path: str = "") -> list[str]:
    """Messages of the CEL rules ``obj`` breaks, walking the structural schema ``node`` alongside it."""
    out = []
    for rule in node.get("x-kubernetes-validations", []):
        check = KNOWN_CEL.get(_rule(rule["rule"]))
        if check is None:
            raise AssertionError(f"CEL rule this test cannot evaluate at {path or '.'}: {rule['rule']!r}")
        if not check(obj):
            out.append(f"{path or '.'}: {rule.get('message', rule['rule'])}")
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = node.get("properties", {}).get(key)
            if sub is None and isinstance(node.get("additionalProperties"), dict):
                sub = node["additionalProperties"]
            if sub is not None:
                out += cel_violations(sub, value, f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(node.get("items"), dict):
        for i, value in enumerate(obj):
            out += cel_violations(node["items"], value, f"{path}[{i}]")
    return out


def validate(manifest: Manifest, crd: Manifest) -> list[str]:
    """Schema and CEL problems of one manifest against a CRD; [] when valid."""
    validator = jsonschema.Draft202012Validator(schema_for(crd))
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))
    out = [f"{e.json_path}: {e.message}" for e in errors]
    if not out:  # CEL rules see schema-valid objects only, as in the API server
        out = cel_violations(served_version(crd)["schema"]["openAPIV3Schema"], manifest)
    return out


# ------------------------------------------------------------------------------------ cross-checks


def target_problems(so: Manifest, nodeset_crd: Manifest) -> list[str]:
    """The scale target must be a NodeSet of the CRD's served version, which has a usable /scale."""
    out = []
    ref = so["spec"]["scaleTargetRef"]
    if ref.get("apiVersion") != api_version(nodeset_crd):
        out.append(f"scaleTargetRef.apiVersion {ref.get('apiVersion')!r} != {api_version(nodeset_crd)!r}")
    if ref.get("kind") != nodeset_crd["spec"]["names"]["kind"]:
        out.append(f"scaleTargetRef.kind {ref.get('kind')!r} != {nodeset_crd['spec']['names']['kind']!r}")
    scale = served_version(nodeset_crd).get("subresources", {}).get("scale")
    if not scale:
        out.append(f"{api_version(nodeset_crd)} NodeSet has no scale subresource")
    elif scale.get("specReplicasPath") != ".spec.replicas" or not scale.get("labelSelectorPath"):
        out.append(f"NodeSet scale subresource unusable for an HPA: {scale}")  # the HPA needs the selector
    if nodeset_crd["spec"]["scope"] != "Namespaced":
        out.append("NodeSet is not namespaced")
    if ref.get("name") != NODESET:
        out.append(f"scaleTargetRef.name {ref.get('name')!r} != {NODESET!r}")
    return out


def _auth_refs(so: Manifest) -> Iterator[tuple[str, str]]:
    """(trigger type, TriggerAuthentication name) for each trigger with an authenticationRef."""
    for trigger in _triggers(so):
        ref = trigger.get("authenticationRef")
        if ref is not None:
            assert ref.get("kind", "TriggerAuthentication") == "TriggerAuthentication", ref
            yield trigger["type"], ref["name"]


def auth_problems(manifests: Mapping[str, Manifest], params: Params | None = None) -> list[str]:
    """authenticationRefs resolve to TriggerAuthentications in keda/ of the same namespace, none is unused,
    and (given KEDA's parameter list) each parameter is one KEDA reads from a TriggerAuthentication."""
    auths = {
        (m["metadata"]["namespace"], m["metadata"]["name"]): m
        for m in manifests.values()
        if m.get("kind") == "TriggerAuthentication"
    }
    out, used = [], set()
    for file, so in manifests.items():
        if so.get("kind") != "ScaledObject":
            continue
        for trigger_type, name in _auth_refs(so):
            key = (so["metadata"]["namespace"], name)
            used.add(key)
            auth = auths.get(key)
            if auth is None:
                out.append(f"{file}: TriggerAuthentication {key[0]}/{name} is not in keda/")
                continue
            if params is None:
                continue
            readable = {
                n for n, p in params[trigger_type].items() if p.get("triggerAuthenticationVariableReadable")
            }
            for ref in auth["spec"].get("secretTargetRef", []):
                if ref["parameter"] not in readable:
                    out.append(
                        f"{file}: {trigger_type} does not read {ref['parameter']!r} from a"
                        f" TriggerAuthentication (it reads {sorted(readable)})"
                    )
    out += [
        f"TriggerAuthentication {ns}/{name} is referenced by no ScaledObject"
        for ns, name in auths.keys() - used
    ]
    return out


def keda_metadata_problems(trigger_type: str, metadata: Mapping[str, str], params: Params) -> list[str]:
    """Metadata keys/values of a trigger against KEDA's parameter list for its type."""
    if trigger_type not in params:
        return [f"KEDA has no scaler type {trigger_type!r}"]
    known = params[trigger_type]
    out = []
    for key, value in metadata.items():
        param = known.get(key)
        from_env = known.get(key.removesuffix("FromEnv")) if key.endswith("FromEnv") else None
        if from_env is not None and from_env.get("envVariableReadable"):
            param = from_env  # <name>FromEnv: the value names an environment variable of the target
        elif param is None or not param.get("metadataVariableReadable"):
            out.append(f"{trigger_type}: KEDA reads no metadata key {key!r}")
            continue
        elif param.get("allowedValue") and value not in param["allowedValue"]:
            out.append(f"{trigger_type}: {key}={value!r} not one of {param['allowedValue']}")
        if param.get("deprecated"):
            out.append(f"{trigger_type}: {key} is deprecated: {param['deprecated']}")
    for name, param in known.items():
        required = (
            not param.get("optional") and "default" not in param and param.get("metadataVariableReadable")
        )
        if required and name not in metadata and f"{name}FromEnv" not in metadata:
            out.append(f"{trigger_type}: required metadata key {name!r} missing")
    return out


_INT = re.compile(r"0|[1-9][0-9]*")
_MEMORY = re.compile(r"[1-9][0-9]*(?:[KMGT]i?)?")


def contract_problems(so: Manifest) -> list[str]:
    """external-push metadata against slurm-keda's contract and the ScaledObject it sits in."""
    out = []
    spec = so["spec"]
    for trigger in _triggers(so):
        if trigger["type"] != "external-push":
            continue
        md = trigger["metadata"]
        unknown = md.keys() - CONTRACT_KEYS - KEDA_OWN_KEYS
        if unknown:
            out.append(f"metadata keys slurm-keda rejects: {sorted(unknown)}")
        if md.get("scalerAddress") != SCALER_ADDRESS:
            out.append(f"scalerAddress {md.get('scalerAddress')!r} != {SCALER_ADDRESS!r}")
        if md.get("partition") != PARTITION:
            out.append(f"partition {md.get('partition')!r} != {PARTITION!r} (required)")
        if "nodeset" in md and md["nodeset"] != spec["scaleTargetRef"]["name"]:
            out.append(
                f"nodeset {md['nodeset']!r} is not the scale target {spec['scaleTargetRef']['name']!r}"
            )
        for key in ("cpusPerNode", "gpusPerNode", "threadsPerCore", "min", "max"):
            if key in md and not _INT.fullmatch(str(md[key])):
                out.append(f"{key}={md[key]!r} is not a non-negative integer")
        if md.get("cpusPerNode") == "0":
            out.append("cpusPerNode must be >= 1")
        if "memoryPerNode" in md and not _MEMORY.fullmatch(str(md["memoryPerNode"])):
            out.append(f"memoryPerNode={md['memoryPerNode']!r}: MiB, or a K/M/G/T or Ki/Mi/Gi/Ti unit")
        for key, field in (("min", "minReplicaCount"), ("max", "maxReplicaCount")):
            if key in md and _INT.fullmatch(str(md[key])) and int(md[key]) != spec.get(field):
                out.append(f"metadata {key}={md[key]} disagrees with {field}={spec.get(field)}")
    return out


_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"\s*')


def parse_selector(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """``name{label="v",...}`` → (name, [(label, op, value)]); ValueError on anything else."""
    m = re.fullmatch(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(.*)\})?\s*", text)
    if m is None:
        raise ValueError(f"not a series selector: {text!r}")
    matchers, body = [], (m.group(2) or "").strip().rstrip(",")
    for part in filter(str.strip, re.split(r',(?=(?:[^"]*"[^"]*")*[^"]*$)', body)):
        mm = _MATCHER.fullmatch(part)
        if mm is None:
            raise ValueError(f"bad label matcher {part!r} in {text!r}")
        matchers.append((mm.group(1), mm.group(2), mm.group(3)))
    return m.group(1), matchers


def _selector_problems(selector: str, so: Manifest, where: str) -> list[str]:
    try:
        name, matchers = parse_selector(selector)
    except ValueError as e:
        return [f"{where}: {e}"]
    out = []
    if name != DESIRED:
        out.append(f"{where}: scales on {name!r}, not {DESIRED}")
    if any(op != "=" for _, op, _ in matchers):
        out.append(f"{where}: only label=value matchers select one target exactly: {matchers}")
    labels = {label: value for label, _, value in matchers}
    want = {"target": so["spec"]["scaleTargetRef"]["name"], "partition": PARTITION}
    if labels != want:
        out.append(f"{where}: labels {labels} != {want} (a NodeSet target is named after the NodeSet)")
    return out


def selector_problems(so: Manifest) -> list[str]:
    """The prometheus query / metrics-api valueLocation select the desired nodes of this NodeSet target."""
    out = []
    for trigger in _triggers(so):
        md = trigger["metadata"]
        if trigger["type"] == "prometheus":
            m = re.fullmatch(r"max\((.*)\)", md["query"].strip())
            if m is None:
                out.append(f"query {md['query']!r}: max(<selector>) returns one sample, as KEDA requires")
            else:
                out += _selector_problems(m.group(1), so, "query")
        elif trigger["type"] == "metrics-api":
            out += _selector_problems(md["valueLocation"], so, "valueLocation")
            if md.get("url") != METRICS_URL or md.get("format") != "prometheus":
                out.append(f"metrics-api reads {md.get('url')!r} as {md.get('format')!r}")
    return out


def hpa_replicas(metric: float, target: float, current: int, tolerance: float) -> int:
    """The HPA's count for an External AverageValue metric (replica_calculator.go,
    GetExternalPerPodMetricReplicas): keep ``current`` while metric / (target × current) is within the
    tolerance, else ⌈metric / target⌉."""
    ratio = metric / (target * current)
    if 1 - tolerance <= ratio <= 1 + tolerance:
        return current
    return math.ceil(metric / target)


_TARGET_KEYS = {"prometheus": "threshold", "metrics-api": "targetValue"}
_ACTIVATION_KEYS = {"prometheus": "activationThreshold", "metrics-api": "activationTargetValue"}


def safety_problems(so: Manifest) -> list[str]:
    """From zero, replicas = desired at any size, immediate scale-up, slow scale-down, errors hold."""
    out = []
    spec = so["spec"]
    lo, hi = spec.get("minReplicaCount"), spec.get("maxReplicaCount")
    if lo != 0:
        out.append(f"minReplicaCount {lo} (scale from zero needs 0)")
    if "idleReplicaCount" in spec:
        out.append("idleReplicaCount set (with minReplicaCount 0 it only confuses)")
    if not spec.get("cooldownPeriod"):
        out.append("cooldownPeriod unset or 0: the last node would go the moment demand is 0")
    fallback = spec.get("fallback")
    if fallback is None or fallback.get("replicas", 0) < 1 or fallback.get("behavior") != "currentReplicas":
        out.append(
            f"fallback {fallback}: want behavior currentReplicas, replicas >= 1 (0 scales errors to zero)"
        )
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
    up, down = behavior.get("scaleUp", {}), behavior.get("scaleDown", {})
    if up.get("stabilizationWindowSeconds") != 0:
        out.append("scaleUp has a stabilization window")
    if not any(
        p["type"] == "Pods" and p["value"] >= hi and p["periodSeconds"] <= 15 for p in up.get("policies", [])
    ):
        out.append("no scaleUp policy allows the step from 1 to maxReplicaCount in one 15 s period")
    if not down.get("stabilizationWindowSeconds") or not down.get("policies"):
        out.append("scaleDown without a stabilization window and policies")
    for name, rules in (("scaleUp", up), ("scaleDown", down)):
        if rules.get("tolerance") != 0:
            out.append(
                f"{name}.tolerance {rules.get('tolerance')!r}: HPA's 10 % would swallow one-node steps"
            )
    for trigger in _triggers(so):
        kind, md = trigger["type"], trigger["metadata"]
        if trigger.get("metricType") != "AverageValue":
            out.append(
                f"{kind}: metricType {trigger.get('metricType')!r} (AverageValue gives replicas = desired)"
            )
        if kind in _TARGET_KEYS and (md.get(_TARGET_KEYS[kind]), md.get(_ACTIVATION_KEYS[kind])) != (
            "1",
            "0",
        ):
            out.append(f"{kind}: target per replica must be 1 and activation 0")
        if kind == "prometheus" and md.get("ignoreNullValues") != "false":
            out.append("prometheus: ignoreNullValues must be false (an empty result would mean 0)")
        if kind == "external-push" and md.get("max") is None:
            out.append("external-push: no max (slurm-keda's desired would exceed maxReplicaCount)")
    if out or not isinstance(hi, int):
        return out
    # the HPA's own arithmetic: from any count in 1..max, the next count is the desired one
    for trigger in _triggers(so):
        md = trigger["metadata"]
        # the target per replica: the trigger's, or slurm-keda's target size 1 (GetMetricSpec)
        target = float(md[_TARGET_KEYS[trigger["type"]]]) if trigger["type"] in _TARGET_KEYS else 1.0
        for current in range(1, hi + 1):
            for desired in range(1, hi + 1):
                tolerance = float((up if desired > current else down)["tolerance"])
                got = hpa_replicas(desired * target, target, current, tolerance)
                if got != desired:
                    out.append(f"HPA at {current} replicas, desired {desired}: {got} replicas")
                    return out
    return out


# ---------------------------------------------------------------------------------------------- files


def test_keda_holds_the_expected_manifests() -> None:
    assert {name: len(docs) for name, docs in DOCUMENTS.items()} == dict.fromkeys(EXPECTED_FILES, 1)
    assert {name: m.get("kind") for name, m in MANIFESTS.items()} == EXPECTED_FILES
    for name, m in MANIFESTS.items():
        assert m["metadata"]["namespace"] == NAMESPACE, name
        assert m["apiVersion"] == "keda.sh/v1alpha1", name
    assert (KEDA_DIR / "README.md").is_file()


def test_readme_metadata_table_is_the_contract() -> None:
    text = (KEDA_DIR / "README.md").read_text()
    section = text.split("## Trigger metadata", 1)[1].split("\n## ", 1)[0]
    keys = set(re.findall(r"^\| `([A-Za-z]+)` \|", section, re.M))
    assert keys == CONTRACT_KEYS | {"scalerAddress"}
    for name in DEMAND_FAMILIES:  # the README names every demand series
        assert name.removeprefix("slurm_autoscaler_") in text, name


# --------------------------------------------------------------------------------------------- schema


@pytest.mark.parametrize("file", sorted(EXPECTED_FILES))
def test_manifest_is_valid_against_its_crd(file: str, crds: dict[str, Manifest]) -> None:
    assert validate(MANIFESTS[file], crds[EXPECTED_FILES[file]]) == []


def test_converted_schemas_are_json_schema_and_every_cel_rule_is_known(crds: dict[str, Manifest]) -> None:
    for kind in ("ScaledObject", "TriggerAuthentication", "NodeSet"):
        jsonschema.Draft202012Validator.check_schema(schema_for(crds[kind]))
    for kind in ("ScaledObject", "TriggerAuthentication"):  # the kinds validated here
        rules = set(cel_rules(served_version(crds[kind])["schema"]))
        assert rules <= KNOWN_CEL.keys(), f"{kind}: new CEL rules to evaluate: {rules - KNOWN_CEL.keys()}"
    assert KNOWN_CEL.keys() <= set(cel_rules(crds["ScaledObject"]))  # the known rule is still there


def test_schema_conversion_of_kubernetes_extensions() -> None:
    schema = to_json_schema(
        {
            "type": "object",
            "properties": {
                "n": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
                "m": {"x-kubernetes-int-or-string": True},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "opt": {"type": "string", "nullable": True},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "map": {"type": "object", "additionalProperties": {"type": "string"}},
                "keep": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}},
                    "x-kubernetes-preserve-unknown-fields": True,
                },
            },
        }
    )
    v = jsonschema.Draft202012Validator(schema)
    ok = {"n": 1, "m": "25%", "free": {"x": [1]}, "opt": None, "tags": ["a", "b"], "map": {"k": "v"}}
    assert not list(v.iter_errors({**ok, "keep": {"a": 1, "b": 2}}))
    for bad in ({"n": True}, {"m": 1.5}, {"opt": 3}, {"tags": ["a", "a"]}, {"map": {"k": 1}}, {"other": 1}):
        assert list(v.iter_errors({**ok, **bad})), bad


# ----------------------------------------------------------------------------------- cross-references


@pytest.mark.parametrize("file", sorted(SCALED_OBJECTS))
def test_scale_target_is_a_scalable_nodeset(file: str, crds: dict[str, Manifest]) -> None:
    assert target_problems(SCALED_OBJECTS[file], crds["NodeSet"]) == []
    spec = served_version(crds["NodeSet"])["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["replicas"]["type"] == "integer"
    assert "StatefulSet" in spec["scalingMode"]["enum"]  # the mode in which replicas count


def test_trigger_authentication_references_resolve() -> None:
    assert auth_problems(MANIFESTS) == []
    assert any(True for so in SCALED_OBJECTS.values() for _ in _auth_refs(so))


def test_trigger_authentication_parameters_are_read_by_keda(scaler_params: Params) -> None:
    assert auth_problems(MANIFESTS, scaler_params) == []


@pytest.mark.parametrize("file", sorted(SCALED_OBJECTS))
def test_trigger_metadata_keys_are_kedas(file: str, scaler_params: Params) -> None:
    for trigger in _triggers(SCALED_OBJECTS[file]):
        md = trigger["metadata"]
        if trigger["type"] == "external-push":  # KEDA's keys only; the rest is slurm-keda's contract
            md = {k: v for k, v in md.items() if k not in CONTRACT_KEYS}
        assert keda_metadata_problems(trigger["type"], md, scaler_params) == []


def test_slurm_keda_tolerates_every_key_keda_defines_for_external_scalers(scaler_params: Params) -> None:
    for kind in ("external-push", "external"):
        assert scaler_params[kind].keys() <= KEDA_OWN_KEYS, kind
        # KEDA never passes its TLS material as metadata: those must come from a TriggerAuthentication
        for name in ("caCert", "tlsClientCert", "tlsClientKey"):
            p = scaler_params[kind][name]
            assert p.get("triggerAuthenticationVariableReadable") and not p.get("metadataVariableReadable")


@pytest.mark.parametrize("file", _with_trigger("external-push"))
def test_external_push_metadata_is_the_contract(file: str) -> None:
    assert contract_problems(SCALED_OBJECTS[file]) == []


def test_recommended_variant_uses_external_push_with_tls() -> None:
    so = SCALED_OBJECTS["scaledobject-external-push.yaml"]
    (trigger,) = _triggers(so)
    assert trigger["type"] == "external-push"
    assert trigger["metadata"].keys() >= {
        "scalerAddress",
        "partition",
        "nodeset",
        "cpusPerNode",
        "memoryPerNode",
    }
    assert trigger["authenticationRef"]["name"] == "slurm-keda-grpc-tls"


# ---------------------------------------------------------------------------------------------- semantics


@pytest.mark.parametrize("file", sorted(SCALED_OBJECTS))
def test_replicas_equal_desired_and_scale_down_is_safe(file: str) -> None:
    assert safety_problems(SCALED_OBJECTS[file]) == []


def test_hpa_default_tolerance_would_swallow_one_node_steps() -> None:
    # why the manifests set tolerance 0: at 20 replicas, desired 21 is a ratio of 1.05
    assert hpa_replicas(21, 1, 20, 0.1) == 20
    assert hpa_replicas(21, 1, 20, 0.0) == 21
    assert hpa_replicas(3, 1, 1, 0.1) == 3  # from 1 (where KEDA leaves it) straight to desired


@pytest.mark.parametrize("file", _with_trigger("prometheus", "metrics-api"))
def test_demand_selectors_name_the_nodeset_target(file: str) -> None:
    assert selector_problems(SCALED_OBJECTS[file]) == []


class _Demand(Collector):
    """The demand families for three targets, rendered by prometheus_client like slurm-keda's /metrics."""

    VALUES: ClassVar[dict[tuple[str, str], tuple[int, int, int]]] = {
        (NODESET, PARTITION): (5, 2, 3),  # desired, busy, needed
        (PARTITION, PARTITION): (7, 2, 5),  # the default per-partition target of the same partition
        ("slurm-cpu", "cpu"): (1, 1, 0),
    }

    def collect(self) -> Iterator[GaugeMetricFamily]:
        fams = {
            name: GaugeMetricFamily(name, f"{name} help", labels=labels)
            for name, labels in DEMAND_FAMILIES.items()
        }
        for (target, partition), (desired, busy, needed) in self.VALUES.items():
            fams[DESIRED].add_metric([target, partition], desired)
            fams["slurm_autoscaler_busy_nodes"].add_metric([target, partition], busy)
            fams["slurm_autoscaler_needed_nodes"].add_metric([target, partition], needed)
            fams["slurm_autoscaler_pending_eligible_jobs"].add_metric([target, partition], needed)
            fams["slurm_autoscaler_pending_ignored_jobs"].add_metric([target, partition, "Dependency"], 4)
        yield from fams.values()


def keda_metrics_api_value(body: str, value_location: str) -> float:
    """KEDA's metrics-api format=prometheus: the first series of the named family whose labels equal every
    matcher's value (metrics_api_scaler.go, getValueFromPrometheusResponse)."""
    name, matchers = parse_selector(value_location)
    for family in text_string_to_metric_families(body):
        if family.name != name:
            continue
        for sample in family.samples:
            if all(sample.labels.get(label) == value for label, _, value in matchers):
                return float(sample.value)
    raise LookupError(f"value {value_location} not found")


def test_metrics_api_value_location_selects_the_nodeset_series() -> None:
    registry = CollectorRegistry()
    registry.register(_Demand())
    body = generate_latest(registry).decode()
    (trigger,) = _triggers(SCALED_OBJECTS["scaledobject-metrics-api.yaml"])
    assert keda_metrics_api_value(body, trigger["metadata"]["valueLocation"]) == 5
    with pytest.raises(LookupError):
        keda_metrics_api_value(
            body.replace(f'target="{NODESET}"', 'target="other"'), trigger["metadata"]["valueLocation"]
        )


def _promtool_test_rules(
    promtool: str, tmp_path: Path, tests: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` on ``tests`` (a rule-test file's content), run in ``tmp_path``."""
    (tmp_path / "query_test.yaml").write_text(yaml.safe_dump(tests))
    return subprocess.run(
        [promtool, "test", "rules", "query_test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _promtool_case(query: str, series: list[tuple[str, int]], expected: list[float]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": f"{v} {v} {v}"} for s, v in series],
        "promql_expr_test": [
            {
                "expr": query,
                "eval_time": "2m",
                "exp_samples": [{"labels": "{}", "value": v} for v in expected],
            }
        ],
    }


def test_prometheus_query_with_promtool(tmp_path: Path) -> None:
    """The real PromQL engine: one sample = the NodeSet target's desired count (the larger of two slurm-keda
    replicas), other targets and families ignored; no series → no sample (an error for KEDA, not 0)."""
    promtool = promtool_path()
    (trigger,) = _triggers(SCALED_OBJECTS["scaledobject-prometheus.yaml"])
    query = trigger["metadata"]["query"]
    ns = f'target="{NODESET}",partition="{PARTITION}"'
    present = [
        (f'{DESIRED}{{{ns},instance="10.0.0.1:9341"}}', 3),
        (f'{DESIRED}{{{ns},instance="10.0.0.2:9341"}}', 4),
        (f'{DESIRED}{{target="{PARTITION}",partition="{PARTITION}",instance="10.0.0.1:9341"}}', 9),
        (f'slurm_autoscaler_busy_nodes{{{ns},instance="10.0.0.1:9341"}}', 8),
    ]
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [_promtool_case(query, present, [4]), _promtool_case(query, present[2:], [])],
    }
    res = _promtool_test_rules(promtool, tmp_path, tests)
    assert res.returncode == 0, res.stdout + res.stderr
    # and the harness can fail: a wrong expectation is reported
    tests["tests"] = [_promtool_case(query, present, [3])]
    res = _promtool_test_rules(promtool, tmp_path, tests)
    assert res.returncode != 0 and "FAILED" in res.stdout + res.stderr


# --------------------------------------------------------------------------------------- not vacuous


def _set(path: str, value: Any) -> Callable[[Manifest], None]:
    """A mutation setting (or, with value DELETE, removing) the dotted path; [n] indexes a list."""

    def mutate(doc: Manifest) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in re.split(r"\.|\[|\]\.?", path) if k]
        node = doc
        for key in keys[:-1]:
            node = node[key]
        if value is DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value

    return mutate


DELETE = object()
PUSH = "scaledobject-external-push.yaml"
PROM = "scaledobject-prometheus.yaml"
TLS = "triggerauthentication-tls.yaml"


@pytest.mark.parametrize(
    ("file", "path", "value", "expect"),
    [
        (PUSH, "spec.minReplicaCount", "0", "is not of type 'integer'"),
        (PUSH, "spec.minReplicaCount", -1, "less than the minimum"),
        (PUSH, "spec.minReplicaCount", 20, "minReplicaCount must be less than or equal to maxReplicaCount"),
        (PUSH, "spec.triggers[0].typeo", "external-push", "Additional properties"),
        (PUSH, "spec.triggers[0].metadata.cpusPerNode", 64, "is not of type 'string'"),
        (PUSH, "spec.triggers", [], "should be non-empty"),
        (PUSH, "spec.fallback.behavior", "sometimes", "is not one of"),
        (PUSH, "spec.fallback.replicas", DELETE, "'replicas' is a required property"),
        (PUSH, "spec.scaleTargetRef.name", "", "should be non-empty"),
        (
            PUSH,
            "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.tolerance",
            True,
            "is not valid",
        ),
        (
            PUSH,
            "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.tolerance",
            "10 %",
            "does not match",
        ),
        (PUSH, "apiVersion", "keda.sh/v1", "was expected"),
        (PUSH, "kind", "ScaledJob", "was expected"),
        (PUSH, "metadata.name", "Slurm_GPU", "does not match"),
        (PUSH, "metadata.namespace", DELETE, "'namespace' is a required property"),
        (TLS, "spec.secretTargetRef[0].key", DELETE, "'key' is a required property"),
        (TLS, "spec.secretTargetRef[0].parameter", 1, "is not of type 'string'"),
        (TLS, "spec.vault", {}, "Additional properties"),
    ],
)
def test_schema_validation_can_fail(
    file: str, path: str, value: Any, expect: str, crds: dict[str, Manifest]
) -> None:
    doc = copy.deepcopy(MANIFESTS[file])
    _set(path, value)(doc)
    problems = validate(doc, crds[EXPECTED_FILES[file]])
    assert problems and any(expect in p for p in problems), problems


@pytest.mark.parametrize(
    ("path", "value", "expect"),
    [
        ("spec.scaleTargetRef.kind", "StatefulSet", "scaleTargetRef.kind"),
        ("spec.scaleTargetRef.apiVersion", "slinky.slurm.net/v1alpha1", "scaleTargetRef.apiVersion"),
        ("spec.scaleTargetRef.name", "slurm-cpu", "scaleTargetRef.name"),
    ],
)
def test_target_check_can_fail(path: str, value: Any, expect: str, crds: dict[str, Manifest]) -> None:
    doc = copy.deepcopy(MANIFESTS[PUSH])
    _set(path, value)(doc)
    assert any(expect in p for p in target_problems(doc, crds["NodeSet"]))
    no_scale = copy.deepcopy(crds["NodeSet"])
    del served_version(no_scale)["subresources"]["scale"]
    assert any("no scale subresource" in p for p in target_problems(MANIFESTS[PUSH], no_scale))


def test_reference_checks_can_fail(scaler_params: Params) -> None:
    manifests = copy.deepcopy(MANIFESTS)
    manifests[PUSH]["spec"]["triggers"][0]["authenticationRef"]["name"] = "slurm-keda-tls"
    problems = auth_problems(manifests)
    assert any("slurm-keda-tls is not in keda/" in p for p in problems)
    assert any("referenced by no ScaledObject" in p for p in problems)
    manifests = copy.deepcopy(MANIFESTS)
    manifests[TLS]["spec"]["secretTargetRef"][0]["parameter"] = "scalerAddress"  # metadata-only for KEDA
    assert any("does not read 'scalerAddress'" in p for p in auth_problems(manifests, scaler_params))


@pytest.mark.parametrize(
    ("trigger_type", "metadata", "expect"),
    [
        (
            "prometheus",
            {"serverAddress": "http://p:9090", "querry": "up", "threshold": "1"},
            "no metadata key 'querry'",
        ),
        ("prometheus", {"serverAddress": "http://p:9090", "threshold": "1"}, "required metadata key 'query'"),
        ("metrics-api", {"url": "http://x", "valueLocation": "a", "format": "openmetrics"}, "not one of"),
        (
            "metrics-api",
            {"url": "http://x", "valueLocation": "a", "caCert": "PEM"},
            "no metadata key 'caCert'",
        ),
        ("external-push", {"scalerAddress": "a:1", "tlsClientKey": "PEM"}, "no metadata key 'tlsClientKey'"),
        ("externalpush", {}, "no scaler type"),
    ],
)
def test_keda_metadata_check_can_fail(
    trigger_type: str, metadata: dict[str, str], expect: str, scaler_params: Params
) -> None:
    assert any(expect in p for p in keda_metadata_problems(trigger_type, metadata, scaler_params))


@pytest.mark.parametrize(
    ("key", "value", "expect"),
    [
        ("partitions", "gpu", "slurm-keda rejects: ['partitions']"),
        ("partition", DELETE, "partition None"),
        ("nodeset", "slurm-cpu", "is not the scale target"),
        ("scalerAddress", "slurm-keda.slurm.svc:9341", "scalerAddress"),
        ("memoryPerNode", "480GB", "memoryPerNode"),
        ("cpusPerNode", "0", "cpusPerNode must be >= 1"),
        ("gpusPerNode", "-1", "gpusPerNode"),
        ("max", "32", "disagrees with maxReplicaCount"),
    ],
)
def test_contract_check_can_fail(key: str, value: Any, expect: str) -> None:
    doc = copy.deepcopy(MANIFESTS[PUSH])
    _set(f"spec.triggers[0].metadata.{key}", value)(doc)
    assert any(expect in p for p in contract_problems(doc)), contract_problems(doc)


@pytest.mark.parametrize(
    ("file", "path", "value", "expect"),
    [
        (PUSH, "spec.minReplicaCount", 1, "minReplicaCount 1"),
        (PUSH, "spec.fallback.replicas", 0, "replicas >= 1"),
        (PUSH, "spec.triggers[0].metricType", "Value", "metricType 'Value'"),
        (
            PUSH,
            "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.stabilizationWindowSeconds",
            60,
            "scaleUp",
        ),
        (
            PUSH,
            "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.policies[0].value",
            4,
            "one 15 s",
        ),
        (PUSH, "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.tolerance", DELETE, "10 %"),
        (PUSH, "spec.cooldownPeriod", 0, "cooldownPeriod"),
        (PROM, "spec.triggers[0].metadata.ignoreNullValues", "true", "ignoreNullValues"),
        (PROM, "spec.triggers[0].metadata.threshold", "2", "target per replica"),
    ],
)
def test_safety_check_can_fail(file: str, path: str, value: Any, expect: str) -> None:
    doc = copy.deepcopy(MANIFESTS[file])
    _set(path, value)(doc)
    assert any(expect in p for p in safety_problems(doc)), safety_problems(doc)


@pytest.mark.parametrize(
    ("file", "key", "value", "expect"),
    [
        (PROM, "query", f'{DESIRED}{{target="slurm-gpu",partition="gpu"}}', "returns one sample"),
        (PROM, "query", f'max({DESIRED}{{target=~"slurm-.*",partition="gpu"}})', "only label=value"),
        (
            PROM,
            "query",
            'max(slurm_autoscaler_busy_nodes{target="slurm-gpu",partition="gpu"})',
            "not slurm_autoscaler",
        ),
        (
            "scaledobject-metrics-api.yaml",
            "valueLocation",
            f'{DESIRED}{{target="gpu",partition="gpu"}}',
            "labels",
        ),
        (
            "scaledobject-metrics-api.yaml",
            "valueLocation",
            f"{DESIRED}{{target=slurm-gpu}}",
            "bad label matcher",
        ),
    ],
)
def test_selector_check_can_fail(file: str, key: str, value: str, expect: str) -> None:
    doc = copy.deepcopy(MANIFESTS[file])
    doc["spec"]["triggers"][0]["metadata"][key] = value
    assert any(expect in p for p in selector_problems(doc)), selector_problems(doc)
