"""The kustomize base apiservice/ and its cert-manager variant, generated from the Helm chart.

    PYTHONPATH=hack python hack/render_manifests.py          # rewrite them from the chart
    PYTHONPATH=hack python hack/render_manifests.py --check  # exit 1 if they differ (make lint)

The chart (charts/container-notifier) is the one definition of the manifests. apiservice/ is
`helm template` with the default values (namespace container-notifier, bootstrap certificates)
and image.repository=IMAGE (the chart has no default: no image is published), one file per
template as before, plus namespace.yaml and kustomization.yaml; the labels that only
say which Helm release made an object (HELM_ONLY_LABELS) are left out.
apiservice/cert-manager/ is the same with certificates.mode=cert-manager, in the same files plus
cert-manager.yaml (`diff -r apiservice apiservice/cert-manager` shows what the mode changes).
It is a complete kustomization, not an overlay of ../: kustomize refuses an overlay that lies
inside the directory of its base ("cycle detected"), and moving the base would break every path
that names apiservice/*.yaml. monitoring/servicemonitor.yaml is the chart's ServiceMonitor
(metrics.serviceMonitor.enabled=true).

The check parses the committed files and the chart's output and compares objects (kind,
namespace, name, every field), not text, so comments and formatting may differ and content may
not; for each directory it also compares `kubectl kustomize <dir>` with the chart's output.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localcluster.__main__ import build_binaries
from localcluster.layout import REPO_ROOT

CHART = REPO_ROOT / "charts" / "container-notifier"
BASE = REPO_ROOT / "apiservice"
NAMESPACE = "container-notifier"
RELEASE = "container-notifier"
IMAGE = "container-notifier"
"""The image the kustomize base names: the local name `make image` gives it (docs/image.md);
an overlay sets the image the user pushed (`kustomize edit set image`)."""

HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/instance",
                    "app.kubernetes.io/managed-by", "app.kubernetes.io/version")
"""Labels the chart sets that name the release; not in the kustomize base (Helm adds its own
ownership metadata on install anyway)."""

TEMPLATE_FILES = ("storage-crds.yaml", "serviceaccount.yaml", "rbac-server.yaml",
                  "rbac-users.yaml", "deployment.yaml", "poddisruptionbudget.yaml",
                  "service.yaml", "apiservice.yaml")
"""The chart templates that make the base, each written to the file of the same name, in
kustomization.yaml order (after namespace.yaml)."""


@dataclass(frozen=True)
class Variant:
    """A kustomization directory generated from the chart rendered with `values`."""

    directory: Path
    values: tuple[str, ...]
    """`helm template --set` assignments."""
    extra: tuple[str, ...]
    """Templates written beside TEMPLATE_FILES (and listed after them)."""
    summary: str
    """What the variant deploys (the kustomization's comment)."""


VARIANTS = (
    Variant(BASE, (), (), "with bootstrap certificates (the server makes its CA and serving "
            "certificate and sets the APIService's caBundle); cert-manager/ is the same with "
            "certificates from cert-manager."),
    Variant(BASE / "cert-manager", ("certificates.mode=cert-manager",), ("cert-manager.yaml",),
            "with certificates from cert-manager (install it first): a self-signed Issuer -> CA "
            "-> CA Issuer -> serving Certificate, and cainjector filling the APIService's "
            "caBundle (cert-manager.io/inject-ca-from). The same files as ../ (diff -r shows "
            "what the mode changes); not an overlay of ../, which kustomize refuses inside its "
            "base's directory."),
)

SERVICE_MONITOR = BASE / "monitoring" / "servicemonitor.yaml"

NAMESPACE_YAML = f"""\
apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels:
    app.kubernetes.io/name: container-notifier
"""

_SOURCE = re.compile(r"^# Source: [^/]+/templates/(?P<file>\S+)$", re.MULTILINE)
_HELM_LABEL = re.compile(
    r"^\s+(?:" + "|".join(re.escape(label) for label in HELM_ONLY_LABELS) + r"):.*\n",
    re.MULTILINE)
_GENERATED = "# Generated from charts/container-notifier by hack/render_manifests.py.\n"


def kustomization_yaml(variant: Variant) -> str:
    summary = textwrap.fill(f"Deploys container-notifier into namespace {NAMESPACE} "
                            + variant.summary, width=96, initial_indent="# ",
                            subsequent_indent="# ", break_on_hyphens=False)
    files = ("namespace.yaml", *TEMPLATE_FILES, *variant.extra)
    return f"""\
# Generated from charts/container-notifier by hack/render_manifests.py: edit the chart and run
# `PYTHONPATH=hack python hack/render_manifests.py` (make lint fails when they differ).
{summary}
# Set your image in an overlay of your own (docs/install.md, "Install with kustomize"; no image
# is published: build and push yours, docs/image.md):
# `kustomize edit set image {IMAGE}=<your registry>/container-notifier@<digest>`.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
""" + "".join(f"- {name}\n" for name in files)


def helm_template(helm: Path, *values: str) -> str:
    """`helm template` of the chart into NAMESPACE with image.repository=IMAGE; `values` are
    `--set` assignments."""
    argv = [str(helm), "template", RELEASE, str(CHART), f"--namespace={NAMESPACE}"]
    for value in (f"image.repository={IMAGE}", *values):
        argv += ["--set", value]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"helm template {' '.join(values)} failed: {done.stderr.strip()}")
    return done.stdout


