"""What a newcomer meets (issue 16): advice fitted to the job, durations that read, and a
TUI that fits 80x24."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from pathlib import Path

from conftest import PY, doctor, load_recorded_session
from rich.console import Console
from test_tui import text_of
from windows import host, steps, window

from gpudoctor import display
from gpudoctor.diagnosis.rules import input_bound
from gpudoctor.prescribe.how import fitted_snippet, how
from gpudoctor.tui.app import make_replay_app
from gpudoctor.tui.screens import HelpScreen, QuitScreen, help_text
from gpudoctor.tui.widgets import FindingsPanel, _prompt
from gpudoctor.units import cell_width, ms_text


def test_storage_remedies_only_when_the_job_touches_storage() -> None:
    loop = steps(loader_ms=6.0)
    idle_disk = input_bound.evaluate(window(steps=loop, host=host(read_mb_s=0.0)))
    assert idle_disk is not None
    assert not {"local-ssd", "memmap"} & set(idle_disk.remedies), idle_disk.remedies
    reading = input_bound.evaluate(window(steps=loop, host=host(read_mb_s=20.0)))
    assert reading is not None and {"local-ssd", "memmap"} <= set(reading.remedies)
    sleeping = input_bound.evaluate(window(steps=loop, host=host(status="disk-sleep")))
    assert sleeping is not None and "local-ssd" in sleeping.remedies


def test_durations_below_a_millisecond_read_in_microseconds() -> None:
    assert ms_text(0.3) == "300 µs" and ms_text(0.04) == "40 µs"
    assert ms_text(1.0) == "1.0 ms" and ms_text(21.26) == "21.3 ms"
    assert ms_text(0.0004) == "400 ns"  # a time that was there: never "0 µs" (issue 39)
    assert display.ms(0.25) == "250 µs" and display.ms(250.0) == "250 ms"
    sub_ms = steps(wall_ms=0.3, loader_ms=0.1, forward_ms=0.05, backward_ms=0.05, optimizer_ms=0.02)
    finding = input_bound.evaluate(window(steps=sub_ms))
    assert finding is not None and "0.0 ms" not in finding.evidence
    assert "of a 300 µs median step" in finding.evidence, finding.evidence


def test_commands_are_named_the_way_a_person_names_them() -> None:
    argv = ["/home/u/proj/.venv/bin/python", "/home/u/proj/sample_jobs/dl.py", "--num-workers", "0"]
    assert display.command_words(argv, "/home/u/proj") == (
        "python sample_jobs/dl.py --num-workers 0"
    )
    assert display.command_words(
        ["torchrun", "--nproc-per-node=2", "/opt/x/train.py"], "/home"
    ) == ("torchrun --nproc-per-node=2 /opt/x/train.py")
    # too wide for the panel: paths by their file's name
    assert display.command_words(argv, "/home/u/proj", width=30) == "python dl.py --num-workers 0"


def test_each_finding_in_the_list_shows_its_first_remedy() -> None:
    finding = input_bound.evaluate(window(steps=steps(loader_ms=6.0)))
    assert finding is not None
    prompt = _prompt(finding).plain
    assert f"-> {finding.remedies[0]}: Load batches in parallel worker processes" in prompt
    assert "用多个 worker 进程并行加载数据" in _prompt(finding, "zh").plain


def test_a_findings_long_lines_wrap_under_themselves_at_the_panels_width() -> None:
    """The evidence and the remedy wrap under their first line (past the severity), in
    the panel's width, wide characters counted as two cells; not back at the edge."""
    finding = input_bound.evaluate(window(steps=steps(loader_ms=6.0)))
    assert finding is not None
    for lang in ("en", "zh"):
        lines = _prompt(finding, lang, width=40).plain.splitlines()
        assert len(lines) > 4, lines  # the evidence alone is longer than one line
        assert all(line.startswith("       ") and line[7] != " " for line in lines[1:]), lines
        assert max(cell_width(line) for line in lines[1:]) <= 40, lines
        assert " ".join(w.strip() for w in lines[1:]).startswith(finding.evidence[:30])
    # the width not known yet (the panel not laid out): one line each, as before
    assert len(_prompt(finding).plain.splitlines()) == 3


def test_a_short_screens_finding_fits_its_rows_and_says_where_it_was_cut() -> None:
    """80x24 gives the findings four rows: a finding's evidence in two lines, the
    second ended by an ellipsis where the words go on (Enter shows them all), never cut
    mid-sentence without saying so; a short evidence is left whole."""
    finding = input_bound.evaluate(window(steps=steps(loader_ms=6.0)))
    assert finding is not None
    for lang in ("en", "zh"):
        lines = _prompt(finding, lang, width=76, lines=2).plain.splitlines()
        assert len(lines) == 4 and lines[2].endswith("…"), lines
        assert cell_width(lines[2]) <= 76 and lines[3].lstrip().startswith("-> more-workers")
    short = dataclasses.replace(finding, evidence="89% of each step waits for the DataLoader.")
    lines = _prompt(short, "en", width=76, lines=2).plain.splitlines()
    assert len(lines) == 3 and not lines[1].endswith("…")


def test_help_wraps_to_80_columns_and_scrolls_at_24_rows() -> None:
    app = make_replay_app(load_recorded_session("dataloader_bound"), 7)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            scroll = app.screen.query_one("#help-scroll")
            help_text = app.screen.query_one("#help-text")
            assert "replay only" in text_of(help_text)  # the last row is there, not cut
            assert scroll.max_scroll_y > 0  # more than 24 rows: it scrolls
            before = scroll.scroll_y
            await pilot.press("down", "down", "down")
            await pilot.pause()
            assert scroll.scroll_y > before
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            await pilot.press("q")

    asyncio.run(drive())


