"""python -m localcluster up|down|status: the local control plane for tests, demo and benchmarks.

up      build missing binaries (hack/build.sh), start etcd, kube-apiserver, controller-manager,
        scheduler and kwok (in its own PID namespace) with N fake nodes, and meanwhile (they
        need kube-apiserver alone) register the extension API (its storage CRDs Established
        first), start R server replicas (replica i on port CN_NOTIFIER_PORT+1+i, Kubernetes
        storage) and HAProxy on CN_NOTIFIER_PORT in front of them; wait until all are
        healthy; reuses a healthy running plane of R replicas; prints what it started and how
        long it took.
        If a start fails, stops everything it started and exits 1 naming the component, with
        the last lines of its log.
down    stop every process `up` started, by pid (the replicas at once, the others in turn,
        last started first), and remove the state directory.
status  print each process and whether it runs, and every health problem; exit 1 unless
        every component and each of R replicas runs and answers and the APIService is Available.
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
from collections.abc import Sequence
from pathlib import Path

import httpx

from localcluster import admin, components, haproxy, health, notifier, pki, processes
from localcluster.addresses import NODE_IP
from localcluster.layout import HACK_DIR, REPLICAS, Layout, Ports
from localcluster.plane import replicas as server_replicas
from localcluster.startup import StartFailed, Startup, busy_ports

NODE_COUNT = int(os.environ.get("CN_NODES", "3"))


def build_binaries() -> Path:
    out = subprocess.run(["bash", str(HACK_DIR / "build.sh")], check=True, text=True,
                         stdout=subprocess.PIPE)
    return Path(out.stdout.strip().splitlines()[-1])


ETCD_READY_SECONDS = 60.0
APISERVER_READY_SECONDS = 180.0
"""A cold first start (empty etcd) creates the bootstrap RBAC roles, priority classes and
system namespaces before /readyz passes; on two busy cores that can take well over a minute."""
COMPONENT_READY_SECONDS = 120.0
PORTS_RELEASE_SECONDS = 10.0
"""How long `up` waits for the ports of a plane it just stopped to be released."""


def create_nodes(layout: Layout, ports: Ports, count: int) -> None:
    """`count` kwok nodes, created with their addresses (InternalIP and Hostname).

    kwok's node-initialize stage writes an `addresses` key whenever a node lacks either type,
    and without `--node-name` it has no Hostname to write: the key goes out empty, and the
    strategic merge patch then deletes every address. That stage runs again whenever a node is
    not Ready, as after kube-controller-manager marked it Unknown during a kube-apiserver
    restart, and exec failed with "no preferred addresses found". A node created with both
    types gets no `addresses` key from that stage, so it keeps them."""
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
                "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP},
                                         {"type": "Hostname", "address": name}]},
            }
            response = kube.post("/api/v1/nodes", json=node)
            if response.status_code not in (201, 409):
                raise StartFailed(f"creating node {name}: kube-apiserver answered "
                                  f"{response.status_code} {response.text}")


def nodes_ready(layout: Layout, ports: Ports, count: int) -> bool:
    try:
        with admin.client(layout, ports) as kube:
            items = kube.get("/api/v1/nodes").json().get("items", [])
    except httpx.HTTPError:
        return False
    ready = [n for n in items if any(c["type"] == "Ready" and c["status"] == "True"
                                     for c in n.get("status", {}).get("conditions", []))]
    return len(ready) >= count


def default_service_account_exists(layout: Layout, ports: Ports) -> bool:
    """The controller-manager's serviceaccount controller has made `default` in `default`."""
    try:
        with admin.client(layout, ports) as kube:
            return kube.get("/api/v1/namespaces/default/serviceaccounts/default"
                            ).status_code == 200
    except httpx.HTTPError:
        return False


def openapi_aggregated(layout: Layout, ports: Ports) -> bool:
    """kube-apiserver serves the group's OpenAPI v3 (its aggregator fetches it some seconds
    after the APIService is Available): `kubectl explain` and `kubectl create -f` need it."""
    try:
        with admin.client(layout, ports) as kube:
            return kube.get(f"/openapi/v3/apis/{notifier.GROUP_VERSION}").status_code == 200
    except httpx.HTTPError:
        return False


