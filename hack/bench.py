"""make bench: container-notifier against raw pods/exec, measured in one run on the local
control plane. Prints a table and writes bench-results/bench.json (with --quick: latency,
requests and CPU per notify only, small N, bench-results/bench-quick.json), with the git commit.

Figures:
- latency p50/p95 of one notify (waitSeconds, trivial command) through the aggregator, against
  the same client running the same command by raw pods/exec through kube-apiserver (WebSocket);
  the ratio notify/exec is the figure that matters;
- the floor of a notify, measured in the same run: the p50 of one kube-apiserver write (a merge
  patch of a ConfigMap) and of one aggregated request the server answers at once (its
  group-version discovery); exec + one hop + the writes a notify waits for is the least a notify
  through the aggregator with records in kube-apiserver can take;
- `kubectl exec` in a loop (full run), the tool a user would otherwise script;
- throughput at 1, 8 and 32 concurrent callers, for both (each caller has its own pod, since a
  notifier may not run twice at once on one pod), and latency and throughput of one replica on
  --storage=sqlite for comparison (full run);
- kube-apiserver requests per notify and per raw exec (its apiserver_request_total), by verb
  and resource, writes apart from reads: N sequential operations plus a trailing window for
  asynchronous writes, minus the background rate of a quiet interval of the same length;
- CPU milliseconds per notify and per raw exec of every process of the plane and of this client
  (/proc/<pid>/stat of the recorded pids and their descendants), and each one's idle rate;
- the server's peak RSS (VmHWM, the largest replica's) after 10,000 notifications, and records
  kept per pod;
- recovery after kube-apiserver restarts (full run): kube-apiserver stopped for 20 s and started
  again, the replicas left running; seconds from it answering /readyz until the APIService is
  Available, until a notify through the aggregator is answered 201, and until one on a pod
  created then is (tests/support/control_plane.py);
- the fan-out phases (hack/bench_fanout.py): a Notification over 1000 pods at parallelism 1,
  10 and 50 with a trivial hook and with `sleep 0.5`, against a sequential loop of raw pods/exec
  and raw pods/exec at the same concurrency; a quiesce window's release latency; with
  --scale-pods, one Notification over thousands of pods. --fanout-only runs these alone.

With --profile, a last phase samples every replica with py-spy (hack/profiling.py) during
sequential notifies and then 8 concurrent callers, writes each replica's collapsed stacks to
bench-results/profile-<replica>.txt and puts the functions with the most samples in the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import ssl
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import bench_fanout
import httpx
import profiling
from kube_requests import READ_VERBS, WRITE_VERBS, kube_requests
from plane_cpu import cpu_ms, plane_cpu_ticks

from apiserver.notifier.exec_stream import KubeEndpoint, exec_in_container
from localcluster import __main__ as localcluster
from localcluster import haproxy, pki, plane
from localcluster.layout import REPO_ROOT, Layout, Ports
from tests.support.control_plane import (
    OUTAGE_SECONDS,
    restart_kube_apiserver_and_time_recovery,
    settle_after_kube_apiserver_restart,
)
from tests.support.kube import Cluster, User, wait_until

NAMESPACE = "bench"
COMMAND = ["/bin/sh", "-c", "echo ok"]
NOTIFIERS = json.dumps({"app": [{"name": "ping", "action": {"exec": {"command": COMMAND}}}]})
ANNOTATIONS = {"notifier.x-k8s.io/notifiers": NOTIFIERS}
API = "/apis/notifier.x-k8s.io/v1alpha1"
BODY = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
        "spec": {"notifier": "ping"}}
FLOOR_CONFIGMAP = "bench-floor"
"""The ConfigMap whose merge patch measures one kube-apiserver write."""
NOTIFY_WAITS_FOR_WRITES = 2
"""The storage writes a notify with waitSeconds waits for, at the least: the record created
Running and its final state."""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


class Bench:
    def __init__(self, cluster: Cluster, user: User, pods: list[str]) -> None:
        self.cluster, self.user, self.pods = cluster, user, pods
        self.tls: ssl.SSLContext = user.ssl_context()
        self.http = httpx.AsyncClient(base_url=cluster.server, verify=self.tls, timeout=70,
                                      limits=httpx.Limits(max_connections=64))
        self.endpoint = KubeEndpoint(cluster.server, self.tls)

    async def notify(self, pod: str) -> None:
        response = await self.http.post(f"{API}/namespaces/{NAMESPACE}/pods/{pod}/notify",
                                         params={"waitSeconds": "30"}, json=BODY)
        if response.status_code != 201 or response.json()["status"]["phase"] != "Succeeded":
            raise RuntimeError(f"notify {pod}: {response.status_code} {response.text[:300]}")

    async def exec(self, pod: str, command: list[str] = COMMAND) -> None:
        result = await exec_in_container(self.endpoint, NAMESPACE, pod, "app", command,
                                         timeout_seconds=30)
        if result.exit_code != 0:
            raise RuntimeError(f"exec {pod}: {result.reason} {result.message}")

    async def kube_write(self, pod: str) -> None:
        """One kube-apiserver write (a merge patch of FLOOR_CONFIGMAP)."""
        response = await self.http.patch(
            f"/api/v1/namespaces/{NAMESPACE}/configmaps/{FLOOR_CONFIGMAP}",
            json={"data": {"pod": pod, "at": str(time.time_ns())}},
            headers={"Content-Type": "application/merge-patch+json"})
        if response.status_code != 200:
            raise RuntimeError(f"patch: {response.status_code} {response.text[:300]}")

    async def proxy_hop(self, pod: str) -> None:
        """One request through the aggregator that the server answers at once (discovery)."""
        response = await self.http.get(API)
        if response.status_code != 200:
            raise RuntimeError(f"discovery: {response.status_code} {response.text[:300]}")

    async def kubectl_exec(self, pod: str) -> None:
        """`kubectl exec` of the same command, as the same user (a new process each time)."""
        await asyncio.to_thread(self.cluster.kubectl, "exec", "-n", NAMESPACE, pod, "-c", "app",
                                "--", *COMMAND, user=self.user)

    async def latency(self, call: Callable[[str], Awaitable[None]], count: int,
                      warm_up: int = 10) -> dict[str, float]:
        """p50, p95 and mean of `count` sequential calls, after `warm_up` (connections,
        caches)."""
        await self.latencies(call, warm_up)
        samples = await self.latencies(call, count)
        return {"p50": percentile(samples, 0.5), "p95": percentile(samples, 0.95),
                "mean": statistics.fmean(samples)}

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


def server_memory(layout: Layout) -> dict[str, int]:
    """VmHWM and VmRSS in bytes, each the largest of the server replicas'."""
    fields: dict[str, int] = {}
    for server in plane.replicas(layout):
        for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                fields[key] = max(fields.get(key, 0), int(value.split()[0]) * 1024)
    return fields


