"""The Helm chart, linted and rendered with Helm's own Go SDK; every manifest validated against a
pinned Kubernetes version; the invariants a StatefulSet of stream workers needs, across renders."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ipaddress
from typing import Any

import helm_python as helm
import kubernetes_validate
import orjson
import pytest
import yaml

from dispatcher.domain.addresses import DENY_TABLE
from dispatcher.settings import Settings
from dispatcher.settings_bounds import BOUNDS
from dispatcher.topology import broker_credentials
from tests.deploy.chart import CHART, KUBE_VERSION, NAMESPACE, RELEASE, ROOT, Render, render, with_broker

# The value sets the issue names, plus the ones a platform team reaches for first.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "existing secret": {"auth": {"existingSecret": "dispatcher-tokens", "metricsTokenKey": "metrics-token"}},
    "kafka sasl": {"kafka": {"saslPasswordSecret": {"name": "kafka-user", "key": "password"}},
                   "config": {"DISPATCHER_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                              "DISPATCHER_KAFKA_SASL_USERNAME": "webhook-dispatcher"}},
    "metrics on": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                               "prometheusRule": {"enabled": True}},
                   "auth": {"metricsTokenKey": "metrics-token"}},
    "network policy on": {"networkPolicy": {
        "enabled": True, "allowedCidrs": ["10.20.0.0/16"],
        "kafkaTo": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kafka"}}}],
        "apiFrom": [{"namespaceSelector": {"matchLabels": {"team": "payments"}}}],
        "metricsFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        ],
        "otlpTo": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                    "podSelector": {"matchLabels": {"app": "otel-collector"}}}]}},
    "network policy minimal": {"networkPolicy": {
        "enabled": True, "kafkaTo": [{"ipBlock": {"cidr": "10.40.0.0/24"}}]}},
    "5 replicas": {"replicaCount": 5, "kafka": {"partitions": 40}},
    "no persistence": {"persistence": {"enabled": False}, "podDisruptionBudget": {"enabled": False},
                       "preStopSleepSeconds": 0, "image": {"digest": "sha256:" + "a" * 64}},
    "settings": {"config": {"DISPATCHER_ALLOW_TARGETS": "10.20.0.0/16", "DISPATCHER_MAX_IN_FLIGHT": 512,
                            "DISPATCHER_VERIFY_ENDPOINTS": True,
                            "DISPATCHER_CA_FILE": "/etc/dispatcher-ca/ca.pem"},
                 "extraVolumes": [{"name": "ca", "configMap": {"name": "private-ca"}}],
                 "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/dispatcher-ca", "readOnly": True}]},
}
# The env names the chart sets from its own values (or the pod), not through `config`.
CHART_SET = {
    "DISPATCHER_BROKER", "DISPATCHER_APP_ID", "DISPATCHER_PARTITIONS", "DISPATCHER_TOPIC_REPLICATION",
    "DISPATCHER_TOPIC_MIN_INSYNC_REPLICAS", "DISPATCHER_SESSION_TIMEOUT", "DISPATCHER_STANDBY_REPLICAS",
    "DISPATCHER_API_TOKEN", "DISPATCHER_METRICS_TOKEN", "DISPATCHER_INSTANCE_ID",
    "DISPATCHER_ADVERTISED_URL", "DISPATCHER_WEB_HOST", "DISPATCHER_WEB_PORT", "DISPATCHER_DATA_DIR",
    "DISPATCHER_KAFKA_SASL_PASSWORD",  # from a Secret (kafka.saslPasswordSecret), never inline
}
# Prometheus Operator kinds: kubernetes-validate has no schema for CRDs.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
RULES = ROOT / "deploy" / "prometheus" / "webhook-dispatcher-rules.yml"


@pytest.fixture(scope="module")
def renders() -> dict[str, Render]:
    return {name: render(values) for name, values in VALUE_SETS.items()}


def schema() -> dict[str, Any]:
    return orjson.loads((CHART / "values.schema.json").read_bytes())


@pytest.mark.parametrize("name", VALUE_SETS)
def test_lint_is_clean(name: str) -> None:
    report = helm.lint(CHART, with_broker(VALUE_SETS[name]), strict=True, namespace=NAMESPACE,
                       kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert report["errors"] == [] and problems == [], report


def oldest_kubernetes() -> str:
    """The floor of Chart.yaml's kubeVersion (">=1.27.0-0" -> "1.27.0")."""
    floor = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    return floor.removeprefix(">=").split("-")[0]


