from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apiserver.authn.authenticator import AuthenticationFailed, Authenticator, TrustNotLoaded
from apiserver.authn.tokenreview import TokenReviewer
from apiserver.authn.trust import TrustStore
from apiserver.authn.user import UserInfo
from apiserver.kube import KubeRejected, KubeUnavailable

PROXY_HEADERS = [
    (b"x-remote-user", b"bob"),
    (b"x-remote-group", b"dev, ops"),
    (b"x-remote-group", b"system:masters-not-really"),
    (b"x-remote-extra-scopes", b"a"),
    (b"x-remote-extra-scopes", b"b,c"),
    (b"x-remote-extra-example.com%2fteam", b"x"),
]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make(pki, fake_kube, clock):
    def make(allowed_names=("front-proxy-client",), loaded=True, ttl=10.0, now=None):
        store = TrustStore()
        if loaded:
            store.update(pki.trust(allowed_names))
        reviewer = TokenReviewer(fake_kube.client(), ttl, clock=clock)
        kwargs = {"clock": lambda: now} if now else {}
        return Authenticator(store, reviewer, **kwargs), reviewer

    return make


async def test_front_proxy_headers_trusted_with_front_proxy_cert(pki, make):
    authenticator, _ = make()
    user = await authenticator.authenticate(PROXY_HEADERS, pki.der(pki.front_proxy))
    assert user == UserInfo(
        name="bob",
        groups=["dev, ops", "system:masters-not-really", "system:authenticated"],
        extra={"scopes": ["a", "b,c"], "example.com/team": ["x"]},
    )


async def test_front_proxy_any_cn_when_allowed_names_empty(pki, make):
    authenticator, _ = make(allowed_names=())
    user = await authenticator.authenticate(PROXY_HEADERS, pki.der(pki.front_proxy_wrong_cn))
    assert user.name == "bob"


async def test_headers_ignored_without_certificate(make):
    authenticator, _ = make()
    user = await authenticator.authenticate(PROXY_HEADERS, None)
    assert user == UserInfo("system:anonymous", groups=["system:unauthenticated"])


async def test_headers_ignored_with_client_ca_cert_even_with_front_proxy_cn(pki, make):
    authenticator, _ = make()
    user = await authenticator.authenticate(PROXY_HEADERS, pki.der(pki.client_ca_front_proxy_cn))
    assert user.name == "front-proxy-client"  # the x509 user, not the header's "bob"
    assert "dev, ops" not in user.groups


async def test_headers_not_trusted_when_cn_not_allowed(pki, make):
    authenticator, _ = make()
    with pytest.raises(AuthenticationFailed, match="not an allowed name"):
        await authenticator.authenticate(PROXY_HEADERS, pki.der(pki.front_proxy_wrong_cn))


async def test_headers_not_trusted_without_client_auth_usage(pki, make):
    authenticator, _ = make()
    with pytest.raises(AuthenticationFailed):
        await authenticator.authenticate(PROXY_HEADERS, pki.der(pki.front_proxy_server_only))


async def test_cert_from_unknown_ca_fails(pki, make):
    authenticator, _ = make()
    with pytest.raises(AuthenticationFailed, match="not issued by a trusted CA"):
        await authenticator.authenticate(PROXY_HEADERS, pki.der(pki.stranger))


async def test_expired_front_proxy_cert_not_trusted(pki, make):
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=400)
    authenticator, _ = make(now=later)
    with pytest.raises(AuthenticationFailed, match="validity"):
        await authenticator.authenticate(PROXY_HEADERS, pki.der(pki.front_proxy))


async def test_front_proxy_cert_without_user_header_is_not_a_client_cert(pki, make):
    authenticator, _ = make()
    with pytest.raises(AuthenticationFailed, match="client certificate"):
        await authenticator.authenticate([(b"x-remote-group", b"g")], pki.der(pki.front_proxy))


async def test_x509_user_from_client_ca(pki, make):
    authenticator, _ = make()
    user = await authenticator.authenticate([], pki.der(pki.alice))
    assert user == UserInfo("alice", groups=["team-a", "team-b", "system:authenticated"])