def apiservice_available(layout: Layout, ports: Ports) -> bool:
    return health.apiservice_problem(layout, ports) is None


def healthy(layout: Layout, ports: Ports, replicas: int = REPLICAS) -> bool:
    """Every component and `replicas` server replicas recorded, running and answering, and
    the APIService Available."""
    return not health.check(layout, ports, replicas)


def _wait_answers(plane: Startup, probe: health.Probe, timeout: float) -> None:
    plane.wait_for(probe.component, f"{probe.component} to answer GET {probe.url}",
                   probe.answers, timeout)


def up(layout: Layout, ports: Ports, node_count: int, replicas: int = REPLICAS,
       server: bool = True, server_args: Sequence[str] = ()) -> None:
    """Start the plane unless it is healthy; on failure stop what was started, raise StartFailed.

    server=False: the control plane and its kwok nodes only, without the extension (nothing
    registered, no replica, no HAProxy), for tests that install it themselves (the Helm
    chart); such a plane is always started afresh. `server_args` are appended to every server
    replica's command line (e.g. short certificate validities)."""
    started_at = time.monotonic()
    found = health.check(layout, ports, replicas) if server else ["without the extension"]
    if not found:
        print(f"cluster: already running and healthy; kubeconfig {layout.kubeconfig}")
        return
    if server and (problem := haproxy.socket_path_problem(layout)):
        raise StartFailed(problem)
    if layout.state_file.exists():
        print("cluster: not healthy, starting afresh:\n  " + "\n  ".join(found))
    down(layout, quiet=True)
    if server and not haproxy.BINARY.exists():
        raise StartFailed(f"{haproxy.BINARY} is missing: install the Debian package haproxy "
                          "(apt-get install -y haproxy; `make cluster-up` does it as root)")
    bins = build_binaries()
    layout.root.mkdir(parents=True, exist_ok=True)
    pki.ensure(layout, ports)
    components.write_kwok_config(bins, layout)
    haproxy.write_config(layout, ports, replicas)
    if busy := busy_ports(ports.by_variable(replicas), timeout=PORTS_RELEASE_SECONDS):
        raise StartFailed(f"ports already in use on 127.0.0.1: {', '.join(busy)}; stop what "
                          "listens there (ss -ltnp) or move the cluster with those variables")
    probe = {p.component: p for p in health.probes(layout, ports, replicas)}
    with Startup(layout) as plane:
        plane.launch(components.ETCD, components.etcd(bins, layout, ports))
        _wait_answers(plane, probe[components.ETCD], ETCD_READY_SECONDS)
        plane.launch(components.KUBE_APISERVER, components.kube_apiserver(bins, layout, ports))
        _wait_answers(plane, probe[components.KUBE_APISERVER], APISERVER_READY_SECONDS)
        plane.launch(components.CONTROLLER_MANAGER,
                     components.controller_manager(bins, layout, ports))
        plane.launch(components.SCHEDULER, components.scheduler(bins, layout, ports))
        # unshare ignores SIGTERM while it waits for its child; SIGKILL makes it SIGKILL the
        # namespace's init (--kill-child), which takes every process in the namespace with it.
        plane.launch(components.KWOK, components.kwok(bins, layout, ports), stop_signal="SIGKILL")
        create_nodes(layout, ports, node_count)
        servers = [components.replica(i) for i in range(replicas)] if server else []
        if server:  # while the other components start (the replicas need kube-apiserver only)
            crds = notifier.register(bins, layout, ports)
            # Each replica checks at start that its storage CRDs are served.
            plane.wait_for(components.KUBE_APISERVER,
                           f"CRDs {', '.join(crds)} to be Established",
                           lambda: notifier.crds_established(layout, ports, crds),
                           COMPONENT_READY_SECONDS)
            for i, name in enumerate(servers):
                plane.launch(name, notifier.server_argv(layout, ports, i, server_args))
            plane.launch(components.HAPROXY, haproxy.argv(layout))
        for name in (components.CONTROLLER_MANAGER, components.SCHEDULER, components.KWOK):
            _wait_answers(plane, probe[name], COMPONENT_READY_SECONDS)
        plane.wait_for(components.KWOK, f"{node_count} Ready kwok nodes",
                       lambda: nodes_ready(layout, ports, node_count), COMPONENT_READY_SECONDS)
        plane.wait_for(components.CONTROLLER_MANAGER, "the default ServiceAccount",
                       lambda: default_service_account_exists(layout, ports),
                       COMPONENT_READY_SECONDS)
        if not server:
            print(f"cluster: up without the extension in {time.monotonic() - started_at:.1f} s;"
                  f" export KUBECONFIG={layout.kubeconfig}")
            return
        for name in servers:
            _wait_answers(plane, probe[name], COMPONENT_READY_SECONDS)
        _wait_answers(plane, probe[components.HAPROXY], COMPONENT_READY_SECONDS)
        plane.wait_for(servers[0], f"APIService {notifier.APISERVICE_NAME} Available",
                       lambda: apiservice_available(layout, ports), COMPONENT_READY_SECONDS)
        plane.wait_for(servers[0], "kube-apiserver to serve the group's OpenAPI v3",
                       lambda: openapi_aggregated(layout, ports), COMPONENT_READY_SECONDS)
    elapsed = time.monotonic() - started_at
    for child in plane.children:
        proc = child.tracked
        print(f"cluster: started {proc.name} (pid {proc.pid}), log "
              f"{processes.log_path(layout.logs, proc.name)}")
    print(f"cluster: {node_count} kwok nodes Ready; kube-apiserver https://127.0.0.1:{ports.apiserver}")
    print(f"cluster: server replicas {', '.join(components.replica(i) for i in range(replicas))}"
          f" on ports {', '.join(str(ports.replica(i)) for i in range(replicas))}, behind "
          f"HAProxy on {ports.notifier}")
    print(f"cluster: up in {elapsed:.1f} s; export KUBECONFIG={layout.kubeconfig}")
    print(f"cluster: kubectl is {bins / 'kubectl'}")