@pytest.mark.parametrize("version", [KUBE_VERSION, oldest_kubernetes()])
def test_every_manifest_validates_against_kubernetes(renders: dict[str, Render], version: str) -> None:
    checked = 0
    for name, rendered in renders.items():
        for manifest in rendered.manifests:
            if manifest["kind"] in CUSTOM_KINDS:
                continue
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                what = f"{manifest['kind']} {manifest['metadata']['name']}"
                raise AssertionError(f"{name}: {what} (Kubernetes {version}): {exc}") from exc
            checked += 1
    assert checked >= 7 * len(renders) - 2  # every kind but the Prometheus Operator's


def test_the_kinds_each_value_set_renders(renders: dict[str, Render]) -> None:
    base = ["Pod", "PodDisruptionBudget", "Secret", "Service", "Service", "ServiceAccount", "StatefulSet"]
    assert renders["defaults"].kinds() == base
    assert renders["existing secret"].kinds() == [k for k in base if k != "Secret"]
    assert renders["metrics on"].kinds() == sorted([*base, "PrometheusRule", "ServiceMonitor"])
    assert renders["network policy on"].kinds() == sorted([*base, "NetworkPolicy"])
    assert renders["no persistence"].kinds() == [k for k in base if k != "PodDisruptionBudget"]


def test_a_statefulset_of_parallel_workers_with_a_volume_each(renders: dict[str, Render]) -> None:
    for name, rendered in renders.items():
        spec = rendered.statefulset["spec"]
        assert spec["podManagementPolicy"] == "Parallel", name
        headless = [s for s in rendered.of("Service") if s["spec"].get("clusterIP") == "None"]
        assert [s["metadata"]["name"] for s in headless] == [spec["serviceName"]], name
        assert headless[0]["spec"]["publishNotReadyAddresses"] is True
        mounts = {m["name"]: m["mountPath"] for m in rendered.container["volumeMounts"]}
        assert mounts["data"] == rendered.env()["DISPATCHER_DATA_DIR"]["value"], name
        if name == "no persistence":
            assert "volumeClaimTemplates" not in spec
            continue
        claims = spec["volumeClaimTemplates"]
        assert [c["metadata"]["name"] for c in claims] == ["data"], name
        assert claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"]
        retention = spec["persistentVolumeClaimRetentionPolicy"]
        assert retention == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert renders["5 replicas"].statefulset["spec"]["replicas"] == 5


def test_instance_id_and_advertised_url_come_from_the_pod_name(renders: dict[str, Render]) -> None:
    for name, rendered in renders.items():
        env = rendered.container["env"]
        names = [e["name"] for e in env]
        pod_name = names.index("POD_NAME")
        assert env[pod_name]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        # Kubernetes expands $(VAR) only from variables defined earlier in the list.
        for dependent in ("DISPATCHER_INSTANCE_ID", "DISPATCHER_ADVERTISED_URL"):
            assert names.index(dependent) > pod_name, (name, dependent)
        by_name = rendered.env()
        assert by_name["DISPATCHER_INSTANCE_ID"]["value"] == "$(POD_NAME)"
        headless = rendered.statefulset["spec"]["serviceName"]
        port = rendered.container["ports"][0]["containerPort"]
        assert by_name["DISPATCHER_ADVERTISED_URL"]["value"] == (
            f"http://$(POD_NAME).{headless}.{NAMESPACE}.svc.cluster.local:{port}")
        assert by_name["DISPATCHER_WEB_HOST"]["value"] == "0.0.0.0"
        assert by_name["DISPATCHER_WEB_PORT"]["value"] == str(port)


