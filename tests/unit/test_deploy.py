"""deploy/: every overlay rendered by kustomize (Debian trixie's kustomize 5.6, `make kustomize`), each object
validated against Kubernetes' own schemas (kubernetes-validate, strict) or the real CRD (../shared/schemas),
and the properties the issue asks for checked on the rendered objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from autoscaler.targets import load_targets_file
from slurm_keda.settings import ENV_PREFIX, OPTIONS
from testkit.paths import ROOT
from testkit.schemas import SCHEMAS, schema_for

OVERLAYS = ("exporter", "autoscaler", "all", "shared-nodes")
KUBERNETES = "1.31.0"
CRDS = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}
Manifest = dict[str, Any]
CERT_MANAGER = frozenset({"Issuer", "Certificate"})
"""cert-manager's kinds (the bridge's webhook certificate): their CRDs are not among ../shared/schemas, so
their wiring is what is checked (test_the_webhook_is_wired)."""


def kustomize_path() -> str:
    path = shutil.which("kustomize") or str(ROOT / ".venv/bin/kustomize")
    if not Path(path).is_file():
        if os.environ.get("SLURM_KEDA_REQUIRE_LAB") == "1":
            pytest.fail("kustomize is missing (make kustomize) but SLURM_KEDA_REQUIRE_LAB=1")
        pytest.skip("kustomize is not installed (make kustomize)")
    return path


@cache
def _render(overlay: str, kustomize: str) -> tuple[Manifest, ...]:
    out = subprocess.run(
        [kustomize, "build", str(ROOT / "deploy/overlays" / overlay)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def render(overlay: str) -> tuple[Manifest, ...]:
    return _render(overlay, kustomize_path())


def one(objects: tuple[Manifest, ...], kind: str, name: str | None = None) -> Manifest:
    (found,) = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


def container(objects: tuple[Manifest, ...]) -> Manifest:
    (c,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c


def _python_patterns(node: Any) -> Any:
    """Go's ``^(?i)...`` (a flag after the anchor, which Python's re refuses) as ``(?i)^...``."""
    if isinstance(node, dict):
        return {
            k: (v.replace("^(?i)", "(?i)^") if k == "pattern" and isinstance(v, str) else _python_patterns(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = _python_patterns(schema_for(yaml.safe_load((SCHEMAS / CRDS[kind]).read_text())))
    return schema


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_against_kubernetes_or_its_crd(overlay: str) -> None:
    for obj in render(overlay):
        assert obj["metadata"].get("namespace") in ("slurm", None), obj["metadata"]
        if obj["kind"] in CERT_MANAGER:
            assert obj["apiVersion"] == "cert-manager.io/v1"
        elif obj["kind"] in CRDS:
            if not SCHEMAS.is_dir():
                continue  # the CRDs live in ../shared; the structure checks below still run
            jsonschema.validate(obj, crd_schema(obj["kind"]))
        else:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_the_crd_validation_rejects_a_broken_object() -> None:
    if not SCHEMAS.is_dir():
        pytest.skip(f"{SCHEMAS} is absent")
    monitor = one(render("exporter"), "ServiceMonitor")
    broken = {**monitor, "spec": {**monitor["spec"], "endpoints": [{"port": "metrics", "intervall": "30s"}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, crd_schema("ServiceMonitor"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_deployment_is_locked_down(overlay: str) -> None:
    objects = render(overlay)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    c = container(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc.get("privileged")
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    # the JWT comes from a Secret mounted as the secrets directory, and is read as a token file there
    env = {e["name"]: e.get("value") for e in c["env"]}
    (secrets,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/var/run/secrets/slurm-keda"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == secrets["name"]]
    assert volume["secret"]["secretName"] == "slurm-keda-jwt" and secrets["readOnly"]
    assert env["SLURM_KEDA_TOKEN_FILE"] == "/var/run/secrets/slurm-keda/token"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_environment_variable_is_a_real_setting(overlay: str) -> None:
    fields = set(OPTIONS)
    for e in container(render(overlay))["env"]:
        if e["name"].startswith(ENV_PREFIX):
            assert e["name"].removeprefix(ENV_PREFIX).lower() in fields, e["name"]
        else:  # the bridge's Lease identity, and where the standby copies the leader's snapshots from
            assert e["name"] in ("POD_NAME", "POD_IP"), e["name"]


def test_api_access_only_where_the_bridge_runs() -> None:
    for overlay in ("exporter", "autoscaler"):
        objects = render(overlay)
        kinds = {o["kind"] for o in objects}
        assert not kinds & {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}, overlay
        assert one(objects, "ServiceAccount")["automountServiceAccountToken"] is False
        assert one(objects, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
        assert one(objects, "Deployment")["spec"]["replicas"] == 1
    everything = render("all")
    assert one(everything, "ServiceAccount")["automountServiceAccountToken"] is True
    deployment = one(everything, "Deployment")
    assert deployment["spec"]["replicas"] == 2  # leader election: one writes, one waits
    env = {e["name"]: e for e in container(everything)["env"]}
    assert env["SLURM_KEDA_BRIDGE"]["value"] == "true"
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}  # --replica-copy
    # ... and the replicas reach each other's metrics port (the base lets only Prometheus in)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert any(
        rule.get("from") == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "slurm-keda"}}}]
        and {p["port"] for p in rule["ports"]} == {"metrics"}
        and pod_labels["app.kubernetes.io/name"] == "slurm-keda"
        for policy in everything
        if policy["kind"] == "NetworkPolicy"
        for rule in policy["spec"]["ingress"]
    ), "no NetworkPolicy lets the replicas copy each other's snapshots"
    for binding in (o for o in everything if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slurm-keda", "namespace": "slurm"}]
    # the Lease Role is in the bridge's namespace, naming the Lease of the default instance
    role = one(everything, "Role")
    assert role["metadata"]["namespace"] == "slurm"
    assert any(r.get("resourceNames") == ["slurm-keda-bridge-default"] for r in role["rules"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_monitor_network_policy_and_service_fit_together(overlay: str) -> None:
    objects = render(overlay)
    service, monitor = one(objects, "Service", "slurm-keda"), one(objects, "ServiceMonitor")
    services = [o for o in objects if o["kind"] == "Service"]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert all(s["spec"]["selector"].items() <= pod_labels.items() for s in services)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    ports = {p["name"]: p for s in services for p in s["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"] and "metrics" in ports
    assert all(p["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items() for p in policies)
    allowed = {p["port"] for policy in policies for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    container_ports = {p["name"] for p in container(objects)["ports"]}
    assert allowed == container_ports == set(ports), "every served port is reachable, nothing else"
    assert ("grpc" in ports) == (overlay != "exporter")
    assert ("webhook" in ports) == (overlay in ("all", "shared-nodes"))  # where the bridge runs
    assert one(objects, "PrometheusRule")["spec"] == yaml.safe_load(
        (ROOT / "dashboards/rules/slurm-keda.rules.yaml").read_text()
    )


def test_the_autoscaler_targets_and_tls_are_wired(tmp_path: Path) -> None:
    objects = render("autoscaler")
    c = container(objects)
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    targets = next(
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "slurm-keda-targets"
    )
    path = tmp_path / "targets.yaml"
    path.write_text(targets["data"]["targets.yaml"])
    assert [t.name for t in load_targets_file(path)] == ["slurm-gpu"]  # the keda/ examples' NodeSet
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert str(Path(env["SLURM_KEDA_AUTOSCALER_TARGETS_FILE"]).parent) in mounts
    for key in (
        "SLURM_KEDA_GRPC_TLS_CERT_FILE",
        "SLURM_KEDA_GRPC_TLS_KEY_FILE",
        "SLURM_KEDA_GRPC_TLS_CLIENT_CA_FILE",
    ):
        assert str(Path(env[key]).parent) in mounts, key
    assert env["SLURM_KEDA_GRPC_LISTEN"].endswith(":9342")


def test_the_webhook_is_wired() -> None:
    """The bridge's webhook: cert-manager's certificate names the Service the configurations call, lands in
    the Secret the replicas mount, its CA is injected into both; kube-system and the bridge's own
    namespace are never sent a review; the replicas listen where the Service points."""
    objects = render("all")
    cert = one(objects, "Certificate")
    service = one(objects, "Service", "slurm-keda-webhook")
    ns = service["metadata"]["namespace"]
    assert f"{service['metadata']['name']}.{ns}.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == one(objects, "Issuer")["metadata"]["name"]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    c = container(objects)
    env = {e["name"]: e.get("value") for e in c["env"]}
    (volume,) = [
        v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == cert["spec"]["secretName"]
    ]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == volume["name"]]
    assert env["SLURM_KEDA_WEBHOOK_CERT_FILE"] == f"{mount['mountPath']}/tls.crt"
    assert env["SLURM_KEDA_WEBHOOK_KEY_FILE"] == f"{mount['mountPath']}/tls.key"
    (port,) = [p for p in c["ports"] if p["name"] == service["spec"]["ports"][0]["targetPort"]]
    assert env["SLURM_KEDA_WEBHOOK_LISTEN"].endswith(f":{port['containerPort']}")
    for kind, path in (
        ("MutatingWebhookConfiguration", "/mutate"),
        ("ValidatingWebhookConfiguration", "/validate"),
    ):
        config = one(objects, kind)
        assert (
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            == f"{ns}/{cert['metadata']['name']}"
        )
        (hook,) = config["webhooks"]
        called = hook["clientConfig"]["service"]
        assert (called["name"], called["namespace"], called["path"]) == (
            service["metadata"]["name"],
            ns,
            path,
        )
        assert called["port"] == service["spec"]["ports"][0]["port"]
        (never,) = hook["namespaceSelector"]["matchExpressions"]
        assert never["operator"] == "NotIn" and {"kube-system", ns} <= set(never["values"])
        assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
    validating = one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert "'slurm-bridge'" in validating["matchConditions"][0]["expression"]
    assert "pods/resize" in validating["rules"][0]["resources"]
