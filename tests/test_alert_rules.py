"""The shipped Prometheus alert rules (deploy/prometheus/rules.yml, issue 44): valid for
the real promtool, their own unit tests pass (rules_test.yml: when each alert fires and
when it must not), and every series and finding they name is one the doctor serves."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

from conftest import FIXTURES, ROOT, load_session_file
from prometheus_client.parser import text_string_to_metric_families
from test_metrics import free_port

from gpudoctor.diagnosis.engine import RULES
from gpudoctor.metrics import NodeCollector, NodeEntry, RunCollector, serve, serve_collector
from gpudoctor.snapshot import take

RULES_DIR = ROOT / "deploy" / "prometheus"
# scripts/test.sh installs Debian's prometheus, promtool with it
assert shutil.which("promtool"), "promtool is needed: apt-get install prometheus"


def promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_rules_are_valid_and_their_unit_tests_pass() -> None:
    check = promtool("check", "rules", "rules.yml")
    assert check.returncode == 0 and "SUCCESS: 5 rules found" in check.stdout, check.stdout
    tested = promtool("test", "rules", "rules_test.yml")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_a_broken_expectation_fails_the_rules_tests(tmp_path: Path) -> None:
    """The unit tests can fail: the input-bound alert expected at 9 minutes (it waits 10)."""
    for name in ("rules.yml", "rules_test.yml"):
        shutil.copy(RULES_DIR / name, tmp_path / name)
    broken = tmp_path / "rules_test.yml"
    text = broken.read_text()
    broken.write_text(text.replace("eval_time: 15m", "eval_time: 9m", 1))
    result = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert result.returncode != 0 and "GpudoctorInputBound" in result.stdout + result.stderr


def test_every_series_and_finding_the_rules_name_is_served() -> None:
    """What `--metrics` serves for a recorded input-bound run: the rules' series are
    among its samples, their finding ids are the doctor's."""
    rules = (RULES_DIR / "rules.yml").read_text()
    named = set(re.findall(r"\b(gpudoctor_[a-z_]+)", rules))
    served = _served()
    assert named and named <= served, named - served
    ids = set(re.findall(r'id="([a-z-]+)"', rules))
    assert ids == {"input-bound", "straggler"} and ids <= {r.ID for r in RULES}


DASHBOARD = ROOT / "deploy" / "grafana" / "gpudoctor.json"
DCGM_SERIES = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}  # what the panels join to


def _queries() -> list[str]:
    """Each panel's PromQL, its dashboard variable filled as Grafana would ($hostname:
    all nodes)."""
    model = json.loads(DASHBOARD.read_text())
    return [t["expr"].replace("$hostname", ".*") for p in model["panels"] for t in p["targets"]]


def test_the_dashboard_is_a_grafana_model_whose_queries_name_served_series(
    tmp_path: Path,
) -> None:
    """deploy/grafana/gpudoctor.json: Grafana's dashboard JSON model (a title, a uid, a
    schema version, panels with ids, places, a Prometheus data source and targets);
    every query parses as PromQL (the real promtool, as recording rules) and names only
    series the doctor serves or DCGM's exporter does."""
    model = json.loads(DASHBOARD.read_text())
    assert model["uid"] and model["title"] and model["schemaVersion"] >= 36
    assert {v["name"] for v in model["templating"]["list"]} == {"datasource", "hostname"}
    panels = model["panels"]
    assert len({p["id"] for p in panels}) == len(panels) >= 6
    for p in panels:
        assert p["type"] in ("timeseries", "table") and p["title"], p
        assert (
            set(p["gridPos"]) == {"x", "y", "w", "h"}
            and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        )
        assert p["datasource"]["type"] == "prometheus" and p["targets"], p
    queries = _queries()
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel_{n}", "expr": q} for n, q in enumerate(queries)
    ]}]}  # fmt: skip
    (tmp_path / "panels.yml").write_text(json.dumps(rules))
    check = promtool("check", "rules", "panels.yml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    names = {n for q in queries for n in re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*(?:\{|\[|$)", q)}
    ours = {n for n in names if n.startswith("gpudoctor_")}
    assert ours <= _served() and names - ours <= DCGM_SERIES, names


def test_each_ranks_gpu_joins_dcgms_series_on_hostname_and_gpu(tmp_path: Path) -> None:
    """The dashboard's join, evaluated by Prometheus' own engine (promtool's PromQL
    tests) over DCGM-shaped series and ours: two ranks on node-a's GPUs 0 and 1, one on
    node-b's GPU 0 (the same index on another node must not match), a GPU no rank uses."""
    (join,) = [q for q in _queries() if "DCGM_FI_DEV_GPU_UTIL" in q]
    dcgm = 'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}", UUID="GPU-{h}{g}", modelName="NVIDIA H200", hostname="{h}"}}'
    info = 'gpudoctor_rank_gpu_info{{rank="{r}", pid="{p}", hostname="{h}", gpu="{g}", UUID="GPU-{h}{g}"}}'
    series = [
        {"series": dcgm.format(g=0, h="node-a"), "values": "97x3"},
        {"series": dcgm.format(g=1, h="node-a"), "values": "45x3"},
        {"series": dcgm.format(g=2, h="node-a"), "values": "0x3"},
        {"series": dcgm.format(g=0, h="node-b"), "values": "88x3"},
        {"series": info.format(r=0, p=101, h="node-a", g=0), "values": "1x3"},
        {"series": info.format(r=1, p=102, h="node-a", g=1), "values": "1x3"},
        {"series": info.format(r=2, p=201, h="node-b", g=0), "values": "1x3"},
    ]
    # an arithmetic join drops the metric's name: DCGM's labels, the rank's added
    expected = [
        {"labels": dcgm.format(g=g, h=h)[len("DCGM_FI_DEV_GPU_UTIL") : -1] + f', pid="{p}", rank="{r}"}}', "value": v}
        for g, h, p, r, v in ((0, "node-a", 101, 0, 97), (1, "node-a", 102, 1, 45), (0, "node-b", 201, 2, 88))
    ]  # fmt: skip
    tests = {"evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": join, "eval_time": "2m", "exp_samples": expected}],
    }]}  # fmt: skip
    (tmp_path / "join_test.yml").write_text(json.dumps(tests))
    result = promtool("test", "rules", "join_test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _served() -> set[str]:
    """The samples' names `--metrics` serves for a recorded H200 run (input-bound, one
    process), read over HTTP from the doctor's own server."""
    port = free_port()
    collector = serve(f"127.0.0.1:{port}")
    s = take(load_session_file(FIXTURES / "gpu_session_dataloader_bound.json.gz"))
    collector.latest = s
    # and as it would be past its first hour (whose step time is served from then on)
    collector.latest = dataclasses.replace(s, elapsed_s=s.elapsed_s + 3600)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    # and what the node exporter serves for the same job, and for one watched from
    # outside (its loop counter read: the stalled-job alert's series for it)
    watched = dataclasses.replace(s, mode="watch", job_pid=4242, loop_counter=1234)
    node = NodeCollector()
    node.entries = (
        NodeEntry(s, True, {"user": "alice", "hpc_job": "77"}),
        NodeEntry(watched, True, {"user": "bob"}),
    )
    port = free_port()
    serve_collector(f"127.0.0.1:{port}", node)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text += response.read().decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_first_hours_step_time_is_served_once_the_hour_is_over() -> None:
    """The baseline of the regression alert: the median of a job's step time over its
    first hour, from the snapshots as they came; nothing served before the hour is over
    (the alert cannot fire on the hour itself), then held whatever the job does."""

    s = take(load_session_file(FIXTURES / "gpu_session_dataloader_bound.json.gz"))
    collector = RunCollector()

    def first_hour() -> list[float]:
        return [
            sample.value
            for family in collector.collect()
            if family.name == "gpudoctor_first_hour_step_seconds"
            for sample in family.samples
        ]

    for t, p50 in ((60.0, 10.0), (1800.0, 12.0), (3500.0, 11.0)):
        collector.latest = dataclasses.replace(s, elapsed_s=t, step_p50_ms=p50)
        assert first_hour() == []
    collector.latest = dataclasses.replace(s, elapsed_s=3700.0, step_p50_ms=30.0)
    assert first_hour() == [0.011]
    collector.latest = dataclasses.replace(s, elapsed_s=9000.0, step_p50_ms=5.0)
    assert first_hour() == [0.011]
