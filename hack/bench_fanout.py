"""make bench's fan-out phases (hack/bench.py runs them; `--fanout-only` runs them alone):

- a Notification over --fanout-pods pods at each --fanout-parallelism, with each hook of
  --fanout-hooks (`trivial`: `echo ok`; `sleep`: `sleep 0.5`, the shape of a quiesce), against
  a sequential loop of raw pods/exec of the same command (what a backup tool running hooks one
  by one does) and raw pods/exec at the same concurrency (the limit); with each run's CPU ms per
  pod of every process of the plane (hack/plane_cpu.py), where a CPU-bound fan-out's time goes;
- a quiesce window over --window-pods pods, --window-rounds times: from the release request
  to the first unquiesce start and to the last unquiesce end (minus the unquiesce commands' own
  time), from the last pod quiesced to the window's quiescedTime, and to the moment the leader
  built the status that shows it (the Quiesced condition's lastTransitionTime: what a backup
  waits for, but the status write itself);
- with --scale-pods (off by default: it takes longer than 5 minutes), one Notification over that
  many pods at --scale-parallelism: every pod notified once, the largest stored object, the
  Notification's size, the leader's peak RSS and kube-apiserver writes per pod.

Times on both sides are this machine's clock (the server's status times are RFC 3339 with
milliseconds), so the differences are comparable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import statistics
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
from kube_requests import REVIEW_GROUPS, WRITE_VERBS
from plane_cpu import cpu_ms, plane_cpu_ticks

from localcluster import __main__ as localcluster
from tests.support.kube import Cluster

API = "/apis/notifier.x-k8s.io/v1alpha1"
NAMESPACE = "bench"
TRIVIAL = ["/bin/sh", "-c", "echo ok"]
SLEEP = ["/bin/sh", "-c", "sleep 0.5"]
HOOKS = {"trivial": ("ping", TRIVIAL), "sleep": ("pause", SLEEP)}
"""--fanout-hooks: the notifier each fleet pod declares for it, and its command."""
FLEET_ANNOTATIONS = {"notifier.x-k8s.io/notifiers": json.dumps({"app": [
    {"name": name, "action": {"exec": {"command": command}}}
    for name, command in HOOKS.values()]})}
WINDOW_ANNOTATIONS = {"notifier.x-k8s.io/notifiers": json.dumps({"app": [
    {"name": "quiesce", "action": {"exec": {"command": TRIVIAL}}},
    {"name": "unquiesce", "action": {"exec": {"command": TRIVIAL}}}]})}
RECORDS_PAGE = "500"
REMOVE_SECONDS = 600
"""How long deleting a phase's pods may take (kwok deletes 1000 pods in over a minute)."""
STORAGE_GROUP = "storage.notifier.x-k8s.io"
SCALE_PODS_PER_NODE = 500
"""kwok nodes the scale phase adds: one per this many pods (kwok nodes are cheap)."""


def seconds_of(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def deploy(cluster: Cluster, name: str, replicas: int, annotations: dict[str, str],
           timeout: float = 60.0) -> list[str]:
    """A Deployment of `replicas` kwok pods; their names once all Run."""
    pods = cluster.deploy(NAMESPACE, name, replicas, annotations=annotations, timeout=timeout)
    return sorted(p["metadata"]["name"] for p in pods)


def remove(cluster: Cluster, name: str) -> None:
    """The Deployment and its pods, the pods in one collection DELETE (`kubectl delete pods -l`
    deletes them one request each: over a minute for 5000), waited for by listing them
    (`kubectl delete --wait` of a thousand pods could wait out its timeout after the last one
    was gone)."""
    cluster.kubectl("delete", "deployment", name, "-n", NAMESPACE, "--wait=false", check=False)
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    selector = {"labelSelector": f"app={name}"}
    deadline = time.monotonic() + REMOVE_SECONDS
    with cluster.admin(timeout=REMOVE_SECONDS) as kube:
        while kube.get(pods, params={**selector, "limit": "1"}).json()["items"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the pods app={name} were not deleted within "
                                   f"{REMOVE_SECONDS} s")
            # Asked again each time: kube-apiserver ends a collection DELETE at its 60 s
            # request timeout, and 5000 pods can take longer.
            with contextlib.suppress(httpx.TransportError):
                kube.delete(pods, params=selector)
            time.sleep(1.0)


async def notification(bench: Any, app: str, notifier: str, parallelism: int,
                       **spec: Any) -> dict[str, Any]:
    """Create a Notification over the pods labelled app=`app` and return it once finished."""
    body = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
            "metadata": {"generateName": f"{app}-p{parallelism}-"},
            "spec": {"selector": {"matchLabels": {"app": app}}, "notifier": notifier,
                     "parallelism": parallelism, **spec}}
    created = await bench.http.post(f"{API}/namespaces/{NAMESPACE}/notifications", json=body)
    if created.status_code != 201:
        raise RuntimeError(f"create: {created.status_code} {created.text[:300]}")
    return await finished(bench, created.json()["metadata"]["name"])


