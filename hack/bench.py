"""make bench: container-notifier against raw pods/exec, measured in one run on the local
control plane. Prints a table and writes bench-results/notify.json.

Figures:
- latency p50/p95 of one notify (waitSeconds, trivial command) through the aggregator, against
  the same client running the same command by raw pods/exec through kube-apiserver (WebSocket);
  the ratio notify/exec is the figure that matters;
- throughput at 1, 8 and 32 concurrent callers, for both (each caller has its own pod, since a
  notifier may not run twice at once on one pod);
- the server's peak RSS (VmHWM, the largest replica's) after 10,000 notifications, and records
  kept per pod;
- a Notification over 1000 pods at parallelism 1, 10 and 50, against a sequential loop of raw
  pods/exec (what a backup tool running hooks one by one does) and raw pods/exec at the same
  concurrency (the limit); the server's peak RSS during those runs (the server is restarted
  first, so the peak is theirs alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from apiserver.notifier.exec_stream import KubeEndpoint, exec_in_container
from localcluster import __main__ as localcluster
from localcluster import haproxy, pki, plane
from localcluster.layout import REPO_ROOT, Layout, Ports
from tests.support.kube import Cluster, User, wait_until

NAMESPACE = "bench"
COMMAND = ["/bin/sh", "-c", "echo ok"]
NOTIFIERS = json.dumps({"app": [{"name": "ping", "action": {"exec": {"command": COMMAND}}}]})
API = "/apis/notifier.x-k8s.io/v1alpha1"
BODY = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
        "spec": {"notifier": "ping"}}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


class Bench:
    def __init__(self, cluster: Cluster, user: User, pods: list[str]) -> None:
        self.cluster, self.pods = cluster, pods
        self.tls: ssl.SSLContext = user.ssl_context()
        self.http = httpx.AsyncClient(base_url=cluster.server, verify=self.tls, timeout=70,
                                      limits=httpx.Limits(max_connections=64))
        self.endpoint = KubeEndpoint(cluster.server, self.tls)

    async def notify(self, pod: str) -> None:
        response = await self.http.post(f"{API}/namespaces/{NAMESPACE}/pods/{pod}/notify",
                                         params={"waitSeconds": "30"}, json=BODY)
        if response.status_code != 201 or response.json()["status"]["phase"] != "Succeeded":
            raise RuntimeError(f"notify {pod}: {response.status_code} {response.text[:300]}")

    async def exec(self, pod: str) -> None:
        result = await exec_in_container(self.endpoint, NAMESPACE, pod, "app", COMMAND,
                                         timeout_seconds=30)
        if result.exit_code != 0:
            raise RuntimeError(f"exec {pod}: {result.reason} {result.message}")

    async def latencies(self, call: Callable[[str], Awaitable[None]], count: int) -> list[float]:
        samples = []
        for i in range(count):
            start = time.perf_counter()
            await call(self.pods[i % len(self.pods)])
            samples.append(time.perf_counter() - start)
        return samples

    async def throughput(self, call: Callable[[str], Awaitable[None]], callers: int,
                         total: int) -> float:
        per_caller = max(1, total // callers)

        async def caller(pod: str) -> None:
            for _ in range(per_caller):
                await call(pod)

        start = time.perf_counter()
        await asyncio.gather(*(caller(self.pods[i]) for i in range(callers)))
        return callers * per_caller / (time.perf_counter() - start)


async def exec_all(bench: Bench, pods: list[str], concurrency: int) -> None:
    """Raw pods/exec on every pod, `concurrency` at a time (1: a sequential loop)."""

    async def worker() -> None:
        while pods:
            await bench.exec(pods.pop())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def server_memory(layout: Layout) -> dict[str, int]:
    """VmHWM and VmRSS in bytes, each the largest of the server replicas'."""
    fields: dict[str, int] = {}
    for server in plane.replicas(layout):
        for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                fields[key] = max(fields.get(key, 0), int(value.split()[0]) * 1024)
    return fields


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def kube_writes(cluster: Cluster) -> Counter[str]:
    """kube-apiserver's write requests so far (its apiserver_request_total), by resource
    (``group/resource[/subresource]``)."""
    with cluster.admin() as kube:
        text = kube.get("/metrics").text
    writes: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "apiserver_request_total" and labels.get("verb") in WRITE_VERBS:
                resource = "/".join(part for part in (
                    labels.get("group") or "core", labels.get("resource", ""),
                    labels.get("subresource", "")) if part)
                writes[resource] += int(sample.value)
    return writes


