"""The guide inside the project (issue 16): every section a remedy cites exists in both
languages, `gpudoctor guide` prints them, the wheel carries them, and the finding
screen opens them with `g`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, doctor, load_recorded_session
from test_tui import open_finding, text_of

from gpudoctor import guide
from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.tui.app import make_replay_app
from gpudoctor.tui.screens import FindingScreen, GuideScreen


@pytest.mark.parametrize("lang", guide.LANGS)
def test_every_remedy_cites_a_section_that_exists(lang: str) -> None:
    sections = guide.sections(lang)
    missing = {r.id: r.guide_section for r in CATALOGUE.values() if r.guide_section not in sections}
    assert not missing, f"remedies citing sections the {lang} guide lacks: {missing}"


def test_both_languages_have_the_same_sections_each_with_what_to_measure_change_and_code() -> None:
    en, zh = guide.sections("en"), guide.sections("zh")
    assert list(en) == list(zh) and len(en) == 13
    for sid in en:
        if sid == "common":  # the table of common problems
            assert "|---|" in en[sid].body and "|---|" in zh[sid].body
            continue
        assert "Measure:" in en[sid].body and "Change:" in en[sid].body, sid
        assert "测什么" in zh[sid].body and "改什么" in zh[sid].body, sid
        assert en[sid].body.count("```") == 2 and zh[sid].body.count("```") == 2, sid


def test_no_section_names_somebody_elses_machine() -> None:
    for lang in guide.LANGS:
        for s in guide.sections(lang).values():
            assert "rivermind" not in s.body and "/root/" not in s.body, (lang, s.id)


def test_the_command_prints_a_section_in_each_language_and_the_list() -> None:
    zh = doctor("guide", "dataloader", "--lang", "zh")
    assert zh.returncode == 0 and zh.stdout.startswith("[dataloader] 让 DataLoader")
    assert "num_workers=WORKERS" in zh.stdout
    en = doctor("guide", "dataloader", "--lang", "en")
    assert en.returncode == 0 and en.stdout.startswith("[dataloader] Let the DataLoader")
    listing = doctor("guide")
    assert listing.returncode == 0
    assert [line.split()[0] for line in listing.stdout.splitlines()[:13]] == list(
        guide.sections("en")
    )
    bad = doctor("guide", "dataloder")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "no section 'dataloder'" in bad.stderr and "Traceback" not in bad.stderr


def test_the_wheel_carries_the_guide(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("gpudoctor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"gpudoctor/guide/en.md", "gpudoctor/guide/zh.md"} <= set(names)


def test_g_on_a_finding_opens_the_sections_its_remedies_cite() -> None:
    app = make_replay_app(load_recorded_session("dataloader_bound"), 7)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await open_finding(app, pilot, "input-bound")
            await pilot.press("g")
            assert isinstance(app.screen, GuideScreen)
            assert app.screen.section_ids[0] == "dataloader"
            shown = text_of(app.screen.query(".guide").first())
            assert "Let the DataLoader prepare batches ahead" in shown and "Measure:" in shown
            await pilot.press("escape")
            assert isinstance(app.screen, FindingScreen)
            await pilot.press("escape")
            await pilot.press("q")

    asyncio.run(drive())
