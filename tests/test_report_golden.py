"""The report's forms are a contract: for every recorded session in tests/fixtures/, the
JSON, the Markdown and the printed summary are what the doctor wrote on 2026-11-30
(tests/fixtures/reports/), byte for byte, in English and Chinese."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from gpudoctor.model import JobExit
from gpudoctor.report.build import build
from gpudoctor.report.render import markdown, summary
from gpudoctor.store import apply_record
from gpudoctor.timeline import Timeline

SESSIONS = sorted(FIXTURES.glob("*_session_*.json.gz"))
GOLDEN = FIXTURES / "reports"


def recorded(path: Path) -> Timeline:
    data = json.loads(gzip.decompress(path.read_bytes()))
    s = data["session"]
    timeline = Timeline(
        json.loads(s["command"]), s["started_unix"], s["start_mono_ns"], gpu_reason=s["gpu_reason"]
    )
    for kind, _t, record in data["records"]:
        apply_record(timeline, kind, record)
    timeline.end_mono_ns = s["end_mono_ns"]
    if s["exit_json"]:
        timeline.exit = JobExit(**json.loads(s["exit_json"]))
    return timeline


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name.split(".")[0])
def test_the_report_reads_as_it_did(path: Path, lang: str) -> None:
    name = path.name[: -len(".json.gz")]
    report = build(recorded(path), 7, lang)
    assert report.to_json() == (GOLDEN / f"{name}.{lang}.json").read_text(encoding="utf-8")
    assert markdown(report) == (GOLDEN / f"{name}.{lang}.md").read_text(encoding="utf-8")
    assert summary(report) == (GOLDEN / f"{name}.{lang}.txt").read_text(encoding="utf-8")


def test_there_is_a_run_a_watch_and_gpu_sessions_among_them() -> None:
    names = [p.name for p in SESSIONS]
    assert any(n.startswith("cpu_session_") for n in names)
    assert any(n.startswith("watch_session_") for n in names)
    assert sum(n.startswith("gpu_session_") for n in names) >= 5
