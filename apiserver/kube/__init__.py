"""kube-apiserver access: the connection (`config`), the async client (`client`) and the one
list-then-watch cache every list/watch of the server uses (`informer`)."""

from apiserver.kube.client import (
    CONNECTION_LIMITS,
    METADATA_ONLY,
    METADATA_ONLY_WATCH,
    UNAVAILABLE_CODES,
    KubeClient,
    KubeRejected,
    KubeUnavailable,
)
from apiserver.kube.config import (
    Connection,
    Credentials,
    KubeconfigError,
    connection_from_configuration,
    connection_from_kubeconfig,
    in_cluster_connection,
)

__all__ = [
    "CONNECTION_LIMITS",
    "METADATA_ONLY",
    "METADATA_ONLY_WATCH",
    "UNAVAILABLE_CODES",
    "Connection",
    "Credentials",
    "KubeClient",
    "KubeRejected",
    "KubeUnavailable",
    "KubeconfigError",
    "connection_from_configuration",
    "connection_from_kubeconfig",
    "in_cluster_connection",
]
