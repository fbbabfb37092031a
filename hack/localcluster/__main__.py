"""python -m localcluster up|down|status: the local control plane for tests, demo and benchmarks.

up      build missing binaries (hack/build.sh), start etcd, kube-apiserver, controller-manager,
        scheduler and kwok (in its own PID namespace) with N fake nodes, wait until all are
        healthy; reuses a healthy running plane; prints what it started and how long it took.
down    stop every process `up` started, by pid, and remove the state directory.
status  print each process and whether it runs; exit 1 unless all run.
user    issue a client certificate (CN NAME, O each --group) and print its kubeconfig path;
        the certificate and key sit beside it as NAME.crt and NAME.key.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from localcluster import admin, components, notifier, pki, processes
from localcluster.layout import HACK_DIR, Layout, Ports

NODE_COUNT = int(os.environ.get("CN_NODES", "3"))


def build_binaries() -> Path:
    out = subprocess.run(["bash", str(HACK_DIR / "build.sh")], check=True, text=True,
                         stdout=subprocess.PIPE)
    return Path(out.stdout.strip().splitlines()[-1])


def _ok(url: str, **kwargs: object) -> bool:
    try:
        response = httpx.get(url, timeout=2.0, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def wait_for(what: str, check: Callable[[], bool], tracked: list[processes.Tracked],
             layout: Layout, timeout: float = 90.0) -> None:
    """Poll `check` until it passes; fail early, with the log tail, if a process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for proc in tracked:
            if not processes.is_alive(proc):
                log = (layout.logs / f"{proc.name}.log").read_text(errors="replace")
                raise SystemExit(f"{proc.name} exited while waiting for {what}; last log lines:\n"
                                 + "\n".join(log.splitlines()[-30:]))
        time.sleep(0.25)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}; logs in {layout.logs}")


def create_nodes(layout: Layout, ports: Ports, count: int) -> None:
    with admin.client(layout, ports) as kube:
        for i in range(count):
            name = f"kwok-node-{i}"
            node = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake",
                                    "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                               "kubernetes.io/arch": "amd64", "type": "kwok"},
                },
            }
            response = kube.post("/api/v1/nodes", json=node)
            if response.status_code not in (201, 409):
                raise SystemExit(f"creating node {name}: {response.status_code} {response.text}")


def nodes_ready(layout: Layout, ports: Ports, count: int) -> bool:
    try:
        with admin.client(layout, ports) as kube:
            items = kube.get("/api/v1/nodes").json().get("items", [])
    except httpx.HTTPError:
        return False
    ready = [n for n in items if any(c["type"] == "Ready" and c["status"] == "True"
                                     for c in n.get("status", {}).get("conditions", []))]
    sa = _default_service_account_exists(layout, ports)
    return len(ready) >= count and sa


def _default_service_account_exists(layout: Layout, ports: Ports) -> bool:
    with admin.client(layout, ports) as kube:
        return kube.get("/api/v1/namespaces/default/serviceaccounts/default").status_code == 200


def apiservice_available(layout: Layout, ports: Ports) -> bool:
    with admin.client(layout, ports) as kube:
        response = kube.get(
            f"/apis/apiregistration.k8s.io/v1/apiservices/{notifier.APISERVICE_NAME}")
    return response.status_code == 200 and notifier.apiservice_available(response.json())


def restart(layout: Layout, name: str) -> processes.Tracked:
    """Stop one component and start it again with the same command line."""
    tracked = processes.load(layout.state_file)
    (old,) = [p for p in tracked if p.name == name]
    processes.stop([old])
    new = processes.start(name, old.argv, layout.logs, stop_signal=old.stop_signal)
    processes.save(layout.state_file, [new if p.name == name else p for p in tracked])
    return new


def stop_component(layout: Layout, name: str) -> None:
    """Stop one component, keeping it recorded so that `restart` can start it again."""
    processes.stop([p for p in processes.load(layout.state_file) if p.name == name])


def healthy(layout: Layout, ports: Ports) -> bool:
    tracked = processes.load(layout.state_file)
    if not tracked or not all(processes.is_alive(p) for p in tracked):
        return False
    return _ok(f"https://127.0.0.1:{ports.apiserver}/readyz", verify=admin.ssl_context(layout))


