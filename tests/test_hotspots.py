"""Naming the line (issue 20): py-spy's samples of the job's main thread and its
DataLoader workers, put on the lines of the user's own code, in the evidence, the
report and the finding screen. Each job here is written the way people write them, not
one of the sample jobs; the line to find is marked `# <- the line`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, doctor, env_without_probe, load_recorded_session
from test_tui import open_finding, text_of

from gpudoctor.diagnosis.hotspots import hotspots
from gpudoctor.sources.hotspots import HotspotSampler, chunk_of, parse, user_code
from gpudoctor.sources.stacks import find_py_spy
from gpudoctor.tui.app import make_replay_app

pytestmark = pytest.mark.skipif(find_py_spy() is None, reason="py-spy is a dependency")

# Long enough for the warm-up and one whole chunk of sampling (10 s) with room to spare.
RUN_S = 15

WAIT_LOOP = f"""
import time
import torch

torch.manual_seed(0)
model = torch.nn.Linear(64, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def next_batch():
    # stands in for a rate-limited remote data service
    time.sleep(0.02)  # <- the line
    return torch.randn(32, 64), torch.randint(0, 8, (32,))


start = time.monotonic()
while time.monotonic() - start < {RUN_S}:
    x, y = next_batch()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

COSTLY_TRANSFORM = f"""
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def to_tensor(arr):
    return torch.from_numpy(arr / 255.0).permute(2, 0, 1).float()


def flip(arr):
    return arr[:, ::-1].copy()


def blur(arr):
    arr = arr.astype(np.float32)
    for _ in range(8):
        arr = (arr + np.roll(arr, 1, 0) + np.roll(arr, 1, 1) + np.roll(arr, -1, 0)) / 4  # <- the line
    return arr


class Pictures(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        img = np.full((96, 96, 3), i % 251, dtype=np.uint8)
        img = flip(img)
        img = blur(img)
        return to_tensor(img), i % 10


model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 96 * 96, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
start = time.monotonic()
for x, y in DataLoader(Pictures(), batch_size=16, num_workers=1):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if time.monotonic() - start > {RUN_S}:
        break
"""

READER = """
import sys
import time
import torch

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.001)
TEXT = ",".join(str(i % 97) for i in range(60000))


def read_record(k):
    fields = [float(v) * 0.5 for v in TEXT.split(",")]  # <- the line
    return torch.tensor(fields[k % 100 : k % 100 + 16]).view(1, 16)


for step in range(int(sys.argv[1])):
    x = read_record(step)
    loss = (model(x) - 1.0).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("weights", [round(v, 10) for v in model.weight.view(-1).tolist()])
"""


def _write(tmp_path: Path, name: str, text: str) -> tuple[Path, int]:
    path = tmp_path / name
    path.write_text(text)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "# <- the line" in t)
    return path, line