def down(layout: Layout, quiet: bool = False) -> None:
    """Stop every process, last started first, but the server replicas at once (each drains
    for its shutdown delay; none depends on another); remove the plane's directory."""
    recorded = processes.load(layout.state_file)
    replicas = server_replicas(layout)
    first = recorded.index(replicas[0]) if replicas else len(recorded)
    stopped = (processes.stop([p for p in recorded[first:] if p not in replicas])
               + processes.stop_together(replicas[::-1]) + processes.stop(recorded[:first]))
    if layout.root.exists():
        shutil.rmtree(layout.root)
    if not quiet:
        print(f"cluster: stopped {', '.join(stopped) or 'nothing (none running)'}; "
              f"removed {layout.root}")


def status(layout: Layout, ports: Ports, replicas: int = REPLICAS) -> int:
    """Print each recorded process and every health problem; 0 only if healthy."""
    for proc in processes.load(layout.state_file):
        state = "running" if processes.is_alive(proc) else "stopped"
        print(f"{proc.name}\tpid {proc.pid}\t{state}")
    found = health.check(layout, ports, replicas)
    for problem in found:
        print(f"unhealthy: {problem}")
    if not found:
        print(f"healthy: {', '.join(components.plane(replicas))} answer; APIService "
              f"{notifier.APISERVICE_NAME} is Available")
    return 1 if found else 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "status", "user"])
    parser.add_argument("name", nargs="?", help="with `user`: the user name (certificate CN)")
    parser.add_argument("--group", action="append", default=[],
                        help="with `user`: a group (certificate O); repeatable")
    parser.add_argument("--nodes", type=int, default=NODE_COUNT,
                        help="kwok nodes to create (default: $CN_NODES or 3)")
    parser.add_argument("--replicas", type=_positive, default=REPLICAS,
                        help="with `up` and `status`: server replicas behind HAProxy "
                        "(default: $CN_REPLICAS or 2)")
    args = parser.parse_args(argv)
    layout, ports = Layout.default(), Ports()
    if args.command == "up":
        try:
            up(layout, ports, args.nodes, args.replicas)
        except StartFailed as error:
            print(f"cluster: {error}", file=sys.stderr)
            return 1
    elif args.command == "down":
        down(layout)
    elif args.command == "user":
        if not args.name:
            parser.error("user needs a NAME")
        print(pki.user_kubeconfig(layout, ports, args.name, tuple(args.group)))
    else:
        return status(layout, ports, args.replicas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
