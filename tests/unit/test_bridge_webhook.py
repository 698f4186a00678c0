"""The bridge's admission webhook: AdmissionReview v1 bodies as kube-apiserver sends them, answers judged as
it judges them (testkit.admission), and the HTTPS server with its certificate rotation."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bridge.pods import decode_pod
from bridge.policy import parse_policy
from bridge.requests import PREFIX, Refusal, admit
from bridge.webhook import (
    OPT_OUT_ANNOTATION,
    CertificateFiles,
    ReviewError,
    WebhookOptions,
    WebhookServer,
    mutate,
    parse_review,
    validate,
)
from testkit.admission import patched, review, verify
from testkit.builders import pod_doc
from testkit.fake_kube import TOKEN, FakeKube, now_text, serve_kube, write_kubeconfig
from testkit.pki import have_openssl, make_pki
from testkit.scale_harness import free_port

POLICY = parse_policy(
    {
        "namespaces": {"team-a": {"user_id": 1001, "partitions": ["cpu", "gpu"]}},
        "namespace_selectors": [{"selector": "slurm=yes", "user_id": 3000, "partitions": ["cpu"]}],
    }
)
OPTIONS = WebhookOptions(scheduler_name="slurm-bridge", own_namespace="slurm-keda", policy=POLICY)


def doc(namespace: str = "team-a", scheduler: str = "default-scheduler", **kw: Any) -> dict[str, Any]:
    return pod_doc("p", namespace, uid="u1", scheduler=scheduler, **kw)


def mutated(
    obj: dict[str, Any], namespace: str = "team-a", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    sent = review("CREATE", obj, namespace=namespace)
    response = verify(sent, mutate(parse_review(json.dumps(sent).encode()), OPTIONS, labels))
    assert response["allowed"] is True
    return patched(sent, response)


def test_a_pod_of_a_managed_namespace_is_put_on_the_bridge() -> None:
    assert mutated(doc())["spec"]["schedulerName"] == "slurm-bridge"
    selected = mutated(doc("team-z"), "team-z", {"slurm": "yes"})  # chosen by the policy's selector
    assert selected["spec"]["schedulerName"] == "slurm-bridge"


@pytest.mark.parametrize(
    ("obj", "namespace", "why"),
    [
        (doc(scheduler="volcano"), "team-a", "names another scheduler"),
        (doc(annotations={OPT_OUT_ANNOTATION: "true"}), "team-a", "opts out"),
        (doc("team-b"), "team-b", "namespace not in the policy"),
        (doc("kube-system"), "kube-system", "kube-system"),
        (doc("slurm-keda"), "slurm-keda", "the bridge's own namespace"),
        (doc(node="c1"), "team-a", "already bound"),
        (
            doc(meta={"ownerReferences": [{"kind": "DaemonSet", "name": "ds", "controller": True}]}),
            "team-a",
            "DaemonSet",
        ),
        (doc(annotations={"kubernetes.io/config.mirror": "x"}), "team-a", "mirror pod"),
    ],
)
def test_pods_the_bridge_must_not_take_are_left_alone(obj: dict[str, Any], namespace: str, why: str) -> None:
    assert mutated(obj, namespace) == obj, why


def test_only_pod_creation_is_mutated() -> None:
    sent = review("UPDATE", doc(), old=doc())
    assert "patch" not in verify(sent, mutate(sent["request"], OPTIONS))
    node = review("CREATE", {"metadata": {"name": "n"}})
    node["request"]["resource"] = {"group": "", "version": "v1", "resource": "nodes"}
    assert "patch" not in verify(node, mutate(node["request"], OPTIONS))


def judged(obj: dict[str, Any], operation: str = "CREATE", sub: str = "") -> dict[str, Any]:
    sent = review(operation, obj, old=obj if operation == "UPDATE" else None, sub=sub)
    return verify(sent, validate(parse_review(json.dumps(sent).encode()), OPTIONS))


def test_a_pod_the_bridge_would_refuse_is_refused_with_the_events_message() -> None:
    bad = doc(scheduler="slurm-bridge", annotations={PREFIX + "partition": "debug"})
    response = judged(bad)
    refusal = admit(
        decode_pod(json.dumps(bad)), scheduler_name="slurm-bridge", own_namespace="slurm-keda", policy=POLICY
    )
    assert isinstance(refusal, Refusal)
    assert response["allowed"] is False and response["status"]["message"] == refusal.reason
    assert response["status"]["code"] == 403
    unknown = judged(doc(scheduler="slurm-bridge", annotations={PREFIX + "color": "blue"}))
    assert (
        unknown["allowed"] is False
        and "unknown annotation slurm-keda.io/color" in unknown["status"]["message"]
    )
    spread = [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
    ]
    refused = judged(doc(scheduler="slurm-bridge", spec={"topologySpreadConstraints": spread}))
    assert refused["allowed"] is False and "DoNotSchedule" in refused["status"]["message"]
    gang = judged(
        doc(scheduler="slurm-bridge", annotations={PREFIX + "group": "g", PREFIX + "group-size": "x"})
    )
    assert gang["allowed"] is False


def test_good_pods_other_schedulers_and_bound_updates_are_allowed() -> None:
    assert judged(doc(scheduler="slurm-bridge", annotations={PREFIX + "partition": "gpu"}))["allowed"] is True
    assert judged(doc(scheduler="default-scheduler", annotations={PREFIX + "partition": "debug"}))["allowed"]
    assert judged(doc(scheduler="slurm-bridge", node="c1"), "UPDATE")["allowed"] is True


def test_a_resize_of_a_bridge_pod_is_refused() -> None:
    response = judged(doc(scheduler="slurm-bridge", node="c1"), "UPDATE", sub="resize")
    assert response["allowed"] is False and "not resizable" in response["status"]["message"]
    assert judged(doc(scheduler="default-scheduler", node="c1"), "UPDATE", sub="resize")["allowed"] is True


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}',
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}',
    ],
)
def test_what_is_not_a_review_is_refused_as_such(body: bytes) -> None:
    with pytest.raises(ReviewError):
        parse_review(body)


# -- over HTTPS ------------------------------------------------------------------------------------------

needs_openssl = pytest.mark.skipif(not have_openssl(), reason="openssl CLI not installed")


@needs_openssl
async def test_the_webhook_answers_over_https_and_picks_up_a_rotated_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    cert, key = mounted / "tls.crt", mounted / "tls.key"
    shutil.copy(pki.server.crt, cert)
    shutil.copy(pki.server.key, key)
    files = CertificateFiles(cert, key)
    server = WebhookServer(OPTIONS, files, "127.0.0.1", 0, reload_every=0.05)
    task = asyncio.create_task(server.run(), name="webhook")
    try:
        while server.bound_port is None:
            await asyncio.sleep(0.01)
        url = f"https://127.0.0.1:{server.bound_port}"
        sent = review("CREATE", doc())
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/mutate", json=sent, ssl=pki.client_ctx()) as resp:
                assert resp.status == 200
                assert (
                    patched(sent, verify(sent, await resp.json()))["spec"]["schedulerName"] == "slurm-bridge"
                )
            async with http.post(f"{url}/validate", data=b"{}", ssl=pki.client_ctx()) as resp:
                assert resp.status == 400
            with pytest.raises(aiohttp.ClientError):  # HTTPS only
                async with http.post(f"http://127.0.0.1:{server.bound_port}/mutate", json=sent) as resp:
                    await resp.read()
        # the Secret is updated: the next handshake shows the new certificate (trusted through ca2 only)
        shutil.copy(pki.server2.crt, cert)
        shutil.copy(pki.server2.key, key)
        rotated = ssl.create_default_context(cafile=str(pki.ca2))
        for _ in range(200):
            if files.reloads:
                break
            await asyncio.sleep(0.02)
        assert files.reloads == 1
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{url}/validate", json=sent, ssl=rotated) as resp,
        ):
            assert verify(sent, await resp.json())["allowed"] is True
        # a half-written pair does not replace the good one
        key.write_text("garbage")
        for _ in range(200):
            if files.reload_errors:
                break
            await asyncio.sleep(0.02)
        assert files.reload_errors >= 1 and files.reloads == 1
        verdicts = {tuple(s.labels.values()): s.value for f in server.families() for s in f.samples}
        assert verdicts[("mutate", "mutated")] == 1 and verdicts[("validate", "bad_request")] == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


SCRIPT = Path(sys.executable).parent / "slurm-keda"


@needs_openssl
@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (make venv)")
async def test_slurm_keda_bridge_serves_the_webhook_on_every_replica(tmp_path: Path) -> None:
    """``slurm-keda bridge --webhook-listen``: the console script answers AdmissionReviews over HTTPS whether
    or not it leads (another replica holds the Lease here) and without slurmrestd."""
    pki = make_pki(tmp_path)
    policy = tmp_path / "policy.yaml"
    policy.write_text("namespaces: {team-a: {user_id: 1001, partitions: [cpu]}}\n")
    fake = FakeKube(token=TOKEN)
    held = {"holderIdentity": "the-other-replica", "leaseDurationSeconds": 3600, "renewTime": now_text()}
    lease = {"metadata": {"name": "slurm-keda-bridge-default", "namespace": "slurm"}, "spec": held}
    fake.put("leases", lease, "coordination.k8s.io/v1")  # another replica leads: this one is a standby
    async with serve_kube(fake) as url:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        port, http = free_port(), free_port()
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT),
            "bridge",
            *(
                "--slurmrestd-url",
                "http://127.0.0.1:9",
                "--listen-address",
                "127.0.0.1",
                "--listen-port",
                str(http),
            ),
            *(
                "--bridge-policy-file",
                str(policy),
                "--kubeconfig",
                str(kubeconfig),
                "--bridge-namespace",
                "slurm",
            ),
            *("--webhook-listen", f"127.0.0.1:{port}"),
            *("--webhook-cert-file", str(pki.server.crt), "--webhook-key-file", str(pki.server.key)),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            sent = review("CREATE", doc())

            async def answered() -> dict[str, Any] | None:
                try:
                    async with (
                        aiohttp.ClientSession() as http_client,
                        http_client.post(
                            f"https://127.0.0.1:{port}/mutate", json=sent, ssl=pki.client_ctx()
                        ) as r,
                    ):
                        return dict(await r.json())
                except aiohttp.ClientError:
                    return None

            got = None
            for _ in range(200):
                if (got := await answered()) is not None:
                    break
                await asyncio.sleep(0.05)
            assert got is not None, "the webhook never answered"
            assert patched(sent, verify(sent, got))["spec"]["schedulerName"] == "slurm-bridge"
            async with (
                aiohttp.ClientSession() as http_client,
                http_client.get(f"http://127.0.0.1:{http}/metrics") as r,
            ):
                metrics = await r.text()
            assert "slurm_bridge_leader 0.0" in metrics, "a standby answers the webhook too"
            assert 'slurm_bridge_webhook_reviews_total{path="mutate",verdict="mutated"} 1.0' in metrics
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)
        assert proc.stderr is not None
        err = (await proc.stderr.read()).decode()
        assert "webhook: listening on https://127.0.0.1" in err, err
