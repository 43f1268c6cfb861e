"""deploy/k8s: every manifest validates against Kubernetes' own schemas (kubernetes-validate,
strict, at a fixed version), KEDA's ScaledObject and the Kustomization by hand, and the
manifests agree with the code (issue 28.7): the metric KEDA reads exists, the workers' grace
period covers a job, workers reach nothing but PgBouncer, Redis and DNS."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import Settings
from tests.conftest import CI

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# The oldest Kubernetes the manifests are written for: user namespaces for pods (hostUsers:
# false) are on by default from 1.33; appArmorProfile is a field from 1.30.
KUBERNETES_VERSION = "1.33.0"
NOT_CORE = {("keda.sh/v1alpha1", "ScaledObject"), ("kustomize.config.k8s.io/v1beta1", "Kustomization")}


def kv() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        if CI:
            pytest.fail("kubernetes-validate is not installed (pip install -e '.[test]'); required when CI=true")
        pytest.skip("kubernetes-validate not installed: pip install -e '.[test]'")
    return kubernetes_validate


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def listed() -> list[Path]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return [K8S / name for name in kustomization["resources"]]


def resources() -> list[dict[str, Any]]:
    return [d for path in listed() for d in documents(path)]


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in resources() if d["kind"] == kind}


def worker_deployments() -> dict[str, dict[str, Any]]:
    return {name: d for name, d in by_kind("Deployment").items()
            if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"}


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization" and kustomization["namespace"] == "ideabench"
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk


@pytest.mark.parametrize("path", sorted(K8S.rglob("*.yaml")), ids=lambda p: str(p.relative_to(K8S)))
def test_every_manifest_validates(path: Path) -> None:
    validator = kv()
    for doc in documents(path):
        if (doc["apiVersion"], doc["kind"]) in NOT_CORE:
            continue  # checked by hand below
        validator.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_catches_a_mistake() -> None:
    validator = kv()
    api = next(d for d in documents(K8S / "api.yaml") if d["kind"] == "Deployment")
    api["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUserr"] = 1
    with pytest.raises(validator.ValidationError):
        validator.validate(api, KUBERNETES_VERSION, strict=True)


def test_keda_scales_the_workers_on_the_queue_depth_metric() -> None:
    """A CRD, so no schema here: the fields KEDA reads, and the metric the API exports."""
    metrics = (ROOT / "app" / "metrics.py").read_text()
    assert re.search(r'GaugeMetricFamily\("ideabench_queue_depth",.*labels=\["queue"\]', metrics)
    deployments = worker_deployments()
    scaled = by_kind("ScaledObject")
    assert {s["spec"]["scaleTargetRef"]["name"] for s in scaled.values()} == set(deployments)
    for obj in scaled.values():
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        spec = obj["spec"]
        assert set(spec) <= {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval",
                             "cooldownPeriod", "advanced", "triggers"}
        assert spec["minReplicaCount"] >= 1  # the dispatcher runs in workers; gpu intake needs one alive
        assert spec["maxReplicaCount"] >= spec["minReplicaCount"]
        queue = deployments[spec["scaleTargetRef"]["name"]]["metadata"]["labels"]["ideabench.dev/queue"]
        [trigger] = spec["triggers"]
        assert trigger["type"] == "prometheus"
        meta = trigger["metadata"]
        assert set(meta) == {"serverAddress", "query", "threshold"}
        assert meta["query"] == f'sum(ideabench_queue_depth{{queue="{queue}"}})'
        assert float(meta["threshold"]) == 1  # one job per pod
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] > 0


def test_workers_get_the_job_timeout_to_drain() -> None:
    timeout = Settings().job_timeout_s
    config = by_kind("ConfigMap")["ideabench-config"]["data"]
    assert float(config["IDEABENCH_JOB_TIMEOUT_S"]) == timeout
    for name, deployment in worker_deployments().items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] >= timeout + 60, name
        [container] = pod["containers"]
        pre_stop = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
        assert "kill -TERM 1" in pre_stop and "kill -0 1" in pre_stop, name


def test_one_job_per_pod_and_one_gpu_per_gpu_worker() -> None:
    workers = worker_deployments()
    assert set(workers) == {"ideabench-worker-cpu", "ideabench-worker-gpu"}
    for name, deployment in workers.items():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert "--concurrency" not in container["args"], name  # solo pool: one job at a time
        env = {e["name"]: e.get("value") for e in container["env"]}
        queue = deployment["metadata"]["labels"]["ideabench.dev/queue"]
        assert container["args"][-2:] == ["--queues", queue]
        assert env["IDEABENCH_REQUIRE_FULL_ISOLATION"] == "1"
        assert "IDEABENCH_SEED_SECRET" in env  # per-pod data dirs: the secret must be shared
        gpus = container["resources"]["limits"].get("nvidia.com/gpu")
        if queue == "gpu":
            assert gpus == 1 and env["IDEABENCH_DEVICE"] == "cuda:0"
        else:
            assert gpus is None and env["IDEABENCH_DEVICE"] == "cpu"


def test_the_worker_pod_has_what_the_sandbox_needs_and_says_why() -> None:
    text = (K8S / "worker-cpu.yaml").read_text()
    for field, reason in (("runtimeClassName", "cgroup"), ("hostUsers", "user namespace"),
                          ("procMount", "/proc"), ("seccompProfile", "user namespaces"),
                          ("capabilities", "CHOWN")):
        comment = text[:text.index(field + ":")].rsplit("\n\n", 1)[-1]
        assert reason in comment[-900:], field
    for deployment in worker_deployments().values():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["runtimeClassName"] in by_kind("RuntimeClass")
        assert pod["hostUsers"] is False
        assert pod["automountServiceAccountToken"] is False
        [container] = pod["containers"]
        security = container["securityContext"]
        assert security.get("privileged") is not True
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "SETUID", "SETGID"]}
        assert security["procMount"] == "Unmasked"
        assert container["command"] == ["/usr/local/bin/ideabench-entrypoint"]
        probe = " ".join(container["livenessProbe"]["exec"]["command"])
        assert probe.endswith("python -m workers.healthcheck")


def test_other_pods_are_restricted() -> None:
    for name, deployment in {**by_kind("Deployment"), **by_kind("Job")}.items():
        pod = deployment["spec"]["template"]["spec"]
        if name in worker_deployments():
            continue
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}}, name


def test_api_probes() -> None:
    [container] = by_kind("Deployment")["ideabench-api"]["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    routes = (ROOT / "app" / "health" / "routes.py").read_text()
    assert '"/healthz"' in routes and '"/readyz"' in routes
    assert "readyz/judging" not in yaml.safe_dump(resources())  # no probe depends on workers
    hpa = by_kind("HorizontalPodAutoscaler")["ideabench-api"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "ideabench-api"


def test_the_migration_job_runs_ideabench_migrate_directly_on_postgres() -> None:
    [container] = by_kind("Job")["ideabench-migrate"]["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["ideabench", "migrate"]
    [url] = [e for e in container["env"] if e["name"] == "DATABASE_URL"]
    assert url["valueFrom"]["secretKeyRef"]["key"] == "database-url-direct"


def test_secrets_are_referenced_never_committed() -> None:
    assert not [d for path in K8S.rglob("*.yaml") for d in documents(path) if d["kind"] == "Secret"]
    names = set(re.findall(r"(?:secretKeyRef: \{name|secretName): ([\w-]+)", "".join(
        p.read_text() for p in listed())))
    assert names == {"ideabench-secrets", "ideabench-pgbouncer"}


def _peers(rule: dict[str, Any]) -> list[str]:
    """What an egress rule reaches, as component names, 'dns' or a CIDR."""
    found = []
    for peer in rule.get("to", []):
        if "ipBlock" in peer:
            found.append(peer["ipBlock"]["cidr"])
            continue
        labels = peer.get("podSelector", {}).get("matchLabels", {})
        if labels.get("k8s-app") == "kube-dns":
            found.append("dns")
        else:
            found.append(labels["app.kubernetes.io/component"])
    return found


def _egress_of(component: str) -> tuple[set[str], set[int]]:
    peers: set[str] = set()
    ports: set[int] = set()
    for policy in by_kind("NetworkPolicy").values():
        selector = policy["spec"]["podSelector"].get("matchLabels", {})
        if selector and selector.get("app.kubernetes.io/component") != component:
            continue
        for rule in policy["spec"].get("egress", []):
            peers.update(_peers(rule))
            ports.update(p["port"] for p in rule.get("ports", []))
    return peers, ports


def test_network_policies_deny_by_default_and_keep_workers_off_the_internet() -> None:
    policies = by_kind("NetworkPolicy")
    deny = policies["default-deny"]["spec"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in deny and "egress" not in deny
    peers, ports = _egress_of("worker")
    assert peers == {"dns", "pgbouncer", "redis"}
    assert ports == {53, 6432, 6379}
    # Only the API may leave the cluster (webhooks), and never to private ranges.
    for component in ("pgbouncer", "migrate", "worker"):
        assert not any("/" in p for p in _egress_of(component)[0]), component
    api_peers, api_ports = _egress_of("api")
    assert {"pgbouncer", "redis", "0.0.0.0/0"} <= api_peers and {443, 80} <= api_ports
    [internet] = [r for p in policies.values() for r in p["spec"].get("egress", [])
                  if "0.0.0.0/0" in _peers(r)]
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(
        internet["to"][0]["ipBlock"]["except"])


def test_webhooks_are_described_honestly() -> None:
    """The API processes send the webhooks (app/webhooks/sender.py), the one tier with egress;
    nothing in the workers sends any."""
    assert "class WebhookSender" in (ROOT / "app" / "webhooks" / "sender.py").read_text()
    assert not (ROOT / "workers" / "webhooks.py").exists()
    assert "app/webhooks/sender.py" in (K8S / "networkpolicies.yaml").read_text()
