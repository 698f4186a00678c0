"""The real CRDs of ``../shared/schemas`` as JSON schemas: manifests are validated against them."""

from __future__ import annotations

from typing import Any

from testkit.paths import SHARED

SCHEMAS = SHARED / "schemas"
Manifest = dict[str, Any]
_DROPPED = frozenset({"description", "default", "example", "externalDocs", "nullable"})
_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
OBJECT_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": _DNS1123_SUBDOMAIN},
        "namespace": {"type": "string", "maxLength": 63, "pattern": _DNS1123_LABEL},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
"""The ObjectMeta fields a manifest here may set; the namespace is always explicit."""


def schema_for(crd: Manifest) -> dict[str, Any]:
    """JSON Schema of a whole object of this CRD: envelope pinned to the served version, strict ObjectMeta."""
    schema = to_json_schema(served_version(crd)["schema"]["openAPIV3Schema"])
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    props = schema["properties"]
    props["apiVersion"] = {"const": api_version(crd)}
    props["kind"] = {"const": crd["spec"]["names"]["kind"]}
    props["metadata"] = OBJECT_META
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return schema


def to_json_schema(node: Any) -> Any:
    """One structural-schema node (Kubernetes' OpenAPI v3 subset) as JSON Schema (draft 2020-12)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in _DROPPED:
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not preserve
    ):
        out["additionalProperties"] = False
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def served_version(crd: Manifest) -> Manifest:
    """The one served version of a CRD (each of ours serves exactly one)."""
    served = [v for v in crd["spec"]["versions"] if v.get("served")]
    assert len(served) == 1, f"{crd['metadata']['name']}: {len(served)} served versions"
    return served[0]


def api_version(crd: Manifest) -> str:
    return f"{crd['spec']['group']}/{served_version(crd)['name']}"