def test_probes_use_the_worker_s_real_paths_and_port(renders: dict[str, Render]) -> None:
    paths = set(orjson.loads((ROOT / "web" / "openapi.json").read_bytes())["paths"])
    for rendered in renders.values():
        container = rendered.container
        ports = {p["name"] for p in container["ports"]}
        probes = {k: container[k]["httpGet"] for k in ("startupProbe", "readinessProbe", "livenessProbe")}
        assert probes["readinessProbe"]["path"] == "/readyz"
        assert probes["livenessProbe"]["path"] == probes["startupProbe"]["path"] == "/healthz"
        assert all(p["path"] in paths and p["port"] in ports for p in probes.values())
        # A long recovery must not be mistaken for a dead worker: minutes before liveness counts.
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_the_api_token_comes_from_a_secret_and_none_is_inline(renders: dict[str, Render]) -> None:
    for name, rendered in renders.items():
        env = rendered.env()
        assert "value" not in env["DISPATCHER_API_TOKEN"], name
        ref = env["DISPATCHER_API_TOKEN"]["valueFrom"]["secretKeyRef"]
        secrets = rendered.of("Secret")
        if name == "existing secret":
            assert secrets == [], "no Secret of the chart's own when existingSecret is set"
            assert ref == {"name": "dispatcher-tokens", "key": "api-token"}
            assert env["DISPATCHER_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"] == {
                "name": "dispatcher-tokens", "key": "metrics-token"}
        else:
            assert [s["metadata"]["name"] for s in secrets] == [ref["name"]]
            assert ref["key"] in secrets[0]["data"]
            assert len(secrets[0]["data"][ref["key"]]) >= 40  # generated: 40 random characters, base64
        inline = [e["name"] for e in rendered.container["env"] if "TOKEN" in e["name"] and "value" in e]
        assert inline == [], name


def test_a_given_token_is_used_as_is() -> None:
    rendered = render({"auth": {"apiToken": "s3cret-token-of-the-operator"}})
    assert base64.b64decode(rendered.one("Secret")["data"]["api-token"]) == b"s3cret-token-of-the-operator"


def test_every_setting_is_settable_through_values(renders: dict[str, Render]) -> None:
    settings = {f"DISPATCHER_{f.name.upper()}" for f in dataclasses.fields(Settings)}
    config_names = set(schema()["properties"]["config"]["propertyNames"]["enum"])
    missing = settings - config_names - CHART_SET
    assert not missing, (f"add {sorted(missing)} to the `config` names of {CHART}/values.schema.json "
                         "(or set it in templates/statefulset.yaml)")
    unknown = config_names - settings
    assert not unknown, f"values.schema.json names settings that do not exist: {sorted(unknown)}"
    assert not config_names & CHART_SET, "the chart sets these itself"
    env = renders["settings"].env()
    assert env["DISPATCHER_ALLOW_TARGETS"]["value"] == "10.20.0.0/16"
    assert env["DISPATCHER_MAX_IN_FLIGHT"]["value"] == "512"
    assert env["DISPATCHER_VERIFY_ENDPOINTS"]["value"] == "true"
    pod = renders["settings"].statefulset["spec"]["template"]["spec"]
    assert {"name": "ca", "configMap": {"name": "private-ca"}} in pod["volumes"]
    mounts = {m["name"]: m["mountPath"] for m in renders["settings"].container["volumeMounts"]}
    assert env["DISPATCHER_CA_FILE"]["value"].startswith(mounts["ca"] + "/")
    for name in CHART_SET - {"DISPATCHER_METRICS_TOKEN", "DISPATCHER_KAFKA_SASL_PASSWORD"}:  # when given
        assert name in env, f"the chart sets {name}"