async def test_token_reviewed_and_cached(make, fake_kube, clock):
    fake_kube.tokens["good"] = {"username": "carol", "uid": "u-1", "groups": ["g1"],
                                "extra": {"k": ["v"]}}
    authenticator, reviewer = make()
    headers = [(b"authorization", b"Bearer good")]
    first = await authenticator.authenticate(headers, None)
    second = await authenticator.authenticate(headers, None)
    assert first == second == UserInfo("carol", "u-1", ["g1", "system:authenticated"],
                                       {"k": ["v"]})
    assert fake_kube.paths() == ["/apis/authentication.k8s.io/v1/tokenreviews"]
    assert fake_kube.reviews[0][1]["spec"] == {"token": "good"}
    assert (reviewer.counters.reviews, reviewer.counters.cache_hits) == (1, 1)
    clock.now = 10.0  # TTL passed: reviewed again
    await authenticator.authenticate(headers, None)
    assert reviewer.counters.reviews == 2


async def test_rejected_token_is_401_and_cached(make, fake_kube):
    authenticator, reviewer = make()
    for _ in range(2):
        with pytest.raises(AuthenticationFailed, match="invalid bearer token"):
            await authenticator.authenticate([(b"authorization", b"Bearer bad")], None)
    assert reviewer.counters.reviews == 1


async def test_token_review_errors_are_not_cached(make, fake_kube):
    fake_kube.tokens["good"] = {"username": "carol"}
    authenticator, reviewer = make()
    headers = [(b"authorization", b"Bearer good")]
    fake_kube.down = True
    with pytest.raises(KubeUnavailable):
        await authenticator.authenticate(headers, None)
    fake_kube.down, fake_kube.error_code = False, 403
    with pytest.raises(KubeRejected):
        await authenticator.authenticate(headers, None)
    fake_kube.error_code = None
    assert (await authenticator.authenticate(headers, None)).name == "carol"
    assert reviewer.counters.errors == 2
    assert reviewer.counters.reviews == 3


async def test_non_bearer_authorization_is_anonymous(make, fake_kube):
    authenticator, _ = make()
    user = await authenticator.authenticate([(b"authorization", b"Basic Zm9vOmJhcg==")], None)
    assert user == UserInfo("system:anonymous", groups=["system:unauthenticated"])
    assert fake_kube.reviews == []


async def test_front_proxy_wins_over_token(pki, make, fake_kube):
    authenticator, _ = make()
    headers = [*PROXY_HEADERS, (b"authorization", b"Bearer whatever")]
    assert (await authenticator.authenticate(headers, pki.der(pki.front_proxy))).name == "bob"
    assert fake_kube.reviews == []


async def test_not_loaded_trust_refuses(make):
    authenticator, _ = make(loaded=False)
    with pytest.raises(TrustNotLoaded):
        await authenticator.authenticate([], None)


def test_strip_identity_headers(make):
    authenticator, _ = make()
    headers = [*PROXY_HEADERS, (b"authorization", b"Bearer t"), (b"accept", b"*/*"),
               (b"X-Remote-User", b"mixed-case")]
    assert authenticator.strip_identity_headers(headers) == [(b"accept", b"*/*")]


def _two_cn_cert(pki, first: str, last: str) -> bytes:
    """A client-CA certificate whose subject holds two CNs (and two Os), in that order."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, first),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "o-1"),
                         x509.NameAttribute(NameOID.COMMON_NAME, last),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "o-2")])
    cert = (x509.CertificateBuilder().subject_name(subject)
            .issuer_name(pki.client_ca.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)
            .sign(pki.client_ca.key, hashes.SHA256()))
    return cert.public_bytes(Encoding.DER)


async def test_two_cns_name_the_last_as_go_does(pki, make):
    """kube-apiserver (Go's pkix.Name) takes the last CN as the user and every O as a group;
    reading the first would make this server see another user than kube-apiserver does."""
    authenticator, _ = make()
    user = await authenticator.authenticate([], _two_cn_cert(pki, "admin", "mallory"))
    assert user == UserInfo("mallory", groups=["o-1", "o-2", "system:authenticated"])
