"""The report's forms are a contract: for every recorded session in tests/fixtures/, the
JSON, the Markdown and the printed summary are what the doctor wrote on 2026-11-30
(tests/fixtures/reports/), byte for byte, in English and Chinese."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES, load_session_file

from gpudoctor.report.build import build
from gpudoctor.report.render import markdown, summary

SESSIONS = sorted(FIXTURES.glob("*_session_*.json.gz"))
GOLDEN = FIXTURES / "reports"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name.split(".")[0])
def test_the_report_reads_as_it_did(path: Path, lang: str) -> None:
    name = path.name[: -len(".json.gz")]
    report = build(load_session_file(path), 7, lang)
    assert report.to_json() == (GOLDEN / f"{name}.{lang}.json").read_text(encoding="utf-8")
    assert markdown(report) == (GOLDEN / f"{name}.{lang}.md").read_text(encoding="utf-8")
    assert summary(report) == (GOLDEN / f"{name}.{lang}.txt").read_text(encoding="utf-8")


def test_there_is_a_run_a_watch_and_gpu_sessions_among_them() -> None:
    names = [p.name for p in SESSIONS]
    assert any(n.startswith("cpu_session_") for n in names)
    assert any(n.startswith("watch_session_") for n in names)
    assert sum(n.startswith("gpu_session_") for n in names) >= 5


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name.split(".")[0])
def test_the_summary_lists_every_remedy_of_the_report_in_its_order(path: Path) -> None:
    report = build(load_session_file(path), 7, "en")
    said = [line.split("-> ", 1)[1].split(":", 1)[0] for line in summary(report).splitlines()
            if line.startswith("      -> ")]  # fmt: skip
    assert said == [r.id for f in report.findings for r in f.remedies]