def test_the_schema_refuses_bad_values() -> None:
    bad: list[tuple[dict[str, Any], str]] = [
        ({"replicaCount": 0}, "replicaCount"),
        ({"config": {"DISPATCHER_NO_SUCH_SETTING": "1"}}, "DISPATCHER_NO_SUCH_SETTING"),
        ({"config": {"DISPATCHER_BROKER": "kafka://x:9092"}}, "DISPATCHER_BROKER"),  # kafka.broker sets it
        ({"config": {"DISPATCHER_KAFKA_SASL_PASSWORD": "pw"}}, "DISPATCHER_KAFKA_SASL_PASSWORD"),  # a Secret
        ({"kafka": {"partitions": "many"}}, "partitions"),
        ({"service": {"port": 70000}}, "port"),
        ({"persistence": {"size": "ten gigs"}}, "size"),
        ({"image": {"digest": "latest"}}, "digest"),
        ({"probes": {"readiness": {"path": "/ready"}}}, "path"),
        ({"replicas": 3}, "replicas"),
    ]
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(chart.merge_values(with_broker()))
        for values, named in bad:
            with pytest.raises(helm.HelmValuesError) as caught:
                chart.render(with_broker(values), name="x", namespace=NAMESPACE)
            assert named in str(caught.value), (values, str(caught.value))
        with pytest.raises(helm.HelmError, match=r"kafka\.broker is required"):
            chart.render({}, name="x", namespace=NAMESPACE)


# The chart's own values and the settings they become (templates/statefulset.yaml).
KAFKA_VALUES = {"partitions": "partitions", "topicReplication": "topic_replication",
                "topicMinInsyncReplicas": "topic_min_insync_replicas",
                "sessionTimeoutSeconds": "session_timeout", "standbyReplicas": "standby_replicas"}


def test_the_schema_takes_what_the_worker_takes_of_the_kafka_values() -> None:
    kafka = schema()["properties"]["kafka"]["properties"]
    for value, setting in KAFKA_VALUES.items():
        bound = BOUNDS[setting]
        assert kafka[value]["maximum"] == bound.high, value
        if value == "sessionTimeoutSeconds":  # above the heartbeat, which the chart leaves at its default
            assert kafka[value]["exclusiveMinimum"] == Settings().heartbeat_interval
        else:
            assert kafka[value]["minimum"] == bound.low and not bound.low_excluded, value
    with helm.Chart.load(CHART) as chart:
        for value in KAFKA_VALUES:
            with pytest.raises(helm.HelmValuesError, match=value):
                chart.render(with_broker({"kafka": {value: 100_000}}), name="x", namespace=NAMESPACE)


