"""The probe samples short steps (gpudoctor/probe/clock.py): on a real fast training
loop under the real doctor, every step is still counted and timed, and the split and
data wait come from the steps it measured in detail."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import PY, ROOT, doctor

from gpudoctor.probe.clock import FULL_STEPS, SAMPLE_EVERY, SAMPLE_MIN_GAP_NS
from gpudoctor.probe.flops import COUNT_AFTER_STEPS
from gpudoctor.store import Store

LOOP = ROOT / "bench" / "loop_job.py"  # a plain DataLoader + MLP + SGD loop, ~0.3 ms steps


def test_every_step_is_counted_and_one_in_n_is_measured_in_detail(tmp_path: Path) -> None:
    args = ["--steps", "600", "--warmup", "0", "--hidden", "64", "--batch-size", "16"]
    proc = doctor("run", "--headless", "--", PY, str(LOOP), *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    timeline = Store(Path(os.environ["GPUDOCTOR_STORE"])).load(1)
    steps = list(timeline.main_steps())
    assert [s.number for s in steps] == list(range(600))
    assert all(s.wall_ns > 0 for s in steps[1:])
    detailed = [s for s in steps if s.detail]
    # every step of the first FULL_STEPS in detail, but the one whose FLOPs the probe
    # counts and the next (timed, their split left out: probe/flops.py)
    counting = (COUNT_AFTER_STEPS, COUNT_AFTER_STEPS + 1)
    full = [n for n in range(FULL_STEPS) if n not in counting]
    assert [s.number for s in detailed[: len(full)]] == full
    # one in SAMPLE_EVERY after that, or one every SAMPLE_MIN_GAP_NS on short steps
    # (each plan learns the step time from the steps since the last one), plus one at
    # least every half second
    later = len(steps) - FULL_STEPS
    elapsed = steps[-1].t_end_mono_ns - steps[FULL_STEPS].t_end_mono_ns
    expected = min(later // SAMPLE_EVERY, elapsed // SAMPLE_MIN_GAP_NS)
    assert expected - 1 <= len(detailed) - len(full) < later // 4
    assert all(s.loader_ns > 0 and s.forward_ns > 0 and s.batch_size == 16 for s in detailed)
    counted = [s for s in steps if not s.detail]
    assert all(s.loader_ns == s.forward_ns == 0 and s.batch_size is None for s in counted)

    report = doctor("report", "1", "--format", "json")
    assert report.returncode == 0
    assert '"forward": 0.' in report.stdout and '"samples_per_s": ' in report.stdout


NO_GRAD_CALL_EVERY_STEP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 16)
for i in range(1500):
    with torch.no_grad():  # a rollout, pseudo-labels: the trained model, gradients off
        y = model(x)
    loss = torch.nn.functional.mse_loss(model(x), y + 0.1)
    loss.backward()
    opt.step()
    opt.zero_grad()
print("steps", i + 1)
"""


def test_a_call_with_gradients_off_in_every_short_step_keeps_the_steps_sampled(
    tmp_path: Path,
) -> None:
    """A call of the trained model with gradients off is taken for an evaluation, whose
    first forward on a step only counted makes the probe measure that step in detail
    (to time the whole evaluation). In a job that makes such a call in every short
    step, that must not measure every step in detail: at most one step every
    SAMPLE_MIN_GAP_NS is switched so, the sampling's own bound."""
    script = tmp_path / "rollout.py"
    script.write_text(NO_GRAD_CALL_EVERY_STEP)
    proc = doctor("run", "--headless", "--", PY, str(script))
    assert proc.returncode == 0 and "steps 1500" in proc.stdout, proc.stderr[-2000:]
    timeline = Store(Path(os.environ["GPUDOCTOR_STORE"])).load(1)
    steps = list(timeline.main_steps())
    assert len(steps) == 1500
    later = [s for s in steps[FULL_STEPS:] if s.detail]
    elapsed = steps[-1].t_end_mono_ns - steps[FULL_STEPS].t_end_mono_ns
    # the sampling's own (one every SAMPLE_MIN_GAP_NS) and as many switched
    assert len(later) <= 2 * (elapsed // SAMPLE_MIN_GAP_NS) + 2, (len(later), elapsed)
    assert len(later) < len(steps) // 4