def test_the_help_is_wrapped_when_drawn_not_beforehand() -> None:
    def lines(width: int) -> list[str]:
        console = Console(width=width, file=io.StringIO(), record=True)
        console.print(help_text())
        return console.export_text().splitlines()

    narrow, wide = lines(60), lines(140)
    assert len(narrow) > len(wide)  # the rows rewrap to the width they are given
    assert any(len(line.rstrip()) > 100 for line in wide)  # and use a wide screen


def test_the_quit_dialog_shows_one_set_of_keys() -> None:
    bindings = {b.key: b for b in QuitScreen.BINDINGS}  # type: ignore[union-attr]
    assert bindings["s"].show and not bindings["ctrl+c"].show  # type: ignore[union-attr]
    assert bindings["s"].action == bindings["ctrl+c"].action  # type: ignore[union-attr]


def test_the_findings_panel_on_a_replay_shows_the_first_remedy() -> None:
    app = make_replay_app(load_recorded_session("dataloader_bound"), 7)

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            panel = app.query_one(FindingsPanel)
            prompts = [str(panel.get_option_at_index(i).prompt) for i in range(panel.option_count)]
            assert any("-> more-workers" in p for p in prompts), prompts
            await pilot.press("q")

    asyncio.run(drive())


def test_snippets_carry_the_values_the_advice_computed() -> None:
    facts = {"dataloaders": [{"num_workers": 0, "batch_size": 24}], "world_size": 1}
    assert fitted_snippet("prefetch", facts, 2) == (
        "DataLoader(dataset, num_workers=2, prefetch_factor=4)"
    )
    assert "num_workers=2" in how("prefetch", facts, 2)  # the words and the snippet agree
    assert fitted_snippet("more-workers", facts, 2) == (
        "DataLoader(dataset, batch_size=24, num_workers=2)"
    )
    assert "batch_size=48" in fitted_snippet("larger-batch", facts, 2)
    assert "torch.float16" in fitted_snippet("amp", {"compute_capability": (7, 0)}, 2)
    assert "torch.bfloat16" in fitted_snippet("amp", {"compute_capability": (9, 0)}, 2)


ROOTED = """
import pathlib, sys, torch
from torch.utils.data import DataLoader, Dataset

class Files(Dataset):
    def __init__(self, root):
        self.root = pathlib.Path(root)
    def __len__(self):
        return 64
    def __getitem__(self, i):
        return torch.full((4,), float(i))
    def __getattr__(self, name):
        raise RuntimeError("a dataset whose lookups fail")

class Wrapped(Dataset):  # a Subset-like wrapper, its own attributes failing too
    def __init__(self, inner):
        self.dataset = inner
    def __len__(self):
        return len(self.dataset)
    def __getitem__(self, i):
        return self.dataset[i]

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x in DataLoader(Wrapped(Files(sys.argv[1])), batch_size=8):
        model(x).sum().backward(); opt.step(); opt.zero_grad()
print("done", round(float(model.weight.sum()), 6))
"""


def test_the_dataset_root_is_seen_and_named_in_the_local_ssd_snippet(tmp_path: Path) -> None:
    script = tmp_path / "rooted.py"
    script.write_text(ROOTED)
    data = tmp_path / "my-data"
    report = tmp_path / "r.json"
    result = doctor("run", "--headless", "--report", str(report), "--", PY, str(script), str(data))
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-2000:]
    loaders = json.loads(report.read_text())["facts"]["dataloaders"]
    assert loaders[0]["root"] == str(data)
    facts = {"dataloaders": loaders}
    assert fitted_snippet("local-ssd", facts, 2).startswith(f"rsync -a {data}/ /path/to/local")


def test_the_readme_is_what_a_new_user_needs_first_and_links_the_rest() -> None:
    """Issue 40: the README was 45 KB and the first command was found by scrolling. It
    holds what the first ten minutes need (the two commands, how to call the installed
    doctor, every command) under 15,000 bytes; every page it links exists and links
    back; every command of `gpudoctor --help` is in it."""
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    assert len(readme.encode()) < 15_000
    head = readme[: readme.index("## Using it")]
    assert "bash scripts/demo.sh" in head and "bash scripts/test.sh" in head
    assert ".venv/bin/gpudoctor" in head and ". .venv/bin/activate" in head
    import re

    links = re.findall(r"\]\((docs/[^)]+)\)", readme)
    assert len(links) >= 8
    for link in links:
        page = root / link
        assert page.exists(), link
        assert "(../README.md)" in page.read_text(), link
    from gpudoctor.cli import COMMANDS

    for name in COMMANDS:
        assert f"gpudoctor {name}" in readme, name


def test_the_headless_status_line_never_wraps() -> None:
    """Issue 40, point 11: the status line was ~97 columns and wrapped at 80. Within the
    width it is given: the job's cores go first, the step rate next, then an ellipsis."""
    from gpudoctor.live import status_line

    timeline = load_recorded_session("dataloader_bound")
    whole = status_line(timeline)
    assert cell_width(whole) > 80 and "(job " in whole
    for width in (100, 80, 60, 40):
        line = status_line(timeline, width)
        assert cell_width(line) <= width, line
        assert line.startswith("[gpudoctor") and ("…" in line or "…" not in whole)
    assert "(job " not in status_line(timeline, 80)
