"""kube-apiserver's own count of the requests it served (its /metrics), for the benchmarks:
which verbs write, which read, and which writes are reviews that nothing stores."""

from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from tests.support.kube import Cluster

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
READ_VERBS = frozenset({"GET", "LIST", "WATCH", "WATCHLIST"})
REVIEW_GROUPS = ("authorization.k8s.io/", "authentication.k8s.io/")
"""SubjectAccessReviews and TokenReviews are POSTs that kube-apiserver answers without storing
anything (no etcd write)."""


def kube_requests(cluster: Cluster) -> Counter[tuple[str, str]]:
    """kube-apiserver's resource requests so far (its apiserver_request_total), by verb and
    ``group/resource[/subresource]``; non-resource requests (its /metrics) are left out."""
    with cluster.admin() as kube:
        text = kube.get("/metrics").text
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name != "apiserver_request_total" or not labels.get("resource"):
                continue
            resource = "/".join(part for part in (
                labels.get("group") or "core", labels["resource"],
                labels.get("subresource", "")) if part)
            counts[(labels["verb"], resource)] += int(sample.value)
    return counts
