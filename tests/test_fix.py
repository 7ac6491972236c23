"""`gpudoctor fix`: the whole visit on real sample jobs (diagnose, apply, trial, keep,
repeat), its budget, and the bad inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, SAMPLES, doctor

from gpudoctor.prescribe.edits import loader_diff
from gpudoctor.prescribe.predict import Prediction
from gpudoctor.prescribe.rerun import Change, Treatment
from gpudoctor.prescribe.trial import Arm, Comparison
from gpudoctor.prescribe.visit import FixResult, FixStep
from gpudoctor.report.render import fix_markdown, fix_text

pytestmark = pytest.mark.timeout(400)

# the loader-bound job: each sample waits 2 ms for storage and decodes in ~0.3 ms, no
# workers; more workers overlap the waits (sleeps), on a busy 2-core machine too
LOADER_BOUND = (
    PY, str(SAMPLES / "dataloader_bound.py"), "--seconds", "600", "--decode-work", "1",
    "--read-ms", "2",
)  # fmt: skip


def fix_that_keeps(
    report: Path, *args: str, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`gpudoctor fix ... --report REPORT`, once more when its first trial kept nothing:
    a load beside it that comes and goes between its runs makes the interval too wide to
    claim a gain, rightly (the suite's own load read [0.41, 11.17] in CI, 2026-12-07,
    where two steady busy loops beside it here read 1.88x [1.84, 1.93], kept). A second
    miss fails."""
    for _attempt in range(2):
        proc = doctor("fix", "--report", str(report), *args, cwd=cwd, timeout=380)
        assert proc.returncode == 0, proc.stderr[-3000:]
        visit = json.loads(report.read_text())["fix"]
        if visit["steps"] and visit["steps"][0]["kept"]:
            break
    return proc, visit


@pytest.mark.timeout(800)  # fix_that_keeps may run the visit twice
def test_fix_keeps_more_workers_and_says_what_to_edit_by_hand(tmp_path: Path) -> None:
    proc, visit = fix_that_keeps(tmp_path / "fix.json", "--steps", "60", "--", *LOADER_BOUND)
    first = visit["steps"][0]
    # the remedy predicted to buy most, applied through the script's own flag
    assert first["remedy"] == "more-workers" and first["finding"] == "input-bound"
    assert first["changes"][0]["change"] == "--num-workers 0 -> 2"
    predicted = first["predicted"]
    assert 0 < predicted["low"] <= predicted["high"] and "waiting for data" in predicted["basis"]
    assert first["kept"] and first["ci95"][0] > 1.0 and first["verdict"] == "faster"
    # the command to use from now on, and the whole visit against the job as it was
    assert visit["final_command"][-2:] == ["--num-workers", "2"]
    assert visit["speedup"] > 1.0 and visit["ci95"][0] > 1.0
    assert visit["stopped_by"] in ("no remedy left", "budget")
    assert any(e.startswith("preprocess-offline") and "by hand" in e for e in visit["edits"])
    # what it printed: the path taken as a table, the command to use
    assert "more-workers  --num-workers 0 -> 2" in proc.stderr
    assert "use: " + " ".join(visit["final_command"]) in proc.stderr
    # every remedy after the first was tried against the kept configuration
    for step in visit["steps"][1:]:
        assert step["remedy"] != "more-workers"


