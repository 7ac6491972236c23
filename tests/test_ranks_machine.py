"""What trials, predictions and `fix` know of the machine a distributed job runs on
(issue 39, point 5): the job's own new processes are not neighbours, workers are
suggested per rank, a prediction that can be a slowdown says why, and `fix` says why it
tried nothing."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
from windows import host, steps, window

from gpudoctor.diagnosis.engine import diagnose
from gpudoctor.model import StackChunk
from gpudoctor.prescribe.how import suggested_workers
from gpudoctor.prescribe.predict import predict
from gpudoctor.sources.host import HostReader

LOADER = {"dataloaders": [{"num_workers": 0, "pin_memory": False, "persistent_workers": False}]}


def test_workers_are_suggested_per_rank_on_the_node() -> None:
    assert suggested_workers({}, 2) == 2
    assert suggested_workers({"world_size": "2", "local_world_size": "2"}, 2) == 1
    assert suggested_workers({"world_size": "16", "local_world_size": "8"}, 64) == 8
    assert suggested_workers({}, 1) == 1  # one core: no worker beside the training's


def test_more_workers_for_ranks_that_fill_the_cores_may_be_a_slowdown_and_says_why() -> None:
    facts = {**LOADER, "world_size": "2", "local_world_size": "2"}
    w = window(steps=steps(loader_ms=5.0), facts=facts)
    finding = next(f for f in diagnose(w) if f.id == "input-bound")
    p = predict("more-workers", finding, w, 2)
    assert p.low < 1.0 < p.high
    assert "no core is free beside the ranks" in p.basis and "can slow it" in p.basis
    alone = predict("more-workers", finding, window(steps=steps(loader_ms=5.0), facts=LOADER), 2)
    assert alone.low >= 1.0  # one process on two cores: a core for its worker


def test_more_workers_watched_from_outside_is_predicted_from_the_estimates() -> None:
    """A job watched from outside (py-spy's samples: 92% in the DataLoader, a step of
    14.5 ms from the loop's counter; no worker in its tree) on 2 cores: the loader model
    with the estimated step and wait, as for a run, where it read 1.00x-12.05x (the
    finding's whole share)."""
    t = 10**10
    chunk = StackChunk(
        0, t, {"loader": 184, "forward": 10, "backward": 6}, {"main:step": 0}, 0,
        {"main:step": 690}, t,
    )  # fmt: skip
    facts = {"dataloaders": [{"num_workers": 0}]}
    w = window(steps=[], host=host(), stacks=[chunk], facts=facts, steps_by_pid={})
    assert w.estimated and abs(w.step_median_ms - 14.49) < 0.01
    finding = next(f for f in diagnose(w) if f.id == "input-bound")
    p = predict("more-workers", finding, w, 2)
    assert "2 cores allowed, 0 workers -> 2" in p.basis, p.basis
    # the wait (92% of 14.5 ms) halved at best by two loaders; one at 3/4 speed at worst
    assert abs(p.high - 14.49 / (0.92 * 14.49 / 2)) < 0.05 and p.low < 1.0, p
    # no step rate read (no loop counter): the finding's share, as before
    bare = StackChunk(0, t, {"loader": 184, "forward": 10, "backward": 6})
    w = window(steps=[], host=host(), stacks=[bare], facts=facts, steps_by_pid={})
    finding = next(f for f in diagnose(w) if f.id == "input-bound")
    assert "won back" in predict("more-workers", finding, w, 2).basis


def test_a_process_new_to_the_job_counts_its_cpu_at_its_first_reading() -> None:
    """A worker started between two readings (a DataLoader's, each epoch) is the job's
    from its first reading: its CPU is not put on other processes (psutil's rate reads 0
    the first time)."""
    busy = "import time\nt = time.time()\nwhile time.time() - t < 20: pass"
    code = (
        "import subprocess, sys, time; time.sleep(1.0); "
        f"subprocess.Popen([sys.executable, '-c', {busy!r}]); time.sleep(30)"
    )
    job = subprocess.Popen([sys.executable, "-c", code])
    try:
        reader = HostReader(job.pid)
        time.sleep(0.3)
        assert [p.pid for p in reader.read().job] == [job.pid]
        time.sleep(2.0)
        sample = reader.read()
        workers = [p for p in sample.job if p.pid != job.pid]
        assert len(workers) == 1
        assert workers[0].cpu_pct > 15.0, workers  # busy since it started, in this interval
    finally:
        for child in psutil.Process(job.pid).children(recursive=True):
            child.kill()
        job.kill()
        job.wait()


def test_fix_says_why_it_tried_nothing() -> None:
    from gpudoctor.app.fix import why_nothing_tried
    from gpudoctor.timeline import Timeline

    quiet = Timeline(command=["python", "t.py"], started_unix=0.0, start_mono_ns=0)
    assert why_nothing_tried(quiet, {}, {}) == (
        "nothing tried: the first run found nothing a remedy could act on"
    )
