"""AdmissionReview v1 as kube-apiserver sends and checks it (``k8s.io/api/admission/v1/types.go``;
``k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go``), for driving the bridge's
webhook with the bodies a real API server would send, and judging its answers the way one would.

Differences from a real API server: no ``userInfo`` groups or ``options`` beyond what a test sets, and
only JSONPatch (the one patch type admission v1 has) is applied.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

from testkit.fake_kube import json_patch

POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
POD_RESOURCE = {"group": "", "version": "v1", "resource": "pods"}


def review(
    operation: str,
    obj: dict[str, Any] | None,
    *,
    old: dict[str, Any] | None = None,
    namespace: str = "team-a",
    sub: str = "",
) -> dict[str, Any]:
    """An AdmissionReview v1 request for a pod (``sub``: a subresource, e.g. ``resize``)."""
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": POD_KIND,
        "resource": POD_RESOURCE,
        "requestKind": POD_KIND,
        "requestResource": POD_RESOURCE,
        "name": ((obj or old or {}).get("metadata") or {}).get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "dryRun": False,
    }
    if sub:
        request["subResource"] = request["requestSubResource"] = sub
    if obj is not None:
        request["object"] = obj
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def verify(sent: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """What kube-apiserver checks of a webhook's answer (``VerifyAdmissionResponse``): the same
    apiVersion and kind as sent, a response with the request's uid, ``allowed`` a boolean, a patch only
    with ``patchType: JSONPatch`` and only from a mutating webhook. Returns the response; AssertionError
    where the API server would reject the answer."""
    assert answer.get("apiVersion") == sent["apiVersion"], answer.get("apiVersion")
    assert answer.get("kind") == "AdmissionReview", answer.get("kind")
    response = answer.get("response")
    assert isinstance(response, dict), "no response"
    assert response.get("uid") == sent["request"]["uid"], "response.uid must be the request's"
    assert isinstance(response.get("allowed"), bool), "allowed must be a boolean"
    known = {"uid", "allowed", "status", "patch", "patchType", "auditAnnotations", "warnings"}
    assert set(response) <= known, set(response) - known
    if "patch" in response:
        assert response.get("patchType") == "JSONPatch", response.get("patchType")
        ops = json.loads(base64.b64decode(response["patch"]))
        assert isinstance(ops, list) and all(isinstance(o, dict) and "op" in o and "path" in o for o in ops)
    else:
        assert "patchType" not in response
    if not response["allowed"]:
        status = response.get("status") or {}
        assert isinstance(status.get("message", ""), str)
    return response


def patched(sent: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The object after the response's JSONPatch, as the API server applies it."""
    obj = copy.deepcopy(sent["request"]["object"])
    if "patch" not in response:
        return obj
    result: dict[str, Any] = json_patch(obj, json.loads(base64.b64decode(response["patch"])))
    return result
