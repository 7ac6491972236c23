"""`report --format html`: one self-contained page, opened in a real headless browser
(Debian's chromium): it draws the charts, asks the network for nothing, logs no error,
and its numbers are the report's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PY, SAMPLES, doctor, load_recorded_session

from gpudoctor.report.build import build
from gpudoctor.series import run_series
from gpudoctor.store import Store

pytestmark = pytest.mark.timeout(240)

# scripts/test.sh installs chromium (as it does tmux); without it this fails
assert shutil.which("chromium"), "chromium is needed: apt-get install chromium"

QUIET = [  # the browser's own background traffic off; what is left is the page's
    "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
    "--disable-background-networking", "--disable-sync", "--disable-component-update",
    "--disable-default-apps", "--enable-logging=stderr", "--v=0",
]  # fmt: skip


def browse(page: Path, out: Path, *what: str) -> subprocess.CompletedProcess[str]:
    """Chromium on the page (`--dump-dom` or `--screenshot=...`), with a log of every
    request it made."""
    return subprocess.run(
        ["chromium", *QUIET, f"--log-net-log={out / 'net.json'}", *what, page.as_uri()],
        capture_output=True, text=True, timeout=120, cwd=out,
    )  # fmt: skip


def pages_requests(net_log: Path) -> set[str]:
    """The URLs the page asked for: requests started on behalf of the file:// page
    (the browser's own, to its vendor, have another isolation key)."""
    log = json.loads(net_log.read_text())
    started = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return {
        e["params"]["url"]
        for e in log["events"]
        if e["type"] == started
        and str(e["params"].get("network_isolation_key", "")).startswith("file://")
    }


def test_the_html_report_draws_the_run_and_fetches_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    run = doctor(
        "--store", str(store), "run", "--headless", "--report", str(tmp_path / "run.html"),
        "--", PY, str(SAMPLES / "dataloader_bound.py"), "--steps", "150",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # the run's own page (`run --report X.html`) has the same charts as the rebuilt one
    assert (tmp_path / "run.html").read_text().count("<svg") >= 5
    made = doctor("--store", str(store), "report", "last", "--format", "html")
    assert made.returncode == 0 and made.stderr == "", made.stderr
    page = tmp_path / "report.html"
    page.write_text(made.stdout)
    text = made.stdout

    # self-contained: no script, no stylesheet or image from elsewhere
    assert "<script" not in text and "<link" not in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)

    dom = browse(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") >= 5  # step time, steps/s, data wait, CPU, job CPU
    assert "input-bound" in dom.stdout and "Training waits for input data" in dom.stdout
    assert "input-bound first seen" in dom.stdout  # the marker
    assert pages_requests(tmp_path / "net.json") == set()
    said = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not said, said

    shot = browse(page, tmp_path, "--window-size=1100,1400", "--screenshot=shot.png")
    assert shot.returncode == 0 and (tmp_path / "shot.png").stat().st_size > 50_000

    # the charts' numbers are the report's: the step time over the run around the
    # report's median, the data wait around its share
    opened = Store(store)
    (row,) = opened.sessions()
    timeline = opened.load(row.id)
    opened.close()
    report, series = build(timeline, row.id), run_series(timeline)
    median = report.steps.median_ms
    assert median is not None and report.steps.data_wait_fraction is not None
    # each interval's median weighed by its steps, as the report's median counts steps (a
    # busy spell on a shared machine fills more intervals with fewer, slower steps)
    rate = dict(series.steps_per_s)
    p50 = sorted((v, rate.get(t, 0.0)) for t, v in series.step_p50_ms)
    half, seen = sum(w for _, w in p50) / 2, 0.0
    middle = next(v for v, w in p50 if (seen := seen + w) >= half)
    assert 0.8 * median < middle < 1.25 * median
    wait = sorted(v for _, v in series.data_wait_pct)
    assert abs(wait[len(wait) // 2] - report.steps.data_wait_fraction * 100) < 10
    assert series.ended_at_s is not None and abs(series.ended_at_s - report.duration_s) < 1.5


def test_what_the_page_shows_is_escaped_and_masked(tmp_path: Path) -> None:
    """A command line with a secret and markup in it: masked and shown as text."""
    store = tmp_path / "s.db"
    script = tmp_path / "train.py"
    script.write_text("import sys, time\ntime.sleep(0.5)\n")
    run = doctor(
        "--store", str(store), "run", "--headless", "--", PY, str(script),
        "--hf-token", "hf_abcdefghijklmnopqrstuvwxyz123456", "--note", "<b>bold</b>",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    made = doctor("--store", str(store), "report", "last", "--format", "html")
    assert made.returncode == 0, made.stderr
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in made.stdout
    assert "--hf-token ***" in made.stdout
    assert "<b>bold</b>" not in made.stdout and "&lt;b&gt;bold&lt;/b&gt;" in made.stdout


def test_compare_overlays_two_runs_and_a_markdown_report_shows_its_charts(
    tmp_path: Path,
) -> None:
    """`compare A B --format html`: both runs on each chart, one page, nothing fetched;
    `run --report r.md` writes r.svg beside it and shows it; `report N --svg F`."""
    store = tmp_path / "s.db"
    for work, report in (("6", "slow.md"), ("1", "fast.md")):
        run = doctor(
            "--store", str(store), "run", "--headless", "--report", str(tmp_path / report),
            "--", PY, str(SAMPLES / "dataloader_bound.py"), "--steps", "150", "--decode-work", work,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
    made = doctor("--store", str(store), "compare", "1", "2", "--format", "html")
    assert made.returncode == 0, made.stderr
    assert "<script" not in made.stdout and "<link" not in made.stdout
    page = tmp_path / "compare.html"
    page.write_text(made.stdout)
    dom = browse(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    # step time, samples/s, data wait, CPU, the job's CPU: each with both runs
    assert dom.stdout.count("<svg") >= 5
    assert dom.stdout.count("baseline (session 1)") >= 5
    assert dom.stdout.count("treatment (session 2)") >= 5
    # the verdict the command line gives (on a busy machine too: "no better than noise")
    compared = doctor("--store", str(store), "compare", "1", "2", "--format", "json")
    assert compared.returncode == 0, compared.stderr
    verdict = json.loads(compared.stdout)["verdict"]
    assert verdict in ("faster", "slower", "no better than noise")
    outcome = re.search(r"<pre>(.*?)</pre>", dom.stdout, re.S)
    assert outcome is not None and verdict in outcome.group(1), dom.stdout[:3000]
    assert pages_requests(tmp_path / "net.json") == set()
    said = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not said, said
    # the faster run (less decoding a sample) is drawn faster: its median step shorter
    opened = Store(store)
    slow, fast = (run_series(opened.load(i)) for i in (1, 2))
    opened.close()
    med = [sorted(v for _, v in s.step_p50_ms)[len(s.step_p50_ms) // 2] for s in (slow, fast)]
    assert med[1] < med[0]

    # the Markdown beside its charts: the image link resolves to a drawn SVG
    md = (tmp_path / "fast.md").read_text()
    assert "![The run over time](fast.svg)" in md
    svg = tmp_path / "fast.svg"
    assert svg.read_text().count("<svg") >= 6  # the file's own and five charts
    shot = browse(svg, tmp_path, "--window-size=960,1400", "--screenshot=svg.png")
    assert shot.returncode == 0 and (tmp_path / "svg.png").stat().st_size > 20_000
    # a recorded session's Markdown with its charts in a file of the user's naming
    again = doctor("--store", str(store), "report", "1", "--svg", str(tmp_path / "one.svg"))
    assert again.returncode == 0, again.stderr
    assert f"![The run over time]({tmp_path / 'one.svg'})" in again.stdout
    assert (tmp_path / "one.svg").read_text().count("<svg") >= 6
    # --svg is for the Markdown, and an SVG file: said in one line, exit 2
    for bad in (["--svg", str(tmp_path / "x.png")], ["--format", "html", "--svg", "x.svg"]):
        wrong = doctor("--store", str(store), "report", "1", *bad)
        assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
        assert "Traceback" not in wrong.stderr


def test_chinese_pages_name_cjk_fonts_and_draw_their_glyphs(tmp_path: Path) -> None:
    """Issue 40, point 14: a Chinese page drew empty boxes in a browser that found no CJK
    font by itself. Every page's font stack names the CJK fonts of each platform, and in
    the real browser, with the CJK font the test set-up installs (fonts-wqy-zenhei), two
    different characters in that stack draw different pixels (empty boxes are all the
    same box) and neither draws the box of a character no font has."""
    from gpudoctor.report.html import PAGE_CSS

    for name in ("Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", "WenQuanYi Zen Hei"):
        assert name in PAGE_CSS

    def drawn(char: str) -> bytes:
        page = tmp_path / f"u{ord(char):x}.html"
        page.write_text(
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{PAGE_CSS}</style>"
            f"</head><body style='margin:0'><p style='font-size:96px;margin:0'>{char}</p>"
            "</body></html>",
            encoding="utf-8",
        )
        shot = tmp_path / f"u{ord(char):x}.png"
        done = browse(page, tmp_path, f"--screenshot={shot}", "--window-size=160,140")
        assert shot.exists(), done.stderr[-2000:]
        return shot.read_bytes()

    first, second, nothing = drawn("训"), drawn("练"), drawn("\U000f0000")
    assert first != second, "the two characters draw the same pixels: empty boxes"
    assert nothing not in (first, second)
    # and a Chinese report's page uses that stack: its title is drawn in it
    timeline = load_recorded_session("dataloader_bound")
    from gpudoctor import i18n
    from gpudoctor.report.html import page as html_page

    i18n.use("zh")
    try:
        text = html_page(build(timeline, 7, "zh"), run_series(timeline), [], [])
    finally:
        i18n.use("en")
    assert "报告" in text and PAGE_CSS.strip()[:40] in text


def test_the_page_says_what_the_markdown_says_and_stacks_the_split() -> None:
    """Issue 40, point 14: the page had no samples/s and no host line, and printed
    "14.292 ms" where the Markdown rounds. Its summary is the Markdown's, item by item;
    its "where a step goes" is stacked (each line its part plus those below it)."""
    import html as html_text

    from gpudoctor.report.html import page as html_page
    from gpudoctor.report.html import stacked
    from gpudoctor.report.render import summary_items

    timeline = load_recorded_session("dataloader_bound")
    report = build(timeline, 7, "en")
    text = html_text.unescape(re.sub(r"<[^>]+>", "", html_page(report, run_series(timeline))))
    items = summary_items(report)
    assert any("samples/s" in i for i in items) and any(i.startswith("- host:") for i in items)
    for item in items:
        assert item.lstrip(" -").replace("`", "") in text, item
    lines = stacked({"a": [(1.0, 10.0)], "b": [(1.0, 30.0)], "c": [(1.0, 60.0)]})
    assert list(lines) == ["c", "b", "a"] and lines["c"] == [(1.0, 100.0)]
    assert lines["b"] == [(1.0, 40.0)] and lines["a"] == [(1.0, 10.0)]
