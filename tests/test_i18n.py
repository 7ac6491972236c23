"""Chinese (issue 18): the gettext catalogue is complete and compiled, every finding reads
in Chinese with the same numbers filled in, and a Chinese locale or `--lang zh` is what
a real run writes in."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import PY, SAMPLES, doctor
from test_rules import BURNER, SIGNALS
from windows import host, window

from gpudoctor import i18n
from gpudoctor.diagnosis.engine import RULES
from gpudoctor.diagnosis.window import Window
from gpudoctor.model import Finding
from gpudoctor.prescribe.predict import Prediction
from gpudoctor.prescribe.rerun import Change, Treatment
from gpudoctor.prescribe.trial import Arm, Comparison, TrialResult
from gpudoctor.prescribe.visit import FixResult, FixStep
from gpudoctor.report.render import fix_text, trial_text
from gpudoctor.units import cell_width

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile(r"[\u4e00-\u9fff]")
# the numbers a message is filled with: 12.5, 40%, 3.1 ms, 1.25x, (224, 224), pid 8261
NUMBER = re.compile(r"\d+(?:\.\d+)?")


@pytest.fixture(autouse=True)
def english_after() -> Iterator[None]:
    yield
    i18n.use("en")


def test_the_catalogue_has_every_message_translated_and_compiled() -> None:
    """Each message marked in the code is in the Chinese .po with a translation, and the
    shipped .mo is that .po compiled (scripts/i18n.py, with Babel)."""
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "i18n.py"), "check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


EXTRA: dict[str, Callable[[], Window]] = {
    # the neighbour's finding with whom it names, and the job's own threads beside it
    "noisy-neighbour+own": lambda: window(
        host=host(run_delay=0.6, others_cores=1.0, others=(BURNER,), cores=2),
        facts={"dataloaders": [{"num_workers": 2}], "intra_op_threads": 2},
    ),
}


def finding(name: str, lang: str) -> Finding:
    i18n.use(lang)
    make = {**SIGNALS, **EXTRA}[name]
    rule = next(r for r in RULES if name.split("+")[0] == r.ID)
    found: Finding | None = rule.evaluate(make())
    assert found is not None
    return found


@pytest.mark.parametrize("name", sorted({**SIGNALS, **EXTRA}))
def test_each_finding_reads_in_chinese_with_the_same_numbers(name: str) -> None:
    en, zh = finding(name, "en"), finding(name, "zh")
    assert not CJK.search(en.title + en.evidence)
    assert CJK.search(zh.title) and CJK.search(zh.evidence), (zh.title, zh.evidence)
    # ids, remedies and the measured numbers stay as they are
    assert (zh.id, zh.severity, zh.remedies, zh.estimated_gain) == (
        en.id, en.severity, en.remedies, en.estimated_gain,
    )  # fmt: skip
    assert sorted(NUMBER.findall(zh.evidence)) == sorted(NUMBER.findall(en.evidence)), (
        en.evidence,
        zh.evidence,
    )


def test_a_language_without_a_catalogue_is_english() -> None:
    i18n.use("fr")
    assert i18n.language() == "en"
    assert finding("input-bound", "fr").title == "Training waits for input data"


def test_a_chinese_locale_runs_the_doctor_in_chinese(tmp_path: Path) -> None:
    """No --lang: LANG=zh_CN.UTF-8 is enough. The finding's title and evidence are
    Chinese in what it prints and in the report; the JSON keys and ids stay English."""
    report = tmp_path / "r.json"
    proc = doctor(
        "run", "--headless", "--report", str(report), "--", PY,
        str(SAMPLES / "dataloader_bound.py"), "--steps", "60",
        env={**{k: v for k, v in os.environ.items() if not k.startswith("LC_")},
             "LANG": "zh_CN.UTF-8"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = proc.stdout + proc.stderr
    assert "训练在等待输入数据" in said
    # the summary around it: how the run ended, the step measures, the prediction
    assert "：会话 " in said and "结束方式 exit，退出码 0" in said, said[-3000:]
    assert "每步中位数 " in said and "采用 more-workers 的预测：" in said, said[-3000:]
    found = {f["id"]: f for f in json.loads(report.read_text())["findings"]}
    top = found["input-bound"]
    assert top["title"] == "训练在等待输入数据"
    assert "每步有" in top["evidence"] and "DataLoader" in top["evidence"]
    assert top["remedies"][0]["id"] == "more-workers"


def arm(walls: list[float], losses: tuple[float, ...] = ()) -> Arm:
    return Arm(None, (), tuple(walls), 32.0, 0.4, 0, "exit", len(walls), losses=losses)


def test_fix_and_trial_results_read_in_chinese_and_the_table_lines_up() -> None:
    """The path `fix` took as a table: its columns start at the same terminal column on
    every row though the header is Chinese (two columns a character)."""
    i18n.use("zh")
    base = [arm([0.02] * 40 + [0.021] * 40, (2.3,) * 80)]
    fast = [arm([0.01] * 40 + [0.011] * 40, (2.3,) * 80)]
    comparison = Comparison.of(base, fast)
    workers = Change("more-workers", "flag", "--num-workers 0 -> 2")
    threads = Change("fewer-threads", "probe", "torch.set_num_threads(1)")
    steps = (
        FixStep("more-workers", "input-bound", (workers,), Prediction(1.2, 2.0, "x"), comparison),
        FixStep(
            "fewer-threads", "cpu-saturated", (threads,), Prediction(1.0, 1.5, "y"), comparison
        ),
    )
    final = Treatment(("python", "t.py", "--num-workers", "2"), applied=(workers,))
    result = FixResult(("python", "t.py"), final, steps, comparison, ("preprocess-offline: x",),
                       "no remedy left", None, 42.0)  # fmt: skip
    text = fix_text(result)
    assert "gpudoctor fix：42 秒内尝试了 2 个处方" in text
    assert "停止原因：没有可以应用的处方了" in text and "需要手动修改的地方" in text
    rows = [line for line in text.splitlines() if re.match(r"  (#|\d) ", line)]
    assert len(rows) == 3 and CJK.search(rows[0])
    starts = [
        [cell_width(row[: m.start(1)]) for m in re.finditer(r"(?:^|  )(\S(?:\S| (?! ))*)", row)]
        for row in rows
    ]
    assert starts[0] == starts[1] == starts[2] and len(starts[0]) == 6, (starts, rows)
    trial = trial_text(
        TrialResult(
            comparison, (workers,), ("python", "t.py"), final.argv, "python t.py --num-workers 2"
        )
    )
    assert "gpudoctor trial：更快" in trial and "通过脚本参数应用 more-workers" in trial
    assert "加速比 " in trial and "原配置 " in trial and "新配置 " in trial


def test_the_tui_in_chinese_at_80x24(tmp_path: Path) -> None:
    """A live job in tmux at 80x24 with --lang zh: the panels' titles, the findings and
    the footer's keys are Chinese, no line is wider than the terminal (CJK characters
    take two columns), and q asks in Chinese."""
    from test_tui_terminal import run_in_tmux, tmux, wait_screen

    name = f"gpudoctor-zh-{tmp_path.name}"
    job = f"{PY} {SAMPLES / 'dataloader_bound.py'} --seconds 600"
    run_in_tmux(
        tmp_path,
        name,
        f"GPUDOCTOR_STORE={tmp_path / 's.db'} {PY} -m gpudoctor run --lang zh -- {job}",
    )
    try:
        shown = wait_screen(name, "训练在等待输入数据", "⏎ 处方", "诊断结果", "主机", "作业")
        assert all(cell_width(line) <= 80 for line in shown.splitlines()), shown
        tmux("send-keys", "-t", name, "q")
        asked = wait_screen(name, "作业还在运行。", "停止作业并退出")
        assert all(cell_width(line) <= 80 for line in asked.splitlines()), asked
        tmux("send-keys", "-t", name, "s")
        wait_screen(name, "SHELL-IS-BACK")
    finally:
        tmux("kill-session", "-t", name)


def test_the_markdown_report_of_a_recorded_run_in_chinese() -> None:
    """The H200 recording's report: headings, measures and findings in Chinese, the same
    numbers and the same ids as the English one."""
    from conftest import load_recorded_session

    from gpudoctor.report.build import build
    from gpudoctor.report.render import markdown

    timeline = load_recorded_session("dataloader_bound")
    english = markdown(build(timeline, 7, "en"))
    i18n.use("zh")
    chinese = markdown(build(load_recorded_session("dataloader_bound"), 7, "zh"))
    assert "# gpudoctor 报告（会话 7）" in chinese and "## 诊断结果" in chinese
    assert "1. **input-bound** (high): 训练在等待输入数据" in chinese
    assert "可能的原因：input-bound" in chinese
    assert re.findall(r"\*\*([a-z-]+)\*\*", chinese) == re.findall(r"\*\*([a-z-]+)\*\*", english)


def test_bad_input_is_one_chinese_line_and_exit_2() -> None:
    """--lang zh is taken before the arguments are parsed: their errors are Chinese too."""
    for args, words in (
        (("trial", "--lang", "zh", "--steps", "0", "--", "python", "x.py"), "必须是正数：'0'"),
        (("fix", "--lang=zh"), "没有给出命令"),
        (("fix", "--lang", "zh", "--report", "/tmp/x.txt", "--", "python", "x.py"), "结尾"),
    ):
        proc = doctor(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