async def writes_per_notify(cluster: Cluster, bench: Bench, count: int) -> dict:
    """Write requests kube-apiserver served during `count` sequential notifies, by resource
    and per notify; Leases are the replicas' heartbeats and the leader's renewals, which run
    whether or not anything is notified, so they are reported as a rate of their own."""
    before, start = kube_writes(cluster), time.perf_counter()
    for i in range(count):
        await bench.notify(bench.pods[i % len(bench.pods)])
    seconds = time.perf_counter() - start
    delta = kube_writes(cluster) - before
    leases = sum(n for resource, n in delta.items() if "/leases" in resource)
    per_notify = {resource: n / count for resource, n in sorted(delta.items())
                  if "/leases" not in resource}
    return {"notifies": count, "seconds": seconds, "by_resource": per_notify,
            "total": sum(per_notify.values()), "lease_writes_per_second": leases / seconds}


async def replica_scaling(cluster: Cluster, bench: Bench, callers: int, total: int) -> dict:
    """Notify throughput at `callers` with every replica and with replica 0 alone (the others
    stopped cleanly, then started again)."""
    replicas = cluster.replicas
    out = {str(replicas): await bench.throughput(bench.notify, callers, total)}
    if replicas > 1:
        for replica in range(1, replicas):
            plane.stop_replica(cluster.layout, replica)
        wait_until(lambda: not any(haproxy.routes_to(cluster.layout, r)
                                   for r in range(1, replicas)),
                   "HAProxy to route to replica 0 alone", 30)
        try:
            await bench.throughput(bench.notify, callers, callers)  # settle the connections
            out["1"] = await bench.throughput(bench.notify, callers, total)
        finally:
            for replica in range(1, replicas):
                cluster.restart_replica(replica)
    return out


def setup(cluster: Cluster, replicas: int) -> tuple[User, list[str]]:
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    user = cluster.user("bench-client")
    cluster.grant(NAMESPACE, user, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"], "verbs": ["create"]},
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"], "verbs": ["list"]},
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications"],
         "verbs": ["create", "get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
    ], name="bench-client")
    pods = cluster.deploy(NAMESPACE, "target", replicas=replicas,
                          annotations={"notifier.x-k8s.io/notifiers": NOTIFIERS})
    return user, sorted(p["metadata"]["name"] for p in pods)


async def run(args: argparse.Namespace) -> dict:
    layout, ports = Layout.default(), Ports()
    if not localcluster.healthy(layout, ports):
        localcluster.up(layout, ports, localcluster.NODE_COUNT)
    cluster = Cluster(layout, ports, localcluster.build_binaries())
    pki.ensure(layout, ports)
    user, pods = setup(cluster, max(args.concurrency))
    bench = Bench(cluster, user, pods)
    results: dict = {"latency_seconds": {}, "throughput_per_second": {}}
    for name, call in (("notify", bench.notify), ("exec", bench.exec)):
        await bench.latencies(call, 10)  # warm up connections and caches
        samples = await bench.latencies(call, args.latency_samples)
        results["latency_seconds"][name] = {"p50": percentile(samples, 0.5),
                                            "p95": percentile(samples, 0.95),
                                            "mean": statistics.fmean(samples)}
    for callers in args.concurrency:
        results["throughput_per_second"][str(callers)] = {
            name: await bench.throughput(call, callers, args.throughput_requests)
            for name, call in (("notify", bench.notify), ("exec", bench.exec))}
    callers = max(args.concurrency)
    results["replicas_throughput_per_second"] = {
        "callers": callers,
        **await replica_scaling(cluster, bench, callers, args.throughput_requests)}
    results["kube_writes"] = await writes_per_notify(cluster, bench, args.write_samples)
    start = time.perf_counter()
    done = 0
    while done < args.notifications:
        batch = min(len(pods), args.notifications - done)
        await asyncio.gather(*(bench.notify(pod) for pod in pods[:batch]))
        done += batch
    results["bulk"] = {"notifications": done, "seconds": time.perf_counter() - start,
                       **server_memory(layout)}
    per_pod = []
    for pod in pods:
        listed = (await bench.http.get(f"{API}/namespaces/{NAMESPACE}/podnotifiers",
                                       params={"fieldSelector": f"spec.podName={pod}"})).json()
        per_pod.append(len(listed["items"]))
    results["records_per_pod"] = {"max": max(per_pod), "min": min(per_pod)}
    if args.fanout_pods:
        results["fanout"] = await fanout(cluster, bench, args)
    await bench.http.aclose()
    return results


