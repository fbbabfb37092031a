"""Test doubles and cluster helpers for Events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apiserver.kube.events import Occurrence
from tests.support.kube import Cluster


@dataclass
class RecordingSink:
    """An `EventSink` that keeps what it is given."""

    occurrences: list[Occurrence] = field(default_factory=list)

    def emit(self, occurrence: Occurrence) -> None:
        self.occurrences.append(occurrence)

    def reasons(self) -> list[str]:
        return [o.reason for o in self.occurrences]


def events_regarding(cluster: Cluster, namespace: str, kind: str, name: str = ""
                     ) -> list[dict[str, Any]]:
    """The events.k8s.io/v1 Events in `namespace` regarding objects of `kind` (named `name`)."""
    with cluster.admin() as kube:
        response = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    assert response.status_code == 200, response.text
    return [e for e in response.json()["items"] if e["regarding"]["kind"] == kind
            and (not name or e["regarding"]["name"] == name)]