TRAILING_SECONDS = 3.0
"""How long after the last operation writes are still counted (asynchronous Events, trims)."""
def per_op(delta: Counter[tuple[str, str]], background: dict[tuple[str, str], float],
           seconds: float, count: int) -> dict[str, dict[str, float]]:
    """Requests per operation by verb class, then ``VERB resource``, background subtracted."""
    out: dict[str, dict[str, float]] = {"writes": {}, "reads": {}, "other": {}}
    for key in sorted(set(delta) | set(background)):
        value = (delta[key] - background.get(key, 0.0) * seconds) / count
        if abs(value) >= 0.005:
            verb = key[0]
            kind = "writes" if verb in WRITE_VERBS else "reads" if verb in READ_VERBS else "other"
            out[kind][f"{verb} {key[1]}"] = value
    return out


async def cost(cluster: Cluster, call: Callable[[str], Awaitable[None]], pods: list[str],
               count: int) -> dict:
    """kube-apiserver requests and the plane's CPU per operation over `count` sequential
    operations: the load window plus TRAILING_SECONDS after it, minus the background rate
    measured in a quiet interval of the same length right after (no load)."""
    requests, cpu = kube_requests(cluster), plane_cpu_ticks(cluster.layout)
    start = time.perf_counter()
    for i in range(count):
        await call(pods[i % len(pods)])
    load_seconds = time.perf_counter() - start
    cpu_after = plane_cpu_ticks(cluster.layout)
    await asyncio.sleep(TRAILING_SECONDS)
    window = kube_requests(cluster) - requests
    seconds = time.perf_counter() - start
    quiet_requests, quiet_cpu = kube_requests(cluster), plane_cpu_ticks(cluster.layout)
    await asyncio.sleep(seconds)
    idle_cpu = plane_cpu_ticks(cluster.layout)  # before the scrape: its parsing is not idle
    background = {k: n / seconds for k, n in (kube_requests(cluster) - quiet_requests).items()}
    by_class = per_op(window, background, seconds, count)
    return {
        "operations": count, "load_seconds": load_seconds, "window_seconds": seconds,
        "requests_per_op": by_class,
        "writes_per_op": sum(by_class["writes"].values()),
        "background_per_second": {f"{v} {r}": n for (v, r), n in sorted(background.items())},
        "cpu_ms_per_op": cpu_ms(cpu, cpu_after, count),
        "idle_cpu_ms_per_second": cpu_ms(quiet_cpu, idle_cpu, seconds),
    }