def up(layout: Layout, ports: Ports, node_count: int) -> None:
    started_at = time.monotonic()
    if healthy(layout, ports):
        print(f"cluster: already running and healthy; kubeconfig {layout.kubeconfig}")
        return
    down(layout, quiet=True)
    bins = build_binaries()
    layout.root.mkdir(parents=True, exist_ok=True)
    pki.ensure(layout, ports)
    components.write_kwok_config(bins, layout)
    tracked: list[processes.Tracked] = []

    def launch(name: str, argv: list[str], stop_signal: str = "SIGTERM") -> None:
        tracked.append(processes.start(name, argv, layout.logs, stop_signal=stop_signal))
        processes.save(layout.state_file, tracked)

    launch("etcd", components.etcd(bins, layout, ports))
    wait_for("etcd", lambda: _ok(f"http://127.0.0.1:{ports.etcd}/health"), tracked, layout)
    launch("kube-apiserver", components.kube_apiserver(bins, layout, ports))
    tls = admin.ssl_context(layout)
    wait_for("kube-apiserver /readyz",
             lambda: _ok(f"https://127.0.0.1:{ports.apiserver}/readyz", verify=tls),
             tracked, layout)
    launch("kube-controller-manager", components.controller_manager(bins, layout, ports))
    launch("kube-scheduler", components.scheduler(bins, layout, ports))
    # unshare ignores SIGTERM while it waits for its child; SIGKILL makes it SIGKILL the
    # namespace's init (--kill-child), which takes every process in the namespace with it.
    launch("kwok", components.kwok(bins, layout, ports), stop_signal="SIGKILL")
    create_nodes(layout, ports, node_count)
    wait_for("kube-controller-manager /healthz",
             lambda: _ok(f"https://127.0.0.1:{ports.controller_manager}/healthz", verify=False),
             tracked, layout)
    wait_for("kube-scheduler /healthz",
             lambda: _ok(f"https://127.0.0.1:{ports.scheduler}/healthz", verify=False),
             tracked, layout)
    wait_for(f"{node_count} Ready kwok nodes and the default ServiceAccount",
             lambda: nodes_ready(layout, ports, node_count), tracked, layout)
    notifier.register(bins, layout, ports)
    launch("notifier-apiserver", notifier.server_argv(layout, ports))
    wait_for(f"APIService {notifier.APISERVICE_NAME} Available",
             lambda: apiservice_available(layout, ports), tracked, layout)
    elapsed = time.monotonic() - started_at
    for proc in tracked:
        print(f"cluster: started {proc.name} (pid {proc.pid}), log {layout.logs / proc.name}.log")
    print(f"cluster: {node_count} kwok nodes Ready; kube-apiserver https://127.0.0.1:{ports.apiserver}")
    print(f"cluster: up in {elapsed:.1f} s; export KUBECONFIG={layout.kubeconfig}")
    print(f"cluster: kubectl is {bins / 'kubectl'}")


def down(layout: Layout, quiet: bool = False) -> None:
    stopped = processes.stop(processes.load(layout.state_file))
    if layout.root.exists():
        shutil.rmtree(layout.root)
    if not quiet:
        print(f"cluster: stopped {', '.join(stopped) or 'nothing (none running)'}; "
              f"removed {layout.root}")


def status(layout: Layout) -> int:
    tracked = processes.load(layout.state_file)
    for proc in tracked:
        state = "running" if processes.is_alive(proc) else "stopped"
        print(f"{proc.name}\tpid {proc.pid}\t{state}")
    return 0 if tracked and all(processes.is_alive(p) for p in tracked) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "status", "user"])
    parser.add_argument("name", nargs="?", help="with `user`: the user name (certificate CN)")
    parser.add_argument("--group", action="append", default=[],
                        help="with `user`: a group (certificate O); repeatable")
    parser.add_argument("--nodes", type=int, default=NODE_COUNT,
                        help="kwok nodes to create (default: $CN_NODES or 3)")
    args = parser.parse_args(argv)
    layout, ports = Layout.default(), Ports()
    if args.command == "up":
        up(layout, ports, args.nodes)
    elif args.command == "down":
        down(layout)
    elif args.command == "user":
        if not args.name:
            parser.error("user needs a NAME")
        print(pki.user_kubeconfig(layout, ports, args.name, tuple(args.group)))
    else:
        return status(layout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
