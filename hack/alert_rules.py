"""The alerting rules of apiservice/monitoring/prometheusrule.yaml as Prometheus reads them,
checked by promtool, and the Grafana dashboard's queries with them.

The PrometheusRule's `spec` is a Prometheus rule file (its `groups`); this writes it out as one,
and `--check` runs `promtool check rules` on it (expressions parse, templates expand, no
duplicate rules) and on the dashboard's queries, each made a recording rule with Grafana's
`$__rate_interval` read as 5m, so that each parses as PromQL.
tests/unit/test_alert_rules.py evaluates each alert with `promtool test rules`.

    python hack/alert_rules.py --check         # make lint
    python hack/alert_rules.py --write FILE    # the rule file, for promtool or Prometheus
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_RULE = REPO_ROOT / "apiservice" / "monitoring" / "prometheusrule.yaml"
DASHBOARD = REPO_ROOT / "apiservice" / "monitoring" / "grafana" / "container-notifier.json"
GRAFANA_RATE_INTERVAL = ("$__rate_interval", "5m")
BUILD = REPO_ROOT / "hack" / "build.sh"


def rule_groups(path: Path = PROMETHEUS_RULE) -> dict:
    """The PrometheusRule at `path` as a Prometheus rule file: ``{"groups": [...]}``."""
    rule = yaml.safe_load(path.read_text())
    if rule.get("kind") != "PrometheusRule" or "groups" not in rule.get("spec", {}):
        raise ValueError(f"{path}: expected a PrometheusRule with spec.groups")
    return {"groups": rule["spec"]["groups"]}


def dashboard_queries(path: Path = DASHBOARD) -> dict:
    """The dashboard's panel queries as a rule file of one recording rule each."""
    panels = json.loads(path.read_text())["panels"]
    exprs = [target["expr"] for panel in panels for target in panel.get("targets", [])
             if "expr" in target]
    rules = [{"record": f"dashboard:query_{i}", "expr": expr.replace(*GRAFANA_RATE_INTERVAL)}
             for i, expr in enumerate(exprs)]
    return {"groups": [{"name": "dashboard-queries", "rules": rules}]}


def write_rule_file(target: Path, path: Path = PROMETHEUS_RULE) -> Path:
    target.write_text(yaml.safe_dump(rule_groups(path), sort_keys=False))
    return target


def promtool() -> Path:
    """promtool, built by hack/build.sh from the Go module proxy (cached after the first time)."""
    built = subprocess.run(["bash", str(BUILD)], check=True, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return Path(built.stdout.strip().splitlines()[-1]) / "promtool"


def check() -> int:
    """promtool check rules on the alerts and on the dashboard's queries; 0 if both pass."""
    build = REPO_ROOT / "build"
    build.mkdir(exist_ok=True)
    alerts = write_rule_file(build / "alert-rules.yaml")
    queries = build / "dashboard-queries.yaml"
    queries.write_text(yaml.safe_dump(dashboard_queries(), sort_keys=False))
    tool = promtool()
    failed = 0
    for source, rules in ((PROMETHEUS_RULE, alerts), (DASHBOARD, queries)):
        result = subprocess.run([str(tool), "check", "rules", str(rules)],
                                capture_output=True, text=True)
        print(f"promtool check rules {source.relative_to(REPO_ROOT)}: "
              + (result.stdout.strip().splitlines() or ["no output"])[-1].strip())
        if result.returncode != 0:
            print(result.stdout + result.stderr, file=sys.stderr)
            failed = result.returncode
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true",
                        help="run promtool check rules on the alerts and the dashboard queries")
    action.add_argument("--write", type=Path, metavar="FILE", help="write the rule file")
    args = parser.parse_args(argv)
    if args.write:
        write_rule_file(args.write)
        return 0
    return check()


if __name__ == "__main__":
    sys.exit(main())
