"""Text in terminal columns: Chinese characters are two columns wide and a line may
break between any two of them, but not before a closing mark or after an opening one."""

from __future__ import annotations

from gpudoctor.units import CLOSING, OPENING, cell_width, clip, wrap_columns

CHINESE = (
    "作业的线程有 61% 的时间在等待 CPU 核心（37 个样本中的中位数），而其他进程占用了本机 2 "
    "个核心中的 1.2 个：python（pid 12112）。请在空闲的核心上运行它，或用 taskset 把它们固定"
    "到不同的核心上。"
)


def test_chinese_wraps_by_columns_and_keeps_its_marks_where_they_belong() -> None:
    for width in range(12, 61):
        lines = wrap_columns(CHINESE, width)
        assert all(cell_width(line) <= width for line in lines), (width, lines)
        assert "".join(lines).replace(" ", "") == CHINESE.replace(" ", "")
        assert not any(line[0] in CLOSING for line in lines[1:]), (width, lines)
        assert not any(line[-1] in OPENING for line in lines[:-1]), (width, lines)
        # a number with its unit and a Latin word are never split
        assert not any(line.endswith(("6", "1.")) for line in lines), (width, lines)
        assert not any(line.startswith(("ask", "et")) for line in lines), (width, lines)


def test_english_wraps_between_words_and_a_cut_says_so() -> None:
    words = "The job's threads waited for a core 61% of the time they were ready to run"
    lines = wrap_columns(words, 20)
    assert lines[0] == "The job's threads" and all(len(line) <= 20 for line in lines)
    assert clip(words, 20) == "The job's threads w…" and cell_width(clip(CHINESE, 9)) == 9
