"""The serving certificate planner, on a fake clock: creation, renewal at 2/3 of the serving
certificate's life, a next CA at 2/3 of the CA's, promotion only after the bundle holding it has
been published for the overlap, and the retired CA dropped once its last certificate expired."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509

from apiserver.certificates import secret
from apiserver.certificates.plan import Material, Policy, next_due, plan, renewal_time

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
MINUTE = datetime.timedelta(minutes=1)
POLICY = Policy(service="svc", namespace="ns", serving_validity=datetime.timedelta(hours=30),
                ca_validity=datetime.timedelta(hours=360))


def at(hours: float) -> datetime.datetime:
    return T0 + datetime.timedelta(hours=hours)


def test_nothing_makes_a_fresh_ca_and_a_serving_certificate_it_signed():
    material = plan(None, T0, POLICY)
    cert = material.serving.cert
    cert.verify_directly_issued_by(material.ca.cert)
    assert cert.not_valid_after_utc == T0 + POLICY.serving_validity
    assert material.ca.cert.not_valid_after_utc == T0 + POLICY.ca_validity
    assert material.trusted() == (material.ca.cert,)
    assert material.next_ca is None and material.retired_ca is None


def test_names_are_the_services_four_spellings():
    sans = plan(None, T0, POLICY).serving.cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert [n.value for n in sans] == ["svc", "svc.ns", "svc.ns.svc", "svc.ns.svc.cluster.local"]


def test_backdating_is_small_next_to_a_short_validity():
    short = Policy("svc", "ns", datetime.timedelta(seconds=30), datetime.timedelta(seconds=90))
    material = plan(None, T0, short)
    assert material.serving.cert.not_valid_before_utc == T0 - datetime.timedelta(seconds=3)
    # So its renewal is ahead, not due at once.
    assert plan(material, T0 + datetime.timedelta(seconds=1), short) is material


def test_nothing_due_returns_the_same_material():
    material = plan(None, T0, POLICY)
    assert plan(material, at(1), POLICY) is material
    assert next_due(material, POLICY) == renewal_time(material.serving.cert)


def test_the_serving_certificate_is_renewed_at_two_thirds_of_its_life_by_the_same_ca():
    material = plan(None, T0, POLICY)
    due = renewal_time(material.serving.cert)
    assert due == material.serving.cert.not_valid_before_utc + (
        material.serving.cert.not_valid_after_utc
        - material.serving.cert.not_valid_before_utc) * 2 / 3
    assert plan(material, due - MINUTE, POLICY) is material
    renewed = plan(material, due, POLICY)
    assert renewed.serving.cert.serial_number != material.serving.cert.serial_number
    assert renewed.ca is material.ca
    renewed.serving.cert.verify_directly_issued_by(material.ca.cert)
    assert renewed.serving.cert.not_valid_after_utc == due + POLICY.serving_validity


def test_a_serving_certificate_never_outlives_its_ca():
    material = plan(None, T0, POLICY)
    late = material.ca.cert.not_valid_after_utc - datetime.timedelta(hours=5)
    # (skip the CA rotation: no next CA, as if published never happened)
    renewed = plan(Material(material.ca, material.serving), late, POLICY, published=[])
    assert renewed.serving.cert.not_valid_after_utc == material.ca.cert.not_valid_after_utc


def test_a_certificate_for_other_names_or_of_another_ca_is_reissued():
    material = plan(None, T0, POLICY)
    other = Policy("other", "ns", POLICY.serving_validity, POLICY.ca_validity)
    assert plan(material, at(1), other).serving.cert.subject.rfc4514_string() == (
        "CN=other.ns.svc")
    foreign = plan(None, T0, POLICY)
    mixed = Material(ca=material.ca, serving=foreign.serving)
    fixed = plan(mixed, at(1), POLICY)
    fixed.serving.cert.verify_directly_issued_by(material.ca.cert)


def _rotation_start() -> tuple[Material, datetime.datetime]:
    material = plan(None, T0, POLICY)
    due = renewal_time(material.ca.cert)
    return material, due


def test_a_next_ca_joins_the_bundle_at_two_thirds_of_the_cas_life_and_does_not_sign():
    material, due = _rotation_start()
    assert next_due(plan(material, due - MINUTE, POLICY, published=[material.ca.cert]),
                    POLICY) <= due
    before = plan(material, due - MINUTE, POLICY, published=[material.ca.cert])
    assert before.next_ca is None
    introduced = plan(material, due, POLICY, published=[material.ca.cert])
    assert introduced.next_ca is not None
    assert introduced.trusted() == (material.ca.cert, introduced.next_ca.cert)
    assert introduced.ca is material.ca
    introduced.serving.cert.verify_directly_issued_by(material.ca.cert)
    # The APIService does not hold it yet: not published.
    assert introduced.next_ca_published_at is None


def test_the_next_ca_is_promoted_only_an_overlap_after_its_bundle_was_published():
    material, due = _rotation_start()
    introduced = plan(material, due, POLICY, published=[material.ca.cert])
    assert introduced.next_ca is not None
    bundle = list(introduced.trusted())
    # However long it waits, unpublished means not promoted.
    waiting = plan(introduced, due + POLICY.overlap * 2, POLICY, published=[material.ca.cert])
    assert waiting.ca is material.ca and waiting.next_ca_published_at is None
    seen = due + datetime.timedelta(hours=1)
    published = plan(introduced, seen, POLICY, published=bundle)
    assert published.next_ca_published_at == seen
    assert published.ca is material.ca
    assert next_due(published, POLICY) <= seen + POLICY.overlap
    almost = plan(published, seen + POLICY.overlap - MINUTE, POLICY, published=bundle)
    assert almost.ca is material.ca and almost.next_ca is published.next_ca
    promoted = plan(published, seen + POLICY.overlap, POLICY, published=bundle)
    assert promoted.ca.cert == introduced.next_ca.cert
    assert promoted.next_ca is None
    promoted.serving.cert.verify_directly_issued_by(introduced.next_ca.cert)
    assert promoted.retired_ca == material.ca.cert
    assert promoted.trusted() == (introduced.next_ca.cert, material.ca.cert)
    # The retired CA is trusted until the last certificate it signed expires.
    assert promoted.retired_ca_until == published.serving.cert.not_valid_after_utc


def test_without_an_apiservice_the_next_ca_counts_as_published_when_written():
    material, due = _rotation_start()
    introduced = plan(material, due, POLICY, published=None)
    assert introduced.next_ca_published_at == due


def test_the_retired_ca_is_dropped_once_no_longer_needed():
    material, due = _rotation_start()
    introduced = plan(material, due, POLICY)
    promoted = plan(introduced, due + POLICY.overlap, POLICY)
    assert promoted.retired_ca is not None and promoted.retired_ca_until is not None
    until = promoted.retired_ca_until
    assert next_due(promoted, POLICY) <= until
    kept = plan(promoted, until - MINUTE, POLICY, published=list(promoted.trusted()))
    assert kept.retired_ca is not None
    dropped = plan(kept, until, POLICY, published=list(kept.trusted()))
    assert dropped.retired_ca is None and dropped.trusted() == (promoted.ca.cert,)


def test_a_whole_year_on_a_fake_clock_never_serves_an_untrusted_or_expired_certificate():
    """Step through several CA lifetimes as a replica would (each pass at next_due, the
    APIService publishing what the Secret holds right after): at every step the serving
    certificate is valid, signed by a CA the published bundle held before, and rotations
    happen."""
    material = plan(None, T0, POLICY)
    published = list(material.trusted())
    now, cas, servings = T0, {material.ca.cert}, {material.serving.cert}
    while now < T0 + POLICY.ca_validity * 4:
        now = max(next_due(material, POLICY), now + MINUTE)
        previous_bundle = published
        material = plan(material, now, POLICY, published=published)
        cert = material.serving.cert
        assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc
        # The CA that signs was trusted by the aggregator before this step.
        assert material.ca.cert in previous_bundle or material.ca.cert == next(iter(cas))
        published = list(material.trusted())
        material = plan(material, now, POLICY, published=published)
        cas.add(material.ca.cert)
        servings.add(material.serving.cert)
    assert len(cas) >= 4
    assert len(servings) > len(cas) * 5


def test_an_expired_ca_starts_afresh():
    material = plan(None, T0, POLICY)
    later = material.ca.cert.not_valid_after_utc
    fresh = plan(material, later, POLICY)
    assert fresh.ca.cert != material.ca.cert
    assert fresh.trusted() == (fresh.ca.cert,)


@pytest.mark.parametrize("stage", ["fresh", "introduced", "published", "promoted"])
def test_the_secret_round_trips_every_stage(stage):
    material, due = _rotation_start()
    stages = {"fresh": material}
    stages["introduced"] = plan(material, due, POLICY, published=[material.ca.cert])
    stages["published"] = plan(stages["introduced"], due, POLICY,
                               published=list(stages["introduced"].trusted()))
    stages["promoted"] = plan(stages["published"], due + POLICY.overlap, POLICY)
    chosen = stages[stage]
    obj = secret.with_material({"metadata": {"name": "s", "annotations": {"keep": "me"}}},
                               chosen)
    assert obj["type"] == "kubernetes.io/tls"
    assert obj["metadata"]["annotations"]["keep"] == "me"
    decoded = secret.decode(obj)
    assert secret.holds(obj, decoded)
    assert decoded.trusted() == chosen.trusted()
    assert decoded.next_ca_published_at == chosen.next_ca_published_at
    assert decoded.retired_ca_until == chosen.retired_ca_until
    assert (decoded.serving.cert, decoded.ca.cert) == (chosen.serving.cert, chosen.ca.cert)
    assert base64.b64decode(obj["data"]["ca-bundle.crt"]) == chosen.bundle_pem()


@pytest.mark.parametrize(("data", "message"), [
    ({}, "key ca.crt is missing"),
    ({"ca.crt": "%%%", "ca.key": "", "tls.crt": "", "tls.key": ""}, "key ca.crt is not base64"),
])
def test_an_unusable_secret_names_the_key(data, message):
    with pytest.raises(secret.UnusableSecret, match=message):
        secret.decode({"data": data})


def test_a_key_of_another_certificate_is_unusable():
    a, b = plan(None, T0, POLICY), plan(None, T0, POLICY)
    data, _ = secret.encode(a)
    data["tls.key"] = secret.encode(b)[0]["tls.key"]
    with pytest.raises(secret.UnusableSecret, match="keys tls.crt/tls.key: the private key is "
                       "not the certificate's"):
        secret.decode({"data": data})
