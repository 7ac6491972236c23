"""`gpudoctor trial` and `compare`: real reruns of real sample jobs on this 2-core
machine, and the bad inputs."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, SAMPLES, busy_neighbours, doctor

import gpudoctor.app.trial as trials
import gpudoctor.prescribe.trial as trial_stats
from gpudoctor.prescribe.predict import Prediction
from gpudoctor.prescribe.rerun import NotApplicable, plan
from gpudoctor.prescribe.trial import Arm, Comparison, speedup, t975, t995, verdict
from gpudoctor.prescribe.visit import FixStep
from gpudoctor.report.html import trial_part
from gpudoctor.report.render import trial_document, trial_markdown, trial_text
from gpudoctor.units import cell_width

# a trial runs its job several times: the busy-neighbour trial below took 67 s on this
# 2-core machine and 207 s with one more busy process in a session of its own (whose
# scheduling group takes a core's share alone), past the suite's 180 s; the doctor's
# own wait (`trial`, below) is 600 s
pytestmark = pytest.mark.timeout(600)


def trial(tmp_path: Path, *args: str, name: str = "trial") -> tuple[Any, dict[str, Any]]:
    report = tmp_path / f"{name}.json"
    proc = doctor("trial", "--report", str(report), *args, timeout=600)
    assert report.exists(), proc.stderr[-3000:]
    return proc, json.loads(report.read_text())["trial"]


def says_faster(result: dict[str, Any]) -> None:
    """The trial says "faster"; or, on a machine whose other processes took the job's
    cores throughout its runs (CI's, beside the rest of the suite), "no better than noise"
    where the wider interval the verdict then rests on holds 1, or the runs were too few
    to claim anything (trial.verdict: a 2.09x read so in CI, 2026-12-07). Either way the
    runs read a gain: the caller asserts its size."""
    busy = result["machine_busy"]
    said = (result["speedup"], result["ci95"], result["judged"], busy)
    if busy and not busy["left_out"] and result["verdict"] == "no better than noise":
        low, high = result["judged"]["ci"]
        assert busy["too_few_runs"] or low <= 1.0 <= high, said
    else:
        assert result["verdict"] == "faster", said


def test_more_workers_through_the_scripts_flag_is_faster(tmp_path: Path) -> None:
    """How often a repeat lands inside the interval is the interval's coverage, measured
    over many trials in bench/trial_coverage.py; here what holds every time."""
    # each sample waits 1 ms for storage and decodes in ~0.3 ms: two workers overlap the
    # waits, which holds on a machine shared with a busy process (a decode-only loader
    # gains nothing when another process takes the second core, and that is what the
    # trial then says: the busy-neighbour test below)
    job = (
        "--", PY, str(SAMPLES / "dataloader_bound.py"), "--seconds", "600",
        "--decode-work", "1", "--read-ms", "1",
    )  # fmt: skip
    # two runs a side, and another pair while the interval holds 1 (with two alone, the
    # between-run term's Student-t quantile at one or two degrees of freedom has read a
    # measured 2.01x as "no better than noise" on a busy CI)
    proc, result = trial(tmp_path, *job)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # without --apply: the top finding's (input-bound) first remedy
    (applied,) = result["applied"]
    assert (applied["remedy"], applied["via"], applied["change"]) == (
        "more-workers", "flag", "--num-workers 0 -> 2",
    )  # fmt: skip
    assert "2 cores the job may use" in applied["why"]
    assert result["commands"]["treatment"][-2:] == ["--num-workers", "2"]
    assert result["speedup"] >= 1.3
    says_faster(result)
    # what it was predicted to buy, beside what it measured
    predicted = result["predicted"]
    assert 0 < predicted["low"] <= predicted["high"] and "2 cores allowed" in predicted["basis"]
    assert "predicted " in proc.stderr
    low, high = result["ci95"]
    assert low <= result["speedup"] <= high
    assert low > 1.0 or result["verdict"] != "faster"  # "faster" rests on at least this one
    assert result["baseline"]["data_wait_fraction"] > result["treatment"]["data_wait_fraction"]
    # 100 steady steps a run, two runs a side and the extra pairs run; on a shared machine
    # the steps run while others took the job's cores may be left out, and are counted there
    runs = 2 + result["extra_pairs"]
    assert result["repeat"] == 2 and 0 <= result["extra_pairs"] <= 2
    assert ("more run" in proc.stderr) == (result["extra_pairs"] > 0)
    busy = result["machine_busy"]
    left = busy["busy_steps"] if busy and busy["left_out"] else {"baseline": 0, "treatment": 0}
    for side in ("baseline", "treatment"):
        assert sum(r["steps"] for r in result[side]["runs"]) + left[side] == 100 * runs
    assert result["baseline"]["unit"] == "samples"
    if not left["baseline"] and not left["treatment"]:
        assert len(result["baseline"]["sessions"]) == len(result["treatment"]["sessions"]) == runs
    # two recorded runs compared (all their steady steps): the ratio of the two sides'
    # rates, an interval around it, and the verdict that interval gives
    base_run = result["baseline"]["runs"][0]["session"]
    treated_run = result["treatment"]["runs"][0]["session"]
    # the trial's outcome on the HTML page of its last treatment run's session (which a
    # busy machine may leave out of `runs`: every step of it while others took the cores)
    assert result["session"] >= result["treatment"]["runs"][-1]["session"]
    page = doctor("report", str(result["session"]), "--format", "html")
    assert page.returncode == 0, page.stderr
    assert "<h2>Trial</h2>" in page.stdout and "<b>faster</b>" in page.stdout
    assert "applied <code>more-workers</code>: --num-workers 0 -&gt; 2" in page.stdout
    compared = doctor("compare", str(base_run), str(treated_run), "--format", "json")
    assert compared.returncode == 0, compared.stderr
    c = json.loads(compared.stdout)
    assert (c["baseline"]["sessions"], c["treatment"]["sessions"]) == ([base_run], [treated_run])
    ratio = c["treatment"]["samples_per_s"] / c["baseline"]["samples_per_s"]
    assert c["speedup"] == pytest.approx(ratio, rel=1e-3)
    assert c["ci95"][0] <= c["speedup"] <= c["ci95"][1]
    # the verdict rests on the 95% interval, or on a busy machine on the wider one, and
    # claims nothing from fewer than three runs a side throughout busy (trial.verdict)
    low, high = c["judged"]["ci"] if c["judged"] else c["ci95"]
    too_few = bool(c["machine_busy"] and c["machine_busy"]["too_few_runs"])
    said = "faster" if low > 1 else "slower" if high < 1 else "no better than noise"
    assert c["verdict"] == ("no better than noise" if too_few else said), c


def test_without_the_flag_the_probe_overrides_the_dataloader(tmp_path: Path) -> None:
    job = (
        "--", PY, str(SAMPLES / "dataloader_no_flag.py"), "--seconds", "600",
        "--decode-work", "1", "--read-ms", "1",
    )  # fmt: skip
    proc, result = trial(tmp_path, "--apply", "more-workers", "--repeat", "1", *job)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result["applied"][0]["via"] == "probe"
    assert result["applied"][0]["change"] == "DataLoader num_workers=0 -> 2"
    assert result["commands"]["treatment"] == result["commands"]["baseline"]  # not edited
    assert "GPUDOCTOR_OVERRIDES=" in result["treatment_shown"]
    assert result["speedup"] >= 1.3
    says_faster(result)
    # `history`: the trial is one entry, its runs under it (issue 40, point 11), and no
    # line is wider than the terminal: $COLUMNS off a terminal, 80 when it is unset
    runs = result["baseline"]["sessions"] + result["treatment"]["sessions"]
    for columns in ("80", "140", None):
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        if columns:
            env["COLUMNS"] = columns
        listed = doctor("history", env=env)
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert max(cell_width(line) for line in lines) <= int(columns or 80), listed.stdout
        assert "None" not in listed.stdout
        # two runs, or four when the first pair left it undecided (a busy machine)
        entry = [line for line in lines if f"trial of more-workers: {len(runs)} runs" in line]
        head = [line for line in lines if " trial " in line and "x" in line]
        assert head, listed.stdout
        under = [line for line in lines if line.lstrip().startswith("└ ")]
        assert sorted(int(line.split()[1]) for line in under) == sorted(runs)
        assert entry or columns != "140"


def test_more_workers_on_a_healthy_in_memory_job_is_no_gain(tmp_path: Path) -> None:
    """Batches from tensors in memory: the job does not wait for data, so more workers
    cannot help; the trial must say so, not invent a gain."""
    job = ("--", PY, str(SAMPLES / "in_memory_loader.py"), "--seconds", "600")
    # two runs a side (B T T B): a slow spell of the machine during one run (another
    # process, here a type check run beside CI) no longer reads as a gain. No extra
    # pairs: each is another look at the same question (CI once read "faster" here,
    # 2026-12-03, before the verdict after a second look rested on the 99% interval);
    # the extra pairs are checked in
    # test_runs_that_read_a_change_their_interval_cannot_tell_get_another_pair
    proc, result = trial(
        tmp_path, "--apply", "more-workers", "--repeat", "2", "--extra-pairs", "0", *job
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result["applied"][0]["change"] == "--num-workers 0 -> 2"
    # no gain claimed: the interval holds 1 or lies below it (its point estimate, on a
    # busy 2-core machine, has read 1.17x beside a 0.8-1.6 interval)
    # first in the message (CI cuts it): the numbers, and each run's samples/s
    rates = {
        side: [r["samples_per_s"] for r in result[side]["runs"]]
        for side in ("baseline", "treatment")
    }
    said = (result["speedup"], result["ci95"], result["extra_pairs"], rates)
    assert result["verdict"] in ("no better than noise", "slower"), said
    assert result["ci95"][0] <= 1.0, said


def test_a_trial_beside_busy_processes_says_so_and_claims_no_gain(tmp_path: Path) -> None:
    """Two processes keep this 2-core machine's cores busy through the whole trial: the
    job waits for cores in both sides' runs, there are no quiet steps to compare alone, and
    the trial says who took the cores instead of inventing a gain.

    The change does nothing: persistent workers matter only at an epoch's end, and 30
    steps of 128 batches never reach one. (Not more-workers: beside busy processes, two
    more processes of the job's own do win it a larger share of the contested cores, a
    real gain on that machine that an earlier version of this test called invented.)"""
    job = (
        "--", PY, str(SAMPLES / "in_memory_loader.py"), "--seconds", "600", "--num-workers", "2",
    )  # fmt: skip
    with busy_neighbours(2) as burners:
        # no extra pair: the words are the point here (extra pairs: the test below)
        proc, result = trial(
            tmp_path, "--apply", "persistent-workers", "--steps", "30", "--extra-pairs", "0", *job
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result["applied"][0]["change"] == "DataLoader persistent_workers=False -> True"
    assert result["verdict"] != "faster", result
    busy = result["machine_busy"]
    assert busy is not None and busy["busy_steps"]["treatment"] > 0, busy
    assert not busy["left_out"]
    assert any(f"pid {pid}" in busy["others"] for pid in burners), busy
    assert (
        "the machine was busy" in proc.stderr
        and "the result is for the machine as it was" in proc.stderr
    )
    # two runs a side on a machine busy throughout: no change claimed, and why
    assert busy["too_few_runs"] and result["verdict"] == "no better than noise", result
    assert "no change claimed" in proc.stderr and "--extra-pairs" in proc.stderr
    # the verdict rests on the wider interval, and says why
    assert result["judged"]["level"] == 0.99 and result["judged"]["why"] == "busy", result
    assert "other processes took the job's cores through these runs" in proc.stderr


def test_a_remedy_with_nothing_to_change_is_refused_in_one_line() -> None:
    """healthy.py has a --num-workers option (its parser is shared) but no DataLoader."""
    job = ("--", PY, str(SAMPLES / "healthy.py"), "--seconds", "600")
    proc = doctor("trial", "--apply", "more-workers", "--steps", "30", *job, timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "uses none" in last and "Traceback" not in proc.stderr
    proc = doctor("trial", "--apply", "defer-sync", "--steps", "30", *job, timeout=600)
    assert proc.returncode == 2 and "by hand" in proc.stderr.strip().splitlines()[-1]


def test_bad_input_is_one_line_and_exit_2() -> None:
    job = ("--", PY, str(SAMPLES / "healthy.py"), "--steps", "50")
    for args, words in (
        (("--apply", "warp-drive", *job), "unknown remedy 'warp-drive'"),
        (("--steps", "0", *job), "must be positive"),
        ((), "no command given"),
    ):
        proc = doctor("trial", *args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], proc.stderr


def test_a_baseline_that_fails_ends_the_trial_with_its_exit_code() -> None:
    proc = doctor("trial", "--", PY, str(SAMPLES / "out_of_memory.py"), timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "the baseline run failed (exit code 1)" in proc.stderr
    assert "Traceback" not in proc.stderr.split("gpudoctor trial: baseline")[0]


# -- the pure parts ------------------------------------------------------------------------


def arm(walls: list[float], batch: float = 32.0, code: int | None = 130) -> Arm:
    return Arm(None, (), tuple(walls), batch, None, code, "steps", len(walls))


def test_speedup_interval_holds_the_point_and_separates_clear_differences() -> None:
    slow = arm([0.010, 0.012, 0.011, 0.013] * 50)
    fast = arm([0.005, 0.006, 0.0055, 0.0065] * 50)
    point, (low, high) = speedup([slow], [fast])
    assert point == pytest.approx(2.0, rel=0.05) and low <= point <= high and low > 1.5
    assert verdict((low, high), [fast]) == "faster"
    same, ci = speedup([slow], [arm([0.011, 0.013, 0.010, 0.012] * 50)])
    assert ci[0] <= 1.0 <= ci[1]
    assert verdict(ci, [slow]) == "no better than noise"
    crashed = Arm(None, (), (), None, None, 1, "exception", 3)
    assert verdict((0.9, 1.1), [crashed]) == "crashed"
    assert verdict((0.5, 0.8), [slow]) == "slower"


def test_a_run_slower_at_its_ends_has_an_interval_that_holds_its_point() -> None:
    """Steps slower at a run's start and end (a warm-up, a stop) are drawn as often as
    the others: blocks kept inside the run drew them less, and the interval of two such
    runs passed beside their own ratio (a fresh clone's CI: 1.8529 above 1.8467)."""
    ends = arm([0.013] * 10 + [0.010] * 80 + [0.013] * 10)
    flat = arm([0.010] * 100)
    for base, treated in ((ends, flat), (flat, ends)):
        point, (low, high) = speedup([base], [treated])
        assert low <= point <= high, (point, low, high)


def test_steps_on_a_busy_machine_are_left_out_when_enough_quiet_ones_remain() -> None:
    """A busy spell slows a third of the treatment's steps to double: left out, the
    quiet steps give the true ratio (1.0) and no gain is claimed."""
    base = arm([0.010, 0.012, 0.011, 0.013] * 50)
    walls = [0.010, 0.012, 0.011, 0.013] * 50
    busy = tuple(i < 66 for i in range(200))
    spell = [w * (2 if b else 1) for w, b in zip(walls, busy, strict=True)]
    treated = Arm(None, (), tuple(spell), 32.0, None, 130, "steps", 200, busy, "python3 (pid 9)")
    c = Comparison.of([base], [treated])
    assert c.crowding is not None and c.crowding.left_out
    assert c.crowding.busy_steps == {"baseline": 0, "treatment": 66}
    assert c.speedup == pytest.approx(1.0, rel=0.02) and c.verdict == "no better than noise"
    assert (
        "66 of the treatment's 200 steps (python3 (pid 9)); those steps are left out"
        in c.crowding.words()
    )
    # kept, the spell would have read as a loss
    assert speedup([base], [arm(spell)])[0] < 0.85
    # busy almost throughout: nothing quiet enough to compare; said, and all steps kept
    most = Arm(None, (), tuple(spell), 32.0, None, 130, "steps", 200, (True,) * 180 + (False,) * 20)
    c = Comparison.of([base], [most])
    assert c.crowding is not None and not c.crowding.left_out
    assert "the result is for the machine as it was" in c.crowding.words()
    assert Comparison.of([base], [arm(walls)]).crowding is None


def test_between_run_spread_widens_by_students_t(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs a side that disagree by 10%: the interval's between-run part uses t at
    the Welch-Satterthwaite degrees of freedom (a handful here), not the normal's 1.96."""
    assert (t975(1), t975(2.7), t975(30), t975(500)) == (12.706, 4.303, 2.042, 1.96)
    b1, b2 = arm([0.010] * 200), arm([0.011] * 200)
    t1, t2 = arm([0.005] * 200), arm([0.0055] * 200)
    point, (low, high) = speedup([b1, b2], [t1, t2])
    assert point == pytest.approx(2.0, rel=0.01)
    monkeypatch.setattr(trial_stats, "t975", lambda df: 1.96)
    _, (z_low, z_high) = speedup([b1, b2], [t1, t2])
    assert math.log(high / point) > 1.4 * math.log(z_high / point)
    assert math.log(point / low) > 1.4 * math.log(point / z_low)


def test_runs_that_read_a_change_their_interval_cannot_tell_get_another_pair() -> None:
    """Two runs a side that read 1.5x but differ between themselves by 1.5x: the interval
    holds 1, so the trial runs another pair (continuing B T T B with B T T B), until it
    decides, the extra pairs allowed are spent, or there is no time left for one."""
    base = [arm([0.010] * 200), arm([0.015] * 200)]
    treat = [arm([0.010 / 1.5] * 200), arm([0.015 / 1.5] * 200)]
    said: list[str] = []
    orders: list[list[str]] = []

    def say(text: str, fraction: float | None = None) -> None:
        said.append(text)

    def run_pair(order: list[str]) -> Comparison | None:
        orders.append(order)
        for side in order:
            (treat if side == "treatment" else base).append(
                arm([0.0125 / 1.5] * 200 if side == "treatment" else [0.0125] * 200)
            )
        return Comparison.of(base, treat, looks=len(base) - 1)  # as Sides counts them

    first = Comparison.of(base, treat)
    assert first.speedup == pytest.approx(1.5, rel=0.01) and first.judged is None
    assert first.ci95[0] < 1.0 < first.ci95[1] and first.verdict == "no better than noise"
    assert trial_stats.undecided(first.speedup, first.ci95)
    c, extra = trials.settle(first, 2, 3, run_pair, say)
    # two more pairs still held 1 on the 99% interval (after the second, the 95% one
    # alone would have read faster: 1.08-2.08); the third decided (four looks)
    assert extra == 3 and orders == [["baseline", "treatment"], ["treatment", "baseline"]] + [
        ["baseline", "treatment"]
    ]
    assert c.looks == 4 and c.judged is not None and c.decided_on == c.judged
    assert c.judged[0] <= c.ci95[0] and c.judged[1] >= c.ci95[1]
    assert c.verdict == "faster" and c.judged[0] > 1.0 and len(said) == 3
    assert "the runs read 1.50x but their interval" in said[0] and "(1 of at most 3)" in said[0]
    # said wherever the trial is shown
    result = trial_stats.TrialResult(c, (), ("python",), ("python",), "python", {}, 100, 2, 3)
    assert result.to_dict()["extra_pairs"] == 3
    judged = result.to_dict()["judged"]
    assert judged["level"] == 0.99 and judged["looks"] == 4
    assert judged["ci"] == [round(x, 4) for x in c.judged]
    words = "3 more runs a side: the runs before read a change their interval could not tell"
    why = f"verdict on the 99% interval {c.judged[0]:.2f}-{c.judged[1]:.2f}x: these runs were compared 4 times"
    for shown in (
        trial_text(result),
        trial_markdown(result),
        "".join(trial_part(trial_document(result)["trial"])),
    ):
        assert words in shown and why in shown
    # at most the pairs allowed; none when there is no time left
    base[:], treat[:] = base[:2], treat[:2]
    orders.clear()
    c, extra = trials.settle(first, 2, 1, run_pair, say)
    assert extra == 1 and c.verdict == "no better than noise" and len(orders) == 1
    base[:], treat[:] = base[:2], treat[:2]
    orders.clear()
    assert trials.settle(first, 2, 0, run_pair, say) == (first, 0)
    assert trials.settle(first, 2, 2, lambda order: None, say) == (first, 0)
    assert orders == []
    # runs that read about no change are decided by it: no extra pair
    same = Comparison.of([arm([0.010] * 200), arm([0.013] * 200)], [arm([0.0118] * 200)] * 2)
    assert same.ci95[0] < 1.0 < same.ci95[1] and not trial_stats.undecided(same.speedup, same.ci95)
    assert trials.settle(same, 2, 2, run_pair, say) == (same, 0) and orders == []


def test_after_more_than_one_look_the_verdict_rests_on_the_99_percent_interval() -> None:
    """Runs compared a second time (an extra pair after a look that could not decide)
    whose 95% interval just clears 1: each look is another chance for noise to read as a
    change, so the verdict rests on the 99% interval, which still holds 1. The same runs
    at their first look read faster on the 95% one."""
    assert (t995(1), t995(2.7), t995(30), t995(60), t995(500)) == (63.657, 9.925, 2.75, 2.66, 2.576)
    base = [arm([0.0100] * 200), arm([0.0108] * 200), arm([0.0104] * 200)]
    treat = [arm([w / 1.10] * 200) for w in (0.0100, 0.0108, 0.0104)]
    once = Comparison.of(base, treat)
    again = Comparison.of(base, treat, looks=2)
    assert (once.speedup, once.ci95) == (again.speedup, again.ci95)  # the 95% one as before
    assert once.verdict == "faster" and once.ci95[0] > 1.0 and once.judged is None
    assert again.judged is not None and again.judged[0] < 1.0 < again.judged[1]
    assert again.verdict == "no better than noise" and again.decided_on == again.judged
    # both intervals from one bootstrap: each the same as its level's alone
    assert again.judged == speedup(base, treat, level=0.99)[1]
    assert again.ci95 == speedup(base, treat)[1]
    step = FixStep("more-workers", "input-bound", (), Prediction(1.0, 1.2, "test"), again)
    assert not step.kept and step.as_dict()["judged"]["looks"] == 2  # fix keeps it only if faster


def test_runs_on_a_machine_busy_throughout_are_judged_on_the_99_percent_interval() -> None:
    """Steps busy almost throughout on both sides (nothing quiet to compare alone): the
    neighbour's load between runs is not sampled by two runs a side, so runs whose 95%
    interval just clears 1 are no better than noise; the same runs on a quiet machine
    read faster."""
    walls = [[0.0100] * 200, [0.0108] * 200, [0.0104] * 200]
    busy = (True,) * 190 + (False,) * 10

    def crowded(w: list[float]) -> Arm:
        return Arm(None, (), tuple(w), 32.0, None, 130, "steps", 200, busy, "python3 (pid 9)")

    base = [crowded(w) for w in walls]
    treat = [crowded([x / 1.10 for x in w]) for w in walls]
    c = Comparison.of(base, treat)
    assert c.crowding is not None and not c.crowding.left_out
    assert c.ci95[0] > 1.0 and c.judged is not None and c.judged[0] < 1.0 < c.judged[1]
    assert c.verdict == "no better than noise" and c.decided_on == c.judged
    assert c.judged_as_dict() == {
        "level": 0.99, "looks": 1, "ci": [round(c.judged[0], 4), round(c.judged[1], 4)],
        "why": "busy",
    }  # fmt: skip
    quiet = Comparison.of([arm(w) for w in walls], [arm([x / 1.10 for x in w]) for w in walls])
    assert quiet.verdict == "faster" and quiet.judged is None
    # a clear 2x on three runs a side is claimed; on two runs a side it is not: a spell
    # of the neighbours' load over both baseline runs reads the same
    twice = Comparison.of(base, [crowded([x / 2 for x in w]) for w in walls])
    assert twice.verdict == "faster" and not twice.too_few_runs
    two = Comparison.of(base[:2], [crowded([x / 2 for x in w]) for w in walls[:2]])
    assert two.too_few_runs and two.verdict == "no better than noise", two.decided_on
    assert two.decided_on[0] > 1.0  # the interval alone would have claimed it


def test_a_baseline_whose_step_times_never_arrived_is_not_called_short() -> None:
    """The job counted 200 steps (its counter page) but the probe's messages with their
    times were lost (as when its last flush was interrupted): the trial cannot compare,
    and says what happened rather than "only 200 steps"."""
    lost = Arm(None, (), (), None, None, 0, "exit", 200)
    with pytest.raises(trials.BaselineFailed) as caught:
        trials.check_baseline(lost, "nothing to compare")
    assert "200 steps counted, but the times of only 0 arrived" in str(caught.value)
    short = Arm(None, (), (0.01,) * 3, None, None, 0, "exit", 8)
    with pytest.raises(trials.BaselineFailed) as caught:
        trials.check_baseline(short, "nothing to compare")
    assert "only 8 steps (warm-up is 5)" in str(caught.value)
    trials.check_baseline(arm([0.01] * 20, code=0), "")  # enough: no error


def test_plan_names_the_flag_the_probe_or_says_it_cannot() -> None:
    argv = ["python", "train.py", "--num-workers=0"]
    facts = {
        "dataloaders": [{"num_workers": 0}],
        "script_options": {
            "--num-workers": {"strings": ["--num-workers"], "value": 0, "takes_value": True},
            "--amp": {"strings": ["--amp"], "value": False, "takes_value": False},
        },
    }
    t = plan(["more-workers", "amp"], argv, facts, cores_allowed=8)
    assert list(t.argv) == ["python", "train.py", "--num-workers=8", "--amp"]
    assert [c.via for c in t.applied] == ["flag", "flag"] and not t.overrides
    t = plan(
        ["pin-memory", "persistent-workers"],
        argv,
        {**facts, "dataloaders": [{"num_workers": 2}]},
        8,
    )
    assert t.overrides == {"dataloader": {"pin_memory": True, "persistent_workers": True}}
    assert t.argv == tuple(argv)
    with pytest.raises(NotApplicable, match="by hand"):
        plan(["defer-sync"], argv, facts, 8)
    with pytest.raises(NotApplicable, match="needs DataLoader workers"):
        plan(["prefetch"], argv, {"dataloaders": [{"num_workers": 0}]}, 8)


def test_a_hugging_face_scripts_own_options_apply_the_dataloader_and_batch_remedies() -> None:
    """Hugging Face's example scripts take TrainingArguments' options, each under both
    spellings (as the probe recorded them from run_clm.py): the advice names them, and a
    trial sets them where the command gives them; it said "Edit the DataLoader", which
    Trainer's users cannot."""
    from gpudoctor.prescribe.how import how

    def option(name: str, value: Any) -> dict[str, Any]:
        dashed = name.replace("_", "-")
        return {"strings": [name, dashed], "value": value, "takes_value": True}

    facts = {
        "dataloaders": [{"num_workers": 0, "batch_size": 8}],
        "script_options": {
            "--dataloader-num-workers": option("--dataloader_num_workers", 0),
            "--per-device-train-batch-size": option("--per_device_train_batch_size", 8),
        },
    }
    argv = ["python", "run_clm.py", "--per_device_train_batch_size", "8",
            "--dataloader_num_workers", "0"]  # fmt: skip
    assert how("more-workers", facts, 2) == (
        "Your script has --dataloader_num_workers (now 0): run it with --dataloader_num_workers 2."
    )
    t = plan(["more-workers", "larger-batch"], argv, facts, cores_allowed=2)
    assert list(t.argv) == [
        "python", "run_clm.py", "--per_device_train_batch_size", "16",
        "--dataloader_num_workers", "2",
    ]  # fmt: skip
    assert [c.via for c in t.applied] == ["flag", "flag"] and not t.overrides


# -- the batch-size finder -------------------------------------------------------------------


def test_batch_size_finder_recognises_the_cuda_oom_and_bisects(tmp_path: Path) -> None:
    report = tmp_path / "tune.json"
    job = str(Path(__file__).parent / "jobs" / "oom_above.py")
    store = str(tmp_path / "s.db")
    proc = doctor(
        "--store", store, "tune", "batch-size", "--report", str(report), "--", PY, job,
        "--fits-up-to", "48", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(report.read_text())["batch_size"]
    assert found["largest_fitting"] == 48
    reasons = {t["batch_size"]: t["reason"] for t in found["tries"]}
    assert reasons[8] == "fits" and reasons[64] == "oom" and reasons[56] == "oom"
    assert found["stopped_by"] == "oom at batch size 64"
    assert "largest batch size that fits: 48" in proc.stderr
    # each try ran in a fresh process with the script's own flag set
    assert "try 2 (at most ~" in proc.stderr and "): batch size 16" in proc.stderr
    # the search on the HTML page of its last try's session, each size with its session
    page = doctor("--store", store, "report", "last", "--format", "html")
    assert page.returncode == 0, page.stderr
    assert "<h2>Batch-size search (tune)</h2>" in page.stdout
    assert "largest that fits: <b>48</b>" in page.stdout
    assert "<tr><td>64</td><td>oom</td>" in page.stdout
    runs = {t["batch_size"] for t in found["tries"]}  # a size tried twice ran once
    sessions = re.findall(r"<td>(\d+)</td></tr>", page.stdout)
    assert sorted(map(int, sessions)) == list(range(1, len(runs) + 1))


def test_batch_size_finder_on_cpu_halves_below_the_memory_cap(tmp_path: Path) -> None:
    """64 samples of 32 MiB each (2 GiB) cannot fit under --max-memory 1GiB: the finder
    halves until a size fits, then bisects up to the largest under the safety margin."""
    report = tmp_path / "tune.json"
    job = (
        PY,
        str(Path(__file__).parent / "jobs" / "memory_per_sample.py"),
        "--mib-per-sample",
        "32",
    )
    proc = doctor(
        "tune", "batch-size", "--max-memory", "1GiB", "--steps", "8", "--report", str(report),
        "--", *job, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(report.read_text())["batch_size"]
    assert found["stopped_by"] == "the current batch size does not fit"
    first = found["tries"][0]
    assert (first["batch_size"], first["fits"]) == (64, False)
    assert first["reason"] in ("over memory cap", "over safety margin")
    fitting = [t for t in found["tries"] if t["fits"]]
    assert fitting and all(t["peak_bytes"] <= 0.9 * 2**30 for t in fitting)
    # 32 MiB a sample under 0.9 GiB: at most 28, less the interpreter and torch
    assert 4 <= found["largest_fitting"] < 28
    failing = [t["batch_size"] for t in found["tries"] if not t["fits"]]
    assert min(failing) > found["largest_fitting"]
    assert found["fastest"] in [t["batch_size"] for t in fitting]


def test_tune_bad_input() -> None:
    for args, words in (
        (("batch-size", "--max-memory", "lots", "--", PY, "x.py"), "not a size"),
        (("batch-size",), "no command given"),
        ((), "say what to tune"),
    ):
        proc = doctor("tune", *args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], proc.stderr
