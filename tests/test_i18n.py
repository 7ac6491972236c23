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
from typing import Any

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
from gpudoctor.report.render import fix_markdown, fix_text, trial_markdown, trial_text
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
    # the parts the code joins keep Chinese punctuation too
    assert not HALF_WIDTH_BESIDE_CJK.search(zh.title + zh.evidence), zh.evidence


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
    assert "：会话 " in said and "结束方式 进程退出，退出码 0" in said, said[-3000:]
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
    # the Markdown forms too, nothing left in English (commands are in backticks)
    for written in (fix_markdown(result), trial_markdown(TrialResult(
        comparison, (workers,), ("python", "t.py"), final.argv, "python t.py --num-workers 2",
        steps_per_run=40, repeat=2, predicted=Prediction(1.2, 2.0, "x"),
    ))):  # fmt: skip
        assert not english_left(re.sub(r"`[^`]*`", " ", written)) - {"gpudoctor fix"}, written


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
        # no English left (issue 40, point 12): the severity, the cores, iowait, the
        # command palette's key, as a person reads them; names and units may stay
        for english in ("HIGH", "MEDIUM", "cpu0", "iowait", "palette"):
            assert english not in shown, (english, shown)
        assert "高" in shown and "核0" in shown and "命令面板" in shown
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
        # argparse's own words, through the doctor's catalogue
        (("watch", "--lang", "zh"), "缺少以下参数：--pid"),
        (("history", "--lang", "zh", "--limit", "x"), "参数 --limit：无效的 int 值：'x'"),
        (("trial", "--lang", "zh", "--steps"), "参数 --steps：需要一个值"),
    ):
        proc = doctor(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr


# A message left in English shows as two or more English words in a row; what may stay
# so on a Chinese screen: the column names nvidia-smi and top use, a class the reader
# types as it is, a command, NVIDIA's name for its units, NVML's own error (quoted in
# brackets after the doctor's words), and Textual's own command-palette key (code on a
# page, in <code> and <pre>, is code).
ENGLISH_WORDS = re.compile(r"(?<![\w./-])[A-Za-z][A-Za-z'’]*(?: [A-Za-z][A-Za-z'’]*)+(?![\w/(-])")
KEPT_AS_THEY_ARE = {
    "GPU mem", "disk r", "DataLoader worker", "gpudoctor trial", "p palette", "Tensor Core",
    "NVML Shared Library Not Found",
}  # fmt: skip


def english_left(text: str) -> set[str]:
    """Runs of English words in `text` (tags and styles of a page taken out first)."""
    text = re.sub(r"<(style|script|code|pre)\b.*?</\1>", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return set(ENGLISH_WORDS.findall(text)) - KEPT_AS_THEY_ARE


def test_the_detector_finds_an_english_message() -> None:
    """The check below catches what it is for: an English title, a two-word label."""
    assert english_left("每步耗时 last minute  <h2>Trial result</h2> 0 s") == {
        "last minute", "Trial result",
    }  # fmt: skip
    assert english_left("<code>x</code> <svg><style>a b c</style></svg> 全部") == set()


@pytest.mark.parametrize(
    ("session", "size"),
    [("gpu_session_dataloader_bound", (80, 24)), ("cpu_session_dataloader_bound", (160, 45))],
)
def test_every_screen_of_the_tui_in_chinese(session: str, size: tuple[int, int]) -> None:
    """Each screen a key opens over a recorded run (the dashboard, help, the plots, the
    ranks, the job's output, a finding, the guide): Chinese throughout, nothing wider
    than the terminal (the detector's own test shows it sees English)."""
    proc = subprocess.run(
        [PY, str(ROOT / "tests" / "tui_screens.py"), "zh",
         str(ROOT / "tests" / "fixtures" / f"{session}.json.gz"), *map(str, size)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Plotext's words carry a zero-width space after each CJK character (tui/plots.py)
    screens = {k: v.replace("\u200b", "") for k, v in json.loads(proc.stdout).items()}
    assert set(screens) == {
        "dashboard", "help", "plots", "ranks", "output", "finding", "guide",
    }  # fmt: skip
    for name, shown in screens.items():
        assert CJK.search(shown), (name, shown)
        assert not english_left(shown), (name, english_left(shown), shown)
        assert all(cell_width(line) <= size[0] for line in shown.splitlines()), (name, shown)
    assert "整个运行" in screens["plots"] and "自开始起" in screens["plots"]


def test_the_html_page_its_charts_trial_and_tune_in_chinese(tmp_path: Path) -> None:
    """The run's page with its charts (titles, axes, legends, markers) and a trial's and a
    batch-size search's parts, and a comparison's page: Chinese throughout."""
    from conftest import load_recorded_session

    from gpudoctor.prescribe.batch_size import Try, search
    from gpudoctor.report.build import build
    from gpudoctor.report.html import compare_page, page
    from gpudoctor.report.render import tune_markdown
    from gpudoctor.series import run_series

    amp = Change("amp", "probe", "autocast")
    base = [arm([0.02] * 40, (2.3,) * 40)]
    fast = [arm([0.01] * 40, (2.31,) * 40)]

    def try_size(n: int) -> Try:
        if n <= 36:
            return Try(n, True, "fits", 30.0 * n, n * 2**25)
        reason = {64: "oom", 48: "crashed (exit code 1)"}.get(n, "over safety margin")
        return Try(n, False, reason, None, None)

    pages = {}
    for lang in ("en", "zh"):
        i18n.use(lang)
        trial = TrialResult(
            Comparison.of(base, fast), (amp,), ("python", "t.py"), ("python", "t.py"),
            "python t.py", steps_per_run=40, repeat=1,
            predicted=Prediction(1.2, 2.0, "x"),
        ).to_dict()  # fmt: skip
        tune = {
            **search(32, try_size).as_dict(),
            "sessions": {"32": 3, "64": 4},
            "command": ["python", "t.py"],
        }
        timeline = load_recorded_session("dataloader_bound")
        series = run_series(timeline)
        pages[lang] = page(build(timeline, 7, lang), series, [trial], [tune])
        pages[lang + "-compare"] = compare_page("x", [(7, series), (8, series)])
    tuned = tune_markdown(search(32, try_size))  # in Chinese still (the last language used)
    assert "| 批大小 | 结果 |" in tuned and not english_left(tuned) - {"gpudoctor tune"}, tuned
    for name in ("zh", "zh-compare"):
        assert '<html lang="zh">' in pages[name]
        assert not english_left(pages[name]), (name, english_left(pages[name]))
    assert "每步耗时" in pages["zh"] and "自开始起的秒数" in pages["zh"]
    assert "试验" in pages["zh"] and "批大小搜索" in pages["zh"] and "首次出现" in pages["zh"]
    assert len(english_left(pages["en"])) > 10 and len(english_left(pages["en-compare"])) > 3


def test_the_ranks_and_the_profile_in_chinese_line_up_by_display_width() -> None:
    from test_tui import ddp_timeline

    from gpudoctor.diagnosis.ranks import rank_measures
    from gpudoctor.display import rank_header, rank_rows
    from gpudoctor.tui.screens import profile_text

    i18n.use("zh")
    ranks = rank_measures(ddp_timeline(12, slow_rank=5).window())
    lines = [rank_header(), *rank_rows(ranks, room=6)]
    assert CJK.search(lines[0]) and "另有 7 个 rank" in lines[-2], lines
    # each row's last cell (4 columns, the GPU's util) starts where the header's GPU does
    gpu_at = cell_width(lines[0][: lines[0].index("GPU")])
    rows = [line for line in lines[1:] if "另有" not in line]
    assert len(rows) == 5 and {cell_width(row) - 4 for row in rows} == {gpu_at}, lines
    addmm = {"name": "aten::addmm", "calls": 60, "self_cpu_time_total_us": 1234.0}
    profile: dict[str, Any] = {
        "steps": 20, "sort": "cpu", "trace": "/tmp/t.json", "operators": [addmm],
    }  # fmt: skip
    shown = profile_text(profile).plain
    assert "按自身 CPU 时间排列的主要算子" in shown and not english_left(shown), shown
    # a name too long for the screen is cut with an ellipsis on its own line, never
    # wrapped back under the numbers' columns
    long = "autograd::engine::evaluate_function: ConvolutionBackward0_with_a_long_tail"
    profile["operators"] = [addmm, {"name": long, "calls": 20, "self_cpu_time_total_us": 99.0}]
    rows = profile_text(profile, width=60, trace=False).plain.splitlines()
    assert rows[-1].endswith("…") and cell_width(rows[-1]) == 60, rows
    assert rows[-1].split()[:2] == ["99", "20"] and "/tmp/t.json" not in "".join(rows)


def test_help_and_errors_from_below_the_command_line_in_chinese() -> None:
    """`--help` (argparse's own words too) wrapped by display width, and the errors of the
    layers under the command line (the store, the launch) in one Chinese line."""
    env = {**os.environ, "COLUMNS": "80"}
    chinese = {**env, "LANG": "zh_CN.UTF-8", "LC_ALL": "", "LANGUAGE": ""}
    for args, where in ((("--help",), chinese), (("trial", "--lang", "zh", "--help"), env)):
        proc = doctor(*args, env=where)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("用法：gpudoctor") and "选项" in proc.stdout, proc.stdout
        assert "显示本帮助并退出" in proc.stdout, proc.stdout
        assert all(cell_width(line) <= 80 for line in proc.stdout.splitlines()), proc.stdout
        assert not english_left(proc.stdout) - {"B T T B"}, english_left(proc.stdout)
    usage = doctor("trial", "--lang", "zh", "--help", env=env).stdout.splitlines()
    # the usage's second line under its first's options, though 用法： takes two columns a
    # character
    assert cell_width(usage[0][: usage[0].index("[-h]")]) == usage[1].index("["), usage
    for argv, code, words in (
        (("report", "999", "--lang", "zh"), 2, "中没有会话 999"),
        (("run", "--headless", "--lang", "zh", "--", "/no/such/command"), 127, "找不到命令"),
    ):
        proc = doctor(*argv)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == code and words in lines[-1], proc.stderr
        assert "Traceback" not in proc.stderr


def test_no_function_binds_the_name_it_translates_with() -> None:
    """`x, _, y = s.partition(":")` in a function that also calls `_()` makes `_` a local
    there: the call raises (UnboundLocalError, or a str called). Twice so far (a bad
    --metrics address, a CPU job's speed of light); ruff does not see it."""
    import ast

    found = []
    for path in sorted((ROOT / "gpudoctor").rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            binds, calls = False, False
            todo: list[ast.AST] = list(ast.iter_child_nodes(fn))
            while todo:
                node = todo.pop()
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    continue  # a scope of its own
                if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                    calls = calls or any(
                        isinstance(n, ast.Call) and getattr(n.func, "id", None) == "_"
                        for n in ast.walk(node)
                    )
                    continue  # its loop variables are its own
                if isinstance(node, ast.Name) and node.id == "_":
                    binds = binds or isinstance(node.ctx, ast.Store)
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_":
                    calls = True
                todo += ast.iter_child_nodes(node)
            if binds and calls:
                found.append(f"{path.relative_to(ROOT)}: {fn.name}")
    assert found == []


# Chinese text takes full-width punctuation beside Chinese characters (，：；！？（）),
# and no space between two of them; the panels' label columns ("磁盘 读 {read} 写
# {write}": a label, then its value's own label) are the exception, as their English is
LABEL_COLUMNS = ("disk r {read} w {write}", "net  rx {rx} tx {tx}", "steps {steps}  step p50 {p50} p90 {p90}")  # fmt: skip
HALF_WIDTH_BESIDE_CJK = re.compile(
    r"[\u4e00-\u9fff][,:;!?()]|[,:;!?()][\u4e00-\u9fff]|[\u4e00-\u9fff]\.(?![\d.])"
)
SPACE_IN_CJK = re.compile(r"[\u4e00-\u9fff] +[\u4e00-\u9fff]")


def test_chinese_punctuation_is_full_width_and_has_no_stray_spaces() -> None:
    from babel.messages.pofile import read_po

    po = ROOT / "gpudoctor" / "locale" / "zh" / "LC_MESSAGES" / "gpudoctor.po"
    with po.open("rb") as f:
        catalogue = read_po(f)
    texts = {str(m.id): str(m.string) for m in catalogue if m.id and isinstance(m.id, str)}
    texts["guide"] = (ROOT / "gpudoctor" / "guide" / "zh.md").read_text()
    mixed = {k: HALF_WIDTH_BESIDE_CJK.findall(v) for k, v in texts.items()}
    assert not {k: v for k, v in mixed.items() if v}
    spaced = {k: SPACE_IN_CJK.findall(v) for k, v in texts.items() if k not in LABEL_COLUMNS}
    assert not {k: v for k, v in spaced.items() if v}


def test_history_in_chinese_and_at_80_columns(tmp_path: Path) -> None:
    """`history` in Chinese says how each run ended, a watch's steps and the top
    finding's severity in Chinese (they were English: "detached", "watch", "(high)");
    a long run's length fits its column without an ellipsis."""
    from gpudoctor.model import JobExit
    from gpudoctor.store import Store
    from gpudoctor.timeline import Timeline

    path = tmp_path / "s.db"
    store = Store(path)
    ends: tuple[tuple[JobExit, dict[str, Any], int], ...] = (
        (JobExit(0, "exit"), {"steps": 400, "top_finding": "input-bound (high)"}, 110),
        (JobExit(None, "detached"), {"mode": "watch", "top_finding": "noisy-neighbour (medium)"}, 15),
        (JobExit(137, "signal"), {"steps": 9}, 3 * 86400 + 4 * 3600),
    )  # fmt: skip
    for n, (end, summary, seconds) in enumerate(ends):
        sid = store.create_session(Timeline(["python", "t.py"], 1e9 + n, 0), "/w", 5)
        store.finish(sid, int(seconds * 1e9), end, summary)
    store.close()
    env = {**os.environ, "COLUMNS": "80"}
    out = doctor("--store", str(path), "--lang", "zh", "history", env=env).stdout
    rows = [line for line in out.splitlines() if not line.startswith("      ")]
    table = "\n".join(rows)
    assert "input-bound（高）" in table and "noisy-neighbour（中）" in table, table
    assert "仍在运行" in table and "观察" in table and "进程退出 0" in table, table
    assert "3d04h" in table and "1m50s" in table and "…" not in table, table
    for english in ("detached", "watch", "exit", "high", "medium", "signal"):
        assert english not in table, (english, table)
    assert all(cell_width(line) <= 80 for line in out.splitlines())