async def fanout(cluster: Cluster, bench: Bench, args: argparse.Namespace) -> dict:
    fleet = sorted(p["metadata"]["name"] for p in cluster.deploy(
        NAMESPACE, "fleet", replicas=args.fanout_pods,
        annotations={"notifier.x-k8s.io/notifiers": NOTIFIERS}))
    cluster.restart_notifier(signal.SIGTERM)
    out: dict = {"pods": len(fleet), "notification_seconds": {}, "exec_seconds": {}}
    for parallelism in args.fanout_parallelism:
        body = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
                "metadata": {"generateName": f"fleet-p{parallelism}-"},
                "spec": {"selector": {"matchLabels": {"app": "fleet"}}, "notifier": "ping",
                         "parallelism": parallelism}}
        start = time.perf_counter()
        created = await bench.http.post(f"{API}/namespaces/{NAMESPACE}/notifications",
                                        json=body)
        if created.status_code != 201:
            raise RuntimeError(f"create: {created.status_code} {created.text[:300]}")
        name = created.json()["metadata"]["name"]
        while True:
            await asyncio.sleep(0.2)
            obj = (await bench.http.get(f"{API}/namespaces/{NAMESPACE}/notifications/{name}")
                   ).json()
            if obj["status"]["phase"] in ("Succeeded", "Failed"):
                break
        if obj["status"]["counts"]["succeeded"] != len(fleet):
            raise RuntimeError(f"{name} ended {obj['status']}")
        out["notification_seconds"][str(parallelism)] = time.perf_counter() - start
        out["object_bytes"] = len(json.dumps(obj))
    out["server_memory"] = server_memory(cluster.layout)
    for concurrency in [1, *args.fanout_parallelism[1:]]:
        start = time.perf_counter()
        await exec_all(bench, list(fleet), concurrency)
        out["exec_seconds"][str(concurrency)] = time.perf_counter() - start
    return out


def report(results: dict) -> str:
    lat = results["latency_seconds"]
    lines = ["| figure | notify (aggregated) | raw pods/exec | ratio notify/exec |",
             "|---|---|---|---|"]
    for key in ("p50", "p95"):
        n, e = lat["notify"][key], lat["exec"][key]
        lines.append(f"| latency {key} | {n * 1000:.1f} ms | {e * 1000:.1f} ms | {n / e:.2f} |")
    for callers, row in results["throughput_per_second"].items():
        lines.append(f"| throughput, {callers} callers | {row['notify']:.1f}/s | "
                     f"{row['exec']:.1f}/s | {row['notify'] / row['exec']:.2f} |")
    scaling = results["replicas_throughput_per_second"]
    for replicas in sorted(key for key in scaling if key != "callers"):
        lines.append(f"| notify throughput, {scaling['callers']} callers, {replicas} "
                     f"replica{'s' if replicas != '1' else ''} | {scaling[replicas]:.1f}/s | | |")
    writes = results["kube_writes"]
    lines.append(f"| kube-apiserver writes per notify | {writes['total']:.2f} | | |")
    for resource, per in writes["by_resource"].items():
        lines.append(f"| - {resource} | {per:.2f} | | |")
    lines.append(f"| Lease writes (heartbeats, leader), per second | "
                 f"{writes['lease_writes_per_second']:.2f} | | |")
    bulk = results["bulk"]
    lines.append(f"| server peak RSS after {bulk['notifications']} notifications | "
                 f"{bulk['VmHWM'] / 2**20:.1f} MiB (now {bulk['VmRSS'] / 2**20:.1f} MiB) | | |")
    lines.append(f"| records kept per pod (max) | {results['records_per_pod']['max']} | | |")
    if "fanout" in results:
        fan = results["fanout"]
        sequential = fan["exec_seconds"]["1"]
        lines += ["", f"Fan-out over {fan['pods']} pods (wall time):", "",
                  "| parallelism | Notification | raw exec, same concurrency | "
                  "ratio to same-concurrency exec | ratio to sequential exec loop |",
                  "|---|---|---|---|---|"]
        for parallelism, seconds in fan["notification_seconds"].items():
            same = fan["exec_seconds"].get(parallelism, sequential)
            lines.append(f"| {parallelism} | {seconds:.1f} s | {same:.1f} s | "
                         f"{seconds / same:.2f} | {seconds / sequential:.2f} |")
        memory = fan["server_memory"]
        lines.append(f"\nserver peak RSS during the fan-out runs: {memory['VmHWM'] / 2**20:.1f} "
                     f"MiB; Notification object {fan['object_bytes']} bytes")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--throughput-requests", type=int, default=320,
                        help="requests per throughput measurement, split across callers")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--write-samples", type=int, default=200,
                        help="sequential notifies around which kube-apiserver's writes are read")
    parser.add_argument("--notifications", type=int, default=10_000,
                        help="notifications before reading the server's peak RSS")
    parser.add_argument("--fanout-pods", type=int, default=1000,
                        help="pods of the fan-out benchmark (0 skips it)")
    parser.add_argument("--fanout-parallelism", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench-results" / "bench.json")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2))
    print(report(results))
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