async def finished(bench: Any, name: str,
                   until: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The Notification once `until` holds of it (default: it finished)."""
    done = until or (lambda obj: obj["status"].get("phase") in ("Succeeded", "Failed"))
    while True:
        obj = (await bench.http.get(f"{API}/namespaces/{NAMESPACE}/notifications/{name}")
               ).json()
        if done(obj):
            return obj
        await asyncio.sleep(0.05)


async def records_of(bench: Any, name: str) -> list[dict[str, Any]]:
    """Every PodNotifier of Notification `name`, page by page."""
    found: list[dict[str, Any]] = []
    token = ""
    while True:
        params = {"labelSelector": f"notifier.x-k8s.io/notification={name}",
                  "limit": RECORDS_PAGE, **({"continue": token} if token else {})}
        page = (await bench.http.get(f"{API}/namespaces/{NAMESPACE}/podnotifiers",
                                     params=params)).json()
        found += page["items"]
        token = page["metadata"].get("continue", "")
        if not token:
            return found


async def exec_all(bench: Any, pods: list[str], concurrency: int, command: list[str]) -> float:
    """Seconds to run `command` by raw pods/exec on every pod, `concurrency` at a time."""
    queue = list(pods)

    async def worker() -> None:
        while queue:
            await bench.exec(queue.pop(), command)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start


async def fanout(cluster: Cluster, bench: Any, args: Any, memory: Callable[[], dict[str, int]]
                 ) -> dict[str, Any]:
    fleet = deploy(cluster, "fleet", args.fanout_pods, FLEET_ANNOTATIONS,
                   timeout=max(60.0, args.fanout_pods / 10))
    cluster.restart_notifier(signal.SIGTERM)  # the peak RSS below is these runs' alone
    out: dict[str, Any] = {"pods": len(fleet), "hooks": {}}
    for hook in args.fanout_hooks:
        notifier, command = HOOKS[hook]
        figures: dict[str, Any] = {"command": command, "notification_seconds": {},
                                   "exec_seconds": {}, "notification_cpu_ms_per_pod": {},
                                   "exec_cpu_ms_per_pod": {}}
        for parallelism in args.fanout_parallelism:
            start, cpu = time.perf_counter(), plane_cpu_ticks(cluster.layout)
            obj = await notification(bench, "fleet", notifier, parallelism)
            if obj["status"]["counts"]["succeeded"] != len(fleet):
                raise RuntimeError(f"{obj['metadata']['name']} ended {obj['status']}")
            figures["notification_seconds"][str(parallelism)] = time.perf_counter() - start
            figures["notification_cpu_ms_per_pod"][str(parallelism)] = cpu_ms(
                cpu, plane_cpu_ticks(cluster.layout), len(fleet))
            out["object_bytes"] = len(json.dumps(obj))
        for concurrency in sorted({1, *args.fanout_parallelism}):
            cpu = plane_cpu_ticks(cluster.layout)
            figures["exec_seconds"][str(concurrency)] = await exec_all(
                bench, fleet, concurrency, command)
            figures["exec_cpu_ms_per_pod"][str(concurrency)] = cpu_ms(
                cpu, plane_cpu_ticks(cluster.layout), len(fleet))
        out["hooks"][hook] = figures
    out["server_memory"] = memory()
    remove(cluster, "fleet")
    return out


async def window(cluster: Cluster, bench: Any, args: Any) -> dict[str, Any]:
    """Release latency of a quiesce window over --window-pods pods, --window-rounds times."""
    pods = deploy(cluster, "window", args.window_pods, WINDOW_ANNOTATIONS)
    to_first_start: list[float] = []
    to_last_end: list[float] = []
    quiesced_lag: list[float] = []
    shown_lag: list[float] = []
    for _ in range(args.window_rounds):
        body = {"apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "Notification",
                "metadata": {"generateName": "window-"},
                "spec": {"selector": {"matchLabels": {"app": "window"}}, "notifier": "quiesce",
                         "parallelism": len(pods),
                         "release": {"notifier": "unquiesce", "maxHoldSeconds": 600}}}
        created = await bench.http.post(f"{API}/namespaces/{NAMESPACE}/notifications",
                                        json=body)
        if created.status_code != 201:
            raise RuntimeError(f"create: {created.status_code} {created.text[:300]}")
        name = created.json()["metadata"]["name"]
        opened = await finished(bench, name, lambda obj: bool(
            (obj["status"].get("window") or {}).get("quiescedTime")))
        requested = time.time()
        released = await bench.http.post(
            f"{API}/namespaces/{NAMESPACE}/notifications/{name}/release")
        if released.status_code != 200:
            raise RuntimeError(f"release: {released.status_code} {released.text[:300]}")
        done = await finished(bench, name)
        if done["status"]["phase"] != "Succeeded":
            raise RuntimeError(f"{name} ended {done['status']}")
        runs = await records_of(bench, name)
        quiesces = [r for r in runs if r["spec"]["notifier"] == "quiesce"]
        unquiesces = [r for r in runs if r["spec"]["notifier"] == "unquiesce"]
        if len(quiesces) != len(pods) or len(unquiesces) != len(pods):
            raise RuntimeError(f"{name}: {len(quiesces)} quiesces, {len(unquiesces)} "
                               f"unquiesces over {len(pods)} pods")
        own = statistics.median(seconds_of(r["status"]["completionTime"])
                                - seconds_of(r["status"]["startTime"]) for r in unquiesces)
        to_first_start.append(min(seconds_of(r["status"]["startTime"]) for r in unquiesces)
                              - requested)
        to_last_end.append(max(seconds_of(r["status"]["completionTime"]) for r in unquiesces)
                           - requested - own)
        last_quiesced = max(seconds_of(r["status"]["completionTime"]) for r in quiesces)
        quiesced_lag.append(seconds_of(opened["status"]["window"]["quiescedTime"])
                            - last_quiesced)
        (shown,) = [c for c in opened["status"]["conditions"] if c["type"] == "Quiesced"]
        shown_lag.append(seconds_of(shown["lastTransitionTime"]) - last_quiesced)
    remove(cluster, "window")
    return {"pods": len(pods), "rounds": args.window_rounds,
            **{key: {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}
               for key, values in (("release_to_first_unquiesce_start", to_first_start),
                                   ("release_to_last_unquiesce_end", to_last_end),
                                   ("last_quiesced_to_quiesced_time", quiesced_lag),
                                   ("last_quiesced_to_quiesced_condition", shown_lag))}}


def largest_storage_object(cluster: Cluster) -> dict[str, Any]:
    """The largest object of each storage resource (bytes of its JSON), read as the admin."""
    with cluster.admin() as kube:
        groups = kube.get(f"/apis/{STORAGE_GROUP}").json()
        version = groups["preferredVersion"]["groupVersion"]
        resources = [r["name"] for r in kube.get(f"/apis/{version}").json()["resources"]
                     if "/" not in r["name"]]
        out: dict[str, Any] = {}
        for resource in resources:
            biggest, token = 0, ""
            while True:
                params = {"limit": RECORDS_PAGE, **({"continue": token} if token else {})}
                page = kube.get(f"/apis/{version}/{resource}", params=params).json()
                biggest = max([biggest, *(len(json.dumps(item)) for item in page["items"])])
                token = page["metadata"].get("continue", "")
                if not token:
                    break
            out[resource] = biggest
    return out


async def scale(cluster: Cluster, bench: Any, args: Any, memory: Callable[[], dict[str, int]],
                requests: Callable[[], Counter[tuple[str, str]]]) -> dict[str, Any]:
    """One Notification over --scale-pods pods at --scale-parallelism (the caller removes the
    pods, after saving the figures)."""
    localcluster.create_nodes(cluster.layout, cluster.ports,
                              max(localcluster.NODE_COUNT,
                                  -(-args.scale_pods // SCALE_PODS_PER_NODE)))
    started = time.perf_counter()
    pods = deploy(cluster, "scale", args.scale_pods, FLEET_ANNOTATIONS,
                  timeout=max(120.0, args.scale_pods / 5))
    deployed = time.perf_counter() - started
    cluster.restart_notifier(signal.SIGTERM)  # the peak RSS below is this run's alone
    idle = memory()  # the caches of the pods, before any run
    before = requests()
    start = time.perf_counter()
    obj = await notification(bench, "scale", "ping", args.scale_parallelism)
    seconds = time.perf_counter() - start
    peak = memory()
    delta = requests() - before
    runs = await records_of(bench, obj["metadata"]["name"])
    per_pod = Counter(r["spec"]["podName"] for r in runs)
    writes = Counter({key: n for key, n in delta.items() if key[0] in WRITE_VERBS})
    out = {"pods": len(pods), "parallelism": args.scale_parallelism,
           "deploy_seconds": deployed, "notification_seconds": seconds,
           "phase": obj["status"]["phase"], "counts": obj["status"]["counts"],
           "records": len(runs), "pods_notified_once": sum(n == 1 for n in per_pod.values()),
           "pods_notified_more": sum(n > 1 for n in per_pod.values()),
           "notification_bytes": len(json.dumps(obj)),
           "largest_storage_object_bytes": largest_storage_object(cluster),
           "server_memory": peak, "server_memory_idle": idle,
           "kube_writes_per_pod": sum(writes.values()) / len(pods),
           "stored_writes_per_pod": sum(n for (_, resource), n in writes.items()
                                        if not resource.startswith(REVIEW_GROUPS))
           / len(pods),
           "kube_writes_by_resource": {f"{verb} {resource}": n
                                       for (verb, resource), n in writes.most_common()}}
    return out


def cpu_table(figures: dict[str, Any]) -> list[str]:
    """CPU milliseconds per pod of each process of the plane, for each Notification and each
    raw exec run (where the time of a CPU-bound fan-out goes)."""
    runs = [(f"Notification p{parallelism}", cpu)
            for parallelism, cpu in figures["notification_cpu_ms_per_pod"].items()]
    runs += [(f"raw exec c{concurrency}", cpu)
             for concurrency, cpu in figures["exec_cpu_ms_per_pod"].items()]
    names = sorted({name for _, cpu in runs for name in cpu},
                   key=lambda name: -max(cpu.get(name, 0.0) for _, cpu in runs))
    lines = ["", "CPU ms per pod:", "", "| process | " + " | ".join(run for run, _ in runs) + " |",
             "|---" * (len(runs) + 1) + "|"]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{cpu.get(name, 0.0):.2f}" for _, cpu in runs)
                     + " |")
    lines.append("| **all** | " + " | ".join(f"{sum(cpu.values()):.2f}" for _, cpu in runs) + " |")
    return lines


def report(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if "fanout" in results:
        fan = results["fanout"]
        for hook, figures in fan["hooks"].items():
            sequential = figures["exec_seconds"]["1"]
            lines += ["", f"Fan-out over {fan['pods']} pods, hook {hook} "
                      f"({' '.join(figures['command'])}), wall time:", "",
                      "| parallelism | Notification | raw exec, same concurrency | "
                      "ratio to same-concurrency exec | sequential exec loop / Notification |",
                      "|---|---|---|---|---|"]
            for parallelism, seconds in figures["notification_seconds"].items():
                same = figures["exec_seconds"].get(parallelism, sequential)
                lines.append(f"| {parallelism} | {seconds:.1f} s | {same:.1f} s | "
                             f"{seconds / same:.2f} | {sequential / seconds:.1f}x faster |")
            lines += cpu_table(figures)
        lines.append(f"\nserver peak RSS during the fan-out runs: "
                     f"{fan['server_memory']['VmHWM'] / 2**20:.1f} MiB; Notification object "
                     f"{fan['object_bytes']} bytes")
    if "window" in results:
        win = results["window"]
        lines += ["", f"Quiesce window over {win['pods']} pods, {win['rounds']} rounds:", "",
                  "| figure | p50 | p95 |", "|---|---|---|"]
        for key in ("release_to_first_unquiesce_start", "release_to_last_unquiesce_end",
                    "last_quiesced_to_quiesced_time", "last_quiesced_to_quiesced_condition"):
            lines.append(f"| {key.replace('_', ' ')} | {win[key]['p50'] * 1000:.0f} ms | "
                         f"{win[key]['p95'] * 1000:.0f} ms |")
    if "scale" in results:
        sc = results["scale"]
        lines += ["", f"Scale: one Notification over {sc['pods']} pods at parallelism "
                  f"{sc['parallelism']}: {sc['phase']} in {sc['notification_seconds']:.1f} s "
                  f"(pods deployed in {sc['deploy_seconds']:.0f} s); {sc['records']} records, "
                  f"{sc['pods_notified_once']} pods notified once, {sc['pods_notified_more']} "
                  "more than once",
                  f"Notification {sc['notification_bytes']} bytes; largest stored object "
                  + ", ".join(f"{resource} {size}" for resource, size in
                              sc["largest_storage_object_bytes"].items()),
                  f"leader peak RSS {sc['server_memory']['VmHWM'] / 2**20:.1f} MiB (before the "
                  f"run {sc['server_memory_idle']['VmRSS'] / 2**20:.1f} MiB); "
                  f"kube-apiserver writes per pod {sc['kube_writes_per_pod']:.2f}, "
                  f"{sc['stored_writes_per_pod']:.2f} of them stored (not reviews): "
                  + ", ".join(f"{key} {n}" for key, n in
                              list(sc["kube_writes_by_resource"].items())[:8])]
    return lines
