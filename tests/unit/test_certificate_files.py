"""The serving pair in --cert-dir (written whole, the key 0600, not rewritten when unchanged),
the TLS layer's view of its expiry, and the reconciler's background loop renewing on time."""

from __future__ import annotations

import asyncio
import datetime
import stat

from apiserver.certificates.files import CertDir
from apiserver.certificates.plan import Policy
from apiserver.certificates.reconciler import ServingCertificates
from apiserver.serving.tls import ServingTLS
from certs.authority import issue, new_ca

from .test_certificate_reconciler import Kube

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_the_pair_is_written_once_with_a_private_key(tmp_path):
    ca = new_ca("ca")
    pair = issue(ca, "svc", dns_names=("svc",), server=True)
    directory = CertDir(tmp_path / "missing" / "dir")
    assert directory.write(pair)
    assert directory.cert_file.read_bytes() == pair.cert_pem()
    assert directory.key_file.read_bytes() == pair.key_pem()
    assert stat.S_IMODE(directory.key_file.stat().st_mode) == 0o600
    inode = directory.cert_file.stat().st_ino
    assert not directory.write(pair)
    assert directory.cert_file.stat().st_ino == inode
    other = issue(ca, "svc", dns_names=("svc",), server=True)
    assert directory.write(other)
    assert directory.cert_file.stat().st_ino != inode  # replaced by a rename, not rewritten
    assert sorted(p.name for p in directory.directory.iterdir()) == ["tls.crt", "tls.key"]


def test_the_tls_layer_reports_the_expiry_of_what_it_serves(tmp_path):
    ca = new_ca("ca")
    directory = CertDir(tmp_path)
    first = issue(ca, "svc", server=True, validity=datetime.timedelta(days=3), now=T0)
    directory.write(first)
    tls = ServingTLS(directory.cert_file, directory.key_file)
    assert tls.expiration_timestamp() == (T0 + datetime.timedelta(days=3)).timestamp()
    second = issue(ca, "svc", server=True, validity=datetime.timedelta(days=9), now=T0)
    directory.write(second)
    assert tls.expiration_timestamp() == (T0 + datetime.timedelta(days=9)).timestamp()


async def test_the_background_loop_renews_when_due(tmp_path):
    """With a 3-second serving validity the loop, sleeping until the renewal is due, writes a
    new certificate within a few seconds (real time)."""
    policy = Policy("svc", "ns", datetime.timedelta(seconds=3), datetime.timedelta(hours=1))
    certificates = ServingCertificates(Kube().client(), policy, CertDir(tmp_path),
                                       secret_name="serving", apiservice="")
    first = await certificates.start()
    started = asyncio.get_running_loop().time()
    loop = asyncio.create_task(certificates.run())
    try:
        async with asyncio.timeout(10):
            while (tmp_path / "tls.crt").read_bytes() == first.serving.cert_pem():
                await asyncio.sleep(0.1)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    # Not at once: at 2/3 of a life of about 3 s (X.509 times are whole seconds).
    assert asyncio.get_running_loop().time() - started > 1.0
    assert certificates.material is not None
    assert certificates.material.ca.cert == first.ca.cert