def test_a_budget_too_short_for_a_trial_stops_after_the_first_run(tmp_path: Path) -> None:
    report = tmp_path / "fix.json"
    proc = doctor(
        "fix", "--budget", "5s", "--steps", "20", "--report", str(report), "--", *LOADER_BOUND,
        timeout=200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    visit = json.loads(report.read_text())["fix"]
    assert visit["stopped_by"] == "budget" and visit["steps"] == []
    assert visit["final_command"] == list(LOADER_BOUND)
    assert "the budget leaves no time to try more-workers" in proc.stderr
    assert "nothing tried made it measurably faster" in proc.stderr


def test_fix_of_a_job_that_fails_ends_with_its_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("import sys\nsys.exit(3)\n")
    proc = doctor("fix", "--", PY, str(script), timeout=120)
    assert proc.returncode == 3
    assert "the baseline run failed (exit code 3): nothing to fix" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "soon", "--", "python", "x.py"], "not a time: 'soon'"),
        ([], "no command given"),
        (["--report", "/tmp/x.txt", "--", "python", "x.py"], "must end in .json or .md"),
    ],
)
def test_fix_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = doctor("fix", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(800)  # fix_that_keeps may run the visit twice
def test_fix_writes_a_kept_override_as_a_diff_of_the_script(tmp_path: Path) -> None:
    """The no-flag loader: more workers kept through the probe's override; the diff sets
    them where the script makes its DataLoader, and the patched script, run without
    any override, has them."""
    jobs = tmp_path / "jobs"
    shutil.copytree(SAMPLES, jobs, ignore=shutil.ignore_patterns("__pycache__"))
    # the wait mostly storage (a sleep): more workers buy about 2x however busy the CPUs
    job = ("dataloader_no_flag.py", "--seconds", "600", "--decode-work", "0", "--read-ms", "1.5")
    proc, visit = fix_that_keeps(tmp_path / "fix.json", "--steps", "60", "--", PY, *job, cwd=jobs)
    assert visit["steps"][0]["kept"], visit["steps"][0]
    assert visit["final_env"]["GPUDOCTOR_OVERRIDES"] == '{"dataloader": {"num_workers": 2}}'
    diff = visit["final_diff"]
    assert "-        num_workers=0,\n+        num_workers=2,\n" in diff, diff
    # the overrides act with the probe inside the job: the line to use runs it so
    assert "use: GPUDOCTOR_OVERRIDES='" in proc.stderr and "' gpudoctor run -- " in proc.stderr
    assert "or make the change part of the script:" in proc.stderr
    patched = subprocess.run(
        ["patch", "-p1"], input=diff, cwd=jobs, capture_output=True, text=True, check=True
    )
    assert "dataloader_no_flag.py" in patched.stdout
    after = tmp_path / "after.json"
    run = doctor(
        "run", "--headless", "--max-seconds", "6", "--report", str(after), "--", PY, *job,
        cwd=jobs,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    (loader,) = json.loads(after.read_text())["facts"]["dataloaders"]
    assert loader["num_workers"] == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # one argument a line: the new one on its own line, as indented
            "loader = DataLoader(\n    ds,\n    batch_size=32\n)\n",
            "loader = DataLoader(\n    ds,\n    batch_size=32,\n    num_workers=2\n)\n",
        ),
        (  # given already: its value replaced where it stands
            "x = torch.utils.data.DataLoader(ds, num_workers=0, shuffle=True)  # é\n",
            "x = torch.utils.data.DataLoader(ds, num_workers=2, shuffle=True)  # é\n",
        ),
        ("x = DataLoader()\n", "x = DataLoader(num_workers=2)\n"),
    ],
)
def test_the_diff_applies_with_patch(tmp_path: Path, text: str, expected: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(text, encoding="utf-8")
    diff = loader_diff(script, {"num_workers": 2}, "train.py")
    assert diff is not None
    subprocess.run(
        ["patch", "-p1"], input=diff, cwd=tmp_path, check=True, capture_output=True, text=True
    )
    assert script.read_text(encoding="utf-8") == expected


@pytest.mark.parametrize(
    "text",
    ["a = DataLoader(x)\nb = DataLoader(y)\n", "a = DataLoader(x, **options)\n", "a = make()\n"],
    ids=["two loaders", "keywords from a dict", "no loader here"],
)
def test_no_diff_where_the_change_is_not_local_and_clear(tmp_path: Path, text: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(text)
    assert loader_diff(script, {"num_workers": 2}, "train.py") is None


def test_a_gain_kept_on_a_busy_machine_says_it_may_be_cores_won_from_the_others() -> None:
    """More workers kept while other processes took the job's cores in every step: the
    path says who, and that the gain may be a larger share of contested cores, which a
    quiet machine would not give; a step whose busy steps were left out says only that."""
    slow = tuple([0.010, 0.012, 0.011, 0.013] * 50)
    fast = tuple(w / 2 for w in slow)

    def arm(walls: tuple[float, ...], busy: tuple[bool, ...]) -> Arm:
        return Arm(None, (), walls, 32.0, None, 130, "steps", 200, busy, "stress (pid 7)")

    change = (Change("more-workers", "flag", "--num-workers 0 -> 2"),)
    guess = Prediction(1.0, 2.0, "")

    def visit(busy: tuple[bool, ...]) -> str:
        c = Comparison.of([arm(slow, busy)] * 3, [arm(fast, busy)] * 3)  # 3 runs a side
        step = FixStep("more-workers", "input-bound", change, guess, c)
        assert step.kept
        final = Treatment(("python", "train.py", "--num-workers", "2"), applied=change)
        result = FixResult(
            ("python", "train.py"), final, (step,), c, (), "no remedy left", None, 9.0
        )
        text = fix_text(result)
        assert text.count("stress (pid 7)") == 1 and fix_markdown(result).count("pid 7") == 1
        return text

    throughout = visit((True,) * 200)
    assert "#1 the machine was busy" in throughout
    assert "part of its gain may be cores taken from those processes" in throughout
    left_out = visit((True,) * 50 + (False,) * 150)
    assert "those steps are left out" in left_out and "part of its gain" not in left_out
