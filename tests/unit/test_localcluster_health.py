"""localcluster.health: healthy means every component runs and answers, and the APIService."""

from __future__ import annotations

from pathlib import Path

from localcluster import components, health, processes
from localcluster.layout import Layout, Ports


def _recorded(*names: str) -> list[processes.Tracked]:
    return [processes.Tracked(name, 100 + i, [name], 1) for i, name in enumerate(names)]


REPLICAS = 2
PLANE = components.plane(REPLICAS)
PROBES = health.probes(Layout(Path("/nonexistent")), Ports(), REPLICAS)


def _problems(recorded: list[processes.Tracked], dead: tuple[str, ...] = (),
              silent: tuple[str, ...] = (), apiservice: str | None = None) -> list[str]:
    return health.problems(recorded, PROBES, lambda p: p.name not in dead,
                           lambda probe: probe.component not in silent, lambda: apiservice)


def test_every_component_has_a_probe_in_start_order() -> None:
    assert tuple(p.component for p in PROBES) == PLANE


def test_healthy_when_every_component_runs_and_answers_and_the_apiservice_is_available() -> None:
    assert _problems(_recorded(*PLANE)) == []


def test_nothing_recorded_is_no_cluster() -> None:
    assert _problems([]) == ["no cluster: processes.json records no process"]


def test_components_missing_from_the_record_are_unhealthy() -> None:
    # The half-started plane of the reported failure: only etcd and kube-apiserver recorded,
    # both alive and kube-apiserver ready; it was taken for healthy and reused.
    found = _problems(_recorded("etcd", "kube-apiserver"),
                      apiservice="not found (not registered)")
    assert found == [
        "kube-controller-manager: not recorded in processes.json (never started)",
        "kube-scheduler: not recorded in processes.json (never started)",
        "kwok: not recorded in processes.json (never started)",
        "notifier-apiserver-0: not recorded in processes.json (never started)",
        "notifier-apiserver-1: not recorded in processes.json (never started)",
        "haproxy: not recorded in processes.json (never started)",
        "APIService v1alpha1.notifier.x-k8s.io: not found (not registered)",
    ]


def test_each_replica_and_haproxy_are_probed_on_their_own_ports() -> None:
    ports = Ports()
    urls = {p.component: p.url for p in PROBES}
    assert PLANE[-3:] == ("notifier-apiserver-0", "notifier-apiserver-1", "haproxy")
    assert urls["notifier-apiserver-0"] == f"https://127.0.0.1:{ports.notifier + 1}/readyz"
    assert urls["notifier-apiserver-1"] == f"https://127.0.0.1:{ports.notifier + 2}/readyz"
    assert urls["haproxy"] == f"https://127.0.0.1:{ports.notifier}/readyz"


def test_a_dead_or_silent_replica_is_unhealthy_even_if_haproxy_answers() -> None:
    recorded = _recorded(*PLANE)
    by_name = {p.name: p for p in recorded}
    found = _problems(recorded, dead=("notifier-apiserver-0",), silent=("notifier-apiserver-1",))
    assert found == [
        f"notifier-apiserver-0: pid {by_name['notifier-apiserver-0'].pid} is not running",
        f"notifier-apiserver-1: pid {by_name['notifier-apiserver-1'].pid} runs but GET "
        f"https://127.0.0.1:{Ports().notifier + 2}/readyz does not answer 200",
    ]


def test_a_replica_beyond_the_expected_count_is_unhealthy() -> None:
    found = _problems(_recorded(*components.plane(3)))
    assert found == ["notifier-apiserver-2: recorded, but not a process of this plane (a plane "
                     "started with another CN_REPLICAS or --replicas)"]


def test_a_dead_or_silent_component_is_unhealthy() -> None:
    recorded = _recorded(*PLANE)
    by_name = {p.name: p for p in recorded}
    found = _problems(recorded, dead=("kwok",), silent=("kube-scheduler",))
    assert found == [
        f"kube-scheduler: pid {by_name['kube-scheduler'].pid} runs but GET "
        f"https://127.0.0.1:{Ports().scheduler}/healthz does not answer 200",
        f"kwok: pid {by_name['kwok'].pid} is not running",
    ]


def test_an_unavailable_apiservice_is_unhealthy() -> None:
    found = _problems(_recorded(*PLANE), apiservice="not Available (x: y)")
    assert found == ["APIService v1alpha1.notifier.x-k8s.io: not Available (x: y)"]


def test_the_apiservice_is_not_asked_about_while_kube_apiserver_does_not_answer() -> None:
    def apiservice() -> str | None:
        raise AssertionError("asked kube-apiserver although it does not answer")

    found = health.problems(_recorded(*PLANE), PROBES, lambda p: True,
                            lambda probe: probe.component != "kube-apiserver", apiservice)
    assert [f.split(":")[0] for f in found] == ["kube-apiserver"]


def test_apiservice_condition_reads_the_available_condition() -> None:
    def with_available(status: str) -> dict:
        return {"status": {"conditions": [
            {"type": "Available", "status": status, "reason": "FailedDiscoveryCheck",
             "message": "no response from https://127.0.0.1:1"}]}}

    assert health.apiservice_condition(with_available("True")) is None
    assert health.apiservice_condition(with_available("False")) == (
        "not Available (FailedDiscoveryCheck: no response from https://127.0.0.1:1)")
    assert health.apiservice_condition({}) == "not Available (no Available condition yet)"


def test_a_probe_of_a_closed_port_or_missing_certificates_does_not_answer(tmp_path: Path) -> None:
    assert not health.Probe("etcd", "http://127.0.0.1:1/health", None).answers()
    assert not health.Probe("kwok", "https://127.0.0.1:1/healthz", tmp_path / "ca.crt").answers()
