"""An httpx client to the local kube-apiserver as the admin user."""

from __future__ import annotations

import ssl

import httpx

from localcluster.layout import Layout, Ports


def ssl_context(layout: Layout, cert_stem: str = "admin") -> ssl.SSLContext:
    """Trusts the local CA and presents the client certificate `pki/<cert_stem>.crt`."""
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    ctx.load_cert_chain(layout.pki / f"{cert_stem}.crt", layout.pki / f"{cert_stem}.key")
    return ctx


def client(layout: Layout, ports: Ports, timeout: float = 10.0) -> httpx.Client:
    return httpx.Client(base_url=f"https://127.0.0.1:{ports.apiserver}",
                        verify=ssl_context(layout), timeout=timeout)
