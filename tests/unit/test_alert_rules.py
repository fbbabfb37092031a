"""The shipped alerts evaluated by Prometheus' own rule engine (`promtool test rules`): each
fires on the series it is for, after its `for`, and stays quiet on others."""

from __future__ import annotations

import subprocess
from pathlib import Path

import alert_rules
import pytest
import yaml

CASES = Path(__file__).with_name("alert_rules_test.yaml")


@pytest.fixture(scope="module")
def promtool() -> Path:
    return alert_rules.promtool()


def without_annotations(groups: dict) -> dict:
    for group in groups["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return groups


def test_every_alert_has_a_firing_case() -> None:
    alerts = {rule["alert"] for group in alert_rules.rule_groups()["groups"]
              for rule in group["rules"] if "alert" in rule}
    cases = yaml.safe_load(CASES.read_text())["tests"]
    fired = {check["alertname"] for case in cases for check in case["alert_rule_test"]
             if check["exp_alerts"]}
    assert fired == alerts


def test_alerts_fire_as_their_cases_say(promtool: Path, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(without_annotations(alert_rules.rule_groups())))
    suite = yaml.safe_load(CASES.read_text()) | {"rule_files": [str(rules)]}
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump(suite, sort_keys=False))
    result = subprocess.run([str(promtool), "test", "rules", str(tests)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
