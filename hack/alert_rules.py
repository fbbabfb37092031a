"""The alerting rules of apiservice/monitoring/prometheusrule.yaml as Prometheus reads them,
checked by promtool.

The PrometheusRule's `spec` is a Prometheus rule file (its `groups`); this writes it out as one,
and `--check` runs `promtool check rules` on it (expressions parse, templates expand, no
duplicate rules). tests/unit/test_alert_rules.py evaluates each alert with `promtool test rules`.

    python hack/alert_rules.py --check         # make lint
    python hack/alert_rules.py --write FILE    # the rule file, for promtool or Prometheus
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_RULE = REPO_ROOT / "apiservice" / "monitoring" / "prometheusrule.yaml"
BUILD = REPO_ROOT / "hack" / "build.sh"


def rule_groups(path: Path = PROMETHEUS_RULE) -> dict:
    """The PrometheusRule at `path` as a Prometheus rule file: ``{"groups": [...]}``."""
    rule = yaml.safe_load(path.read_text())
    if rule.get("kind") != "PrometheusRule" or "groups" not in rule.get("spec", {}):
        raise ValueError(f"{path}: expected a PrometheusRule with spec.groups")
    return {"groups": rule["spec"]["groups"]}


def write_rule_file(target: Path, path: Path = PROMETHEUS_RULE) -> Path:
    target.write_text(yaml.safe_dump(rule_groups(path), sort_keys=False))
    return target


def promtool() -> Path:
    """promtool, built by hack/build.sh from the Go module proxy (cached after the first time)."""
    built = subprocess.run(["bash", str(BUILD)], check=True, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return Path(built.stdout.strip().splitlines()[-1]) / "promtool"


def check(path: Path = PROMETHEUS_RULE) -> int:
    target = REPO_ROOT / "build" / "alert-rules.yaml"
    target.parent.mkdir(exist_ok=True)
    write_rule_file(target, path)
    result = subprocess.run([str(promtool()), "check", "rules", str(target)],
                            capture_output=True, text=True)
    print(f"promtool check rules {path.relative_to(REPO_ROOT)}: "
          + (result.stdout.strip().splitlines() or ["no output"])[-1])
    if result.returncode != 0:
        print(result.stdout + result.stderr, file=sys.stderr)
    return result.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="run promtool check rules")
    action.add_argument("--write", type=Path, metavar="FILE", help="write the rule file")
    args = parser.parse_args(argv)
    if args.write:
        write_rule_file(args.write)
        return 0
    return check()


if __name__ == "__main__":
    sys.exit(main())
