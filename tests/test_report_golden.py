"""The report's forms are a contract: for every recorded session in tests/fixtures/, the
JSON, the Markdown and the printed summary are what the doctor wrote (tests/fixtures/
reports/), byte for byte: in English as on 2026-11-30, in Chinese as on 2026-12-02 (when
its words became Chinese throughout, issue 18). Changed on purpose since: the watched
session's more-workers prediction (2026-12-07: the loader model from py-spy's estimates,
where it was the finding's whole share, 1.00x-13.89x)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES, load_session_file

from gpudoctor import i18n
from gpudoctor.report.build import build
from gpudoctor.report.render import markdown, summary

SESSIONS = sorted(FIXTURES.glob("*_session_*.json.gz"))
GOLDEN = FIXTURES / "reports"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name.split(".")[0])
def test_the_report_reads_as_it_did(path: Path, lang: str) -> None:
    name = path.name[: -len(".json.gz")]
    i18n.use(lang)
    try:
        report = build(load_session_file(path), 7, lang)
        written = (report.to_json(), markdown(report), summary(report))
    finally:
        i18n.use("en")
    assert written[0] == (GOLDEN / f"{name}.{lang}.json").read_text(encoding="utf-8")
    assert written[1] == (GOLDEN / f"{name}.{lang}.md").read_text(encoding="utf-8")
    assert written[2] == (GOLDEN / f"{name}.{lang}.txt").read_text(encoding="utf-8")


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
