"""The address ranges the local plane hands out, all on loopback, and what counts as loopback.

This host has no kube-proxy and no pod network: a ClusterIP or pod IP from a private range
would be dialled through the default route, off this machine. With both ranges inside
127.0.0.0/8 every such dial lands on this machine's loopback interface (Linux routes the whole
/8 there): refused at once, or answered by a test server listening on that address on purpose.
"""

from __future__ import annotations

import ipaddress

SERVICE_CLUSTER_IP_RANGE = "127.200.0.0/16"
"""Service ClusterIPs (kube-apiserver's and kube-controller-manager's
--service-cluster-ip-range)."""

POD_CIDR = "127.244.0.0/16"
"""Pod IPs (kwok's --cidr)."""

KUBERNETES_SERVICE_IP = str(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE)[1])
"""The `kubernetes` Service's ClusterIP: the first address of the service range, which
kube-apiserver's serving certificate names."""

NODE_IP = "127.0.0.1"
"""Every kwok node's InternalIP, where kube-apiserver dials kwok's kubelet API."""


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and an IPv4-mapped IPv6 loopback address (::ffff:127.x.y.z)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback
