"""`--metrics`: a real Prometheus server (Debian's package) scrapes a distributed run,
and a query returns each rank's step time; the exposition parses as OpenMetrics."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import textwrap
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import PY, SAMPLES, doctor
from prometheus_client.parser import text_string_to_metric_families
from test_ranks import DDP, TORCHRUN

pytestmark = pytest.mark.timeout(240)

# scripts/test.sh installs prometheus (as it does tmux); without it this fails
assert shutil.which("prometheus"), "prometheus is needed: apt-get install prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def wait_for(check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if result:
                return result
        except OSError:
            pass
        assert time.monotonic() < deadline, "never came"
        time.sleep(0.3)


def test_prometheus_scrapes_each_ranks_step_time(tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    # the DDP job of test_ranks, run longer: Prometheus needs a few scrapes
    script.write_text(textwrap.dedent(DDP).replace("range(3)", "range(12)"))
    port, prom_port = free_port(), free_port()
    run = subprocess.Popen(
        [PY, "-m", "gpudoctor", "run", "--headless", "--metrics", str(port), "--",
         TORCHRUN, "--standalone", "--nproc_per_node", "2", str(script), "1", "0.004"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        f"scrape_configs:\n  - job_name: gpudoctor\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{port}']\n"
    )
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        query = urllib.parse.quote('gpudoctor_step_seconds{quantile="0.5"}')
        url = f"http://127.0.0.1:{prom_port}/api/v1/query?query={query}"

        def two_ranks() -> list[dict[str, Any]] | None:
            result = json.loads(get(url))["data"]["result"]
            return result if len(result) == 2 else None

        series = wait_for(two_ranks, timeout=120)
        assert sorted(s["metric"]["rank"] for s in series) == ["0", "1"]
        # each series says its node, as DCGM's exporter does (they join on it)
        assert {s["metric"]["hostname"] for s in series} == {socket.gethostname()}
        assert all(0 < float(s["value"][1]) < 1 for s in series)  # seconds a step
        # the served text parses as Prometheus exposition, with the documented names
        families = {f.name for f in text_string_to_metric_families(get(f"http://127.0.0.1:{port}"))}
        assert {"gpudoctor_step_seconds", "gpudoctor_data_wait_ratio", "gpudoctor_comm_wait_seconds",
                "gpudoctor_own_work_seconds", "gpudoctor_samples_per_second", "gpudoctor_steps",
                "gpudoctor_finding_estimated_gain_ratio", "gpudoctor_job_cpu_cores",
                "gpudoctor_others_cpu_cores", "gpudoctor_others_niced_cpu_cores",
                "gpudoctor_job_run_delay_ratio"} <= families  # fmt: skip
        assert run.wait(timeout=180) == 0, run.stderr.read() if run.stderr else ""
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        if run.poll() is None:
            run.kill()


def test_metrics_listen_on_localhost_unless_asked_and_bad_input_is_one_line(
    tmp_path: Path,
) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        proc = doctor("run", "--headless", "--metrics", str(port), "--", PY, "-c", "pass")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1
        assert f"cannot serve --metrics on 127.0.0.1:{port}" in proc.stderr
    for bad, said in (("abc", "wants [HOST:]PORT"), ("70000", "no such port")):
        proc = doctor("run", "--headless", "--metrics", bad, "--", PY, "-c", "pass")
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr
    # a one-process run, the default host: served on 127.0.0.1 only, while the job runs
    run = subprocess.Popen(
        [PY, "-m", "gpudoctor", "run", "--headless", "--metrics", str(port), "--", PY,
         str(SAMPLES / "healthy.py"), "--steps", "300"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        text = wait_for(lambda: "gpudoctor_steps{" in (t := get(f"http://127.0.0.1:{port}")) and t)
        steps = [f for f in text_string_to_metric_families(text) if f.name == "gpudoctor_steps"]
        assert steps and steps[0].samples[0].value > 0
        listening = [
            c.laddr for c in psutil.Process(run.pid).net_connections() if c.status == "LISTEN"
        ]
        assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", port)]
    finally:
        for child in psutil.Process(run.pid).children(recursive=True):
            child.kill()  # the job too: a killed doctor's job goes on by design
        run.kill()
        run.wait()
