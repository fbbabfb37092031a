"""apiservice/monitoring/: the manifests parse with the expected kinds, every alert is annotated
and has a severity, and every series the alerts and the dashboard query is documented (or is
one of kube-apiserver's or kube-state-metrics' listed here). The PromQL is checked only this
far: no Prometheus evaluates it here."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from localcluster.layout import REPO_ROOT

MONITORING = REPO_ROOT / "apiservice" / "monitoring"
DOCS = REPO_ROOT / "docs" / "metrics.md"

EXTERNAL_SERIES = {
    "aggregator_unavailable_apiservice",  # kube-apiserver's aggregator
    "kube_deployment_status_replicas_available",  # kube-state-metrics
    "kube_deployment_spec_replicas",  # kube-state-metrics
}
"""Series the rules use that other components serve."""

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                   "unless", "bool", "offset", "inf", "nan"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not functions, keywords,
    label names (in matchers or grouping clauses) or durations."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"(?<![\w$.])([A-Za-z_:][\w:]*)\b(\s*\()?", expr):
        if match.group(2) is None and match.group(1).lower() not in PROMQL_KEYWORDS:
            names.add(match.group(1))
    return names


def documented() -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)` \|", DOCS.read_text(), re.MULTILINE))


def known(name: str, series: set[str]) -> bool:
    return name in series or any(
        name.endswith(suffix) and name.removesuffix(suffix) in series
        for suffix in HISTOGRAM_SUFFIXES)


def _objects() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    objects = []
    for resource in kustomization["resources"]:
        objects.extend(o for o in yaml.safe_load_all((MONITORING / resource).read_text()) if o)
    return objects


def _rules() -> list[dict[str, Any]]:
    (rule,) = [o for o in _objects() if o["kind"] == "PrometheusRule"]
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _dashboard() -> dict[str, Any]:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    (generated,) = kustomization["configMapGenerator"]
    (path,) = generated["files"]
    return json.loads((MONITORING / path).read_text())


def _dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in _dashboard()["panels"]
            for target in panel.get("targets", [])]


def test_metric_names_skip_functions_labels_and_keywords() -> None:
    assert metric_names(
        'sum by (pod) (rate(a_total{job="x",b="c{d}"}[5m])) > 0 unless on (pod) '
        'histogram_quantile(0.9, sum by (le) (rate(b_bucket[$__rate_interval]))) or vector(0)'
    ) == {"a_total", "b_bucket"}


def test_the_manifests_have_the_expected_kinds() -> None:
    kinds = sorted((o["apiVersion"], o["kind"]) for o in _objects())
    assert kinds == [("monitoring.coreos.com/v1", "PrometheusRule"),
                     ("monitoring.coreos.com/v1", "ServiceMonitor")]
    assert "monitoring" not in yaml.safe_load(
        (REPO_ROOT / "apiservice" / "kustomization.yaml").read_text())["resources"]


def test_the_service_monitor_scrapes_the_service_over_https_with_a_token() -> None:
    (monitor,) = [o for o in _objects() if o["kind"] == "ServiceMonitor"]
    service = yaml.safe_load((REPO_ROOT / "apiservice" / "service.yaml").read_text())
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [
        service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    assert endpoint["bearerTokenFile"] and endpoint["tlsConfig"]["ca"]
    assert endpoint["tlsConfig"]["serverName"] == (
        f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc")


def test_every_alert_is_annotated_with_a_severity() -> None:
    rules = _rules()
    assert {r["alert"] for r in rules} >= {
        "ContainerNotifierAPIServiceUnavailable", "ContainerNotifierHighFailureRatio",
        "ContainerNotifierTimeouts", "ContainerNotifierRunsStuck",
        "ContainerNotifierNoFanoutLeader", "ContainerNotifierReplicasNotReady",
        "ContainerNotifierServingCertificateExpiresSoon"}
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def test_the_alerts_are_explained_in_the_docs() -> None:
    docs = DOCS.read_text()
    assert [r["alert"] for r in _rules() if f"`{r['alert']}`" not in docs] == []


def test_every_series_queried_is_documented_or_external() -> None:
    series = documented() | EXTERNAL_SERIES
    exprs = [r["expr"] for r in _rules()] + _dashboard_exprs()
    used = set().union(*(metric_names(expr) for expr in exprs))
    assert sorted(name for name in used if not known(name, series)) == []
    # Each listed external series is used: the list is not a blanket allowance.
    assert EXTERNAL_SERIES <= used


def test_the_dashboard_has_the_panels_asked_for() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "container-notifier"
    exprs = " ".join(_dashboard_exprs())
    for name in ("apiserver_request_total", "apiserver_request_duration_seconds_bucket",
                 "container_notifier_podnotifiers_finished_total",
                 "container_notifier_podnotifier_duration_seconds_bucket",
                 "container_notifier_notifications_finished_total",
                 "container_notifier_leader", "container_notifier_cache_synced"):
        assert name in exprs, name


def test_the_certificate_alert_watches_the_served_certificates_expiry() -> None:
    (rule,) = [r for r in _rules()
               if r["alert"] == "ContainerNotifierServingCertificateExpiresSoon"]
    assert metric_names(rule["expr"]) == {
        "container_notifier_serving_certificate_expiration_timestamp_seconds"}
    # Earlier than the bootstrap's renewal point of a default (30-day) certificate, 10 days out.
    assert "7 * 86400" in rule["expr"]