def git_state() -> dict:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, check=True, text=True,
                              stdout=subprocess.PIPE).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


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


async def bulk(bench: Bench, total: int) -> dict:
    """`total` notifications, one caller per pod at a time: the answers that were not 201
    Succeeded by status, the slowest one, and the throughput of each minute (a server that
    slows down under sustained load shows it in the last minute against the first)."""
    failures: Counter[str] = Counter()
    slowest = 0.0
    finished: list[float] = []
    start = time.perf_counter()

    async def one(pod: str) -> None:
        nonlocal slowest
        began = time.perf_counter()
        try:
            await bench.notify(pod)
        except (RuntimeError, httpx.HTTPError) as error:
            failures[str(error).split(":")[1].split()[0] if isinstance(error, RuntimeError)
                     else type(error).__name__] += 1
        slowest = max(slowest, time.perf_counter() - began)
        finished.append(time.perf_counter() - start)

    done = 0
    while done < total:
        batch = min(len(bench.pods), total - done)
        await asyncio.gather(*(one(pod) for pod in bench.pods[:batch]))
        done += batch
    seconds = time.perf_counter() - start
    per_minute = Counter(int(moment // 60) for moment in finished)
    minutes = [per_minute[m] / 60 for m in range(int(seconds // 60))]  # whole minutes only
    return {"notifications": done, "callers": len(bench.pods), "seconds": seconds,
            "failures": dict(failures),
            "slowest_seconds": slowest, "throughput_per_minute": minutes}


async def sqlite_comparison(cluster: Cluster, bench: Bench, args: argparse.Namespace) -> dict:
    """Notify latency and throughput of replica 0 alone on --storage=sqlite (a fresh data
    directory; the other replicas stopped), then the plane as it was."""
    layout, replicas = cluster.layout, cluster.replicas
    argv = plane.replica(layout, 0).argv
    data_dir = layout.root / "bench-sqlite"
    shutil.rmtree(data_dir, ignore_errors=True)
    for replica in range(1, replicas):
        plane.stop_replica(layout, replica)
    wait_until(lambda: not any(haproxy.routes_to(layout, r) for r in range(1, replicas)),
               "HAProxy to route to replica 0 alone", 30)
    try:
        cluster.replace_replica(0, [*argv, "--storage=sqlite", f"--data-dir={data_dir}"])
        out: dict = {"replicas": 1, "latency_seconds": await bench.latency(
            bench.notify, args.latency_samples), "throughput_per_second": {}}
        for callers in args.concurrency:
            out["throughput_per_second"][str(callers)] = await bench.throughput(
                bench.notify, callers, args.throughput_requests)
    finally:
        cluster.replace_replica(0, argv)
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
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications/release"],
         "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},  # kubectl exec reads it
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [FLOOR_CONFIGMAP],
         "verbs": ["get", "patch"]},
    ], name="bench-client")
    cluster.kubectl("create", "configmap", FLOOR_CONFIGMAP, "-n", NAMESPACE, check=False)
    pods = cluster.deploy(NAMESPACE, "target", replicas=replicas,
                          annotations=ANNOTATIONS)
    return user, sorted(p["metadata"]["name"] for p in pods)


async def run(args: argparse.Namespace) -> dict:
    layout, ports = Layout.default(), Ports()
    if not localcluster.healthy(layout, ports):
        localcluster.up(layout, ports, localcluster.NODE_COUNT)
    cluster = Cluster(layout, ports, localcluster.build_binaries())
    pki.ensure(layout, ports)
    user, pods = setup(cluster, 1 if args.quick else max(args.concurrency))
    bench = Bench(cluster, user, pods)
    results: dict = {"git": git_state(), "quick": args.quick}
    if not args.fanout_only:
        await notify_figures(cluster, bench, args, results)
    if not args.quick:
        await fanout_phases(cluster, bench, args, results)
    if args.profile:
        results["profile"] = await profile(cluster, bench, args)
    await bench.http.aclose()
    return results


async def notify_figures(cluster: Cluster, bench: Bench, args: argparse.Namespace,
                         results: dict) -> None:
    pods = bench.pods
    results["latency_seconds"] = {
        name: await bench.latency(call, args.latency_samples)
        for name, call in (("notify", bench.notify), ("exec", bench.exec),
                           ("kube_write", bench.kube_write), ("proxy_hop", bench.proxy_hop))}
    results["cost"] = {name: await cost(cluster, call, pods, args.cost_samples)
                       for name, call in (("notify", bench.notify), ("exec", bench.exec))}
    if not args.quick:
        await full_run(cluster, bench, args, results)


async def fanout_phases(cluster: Cluster, bench: Bench, args: argparse.Namespace,
                        results: dict) -> None:
    """hack/bench_fanout.py's phases, each unless its size is 0."""
    def memory() -> dict[str, int]:
        return server_memory(cluster.layout)

    if args.fanout_pods:
        results["fanout"] = await bench_fanout.fanout(cluster, bench, args, memory)
        save(args, results)
    if args.window_pods:
        results["window"] = await bench_fanout.window(cluster, bench, args)
        save(args, results)
    if args.scale_pods:
        results["scale"] = await bench_fanout.scale(cluster, bench, args, memory,
                                                    lambda: kube_requests(cluster))
        save(args, results)
        bench_fanout.remove(cluster, "scale")


async def profile(cluster: Cluster, bench: Bench, args: argparse.Namespace) -> dict:
    """Each replica's busiest functions during sequential notifies, then 8 callers."""
    pids = {f"replica-{index}": server.pid
            for index, server in enumerate(plane.replicas(cluster.layout))}
    with profiling.sampled(pids, args.output.parent) as files:
        await bench.latency(bench.notify, args.latency_samples)
        await bench.throughput(bench.notify, min(8, len(bench.pods)), args.throughput_requests)
    return {name: profiling.summary(path) for name, path in files.items()}


async def full_run(cluster: Cluster, bench: Bench, args: argparse.Namespace,
                   results: dict) -> None:
    """The notify figures beyond --quick: kubectl exec, throughput, replica scaling, SQLite,
    memory, records, recovery."""
    pods = bench.pods
    results["latency_seconds"]["kubectl_exec"] = await bench.latency(
        bench.kubectl_exec, min(args.latency_samples, 50), warm_up=2)
    results["throughput_per_second"] = {}
    for callers in args.concurrency:
        results["throughput_per_second"][str(callers)] = {
            name: await bench.throughput(call, callers, args.throughput_requests)
            for name, call in (("notify", bench.notify), ("exec", bench.exec))}
    callers = max(args.concurrency)
    results["replicas_throughput_per_second"] = {
        "callers": callers,
        **await replica_scaling(cluster, bench, callers, args.throughput_requests)}
    results["sqlite"] = await sqlite_comparison(cluster, bench, args)
    results["bulk"] = {**await bulk(bench, args.notifications),
                       **server_memory(cluster.layout)}
    per_pod = []
    for pod in pods:
        listed = (await bench.http.get(f"{API}/namespaces/{NAMESPACE}/podnotifiers",
                                       params={"fieldSelector": f"spec.podName={pod}"})).json()
        per_pod.append(len(listed["items"]))
    results["records_per_pod"] = {"max": max(per_pod), "min": min(per_pod)}
    results["recovery_after_apiserver_restart_seconds"] = await asyncio.to_thread(
        apiserver_restart_recovery, cluster, bench.user, pods[0])


def apiserver_restart_recovery(cluster: Cluster, user: User, pod: str) -> dict[str, float]:
    """kube-apiserver stopped for OUTAGE_SECONDS, then started again: seconds from its /readyz
    answering until a notify through the aggregator on `pod` is answered 201 (``notify``),
    the APIService is Available, a pod created then is Running and is notified."""
    with cluster.client_for(user, timeout=15) as client:
        recovery = restart_kube_apiserver_and_time_recovery(
            cluster, client, NAMESPACE, pod, ANNOTATIONS)
    settle_after_kube_apiserver_restart(cluster)
    figures = dataclasses.asdict(recovery)
    return {"outage": OUTAGE_SECONDS, "notify": figures.pop("first_notify_seconds"),
            **{key.removesuffix("_seconds"): value for key, value in figures.items()}}


def report(results: dict) -> str:
    fanout = bench_fanout.report(results)
    if "latency_seconds" not in results:  # --fanout-only
        return "\n".join(fanout + profile_report(results))
    return "\n".join(notify_report(results) + fanout + cost_report(results["cost"])
                     + profile_report(results))


def notify_report(results: dict) -> list[str]:
    lat = results["latency_seconds"]
    lines = ["| figure | notify (aggregated) | raw pods/exec | ratio notify/exec |",
             "|---|---|---|---|"]
    for key in ("p50", "p95"):
        n, e = lat["notify"][key], lat["exec"][key]
        lines.append(f"| latency {key} | {n * 1000:.1f} ms | {e * 1000:.1f} ms | {n / e:.2f} |")
    floor = (lat["exec"]["p50"] + lat["proxy_hop"]["p50"]
             + NOTIFY_WAITS_FOR_WRITES * lat["kube_write"]["p50"])
    lines += [f"| floor p50: exec + one aggregated hop ({lat['proxy_hop']['p50'] * 1000:.1f} ms) "
              f"+ {NOTIFY_WAITS_FOR_WRITES} kube-apiserver writes ("
              f"{lat['kube_write']['p50'] * 1000:.1f} ms each) | {floor * 1000:.1f} ms | "
              f"{lat['exec']['p50'] * 1000:.1f} ms | {floor / lat['exec']['p50']:.2f} |",
              f"| notify p50 over the floor | {lat['notify']['p50'] / floor:.2f} | | |"]
    if results["quick"]:
        return lines
    kubectl = lat["kubectl_exec"]
    for key in ("p50", "p95"):
        lines.append(f"| latency {key}, notify against kubectl exec | "
                     f"{lat['notify'][key] * 1000:.1f} ms | {kubectl[key] * 1000:.1f} ms "
                     f"(kubectl exec) | {lat['notify'][key] / kubectl[key]:.2f} |")
    for callers, row in results["throughput_per_second"].items():
        lines.append(f"| throughput, {callers} callers | {row['notify']:.1f}/s | "
                     f"{row['exec']:.1f}/s | {row['notify'] / row['exec']:.2f} |")
    scaling = results["replicas_throughput_per_second"]
    for replicas in sorted(key for key in scaling if key != "callers"):
        lines.append(f"| notify throughput, {scaling['callers']} callers, {replicas} "
                     f"replica{'s' if replicas != '1' else ''} | {scaling[replicas]:.1f}/s | | |")
    sqlite = results["sqlite"]
    for key in ("p50", "p95"):
        lines.append(f"| latency {key}, 1 replica on --storage=sqlite | "
                     f"{sqlite['latency_seconds'][key] * 1000:.1f} ms | "
                     f"{lat['exec'][key] * 1000:.1f} ms | "
                     f"{sqlite['latency_seconds'][key] / lat['exec'][key]:.2f} |")
    for callers, rate in sqlite["throughput_per_second"].items():
        exec_rate = results["throughput_per_second"][callers]["exec"]
        lines.append(f"| throughput, {callers} callers, 1 replica on --storage=sqlite | "
                     f"{rate:.1f}/s | {exec_rate:.1f}/s | {rate / exec_rate:.2f} |")
    bulk = results["bulk"]
    lines.append(f"| server peak RSS after {bulk['notifications']} notifications | "
                 f"{bulk['VmHWM'] / 2**20:.1f} MiB (now {bulk['VmRSS'] / 2**20:.1f} MiB) | | |")
    minutes = bulk["throughput_per_minute"]
    trend = (f"{minutes[0]:.1f}/s first minute, {minutes[-1]:.1f}/s last "
             f"({minutes[-1] / minutes[0]:.2f})" if minutes and minutes[0] else "under a minute")
    lines.append(f"| {bulk['notifications']} notifications, {bulk['callers']} callers | "
                 f"{bulk['notifications'] / bulk['seconds']:.1f}/s; {trend}; slowest "
                 f"{bulk['slowest_seconds']:.1f} s; failed: "
                 f"{bulk['failures'] or 'none'} | | |")
    lines.append(f"| records kept per pod (max) | {results['records_per_pod']['max']} | | |")
    recovery = results["recovery_after_apiserver_restart_seconds"]
    lines.append(f"| after a {recovery['outage']:.0f} s kube-apiserver outage, from its /readyz "
                 f"answering: first notify 201 | {recovery['notify']:.1f} s (APIService "
                 f"Available {recovery['apiservice_available']:.1f} s; a pod created then "
                 f"Running {recovery['new_pod_running']:.1f} s, notified "
                 f"{recovery['new_pod_notify']:.1f} s) | | |")
    return lines


def cost_report(costs: dict) -> list[str]:
    """kube-apiserver requests and CPU per operation, notify against raw exec."""
    notify, exec_ = costs["notify"], costs["exec"]
    lines = ["", f"kube-apiserver writes per notify: {notify['writes_per_op']:.2f} (target <= 3)",
             "", f"kube-apiserver requests per operation ({notify['operations']} sequential "
             f"each, + {TRAILING_SECONDS:.0f} s trailing, background subtracted):", "",
             "| class | verb resource | per notify | per raw exec |", "|---|---|---|---|"]
    for kind in ("writes", "reads", "other"):
        keys = sorted(set(notify["requests_per_op"][kind]) | set(exec_["requests_per_op"][kind]))
        for key in keys:
            n = notify["requests_per_op"][kind].get(key, 0.0)
            e = exec_["requests_per_op"][kind].get(key, 0.0)
            lines.append(f"| {kind} | {key} | {n:.2f} | {e:.2f} |")
        total_n = sum(notify["requests_per_op"][kind].values())
        total_e = sum(exec_["requests_per_op"][kind].values())
        lines.append(f"| {kind} | **total** | {total_n:.2f} | {total_e:.2f} |")
    lines += ["", "background (quiet interval, no load), requests per second: " + ", ".join(
        f"{key} {rate:.2f}" for key, rate in notify["background_per_second"].items()
        if rate >= 0.01), "", "| process | CPU ms per notify | CPU ms per raw exec | "
        "idle CPU ms/s |", "|---|---|---|---|"]
    for name, ms in notify["cpu_ms_per_op"].items():
        lines.append(f"| {name} | {ms:.2f} | {exec_['cpu_ms_per_op'].get(name, 0.0):.2f} | "
                     f"{notify['idle_cpu_ms_per_second'].get(name, 0.0):.1f} |")
    lines.append(f"| **all** | {sum(notify['cpu_ms_per_op'].values()):.2f} | "
                 f"{sum(exec_['cpu_ms_per_op'].values()):.2f} | "
                 f"{sum(notify['idle_cpu_ms_per_second'].values()):.1f} |")
    return lines


def profile_report(results: dict) -> list[str]:
    lines = []
    for name, found in (results.get("profile") or {}).items():
        lines += ["", f"{name}: {found['samples']} busy samples; most on top of the stack:"]
        lines += [f"  {share * 100:5.1f}%  {frame}" for frame, share in found["self"][:8]]
    return lines


def save(args: argparse.Namespace, results: dict) -> None:
    """Write the figures so far to --output (after each long phase too, so that a failure
    late in a run keeps what was measured)."""
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--throughput-requests", type=int, default=320,
                        help="requests per throughput measurement, split across callers")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--quick", action="store_true",
                        help="notify figures only (latency, kube-apiserver requests, CPU), "
                        "small N: under two minutes on a warm plane")
    parser.add_argument("--cost-samples", type=int, default=None,
                        help="sequential operations around which kube-apiserver's requests and "
                        "CPU are read (default 200, 50 with --quick)")
    parser.add_argument("--notifications", type=int, default=10_000,
                        help="notifications before reading the server's peak RSS")
    parser.add_argument("--fanout-pods", type=int, default=1000,
                        help="pods of the fan-out benchmark (0 skips it)")
    parser.add_argument("--fanout-parallelism", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--fanout-hooks", nargs="+", choices=sorted(bench_fanout.HOOKS),
                        default=["trivial", "sleep"],
                        help="the fan-out's hooks: trivial (echo ok), sleep (sleep 0.5)")
    parser.add_argument("--window-pods", type=int, default=20,
                        help="pods of the quiesce-window release benchmark (0 skips it)")
    parser.add_argument("--window-rounds", type=int, default=10)
    parser.add_argument("--scale-pods", type=int, default=0,
                        help="pods of one Notification at scale, e.g. 5000 (off by default: "
                        "it takes more than 5 minutes)")
    parser.add_argument("--scale-parallelism", type=int, default=100)
    parser.add_argument("--fanout-only", action="store_true",
                        help="the fan-out phases alone (no notify figures)")
    parser.add_argument("--profile", action="store_true",
                        help="sample the replicas with py-spy in a last phase (hack/profiling.py)")
    parser.add_argument("--output", type=Path, default=None,
                        help="default bench-results/bench.json (bench-quick.json with --quick)")
    args = parser.parse_args()
    if args.quick:
        args.latency_samples = min(args.latency_samples, 50)
    args.cost_samples = args.cost_samples or (50 if args.quick else 200)
    args.output = args.output or REPO_ROOT / "bench-results" / (
        "bench-quick.json" if args.quick else "bench.json")
    results = asyncio.run(run(args))
    save(args, results)
    print(report(results))
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
