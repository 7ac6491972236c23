"""A new user's afternoon (issue 40), in a real terminal (tmux) at 80x24 and 200x50, in
English and in Chinese: the home screen, a run, leaving it, attaching to a recording
doctor, watching a Python process and one that is not, a replay, the history and the
report in every format. On every screen: no line wider than the terminal, no panel
with zero rows, nothing cut without an ellipsis, and on a Chinese screen no English
words but names, units and what the job itself printed."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import PY, ROOT, SAMPLES, as_from_a_terminal, env_without_probe
from test_i18n import CJK, english_left
from test_tui_terminal import close, screen, tmux, wait_screen

from gpudoctor.units import cell_width

SIZES = ((80, 24), (200, 50))
# a word running into a panel's right padding: cut there without an ellipsis
CUT = re.compile(r"[\w\u4e00-\u9fff][\w\u4e00-\u9fff] │")


def troubles(text: str, width: int, lang: str, job_words: set[str]) -> list[str]:
    """What is wrong on a screen, in words (empty: nothing)."""
    text = text.replace("\u200b", "")  # Plotext's words carry zero-width spaces
    lines = text.splitlines()
    found = [f"wider than {width}: {line!r}" for line in lines if cell_width(line) > width]
    for i, line in enumerate(lines[:-1]):
        for m in re.finditer("╭", line):
            below = lines[i + 1]
            at = cell_width(line[: m.start()])
            column = [c for c in below if cell_width(below[: below.index(c)]) == at][:1]
            if below.strip() and column == ["╰"]:
                found.append(f"a panel with no rows: {line.strip()!r}")
    found += [f"cut without an ellipsis: {line!r}" for line in lines if CUT.search(line)]
    if lang == "zh":
        assert CJK.search(text), text
        shown = names_out(text)
        found += [f"English: {w!r}" for w in sorted(english_left(shown) - job_words)]
        found += [f"English word: {w!r}" for w in sorted(set(OUR_WORDS.findall(shown)))]
    return found


def _our_words() -> re.Pattern[str]:
    """The one-word messages of the catalogue ("watch", "exit", "running"...): on a
    Chinese screen each must show translated (english_left sees only runs of two
    words or more); a word inside an id or an option (more-workers, --steps) is a name."""
    from babel.messages.pofile import read_po

    po = Path(__file__).parent.parent / "gpudoctor" / "locale" / "zh" / "LC_MESSAGES"
    with (po / "gpudoctor.po").open("rb") as f:
        words = {
            m.id for m in read_po(f) if isinstance(m.id, str) and re.fullmatch(r"[a-z]+", m.id)
        }
    return re.compile(r"(?<![\w./-])(" + "|".join(sorted(words)) + r")(?![\w/-])")


OUR_WORDS = _our_words()


def names_out(text: str) -> str:
    """The screen without what is named as it is: code quoted in backticks (across the
    lines it wraps over), the command lines shown (a program and its arguments) and the
    doctor's own commands named in its words (`gpudoctor watch`)."""
    flat = re.sub(r"[\u2500-\u259f]", " ", text)  # the panels' and dialogs' borders
    flat = re.sub(r"`[^`]*`", " ", flat, flags=re.S)
    flat = re.sub(r"\bgpudoctor\s+[a-z]+", " ", flat)  # a command named, wrapped or not
    return re.sub(r"\bpython3?\b[^\n]*", " ", flat)


@contextmanager
def terminal(name: str, command: str, tmp_path: Path) -> Iterator[str]:
    tmux("new-session", "-d", "-s", name, "-x", "80", "-y", "24", command + "; sleep 600")
    try:
        yield name
    finally:
        close(name, tmp_path)


