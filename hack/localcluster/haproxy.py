"""HAProxy in front of the server replicas: its configuration and its command line.

TCP mode passes TLS through untouched, so the aggregator still verifies the replicas' serving
certificate against the APIService caBundle. Connections go round robin to the replicas whose
/readyz answers 200 (checked over TLS every second; two failures take a replica out, one success
puts it back). The Debian package `haproxy` provides /usr/sbin/haproxy (hack/haproxy.sh installs
it).
"""

from __future__ import annotations

import socket
from pathlib import Path

from localcluster.layout import Layout, Ports
from localcluster.notifier import pod_name

BINARY = Path("/usr/sbin/haproxy")
CONNECT_TIMEOUT = "2s"
IDLE_TIMEOUT = "10s"
"""client/server timeouts: they apply only until the connection becomes a tunnel."""
TUNNEL_TIMEOUT_SECONDS = 2 * 1800 + 60
"""How long an established connection may stay silent in both directions: the longest watch the
server keeps open (twice MIN_REQUEST_TIMEOUT_SECONDS of apiserver/handlers/watch_response.py,
when a watch gives no timeoutSeconds) plus a minute, so neither a quiet watch nor a notify that
waits for its run (waitSeconds) is cut by the load balancer."""
CHECK_TIMEOUT = "2s"
SOCKET_PATH_MAX = 97
"""The longest stats socket path HAProxy takes (2.6: "socket path '...' too long (max 97)"): a
unix socket's 107 bytes less the suffix of the temporary name it binds first."""


def socket_path_problem(layout: Layout) -> str:
    """Why HAProxy would refuse the layout's stats socket path, or "" if it takes it."""
    path = str(layout.haproxy_socket)
    if len(path) <= SOCKET_PATH_MAX:
        return ""
    return (f"the state directory {layout.root} is too long for HAProxy's stats socket: "
            f"{path} has {len(path)} characters, HAProxy takes at most {SOCKET_PATH_MAX}; set "
            "CN_CLUSTER_DIR to a shorter directory")


def config(layout: Layout, ports: Ports, replicas: int) -> str:
    """haproxy.cfg: listen on CN_NOTIFIER_PORT, balance over `replicas` replicas; the runtime
    API on layout.haproxy_socket (read by `routes_to`)."""
    servers = "\n".join(
        f"    server {pod_name(i)} 127.0.0.1:{ports.replica(i)} "
        "check check-ssl verify none inter 1s fall 2 rise 1"
        for i in range(replicas))
    return f"""\
# Written by `python -m localcluster up` (hack/localcluster/haproxy.py); rewritten at each up.
global
    log stdout format raw local0
    stats socket {layout.haproxy_socket} mode 600 level user

defaults
    mode tcp
    log global
    option tcplog
    timeout connect {CONNECT_TIMEOUT}
    timeout client {IDLE_TIMEOUT}
    timeout server {IDLE_TIMEOUT}
    timeout tunnel {TUNNEL_TIMEOUT_SECONDS}s
    timeout check {CHECK_TIMEOUT}
    # A replica that died since its last check refuses the connection: try another one.
    retries 2
    option redispatch 1

frontend notifier
    bind 127.0.0.1:{ports.notifier}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz
    http-check expect status 200
{servers}
"""


def write_config(layout: Layout, ports: Ports, replicas: int) -> Path:
    layout.haproxy_config.write_text(config(layout, ports, replicas))
    return layout.haproxy_config


def argv(layout: Layout) -> list[str]:
    """HAProxy in the foreground (-db), so that it is a tracked child like the others."""
    return [str(BINARY), "-db", "-f", str(layout.haproxy_config)]


def routes_to(layout: Layout, replica: int) -> bool:
    """Whether HAProxy counts server replica `replica` UP (its last checks passed), read from
    its runtime API (`show stat`); False if HAProxy does not answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as runtime:
            runtime.settimeout(2.0)
            runtime.connect(str(layout.haproxy_socket))
            runtime.sendall(b"show stat\n")
            answer = b""
            while chunk := runtime.recv(65536):
                answer += chunk
    except OSError:
        return False
    lines = answer.decode(errors="replace").splitlines()
    if not lines or not lines[0].startswith("# "):
        return False
    header = lines[0][2:].split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
    return any(row.get("pxname") == "replicas" and row.get("svname") == pod_name(replica)
               and row.get("status", "").startswith("UP") for row in rows)