def by_template(rendered: str) -> dict[str, str]:
    """The rendered text of each template file (its documents joined by ---), Helm-only labels
    and the `# Source:` lines removed."""
    parts: dict[str, list[str]] = {}
    matches = list(_SOURCE.finditer(rendered))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(rendered)
        body = re.sub(r"\n---\s*$", "", rendered[match.end():end].strip("\n"))
        parts.setdefault(match.group("file"), []).append(_HELM_LABEL.sub("", body + "\n"))
    return {name: "---\n".join(texts) for name, texts in parts.items()}


def generated_files(helm: Path) -> dict[Path, str]:
    """Every generated file and its text."""
    files = {}
    for variant in VARIANTS:
        templates = by_template(helm_template(helm, *variant.values))
        files[variant.directory / "kustomization.yaml"] = kustomization_yaml(variant)
        files[variant.directory / "namespace.yaml"] = NAMESPACE_YAML
        for name in (*TEMPLATE_FILES, *variant.extra):
            files[variant.directory / name] = _GENERATED + templates[name]
    monitoring = by_template(helm_template(helm, "metrics.serviceMonitor.enabled=true"))
    files[SERVICE_MONITOR] = _GENERATED + monitoring["servicemonitor.yaml"]
    return files


def objects(text: str) -> list[dict[str, Any]]:
    """The YAML documents of `text`, Helm-only labels removed (an emptied labels map too)."""
    found = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        labels = doc.get("metadata", {}).get("labels")
        if isinstance(labels, dict):
            for label in HELM_ONLY_LABELS:
                labels.pop(label, None)
            if not labels:
                del doc["metadata"]["labels"]
        found.append(doc)
    return found


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata", {})
    return obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


def differences(what: str, expected: Iterable[dict[str, Any]],
                found: Iterable[dict[str, Any]]) -> list[str]:
    """What differs between two sets of objects, keyed by kind, namespace and name."""
    want = {_key(o): o for o in expected}
    have = {_key(o): o for o in found}
    problems = [f"{what}: missing {'/'.join(k)}" for k in want.keys() - have.keys()]
    problems += [f"{what}: not in the chart's output: {'/'.join(k)}"
                 for k in have.keys() - want.keys()]
    problems += [f"{what}: {'/'.join(k)} differs from the chart's output"
                 for k in want.keys() & have.keys() if want[k] != have[k]]
    return sorted(problems)


def kustomize(kubectl: Path, directory: Path) -> str:
    done = subprocess.run([str(kubectl), "kustomize", str(directory)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory} failed: {done.stderr.strip()}")
    return done.stdout


def drift(helm: Path, kubectl: Path) -> list[str]:
    """Every difference between the committed generated files (and each variant's kustomize
    output) and what the chart renders; empty when they agree."""
    problems = []
    for path, text in generated_files(helm).items():
        shown = path.relative_to(REPO_ROOT)
        if not path.exists():
            problems.append(f"{shown}: missing")
        elif path.name == "kustomization.yaml":
            if yaml.safe_load(path.read_text()) != yaml.safe_load(text):
                problems.append(f"{shown}: differs from the generated one")
        else:
            problems += differences(str(shown), objects(text), objects(path.read_text()))
    for variant in VARIANTS:
        expected = objects(helm_template(helm, *variant.values)) + objects(NAMESPACE_YAML)
        problems += differences(f"kubectl kustomize {variant.directory.relative_to(REPO_ROOT)}",
                                expected, objects(kustomize(kubectl, variant.directory)))
    return problems


def write(helm: Path) -> list[Path]:
    """Write the generated files that differ; returns them."""
    written = []
    for path, text in generated_files(helm).items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if apiservice/ differs from the chart")
    args = parser.parse_args(argv)
    bins = build_binaries()
    if args.check:
        problems = drift(bins / "helm", bins / "kubectl")
        for problem in problems:
            print(f"drift: {problem}", file=sys.stderr)
        if problems:
            print("drift: run `PYTHONPATH=hack python hack/render_manifests.py` and commit "
                  "apiservice/ (edit charts/container-notifier, not apiservice/)", file=sys.stderr)
            return 1
        print("drift: apiservice/ (base, cert-manager/, monitoring/servicemonitor.yaml) equals "
              "the chart's output")
        return 0
    for path in write(bins / "helm"):
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
