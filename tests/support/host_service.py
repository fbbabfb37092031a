"""Install the chart or a kustomize directory already pointed at servers run on the host.

The local plane has no kubelet: kwok's pods run nothing, and no ClusterIP or pod IP has
anything behind it (tests/support/in_cluster.py starts the servers as host processes with
HAProxy in front). The chart's Service and APIService are therefore rewritten before they are
created, by localcluster.notifier.point_at_host (the rewrite `localcluster up` applies to its
own registration): the Service an ExternalName of 127.0.0.1 on HAProxy's port, the APIService
naming that port. So the aggregator's first check of the APIService already dials
127.0.0.1:<port>, refused until HAProxy listens, and never the Service's ClusterIP.

tests/cluster/test_helm_install.py runs docs/install.md's commands unchanged with the
directory of `write_wrappers` first on PATH:
- `helm install` and `helm upgrade` get post_renderer_flags(port): helm pipes what it rendered
  through `python -m tests.support.host_service PORT` before it creates or updates anything,
  and keeps the rewritten manifests as the release's, so an upgrade (the flags are not release
  values: each upgrade gets them again) patches nothing back and `helm uninstall` deletes the
  objects it created;
- `kubectl apply -k DIR` becomes `kubectl kustomize DIR | python -m tests.support.host_service
  PORT | kubectl apply -f -` (the same apply, of the rewritten objects);
- every other command runs the real binary, unchanged.

`python -m tests.support.host_service PORT` (from the repository root, with `hack` on
PYTHONPATH) reads multi-document YAML on stdin and writes it rewritten on stdout.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import yaml

from localcluster.layout import HACK_DIR, REPO_ROOT
from localcluster.notifier import APISERVICE_NAME, point_at_host
from localcluster.pki import NOTIFIER_SERVICE

MODULE = "tests.support.host_service"
PYTHONPATH = f"{REPO_ROOT}:{HACK_DIR}"
"""What the rewrite imports from: this repository's `tests` and hack/'s `localcluster`."""
_POINTED = {("Service", NOTIFIER_SERVICE), ("APIService", APISERVICE_NAME)}


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:  # each object written out in full
        return True


def rewrite(manifests: str, port: int) -> str:
    """Multi-document YAML `manifests` with point_at_host(`port`) applied. Raises ValueError
    unless they hold the Service and the APIService it points (so nothing is installed with
    either unpointed, e.g. after a rename in the chart)."""
    objects = point_at_host(yaml.safe_load_all(manifests), port)
    kinds = sorted(o["kind"] for o in objects
                   if (o.get("kind"), o.get("metadata", {}).get("name")) in _POINTED)
    if kinds != sorted(kind for kind, _ in _POINTED):
        raise ValueError(f"expected one each of {sorted(_POINTED)} to point at port {port}, "
                         f"found kinds {kinds}")
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True)


def rewrite_argv(port: int, python: str = sys.executable) -> list[str]:
    """The command line of the rewrite with `python`."""
    return [python, "-m", MODULE, str(port)]


def post_renderer_flags(port: int, python: str = sys.executable) -> list[str]:
    """helm install/upgrade flags running the rewrite as helm's post-renderer (an executable
    and its arguments; helm writes the rendered manifests to its stdin, reads its stdout)."""
    executable, *args = rewrite_argv(port, python)
    return ["--post-renderer", executable, *(f"--post-renderer-args={a}" for a in args)]


_HELM = """#!/bin/bash
# helm ({helm}), with `install` and `upgrade` post-rendered by {module}: the Service and the
# APIService are created pointed at 127.0.0.1:{port}.
export PYTHONPATH={pythonpath}
case ${{1-}} in
  install|upgrade) exec {helm} "$@" {flags} ;;
  *) exec {helm} "$@" ;;
esac
"""

_KUBECTL = """#!/bin/bash
# kubectl ({kubectl}), with `apply -k DIR` applying `kubectl kustomize DIR` rewritten by
# {module}: the Service and the APIService are created pointed at 127.0.0.1:{port}.
set -euo pipefail
if [[ ${{1-}} != apply ]]; then
  exec {kubectl} "$@"
fi
shift
args=()
directory=
while (($#)); do
  case $1 in
    -k|--kustomize) directory=$2; shift 2 ;;
    -k=*|--kustomize=*) directory=${{1#*=}}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ -z $directory ]]; then
  exec {kubectl} apply "${{args[@]}}"
fi
{kubectl} kustomize "$directory" | PYTHONPATH={pythonpath} {rewrite} \\
  | {kubectl} apply "${{args[@]}}" -f -
"""


def write_wrappers(bins: Path, port: int, directory: Path) -> Path:
    """Write `helm` and `kubectl` into `directory`, each running the one of `bins` with the
    rewrite for HAProxy's `port` as the module docstring says; returns `directory`, to put
    first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    common = {"module": MODULE, "port": port, "pythonpath": shlex.quote(PYTHONPATH)}
    scripts = {
        "helm": _HELM.format(helm=shlex.quote(str(bins / "helm")),
                             flags=shlex.join(post_renderer_flags(port)), **common),
        "kubectl": _KUBECTL.format(kubectl=shlex.quote(str(bins / "kubectl")),
                                   rewrite=shlex.join(rewrite_argv(port)), **common),
    }
    for name, text in scripts.items():
        path = directory / name
        path.write_text(text)
        path.chmod(0o755)
    return directory


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print(f"usage: python -m {MODULE} PORT  (manifests on stdin, rewritten on stdout)",
              file=sys.stderr)
        return 2
    try:
        rewritten = rewrite(sys.stdin.read(), int(argv[0]))
    except ValueError as error:
        print(f"{MODULE}: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(rewritten)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
