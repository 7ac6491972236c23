"""Remedies that change numerics (issue 15): the probe's overrides for mixed precision,
compile, TF32 and intra-op threads, the loss it records for them, and the rule that a
trial or `fix` keeps such a change only when the loss stays within tolerance."""

from __future__ import annotations

import json
import math
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import PY, SAMPLES, doctor
from windows import cuda_facts, host, steps, window

from gpudoctor.app.sessions import load
from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.diagnosis.rules import cpu_saturated, no_mixed_precision, noisy_neighbour
from gpudoctor.diagnosis.speed_of_light import speed_of_light
from gpudoctor.diagnosis.window import CORES_HELD
from gpudoctor.model import CpuPeak, Finding
from gpudoctor.prescribe.loss import LOSS_TOLERANCE, LossCheck
from gpudoctor.prescribe.predict import Prediction, predict
from gpudoctor.prescribe.rerun import Change, NotApplicable, plan
from gpudoctor.prescribe.trial import Arm, Comparison
from gpudoctor.prescribe.visit import FixStep
from gpudoctor.report.render import numerics_words
from gpudoctor.store import Store, default_path

# A small regression trained on fixed data (seeded): each step prints nothing; at the end
# the script prints what it saw of the overrides and its own losses, and saves the model
# whole (pickling must not meet anything of the probe's).
SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    from torch import nn
    torch.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 128), nn.Linear(128, 1)
        def forward(self, x):
            return self.b(torch.relu(self.a(x)))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(512, 64), torch.randn(512, 1)
    losses = []
    for step in range(40):
        out = model(x)
        loss = ((out - y) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
    torch.save(model, sys.argv[1])
    dynamo = sys.modules.get("torch._dynamo")
    print(json.dumps({
        "losses": losses, "out_dtype": str(out.dtype), "threads": torch.get_num_threads(),
        "matmul": torch.get_float32_matmul_precision(),
        "compiled_frames": dynamo.utils.counters["frames"]["ok"] if dynamo else 0,
        "forward_is_the_class_own": "forward" not in vars(model),
    }))
    """
)


def _run(tmp_path: Path, overrides: dict[str, object] | None) -> dict[str, object]:
    script = tmp_path / "regress.py"
    script.write_text(SCRIPT)
    saved = tmp_path / "model.pt"
    if overrides is None:  # plain: no doctor at all
        proc = subprocess.run(
            [PY, str(script), str(saved)], capture_output=True, text=True, timeout=300
        )
    else:
        env_overrides = {"GPUDOCTOR_OVERRIDES": json.dumps(overrides)}
        proc = doctor(
            "run", "--headless", "--", PY, str(script), str(saved), timeout=300,
            env={**os.environ, **env_overrides},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert saved.stat().st_size > 0
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_overrides_change_what_they_say_and_the_loss_is_recorded_as_the_job_saw_it(
    tmp_path: Path,
) -> None:
    plain = _run(tmp_path, None)
    asked = {
        "record_loss": True, "autocast": "bfloat16", "compile": True, "threads": 1,
        "matmul_precision": "medium",
    }  # fmt: skip
    seen = _run(tmp_path, asked)
    # each override acted: the forward in bfloat16 (the losses moved, a little), its
    # output back in float32, compiled, one intra-op thread, the precision set
    assert plain["losses"] != seen["losses"]
    assert isinstance(plain["losses"], list) and isinstance(seen["losses"], list)
    mean = sum(plain["losses"]) / len(plain["losses"])
    assert abs(sum(seen["losses"]) / len(seen["losses"]) - mean) / mean < LOSS_TOLERANCE
    assert seen["out_dtype"] == "torch.float32" and plain["out_dtype"] == "torch.float32"
    assert seen["threads"] == 1 and seen["matmul"] == "medium"
    assert isinstance(seen["compiled_frames"], int) and seen["compiled_frames"] > 0
    assert plain["compiled_frames"] == 0
    # nothing put on the model itself (it pickled above: torch.save)
    assert seen["forward_is_the_class_own"]
    # the probe recorded the losses the job computed, step by step
    store = Store(default_path())
    _, timeline = load(store, "last")
    facts = timeline.merged_facts()
    recorded = facts["losses"]
    assert len(recorded) == 40
    assert recorded == pytest.approx(seen["losses"], rel=1e-6)
    assert set(facts["overrides_applied"]) == {"autocast", "compile", "threads", "matmul_precision"}
    assert facts["overrides_applied"]["autocast"] == ["cpu", "bfloat16"]
    assert not [t for t in facts.get("limits") or [] if "not applied" in t]
    assert timeline.probe_errors == []


def test_a_trial_of_mixed_precision_checks_the_loss(tmp_path: Path) -> None:
    script = tmp_path / "regress.py"
    script.write_text(SCRIPT.replace("range(40)", "range(int(sys.argv[2]))"))
    report = tmp_path / "trial.json"
    proc = doctor(
        "trial", "--apply", "amp", "--steps", "20", "--repeat", "1", "--report", str(report),
        "--", PY, str(script), str(tmp_path / "m.pt"), "200", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = json.loads(report.read_text())["trial"]
    assert trial["applied"][0]["via"] == "probe" and trial["applied"][0]["changes_numerics"]
    assert json.loads(trial["treatment_env"]["GPUDOCTOR_OVERRIDES"]) == {"autocast": "bfloat16"}
    loss = trial["loss"]
    assert loss["steps"] >= 20 and loss["within"] is True
    # bfloat16 moved the loss a little: measured, and within
    assert loss["treatment_mean"] != loss["baseline_mean"]
    assert loss["difference"] < LOSS_TOLERANCE
    assert "changes numerics: mean loss over the first" in proc.stderr
    assert "within the tolerance of 2.0%" in proc.stderr
    # the treatment's last run's page says it too
    session = str(trial["treatment"]["runs"][-1]["session"])
    page = doctor("report", session, "--format", "html").stdout
    assert "<li>changes numerics: mean loss over the first" in page
    assert "within the tolerance of 2.0%)" in page


def test_a_trial_of_fewer_threads_beside_the_loaders_workers(tmp_path: Path) -> None:
    """The sample job runs a worker per core beside the training process's own intra-op
    threads (one per core): fewer threads is tried through the probe, as a change of
    numerics, and the loss of the seeded job stays where it was."""
    report = tmp_path / "trial.json"
    proc = doctor(
        "trial", "--apply", "fewer-threads", "--steps", "30", "--repeat", "1", "--report",
        str(report), "--", PY, str(SAMPLES / "cpu_saturated.py"), timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = json.loads(report.read_text())["trial"]
    (change,) = trial["applied"]
    assert change["via"] == "probe" and change["changes_numerics"]
    # a worker on every core: one thread left to the training process
    assert change["change"].startswith("torch.set_num_threads(1)")
    assert trial["loss"]["within"] and trial["loss"]["steps"] >= 30
    assert "changes numerics: mean loss over the first" in proc.stderr


# -- the pure parts ------------------------------------------------------------------------


def arm(losses: list[float], walls: list[float] | None = None) -> Arm:
    walls = walls or [0.010, 0.012, 0.011, 0.013] * 25
    return Arm(None, (), tuple(walls), 32.0, None, 130, "steps", len(walls), losses=tuple(losses))


def test_the_loss_check_holds_a_change_to_the_tolerance_widened_by_the_baselines_spread() -> None:
    base = [2.0 - 0.01 * i for i in range(50)]
    check = LossCheck.of([arm(base)], [arm([v * 1.01 for v in base])])
    assert check is not None and check.within and check.steps == 50
    assert check.difference == pytest.approx(0.01) and check.tolerance == LOSS_TOLERANCE
    far = LossCheck.of([arm(base)], [arm([v * 1.05 for v in base])])
    assert far is not None and not far.within
    # two baseline runs 6% apart (an unseeded job): 5% is no worse than the job itself
    spread = LossCheck.of(
        [arm(base), arm([v * 1.06 for v in base])], [arm([v * 1.08 for v in base])]
    )
    assert spread is not None and spread.within
    assert spread.tolerance == pytest.approx(LOSS_TOLERANCE + 0.06 / 1.03, rel=1e-3)
    # a diverged run is never within; the common steps only are compared
    nan = LossCheck.of([arm(base)], [arm([*base[:20], math.nan, *base[21:]])])
    assert nan is not None and not nan.within
    short = LossCheck.of([arm(base)], [arm(base[:30])])
    assert short is not None and short.steps == 30
    # no loss recorded, or too few steps: nothing said
    assert LossCheck.of([arm(base)], [arm([])]) is None
    assert LossCheck.of([arm(base)], [arm(base[:5])]) is None
    # a recorded trial's check (its JSON, as the HTML page reads it) says the same words
    for c in (check, far, spread, nan):
        again = LossCheck.from_dict(json.loads(json.dumps(c.as_dict())))
        assert again.within == c.within and again.words() == c.words()


def test_fix_keeps_a_faster_change_of_numerics_only_with_the_loss_within() -> None:
    slow = [0.010, 0.012, 0.011, 0.013] * 25
    fast = [w / 2 for w in slow]
    base = [2.0 - 0.01 * i for i in range(50)]
    amp = (Change("amp", "probe", "autocast"),)
    workers = (Change("more-workers", "probe", "num_workers 0 -> 2"),)
    guess = Prediction(1.0, 2.0, "")

    def step(changes: tuple[Change, ...], treated: list[float]) -> FixStep:
        c = Comparison.of([arm(base, slow)], [arm(treated, fast)])
        return FixStep(changes[0].remedy, None, changes, guess, c)

    assert step(amp, [v * 1.01 for v in base]).kept
    drifted = step(amp, [v * 1.2 for v in base])
    assert drifted.comparison.verdict == "faster" and not drifted.kept
    assert drifted.as_dict()["loss"]["within"] is False
    assert numerics_words(drifted).endswith(
        "outside the tolerance of 2.0%); not kept whatever its speed"
    )
    unrecorded = FixStep("amp", None, amp, guess, Comparison.of([arm([], slow)], [arm([], fast)]))
    assert not unrecorded.kept
    # a change that leaves numerics alone is kept on its speed
    assert step(workers, [v * 1.2 for v in base]).kept
    assert CATALOGUE["amp"].changes_numerics and not CATALOGUE["more-workers"].changes_numerics


def test_plan_applies_the_switches_where_they_can_help() -> None:
    argv = ["python", "train.py"]
    gpu = {"device": "cuda:0", "cuda_capability": [9, 0], "dataloaders": [{"num_workers": 4}]}
    t = plan(["amp", "tf32-matmul", "torch-compile"], argv, gpu, 8)
    assert t.overrides == {"autocast": "bfloat16", "matmul_precision": "high", "compile": True}
    assert all(c.via == "probe" and c.changes_numerics for c in t.applied)
    # float16 would need a GradScaler: an edit
    with pytest.raises(NotApplicable, match="by hand"):
        plan(["amp"], argv, {**gpu, "cuda_capability": [7, 0]}, 8)
    with pytest.raises(NotApplicable, match="compute capability 8.0"):
        plan(["tf32-matmul"], argv, {"device": "cpu"}, 8)
    with pytest.raises(NotApplicable, match="compiled already"):
        plan(["torch-compile"], argv, {**gpu, "compiled": True}, 8)
    with pytest.raises(NotApplicable, match="already runs under autocast"):
        plan(["amp"], argv, {**gpu, "autocast_seen": True}, 8)
    # the threads left beside the workers
    cpu = {"device": "cpu", "intra_op_threads": 8, "dataloaders": [{"num_workers": 6}]}
    assert plan(["fewer-threads"], argv, cpu, 8).overrides == {"threads": 2}
    with pytest.raises(NotApplicable, match="none to give back"):
        plan(["fewer-threads"], argv, {**cpu, "intra_op_threads": 2}, 8)
    # and beside the cores other processes held while the baseline ran
    two = {"device": "cpu", "intra_op_threads": 2, "dataloaders": [{"num_workers": 0}]}
    assert plan(["fewer-threads"], argv, {**two, CORES_HELD: 1}, 2).overrides == {"threads": 1}
    with pytest.raises(NotApplicable, match="none to give back"):
        plan(["fewer-threads"], argv, two, 2)


def test_fewer_threads_is_predicted_up_to_the_steps_speed_of_light() -> None:
    """Threads that wait on each other keep their cores busy: the neighbour's share of
    the step (run delay) does not bound what fewer threads win back (healthy.py beside a
    busy process: predicted 2.0x at most from it, measured 5.8x by a trial). The bound
    is the step at its speed of light, when the probe counted the step's FLOPs."""
    flops = {"per_step": 10**8, "step": 3, "by_kind": {"matmul float32": 10**8}}
    facts = {"device": "cpu", "dataloaders": [{"num_workers": 0}], "flops": flops}
    peak = CpuPeak(tflops=0.2, cores=2, size=512)

    def predicted(threads: int, counted: bool = True) -> tuple[Prediction, float]:
        shown = {**facts, "intra_op_threads": threads}
        if not counted:
            del shown["flops"]
        w = window(host=host(run_delay=0.6, others_cores=1.0, cores=2), facts=shown, cpu_peak=peak)
        found = noisy_neighbour.evaluate(w)
        assert found is not None and found.estimated_gain
        return predict("fewer-threads", found, w, 2), 1 / (1 - found.estimated_gain)

    crowded, share = predicted(2)
    sol = speed_of_light(window(host=host(cores=2), facts=facts, cpu_peak=peak))
    assert sol is not None and sol.could_take_ms
    assert crowded.low == 1.0 and crowded.high == pytest.approx(sol.step_ms / sol.could_take_ms)
    assert crowded.high > share and "speed of light" in crowded.basis
    # no FLOPs counted: the neighbour's share, as for any remedy
    uncounted, share = predicted(2, counted=False)
    assert uncounted.high == pytest.approx(share)


def test_the_findings_offer_the_switches_where_they_apply() -> None:
    """TF32 beside mixed precision from compute capability 8.0; fewer intra-op threads
    when they and the loader's workers ask for more cores than the job may use."""
    ampere = no_mixed_precision.evaluate(window(facts=cuda_facts(cuda_capability=[8, 0])))
    volta = no_mixed_precision.evaluate(window(facts=cuda_facts(cuda_capability=[7, 0])))
    assert ampere is not None and ampere.remedies == ("amp", "tf32-matmul")
    assert volta is not None and volta.remedies == ("amp",)

    def saturated(threads: int) -> tuple[str, ...]:
        facts = {"dataloaders": [{"num_workers": 2}], "intra_op_threads": threads}
        w = window(steps=steps(loader_ms=5.0), host=host(job_cores=1.95, cores=2), facts=facts)
        found = cpu_saturated.evaluate(w)
        assert found is not None
        return found.remedies

    assert saturated(2)[-1] == "fewer-threads"
    assert "fewer-threads" not in saturated(1)

    def crowded(threads: int, workers: int) -> Finding:
        facts = {"dataloaders": [{"num_workers": workers}], "intra_op_threads": threads}
        w = window(host=host(run_delay=0.6, others_cores=1.0, cores=2), facts=facts)
        found = noisy_neighbour.evaluate(w)
        assert found is not None
        return found

    # beside a busy process the job's own threads and workers outnumber its cores: the
    # neighbour's finding offers the job's own share of the remedy, and says why
    own = crowded(2, 2)
    assert own.remedies == ("fewer-threads",)
    assert "The job adds to it: 2 intra-op threads and 2 loader workers on 2 allowed cores" in (
        own.evidence
    )
    assert crowded(1, 2).remedies == ()
    assert "adds to it" not in crowded(1, 2).evidence
    # no workers, but a core held by the neighbour: two threads on the one left wait on
    # each other at every op (2 threads 27-56 ms a step against 3.6 ms on one: RESULTS.md)
    alone = crowded(2, 0)
    assert alone.remedies == ("fewer-threads",)
    assert (
        "The job adds to it: 2 intra-op threads on 2 allowed cores, 1 of them held by other "
        "processes" in alone.evidence
    ), alone.evidence
    # niced neighbours give their cores back: not counted as held
    niced = window(host=host(run_delay=0.6, others_cores=1.0, cores=2, niced=1.0),
                   facts={"dataloaders": [{"num_workers": 0}], "intra_op_threads": 2})  # fmt: skip
    assert niced.cores_held_by_others == 0 and niced.own_threads_oversubscribe() is None
