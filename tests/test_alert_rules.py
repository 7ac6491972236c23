"""The shipped Prometheus alert rules (deploy/prometheus/rules.yml, issue 44): valid for
the real promtool, their own unit tests pass (rules_test.yml: when each alert fires and
when it must not), and every series and finding they name is one the doctor serves."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

from conftest import ROOT, load_recorded_session
from prometheus_client.parser import text_string_to_metric_families
from test_metrics import free_port

from gpudoctor.diagnosis.engine import RULES
from gpudoctor.metrics import serve
from gpudoctor.snapshot import take

RULES_DIR = ROOT / "deploy" / "prometheus"
# scripts/test.sh installs Debian's prometheus, promtool with it
assert shutil.which("promtool"), "promtool is needed: apt-get install prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60
    )


def test_the_rules_are_valid_and_their_unit_tests_pass() -> None:
    check = promtool("check", "rules", "rules.yml")
    assert check.returncode == 0 and "SUCCESS: 4 rules found" in check.stdout, check.stdout
    tested = promtool("test", "rules", "rules_test.yml")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_a_broken_expectation_fails_the_rules_tests(tmp_path: Path) -> None:
    """The unit tests can fail: the input-bound alert expected at 9 minutes (it waits 10)."""
    for name in ("rules.yml", "rules_test.yml"):
        shutil.copy(RULES_DIR / name, tmp_path / name)
    broken = tmp_path / "rules_test.yml"
    text = broken.read_text()
    broken.write_text(text.replace("eval_time: 15m", "eval_time: 9m", 1))
    result = subprocess.run(
        ["promtool", "test", "rules", "rules_test.yml"], cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and "GpudoctorInputBound" in result.stdout + result.stderr


def test_every_series_and_finding_the_rules_name_is_served() -> None:
    """What `--metrics` serves for a recorded input-bound run, read over HTTP from the
    doctor's own server: the rules' series are among its families, their finding ids
    are the doctor's."""
    rules = (RULES_DIR / "rules.yml").read_text()
    named = set(re.findall(r"\b(gpudoctor_[a-z_]+)", rules))
    port = free_port()
    collector = serve(f"127.0.0.1:{port}")
    collector.latest = take(load_recorded_session("dataloader_bound"))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    served = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert named and named <= served, named - served
    ids = set(re.findall(r'id="([a-z-]+)"', rules))
    assert ids == {"input-bound", "straggler"} and ids <= {r.ID for r in RULES}
