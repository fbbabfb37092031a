"""The built-in serving certificate bootstrap (docs/certificates.md): a CA and a serving
certificate kept in a Secret that every replica shares, written to --cert-dir, rotated before
they expire, and the APIService's caBundle kept equal to the Secret's CA bundle. The caBundle,
which only the server writes, is also what a Secret is checked against: a Secret asking to
trust a CA the server did not publish there is refused, whoever created it.

`plan` decides what the Secret should hold (pure, given the time); `secret` maps that to and
from the Secret's keys; `files` writes the serving pair for the TLS layer; `reconciler` reads
and writes the Secret and the APIService with optimistic concurrency and runs the loop.
"""