def both_sizes(name: str, *needles: str, settle: float = 1.0) -> Iterator[tuple[str, int]]:
    """The screen at each size, once it shows `needles` and the app has laid it out."""
    for width, height in SIZES:
        tmux("resize-window", "-t", name, "-x", str(width), "-y", str(height))
        wait_screen(name, *needles)
        time.sleep(settle)
        yield screen(name), width


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_new_users_afternoon(tmp_path: Path, lang: str) -> None:
    store = tmp_path / "s.db"
    doctor = f"cd {ROOT} && GPUDOCTOR_STORE={store} {PY} -m gpudoctor --lang {lang}"
    job_words = english_left("dataloader_bound: 100 steps in 10.0 s healthy: final loss")
    problems: dict[str, list[str]] = {}
    en = lang == "en"
    rate = "steps/s" if en else "步/秒"  # shown once steps are measured
    not_python = "not a Python process" if en else "不是 Python 进程"

    def look(what: str, text: str, width: int) -> None:
        found = troubles(text, width, lang, job_words)
        if found:
            problems[f"{what} {width}"] = found + [text]

    # someone's training job, started plainly, and a process that is not Python; the
    # jobs behind the screens rest between steps: the screens are what is checked, and
    # two jobs keeping both cores busy only slowed them (and every test beside this one)
    light = ("--steps", "1000000", "--batch-size", "4", "--pause-ms", "50")
    plain = subprocess.Popen(
        [PY, str(SAMPLES / "healthy.py"), *light], env=env_without_probe(),
        stdout=subprocess.DEVNULL, preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    sleeper = subprocess.Popen(["sleep", "600"])
    # a doctor recording a job headless, to attach to
    recorder = subprocess.Popen(
        [PY, "-m", "gpudoctor", "--store", str(store), "run", "--headless", "--", PY,
         str(SAMPLES / "healthy.py"), *light],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    try:
        # the home screen: the machine and its processes
        with terminal(f"afternoon-home-{lang}", doctor, tmp_path) as t:
            for text, width in both_sizes(t, str(plain.pid)):
                look("home", text, width)
        # a run: its dashboard with a finding, then q and leave it running
        with terminal(
            f"afternoon-run-{lang}",
            f"{doctor} run -- {PY} {SAMPLES / 'dataloader_bound.py'} --seconds 120",
            tmp_path,
        ) as t:
            for text, width in both_sizes(t, "input-bound", settle=2.0):
                look("run", text, width)
            tmux("send-keys", "-t", t, "q")
            look("quit dialog", wait_screen(t, "still running" if en else "作业还在运行"), 200)
            tmux("send-keys", "-t", t, "l")
            wait_screen(t, "gpudoctor")
        # the recording doctor's session, attached to
        with terminal(f"afternoon-attach-{lang}", f"{doctor} attach 1", tmp_path) as t:
            for text, width in both_sizes(t, rate, settle=2.0):
                look("attach", text, width)
        # watching a plain Python job, and a process that is not Python
        for what, pid, needle in (
            ("watch", plain.pid, rate),
            ("watch sleep", sleeper.pid, not_python),
        ):
            with terminal(
                f"afternoon-{what[-5:]}-{lang}", f"{doctor} watch --pid {pid}", tmp_path
            ) as t:
                for text, width in both_sizes(t, str(pid), needle, settle=2.0):
                    look(what, text, width)
        # the run left above, replayed
        with terminal(f"afternoon-replay-{lang}", f"{doctor} replay 2", tmp_path) as t:
            for text, width in both_sizes(t, "input-bound"):
                look("replay", text, width)
    finally:
        for process in (plain, sleeper, recorder):
            process.terminate()
        recorder.wait(timeout=60)
    # the history and the report in every form, off a terminal: 80 columns
    env = {"COLUMNS": "80", "PATH": "/usr/bin:/bin", "GPUDOCTOR_STORE": str(store)}
    history = subprocess.run(
        [PY, "-m", "gpudoctor", "--lang", lang, "history"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert history.returncode == 0, history.stderr
    look("history", history.stdout, 80)
    for form in ("md", "html", "json"):
        report = subprocess.run(
            [PY, "-m", "gpudoctor", "--lang", lang, "report", "2", "--format", form],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert report.returncode == 0, report.stderr
        if form == "json":
            assert json.loads(report.stdout)["findings"]
        elif lang == "zh":
            english = english_left(names_out(report.stdout)) - job_words
            if english:
                problems[f"report {form}"] = sorted(english)
    assert not problems, json.dumps(problems, ensure_ascii=False, indent=1)


def test_the_checks_see_what_they_look_for() -> None:
    """Each check of the afternoon finds its fault on a screen that has it."""
    cut = "│ HIGH   input-bound: 89% of each step waits for the DataLoader: about 13 ms │\n"
    empty = "╭─ Output ──╮\n╰───────────╯\n"
    chinese = "│ 高 input-bound: 训练在等待输入数据 (last minute) `for p in x` │\n"
    wide = "x" * 81
    assert troubles(cut, 80, "en", set()) == [f"cut without an ellipsis: {cut[:-1]!r}"]
    assert troubles(empty, 80, "en", set()) == ["a panel with no rows: '╭─ Output ──╮'"]
    assert troubles(chinese, 80, "zh", set()) == ["English: 'last minute'"]
    one_word = "│ 46  12-04 19:06  10.5 s  仍在运行  watch  more-workers  gpudoctor watch   │\n"
    assert troubles(one_word, 80, "zh", set()) == ["English word: 'watch'"]
    assert troubles(wide, 80, "en", set()) == [f"wider than 80: {wide!r}"]
    fine = "│ HIGH   input-bound: 89% of each step waits for the Data…  │\n"
    assert troubles(fine + "╭─ Output ──╮\n│ x │\n╰───╯\n", 80, "en", set()) == []