def test_helm_test_asks_the_api_service_with_the_token(renders: dict[str, Render]) -> None:
    for name, rendered in renders.items():
        [pod] = rendered.of("Pod")
        assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
        [container] = pod["spec"]["containers"]
        assert [*container["command"], *container["args"]] == ["webhook-dispatcher", "ready"]
        env = {e["name"]: e for e in container["env"]}
        api = next(s for s in rendered.of("Service") if s["spec"].get("clusterIP") != "None")
        assert env["DISPATCHER_URL"]["value"] == f"http://{api['metadata']['name']}:{api['spec']['ports'][0]['port']}"
        worker_token = rendered.env()["DISPATCHER_API_TOKEN"]["valueFrom"]
        assert env["DISPATCHER_API_TOKEN"]["valueFrom"] == worker_token, name
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_a_restrictive_security_context_with_a_writable_tmp(renders: dict[str, Render]) -> None:
    for name, rendered in renders.items():
        pod = rendered.statefulset["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's user
        assert pod["automountServiceAccountToken"] is False
        context = rendered.container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        mounts = {m["mountPath"] for m in rendered.container["volumeMounts"]}
        assert "/tmp" in mounts
        assert rendered.env()["TMPDIR"]["value"] == "/tmp"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile


def test_the_disruption_budget_and_services_select_the_workers(renders: dict[str, Render]) -> None:
    rendered = renders["defaults"]
    pod_labels = rendered.statefulset["spec"]["template"]["metadata"]["labels"]
    selects = [rendered.one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
               *(s["spec"]["selector"] for s in rendered.of("Service"))]
    for selector in selects:
        assert selector.items() <= pod_labels.items()
    assert rendered.one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert rendered.statefulset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30


def test_the_network_policy_keeps_receivers_off_private_ranges(renders: dict[str, Render]) -> None:
    policy = renders["network policy on"].one("NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    blocks = [peer["ipBlock"] for rule in policy["spec"]["egress"] for peer in rule.get("to", [])
              if "ipBlock" in peer]
    open_blocks = [b for b in blocks if ipaddress.ip_network(b["cidr"]).prefixlen == 0]
    assert sorted(b["cidr"] for b in open_blocks) == ["0.0.0.0/0", "::/0"]
    excepted = [ipaddress.ip_network(net) for b in open_blocks for net in b["except"]]
    for network, reason in DENY_TABLE:  # the worker's own deny table, range for range
        assert any(network.version == e.version and network.subnet_of(e) for e in excepted), (  # type: ignore[arg-type]
            network, reason)
    assert ipaddress.ip_network("::ffff:0:0/96") in excepted  # mapped IPv4 would bypass the v4 list
    assert {"cidr": "10.20.0.0/16"} in blocks  # an allowed private receiver range
    # Kafka, DNS and the other workers are named; the API port is open to the given peers only.
    ports = [sorted(p["port"] for p in rule.get("ports", [])) for rule in policy["spec"]["egress"]]
    assert [53, 53] in ports and [9092] in ports and ["http"] in ports
    ingress = policy["spec"]["ingress"]
    assert ingress[1]["from"] == VALUE_SETS["network policy on"]["networkPolicy"]["apiFrom"]


def test_the_service_monitor_scrapes_metrics_on_the_api_port(renders: dict[str, Render]) -> None:
    rendered = renders["metrics on"]
    monitor = rendered.one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "http"
    assert endpoint["authorization"]["credentials"] == {"name": rendered.one("Secret")["metadata"]["name"],
                                                       "key": "metrics-token"}
    # It selects the headless Service alone (every pod, ready or not, scraped once).
    selected = [s for s in rendered.of("Service")
                if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
    assert [s["spec"].get("clusterIP") for s in selected] == ["None"]


def test_notes_say_how_to_reach_the_api_and_warn_of_idle_workers() -> None:
    notes = render({"replicaCount": 10, "kafka": {"partitions": 8}}).notes
    assert "port-forward svc/hooks-webhook-dispatcher 8080:8080" in notes
    assert "2 worker(s) will own nothing" in notes


def test_the_prometheus_rule_is_deploy_prometheus_s_rule_file(renders: dict[str, Render]) -> None:
    copy = CHART / "files" / "prometheus-rules.yml"
    assert copy.read_text() == RULES.read_text(), f"copy {RULES} to {copy}"
    rule = renders["metrics on"].one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    # The rules' job="webhook-dispatcher" is what the ServiceMonitor's jobLabel gives the targets.
    monitor = renders["metrics on"].one("ServiceMonitor")
    headless = next(s for s in renders["metrics on"].of("Service") if s["spec"].get("clusterIP") == "None")
    assert headless["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "webhook-dispatcher"
    assert 'job="webhook-dispatcher"' in RULES.read_text()


def test_the_chart_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    rows = "\n".join(line for line in readme.splitlines() if line.startswith("| `"))
    free_form = {"config", "resources", "podSecurityContext", "securityContext", "updateStrategy"}
    for key, value in values.items():
        nested = isinstance(value, dict) and value and key not in free_form
        names = [f"{key}.{k}" for k in value] if nested else [key]
        for name in names:
            leaf = name.split(".")[-1]
            found = f"`{name}" in rows or f"`{leaf}`" in rows or (f"`{key}." in rows and f"`.{leaf}`" in rows)
            assert found, f"{name} is missing from the values table of {CHART / 'README.md'}"


def test_every_rendered_environment_is_one_the_worker_accepts(renders: dict[str, Render]) -> None:
    for name, rendered in renders.items():
        env = {e["name"]: e.get("value", "a-secret") for e in rendered.container["env"]}
        env = {k: v.replace("$(POD_NAME)", "hooks-webhook-dispatcher-0") for k, v in env.items()}
        settings = Settings.from_env(env)  # a bad number or boolean raises, naming the variable
        settings.policy()
        settings.target_policy()
        broker_credentials(settings)  # the Kafka connection's security settings
        assert settings.canonical_url().startswith("http://hooks-webhook-dispatcher-0."), name
        assert settings.instance_id == "hooks-webhook-dispatcher-0"
        assert (settings.topic_replication, settings.topic_min_insync_replicas) == (3, 2)


def test_the_kafka_password_comes_from_a_secret(renders: dict[str, Render]) -> None:
    env = renders["kafka sasl"].env()
    assert env["DISPATCHER_KAFKA_SASL_PASSWORD"] == {
        "name": "DISPATCHER_KAFKA_SASL_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "kafka-user", "key": "password"}}}
    assert env["DISPATCHER_KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert "DISPATCHER_KAFKA_SASL_PASSWORD" not in renders["defaults"].env()


def rendered_secret_text(values: dict[str, Any]) -> tuple[str, str]:
    """secret.yaml as rendered and the pod template's checksum/secret, from one render."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(with_broker(values), name=RELEASE, namespace=NAMESPACE, is_install=True)
    secret = next(text for path, text in out.items() if path.endswith("templates/secret.yaml"))
    statefulset = next(
        yaml.safe_load(text) for path, text in out.items() if path.endswith("statefulset.yaml")
    )
    return secret, statefulset["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]


def test_a_changed_token_rolls_every_worker_together(renders: dict[str, Render]) -> None:
    # The checksum is of the very Secret the chart renders, generated token included (one per render).
    for values in ({}, {"auth": {"metricsTokenKey": "metrics-token"}}, {"auth": {"apiToken": "t-1"}}):
        secret, checksum = rendered_secret_text(values)
        assert checksum == hashlib.sha256(secret.encode()).hexdigest(), values
    # With the user's own Secret the chart cannot know its content: no annotation.
    template = renders["existing secret"].statefulset["spec"]["template"]
    annotations = template["metadata"].get("annotations", {})
    assert "checksum/secret" not in annotations
    # The same token, the same pods; another token (given or a new generated one), a rollout.
    def checksum(token: str) -> str:
        return rendered_secret_text({"auth": {"apiToken": token}})[1]

    assert checksum("t-1") == checksum("t-1")
    assert checksum("t-1") != checksum("t-2")
    assert rendered_secret_text({})[1] != rendered_secret_text({})[1]
    # podAnnotations still come through beside it.
    pod = render({"podAnnotations": {"team": "hooks"}}).statefulset["spec"]["template"]["metadata"]
    assert pod["annotations"]["team"] == "hooks" and "checksum/secret" in pod["annotations"]


def test_notes_warn_gitops_users_of_a_generated_token() -> None:
    warning = "helm template, ArgoCD, Flux"
    assert warning in render().notes and "auth.existingSecret" in render().notes
    assert warning in render({"auth": {"apiToken": "t", "metricsTokenKey": "m"}}).notes  # metrics generated
    assert warning not in render({"auth": {"apiToken": "t"}}).notes
    assert warning not in render({"auth": {"existingSecret": "mine"}}).notes
    paths = (CHART / "README.md", CHART / "values.yaml", ROOT / "docs" / "deploy.md")
    docs = {path: path.read_text() for path in paths}
    for path, text in docs.items():
        flat = " ".join(text.split())
        assert all(tool in flat for tool in ("helm template", "ArgoCD", "Flux", "existingSecret")), path


def test_every_egress_rule_names_its_peers(renders: dict[str, Render]) -> None:
    for name in ("network policy on", "network policy minimal"):
        policy = renders[name].one("NetworkPolicy")
        egress = policy["spec"]["egress"]
        for rule in egress:
            assert rule.get("to"), (name, rule)  # no rule open to every address on some port
            for peer in rule["to"]:
                if "ipBlock" in peer and ipaddress.ip_network(peer["ipBlock"]["cidr"]).prefixlen == 0:
                    # The internet rule alone: no ports limit, every private range excepted.
                    assert "ports" not in rule and peer["ipBlock"]["except"], (name, rule)
                    excepted = [ipaddress.ip_network(n) for n in peer["ipBlock"]["except"]]
                    for private in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"):
                        net = ipaddress.ip_network(private)
                        covered = any(
                            net.version == e.version and net.subnet_of(e)  # type: ignore[arg-type]
                            for e in excepted
                        )
                        assert covered or net.version != ipaddress.ip_network(peer["ipBlock"]["cidr"]).version
        by_port = {
            tuple(sorted(str(p["port"]) for p in rule.get("ports", []))): rule["to"] for rule in egress
        }
        # DNS: the cluster's DNS pods unless dnsTo says otherwise; Kafka: the given brokers.
        kube_dns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
        assert by_port[("53", "53")] == [kube_dns]
        assert by_port[("9092",)] == VALUE_SETS[name]["networkPolicy"]["kafkaTo"]
    # A trace collector by name, on the OTLP ports; none without otlpTo.
    on = renders["network policy on"].one("NetworkPolicy")["spec"]["egress"]
    assert {"to": VALUE_SETS["network policy on"]["networkPolicy"]["otlpTo"],
            "ports": [{"port": 4317, "protocol": "TCP"}, {"port": 4318, "protocol": "TCP"}]} in on
    minimal = renders["network policy minimal"].one("NetworkPolicy")["spec"]["egress"]
    assert not any(p["port"] in (4317, 4318) for rule in minimal for p in rule.get("ports", []))
    dns = [{"ipBlock": {"cidr": "169.254.20.10/32"}}]
    custom = render({"networkPolicy": {"enabled": True, "kafkaTo": [{"podSelector": {}}], "dnsTo": dns}})
    assert any(rule["to"] == dns for rule in custom.one("NetworkPolicy")["spec"]["egress"])


def test_the_network_policy_needs_the_brokers() -> None:
    refused = pytest.raises(helm.HelmError, match=r"networkPolicy\.kafkaTo is required")
    with helm.Chart.load(CHART) as chart, refused:
        chart.render(with_broker({"networkPolicy": {"enabled": True}}), name="x", namespace=NAMESPACE)


def test_prometheus_may_scrape_when_the_api_is_closed(renders: dict[str, Render]) -> None:
    on = VALUE_SETS["network policy on"]["networkPolicy"]
    ingress = renders["network policy on"].one("NetworkPolicy")["spec"]["ingress"]
    assert {"from": on["metricsFrom"], "ports": [{"port": "http", "protocol": "TCP"}]} in ingress
    # Without apiFrom the port is open to all anyway: no extra rule. With apiFrom alone, NOTES say so.
    assert len(renders["network policy minimal"].one("NetworkPolicy")["spec"]["ingress"]) == 2
    closed = render({"networkPolicy": {
        "enabled": True, "kafkaTo": [{"podSelector": {}}], "apiFrom": [{"podSelector": {}}],
    }})
    assert "list Prometheus there or in networkPolicy.metricsFrom" in closed.notes
    assert "list Prometheus" not in renders["network policy on"].notes
    assert "peers named in networkPolicy" in renders["network policy on"].notes