def _run(script: Path, tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    report = tmp_path / "report.json"
    result = doctor("run", "--headless", "--report", str(report), "--", PY, str(script), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(report.read_text()), result.stdout + result.stderr


def _input_bound(report: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["id"] == "input-bound")


# -- the parser, on py-spy's own output shapes ---------------------------------------------------

VENV = "/home/u/.venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
RAW = "\n".join(
    [
        # the main thread waiting for the DataLoader, at the user's `for` line
        f'process 100:"python train.py";thread (100): MainThread;<module> (/w/train.py:18);'
        f"_BaseDataLoaderIter.__next__ ({VENV}/torch/utils/data/dataloader.py:725);"
        f"Queue.get ({STDLIB}/multiprocessing/queues.py:113) 30",
        # the main thread in the model: not outside it
        f'process 100:"python train.py";thread (100): MainThread;<module> (/w/train.py:19);'
        f"Module._call_impl ({VENV}/torch/nn/modules/module.py:1786) 10",
        # a helper thread of the main process: left out
        f'process 100:"python train.py";thread (101): QueueFeederThread;'
        f"Thread.run ({STDLIB}/threading.py:982) 40",
        # a worker: its fork point (<module>) above torch's loop is not its work; the
        # library under the user's transform is folded into it
        f'process 100:"python train.py";process 102:"python train.py";thread (102): MainThread;'
        f"<module> (/w/train.py:18);_worker_loop ({VENV}/torch/utils/data/_utils/worker.py:349);"
        f"Pictures.__getitem__ (/w/data.py:30);blur (/w/data.py:21);"
        f"roll ({VENV}/numpy/_core/numeric.py:1290) 25",
        # a worker waiting for its next index: no line of the user's
        f'process 100:"python train.py";process 102:"python train.py";thread (102): MainThread;'
        f"<module> (/w/train.py:18);_worker_loop ({VENV}/torch/utils/data/_utils/worker.py:320);"
        f"Queue.get ({STDLIB}/multiprocessing/queues.py:113) 5",
    ]
)


def test_samples_go_to_the_innermost_line_of_the_users_code() -> None:
    got = parse(RAW, 100)
    assert got == {
        ("main", "/w/train.py", 18, "<module>", "loader"): 30,
        ("main", "/w/train.py", 19, "<module>", "forward"): 10,
        ("workers", "/w/data.py", 21, "blur", "worker"): 25,
        ("workers", "", 0, "", "worker"): 5,
    }
    assert not user_code(f"{VENV}/torch/nn/modules/module.py")
    assert not user_code(f"{STDLIB}/threading.py")
    assert not user_code("<frozen runpy>")
    assert user_code("/w/train.py")


def test_busy_and_idle_come_from_the_two_runs() -> None:
    """The busy run saw the `for` line a third of the time the all-threads run did: the
    rest of that line's time was idle. Shares are of the main thread's whole time."""
    busy = RAW.replace(" 30\n", " 10\n").replace(" 25\n", " 25\n")
    chunk = chunk_of(RAW, busy, 100, 0, 10**10, source=lambda f, n: f"line {n}")
    assert chunk is not None and chunk.main_total == 40 and chunk.workers_total == 30
    spots = hotspots([chunk])
    assert spots is not None
    main = {(h.line, h.state): round(h.share, 3) for h in spots.of("main")}
    assert main == {(18, "idle"): 0.5, (18, "busy"): 0.25}  # of 40 samples: 20 and 10
    (blur,) = spots.of("workers")
    assert (blur.function, blur.state, round(blur.share, 3), blur.code) == (
        "blur", "busy", round(25 / 30, 3), "line 21",
    )  # fmt: skip
    # the main thread's time outside the model (the `for` line; line 19 is the model's)
    assert (round(spots.outside_busy, 3), round(spots.outside_idle, 3)) == (0.25, 0.5)


# -- real jobs under the doctor -----------------------------------------------------------------


def test_an_idle_waiting_loop_is_named_idle_at_its_sleep(tmp_path: Path) -> None:
    script, line = _write(tmp_path, "wait_loop.py", WAIT_LOOP)
    report, _ = _run(script, tmp_path)
    top = report["hotspots"][0]
    assert (top["file"], top["line"], top["state"], top["where"]) == (
        str(script), line, "idle", "main",
    )  # fmt: skip
    # most of each step (a quiet machine: ~0.9; beside a busy suite the rest of the step
    # waits for a core, and that counts as on a CPU: ~0.4)
    assert top["share"] > 0.25 and top["code"] == "time.sleep(0.02)  # <- the line"
    evidence = _input_bound(report)["evidence"]
    assert f"idle at wait_loop.py:{line} `time.sleep(0.02)" in evidence
    assert "it waits" in evidence and "it does not compute input" in evidence


def test_a_run_shorter_than_a_chunk_still_names_its_line(tmp_path: Path) -> None:
    """The job ends 8 s in, inside the sampler's first 10 s chunk: the chunk under way
    is collected as the run ends (py-spy writes what it sampled when the job exits),
    where before a run shorter than a chunk named no line. (5 s named none once on a
    busy CI machine: py-spy starts after the warm-up steps, and a starved start-up left
    it too little of the run.)"""
    short = WAIT_LOOP.replace(f"start < {RUN_S}", "start < 8")
    script, line = _write(tmp_path, "short_wait_loop.py", short)
    report, _ = _run(script, tmp_path)
    assert report["hotspots"], report.get("notes")
    top = report["hotspots"][0]
    assert (top["line"], top["state"], top["where"]) == (line, "idle", "main")


def test_the_costly_transform_among_cheap_ones_is_named_in_the_workers(tmp_path: Path) -> None:
    script, line = _write(tmp_path, "pictures.py", COSTLY_TRANSFORM)
    report, _ = _run(script, tmp_path)
    workers = [h for h in report["hotspots"] if h["where"] == "workers"]
    assert workers, report["hotspots"]
    assert (workers[0]["line"], workers[0]["function"], workers[0]["state"]) == (
        line, "blur", "busy",
    )  # fmt: skip
    assert not any(h["function"] == "flip" for h in workers[:1])
    assert (
        f"the workers spend {workers[0]['share']:.0%} in pictures.py:{line}"
        in (_input_bound(report)["evidence"])
    )


def test_a_hand_written_reader_is_named_busy_at_its_costly_line_and_changes_nothing(
    tmp_path: Path,
) -> None:
    script, line = _write(tmp_path, "reader.py", READER)
    # ~10 s of steps: lines are named from MIN_SAMPLES (4 s at 10 Hz) of the main thread,
    # and 1,000 steps (~5 s) gave 39-48 samples on a busy machine: a flake, 1 run in 5
    steps = "2000"
    # the plain run beside the doctored one (a second core; the job is single-threaded):
    # its result is the same whenever it runs, and waiting for a core counts as busy
    plain = subprocess.Popen(
        [PY, str(script), steps], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env=env_without_probe(),
    )  # fmt: skip
    try:
        report, output = _run(script, tmp_path, steps)
        plain_out, _ = plain.communicate(timeout=120)
    finally:
        plain.kill()
        plain.wait()
    assert report["hotspots"], f"too few samples to name lines in {report['duration_s']} s"
    top = report["hotspots"][0]
    assert (top["line"], top["state"]) == (line, "busy")
    assert top["function"].startswith("read_record")  # its list comprehension, or itself
    evidence = _input_bound(report)["evidence"]
    assert f"busy at reader.py:{line} `fields = [float(v) * 0.5" in evidence
    assert "it waits" not in evidence
    # the job under py-spy's sampling: the same result, bit for bit, and no trouble
    weights = [t for t in output.splitlines() if t.startswith("weights")]
    assert weights == [t for t in plain_out.splitlines() if t.startswith("weights")]
    assert "Traceback" not in output


def test_watch_mode_names_the_workers_line_from_the_stacks_it_samples(tmp_path: Path) -> None:
    """Watched from outside: the same lines, from the stacks watch mode samples anyway;
    the workers are counted though torch names their processes `pt_data_worker`."""
    script, line = _write(tmp_path, "pictures.py", COSTLY_TRANSFORM.replace(f"> {RUN_S}", "> 60"))
    job = subprocess.Popen([PY, str(script)], env=env_without_probe(), stdout=subprocess.DEVNULL)
    try:
        time.sleep(6)  # importing torch and starting the loader
        path = tmp_path / "watch.json"
        result = doctor(
            "watch", "--pid", str(job.pid), "--headless", "--max-seconds", "16",
            "--report", str(path),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        assert job.poll() is None  # left running
    finally:
        job.kill()
        job.wait()
    report = json.loads(path.read_text())
    assert report["facts"]["dataloaders"][0]["num_workers"] == 1
    workers = [h for h in report["hotspots"] if h["where"] == "workers"]
    assert (workers[0]["line"], workers[0]["function"]) == (line, "blur"), workers
    assert f"pictures.py:{line}" in _input_bound(report)["evidence"]


def test_the_line_sampling_yields_the_cpu_to_the_job() -> None:
    """`run`'s py-spy runs at the lowest CPU priority, its own and its session's
    (autogroup): beside a busy process a one-thread job whose whole run py-spy sampled
    ran 1.12x slower (median of 10 pairs), 1.03x with py-spy yielding (6 pairs)."""
    py_spy = find_py_spy()
    assert py_spy is not None
    job = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"], env=env_without_probe())
    sampler = HotspotSampler(py_spy)
    try:
        sampler.begin(job.pid)
        sampler.poll()  # starts the chunk's two runs
        runs = sampler._runs
        assert len(runs) == 2
        for run in runs:
            nice = int(Path(f"/proc/{run.pid}/stat").read_text().rsplit(")", 1)[1].split()[16])
            group = Path(f"/proc/{run.pid}/autogroup").read_text()
            assert nice == 19 and group.strip().endswith("nice 19"), (nice, group)
    finally:
        sampler.close()
        job.kill()
        job.wait()


def test_no_stacks_leaves_the_sampling_out(tmp_path: Path) -> None:
    script, _ = _write(tmp_path, "reader.py", READER)
    report = tmp_path / "r.json"
    result = doctor(
        "run", "--headless", "--no-stacks", "--report", str(report), "--", PY, str(script), "300"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "hotspots" not in json.loads(report.read_text())


def test_the_finding_screen_lists_the_lines_with_their_code() -> None:
    """A recorded session with py-spy's chunk in it, replayed: the input-bound finding's
    screen names the worker's line, its share and state, and shows the line itself."""
    timeline = load_recorded_session("dataloader_bound")
    end = timeline.end_ns()
    chunk = chunk_of(RAW, RAW, 100, end - 10**10, end - 1, source=lambda f, n: f"code of {n}")
    assert chunk is not None
    timeline.hotspots.append(chunk)
    app = make_replay_app(timeline, 7)

    async def drive() -> None:
        async with app.run_test(size=(80, 40)) as pilot:
            await pilot.pause()
            screen = await open_finding(app, pilot, "input-bound")
            head = text_of(screen.query_one("#finding-head"))
            assert "Where the time outside the model goes (py-spy, 40 samples" in head
            assert "83% of the workers, busy  data.py:21 in blur" in head
            assert "code of 21" in head
            await pilot.press("escape")
            await pilot.press("q")

    asyncio.run(drive())


def test_a_file_name_with_a_null_byte_gives_no_line_and_no_crash() -> None:
    """py-spy read while the process changed a name: "embedded null byte" in linecache
    killed the doctor at a run's end (seen in CI); the line is left without its text."""
    from gpudoctor.sources.hotspots import _source_line

    assert _source_line("/tmp/train\x00.py", 3) == ""
    assert _source_line(__file__, 1).startswith('"""')


def test_the_probes_own_frames_are_not_the_users_line() -> None:
    """The probe's wrappers are compiled under a file name with a space and brackets in
    it (probe/invisible.py): a sample inside its DataLoader wrapper belongs to the
    user's line that called `next`, not to a file "importlib._bootstrap-style frames
    are skipped by warnings)>" (pytorch/examples' imagenet listed that as a line)."""
    from gpudoctor.probe.invisible import FILENAME

    raw = (
        f'process 100:"python main.py";thread (100): MainThread;<module> (/w/main.py:40);'
        f"validate (/w/main.py:371);LoaderHooks.__init__.<locals>.__next__ ({FILENAME}:41);"
        f"_BaseDataLoaderIter.__next__ ({VENV}/torch/utils/data/dataloader.py:725) 7\n"
        f'process 100:"python main.py";thread (100): MainThread;'
        f"train (/w/my project (copy)/main.py:12) 3"
    )
    assert parse(raw, 100) == {
        ("main", "/w/main.py", 371, "validate", "loader"): 7,
        ("main", "/w/my project (copy)/main.py", 12, "train", "other"): 3,
    }
