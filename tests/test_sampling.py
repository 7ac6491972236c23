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
