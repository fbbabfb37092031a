"""Command line: issue certificates from a CA on disk.

    python -m certs ca --dir DIR --name NAME --cn CN
    python -m certs client --ca DIR/NAME --out DIR/user --cn alice --group team-a
    python -m certs serving --ca DIR/NAME --out DIR/server --cn svc --dns svc.ns.svc --ip 127.0.0.1
"""

from __future__ import annotations

import argparse
from pathlib import Path

from certs.authority import KeyPair, issue, load_or_create_ca


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m certs", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    ca = sub.add_parser("ca", help="create a CA (or keep an existing one) as DIR/NAME.crt and .key")
    ca.add_argument("--dir", type=Path, required=True)
    ca.add_argument("--name", required=True, help="file stem")
    ca.add_argument("--cn", required=True, help="the CA's common name")

    for kind in ("client", "serving"):
        p = sub.add_parser(kind, help=f"issue a {kind} certificate as OUT.crt and OUT.key")
        p.add_argument("--ca", type=Path, required=True, help="CA path without .crt/.key suffix")
        p.add_argument("--out", type=Path, required=True, help="output path without suffix")
        p.add_argument("--cn", required=True, help="common name (the user name, for a client)")
        if kind == "client":
            p.add_argument("--group", action="append", default=[], help="an O (group); repeatable")
        else:
            p.add_argument("--dns", action="append", default=[], help="a DNS SAN; repeatable")
            p.add_argument("--ip", action="append", default=[], help="an IP SAN; repeatable")

    args = parser.parse_args(argv)
    if args.command == "ca":
        load_or_create_ca(args.dir, args.name, args.cn)
        return
    authority = KeyPair.load(args.ca.with_suffix(".crt"), args.ca.with_suffix(".key"))
    if args.command == "client":
        pair = issue(authority, args.cn, organizations=tuple(args.group), client=True)
    else:
        pair = issue(authority, args.cn, dns_names=tuple(args.dns), ip_addresses=tuple(args.ip),
                     server=True)
    pair.write(args.out.with_suffix(".crt"), args.out.with_suffix(".key"))


if __name__ == "__main__":
    main()
