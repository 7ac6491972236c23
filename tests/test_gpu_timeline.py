"""`gpudoctor trace` (issue 42): the GPU timeline of real Kineto traces.

The numbers are checked against Holistic Trace Analysis 0.5.0 (the oracle, called with
its default arguments) on every trace of ../shared/traces (copied into
tests/fixtures/traces/hta) where it gives one; the
findings on the traces recorded on an H200 (tests/fixtures/traces) against what the
sample jobs were made to show; the command's bad input, CPU-only and AMD traces, JSON
and Chinese as a user meets them."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gzip
import io
import json
import logging
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, PY, SAMPLES, doctor, load_recorded_session

from gpudoctor.diagnosis.gpu_timeline import analyse, is_fp32_matmul, kernel_kind
from gpudoctor.jobs.captures import Captures
from gpudoctor.report.build import build
from gpudoctor.report.render import summary
from gpudoctor.sources import kineto
from gpudoctor.store import apply_record

SHARED = FIXTURES / "traces" / "hta"  # ../shared/traces, copied with its licence
H200 = FIXTURES / "traces"
# the folders HTA analyses (cupti has no GPU events: HTA fails on it, ours says why)
HTA_FOLDERS = ["a100-2ranks", "a100-8ranks-control", "a100-nccl", "alexnet", "amd-mi250", "v100-ns"]


def hta(folder: Path, tmp_path: Path) -> Any:
    """Holistic Trace Analysis on a copy of the folder (it writes beside the traces)."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis  # type: ignore[import-untyped]

    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return TraceAnalysis(trace_dir=str(copy))


@pytest.mark.parametrize("name", HTA_FOLDERS)
def test_the_numbers_agree_with_holistic_trace_analysis(name: str, tmp_path: Path) -> None:
    folder = SHARED / name
    ours = {t.rank: analyse(t) for t in kineto.read_all([folder])}
    ta = hta(folder, tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        temporal = ta.get_temporal_breakdown(visualize=False)
        overlap = ta.get_comm_comp_overlap(visualize=False)
    assert sorted(ours) == sorted(int(r) for r in temporal["rank"])
    for _, row in temporal.iterrows():
        r = ours[int(row["rank"])]
        assert r.pct(r.idle_us) == pytest.approx(row["idle_time_pctg"], abs=1.0)
        assert r.pct(r.compute_us) == pytest.approx(row["compute_time_pctg"], abs=1.0)
        assert r.pct(r.non_compute_us) == pytest.approx(row["non_compute_time_pctg"], abs=1.0)
    for _, row in overlap.iterrows():
        r = ours[int(row["rank"])]
        expected = row["comp_comm_overlap_pctg"]
        if expected != expected:  # NaN: no communication; ours is None, and says so
            assert r.comm_overlap_pct is None
        else:
            assert r.comm_overlap_pct == pytest.approx(expected, abs=1.0)
    for rank, r in ours.items():
        with contextlib.redirect_stdout(io.StringIO()):
            idle = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]
        streams = {s.stream: s for s in r.idle}
        for _, row in idle.iterrows():
            s = streams[int(row["stream"])]
            mine = {"host_wait": s.host_wait_us, "kernel_wait": s.kernel_wait_us,
                    "other": s.other_us}[row["idle_category"]]  # fmt: skip
            assert mine == pytest.approx(row["idle_time"], abs=max(1.0, 0.01 * s.total_us))


def trace(*args: str) -> Any:
    return doctor("trace", *args)


def test_two_ranks_side_by_side_with_the_straggler_named() -> None:
    proc = trace(str(SHARED / "a100-2ranks"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    for r in data["ranks"]:
        assert set(r["temporal"]) == {"idle_pct", "compute_pct", "non_compute_pct"}
        assert sum(r["temporal"].values()) == pytest.approx(100, abs=0.1)
        assert r["idle"] and {"stream", "host_wait_us", "kernel_wait_us", "other_us"} <= set(
            r["idle"][0]
        )
        assert r["top_kernels"][0]["name"].startswith("ncclKernel_SendRecv")
        assert 0 < r["comm_overlap_pct"] < 100
    # the collective's kernel is shortest on the rank that came last: it waited least
    straggler = data["straggler"]
    assert straggler["rank"] in (0, 1) and straggler["collectives"] == 5
    assert straggler["median_late_us"] > 0
    ids = {f["id"] for f in data["findings"]}
    assert "exposed-communication" in ids  # overlap 12% on rank 0, communication 33%
    text = trace(str(SHARED / "a100-2ranks")).stdout
    assert f"rank {straggler['rank']} arrives last at" in text


@pytest.mark.parametrize(
    ("name", "first", "present"),
    [
        # an 81-leaf MLP of batch 16: ~250 kernels of 1 us a step, launches of 5 us
        ("many_small_ops", "launch-bound", {"launch-bound"}),
        # healthy.py at batch 8192 in float32: the GPU busy with SIMT sgemm kernels
        ("fp32_gemm", "fp32-matmul", {"fp32-matmul"}),
        # dataloader_bound.py: the GPU idle for the loader, batches copied from pageable memory
        ("pageable_copies", "gpu-waits-on-host", {"gpu-waits-on-host", "pageable-copies"}),
        # host_sync.py: .item() every step
        ("host_sync", "gpu-waits-on-host", {"host-sync"}),
    ],
)
def test_the_h200_traces_show_what_their_jobs_were_made_to_show(
    name: str, first: str, present: set[str]
) -> None:
    proc = trace(str(H200 / f"h200_{name}.json.gz"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    ids = [f["id"] for f in data["findings"]]
    assert ids[0] == first, ids
    assert present <= set(ids), ids
    rank = data["ranks"][0]
    assert rank["device"] == "NVIDIA H200" and rank["steps"] == 4  # 5 marked, the last cut
    assert rank["comm_overlap_pct"] is None  # one GPU: no communication
    finding = data["findings"][0]
    assert finding["remedies"] and finding["remedies"][0]["how"] and finding["evidence"]


def test_kernel_names_are_classed_as_hta_and_cublas_name_them() -> None:
    assert kernel_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)") == "communication"
    assert kernel_kind("Memcpy HtoD (Pageable -> Device)") == "memory"
    assert kernel_kind("Stream Sync") == "other"
    assert kernel_kind("ampere_sgemm_128x64_nn") == "compute"
    assert is_fp32_matmul("ampere_sgemm_128x64_nn")
    assert is_fp32_matmul("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1")
    assert is_fp32_matmul(
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4"
    )
    assert not is_fp32_matmul("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6>")
    assert not is_fp32_matmul("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64")
    assert not is_fp32_matmul("void fbgemm_gpu::permute_2D_data_kernel<false, int, int>")


def test_a_cpu_only_trace_says_so_and_an_amd_trace_is_read_like_nvidia() -> None:
    proc = trace(str(SHARED / "cupti"), "--json")
    assert proc.returncode == 0, proc.stderr
    rank = json.loads(proc.stdout)["ranks"][0]
    assert rank["span_us"] is None and rank["temporal"]["idle_pct"] is None
    assert rank["top_cpu_ops"] and rank["cpu_ops"] > 0
    text = trace(str(SHARED / "cupti")).stdout
    assert "no GPU events in this trace (a CPU-only capture)" in text
    amd = json.loads(trace(str(SHARED / "amd-mi250"), "--json").stdout)["ranks"][0]
    assert amd["kernels"] > 0 and amd["launch_median_us"] is not None  # hipLaunchKernel
    assert amd["temporal"]["compute_pct"] > 0


def test_bad_input_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a trace\n")
    no_events = tmp_path / "empty.json"
    no_events.write_text('{"schemaVersion": 1}')
    whole = (H200 / "h200_host_sync.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    cut_json = tmp_path / "cut.json"
    cut_json.write_bytes(gzip.decompress(whole)[:50_000])
    for path, words in [
        (text, "not a complete trace"),
        (no_events, "not a profiler trace"),
        (cut, "cannot be read"),
        (cut_json, "not a complete trace"),
        (tmp_path / "missing.json", "no such file or folder"),
    ]:
        proc = trace(str(path))
        assert proc.returncode == 2, (path, proc.stderr)
        assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr
    empty = tmp_path / "none"
    empty.mkdir()
    proc = trace(str(empty))
    assert proc.returncode == 2 and "no trace files" in proc.stderr


def test_in_chinese() -> None:
    proc = trace(str(H200 / "h200_many_small_ops.json.gz"), "--lang", "zh")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "GPU 时间线" in out and "launch-bound" in out
    assert "The GPU waits for kernel launches" not in out


def test_a_capture_of_a_run_is_read_as_its_gpu_timeline(tmp_path: Path) -> None:
    """`run --profile-steps`: the capture's trace is kept beside the store, read as the
    GPU timeline, recorded, and in the report (here a CPU job: a CPU-only capture)."""
    store = tmp_path / "s.db"
    report = tmp_path / "r.json"
    proc = doctor(
        "--store", str(store), "run", "--headless", "--report", str(report),
        "--profile-steps", "5", "--", PY, str(SAMPLES / "healthy.py"), "--steps", "60",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(report.read_text())
    # (once in CI, under load, the report had none: what the doctor and the probe said)
    assert "gpu_timeline" in data, (data.get("profile"), data.get("notes"), proc.stderr[-3000:])
    timeline = data["gpu_timeline"]
    kept = Path(timeline["path"])
    assert kept.parent == tmp_path / "traces" and kept.exists()
    # the report names the trace that was kept (the probe's folder is gone with the run)
    assert data["profile"]["trace"] == str(kept)
    # what the capture cost the job: the time it held it, and beyond 5 ordinary steps
    profile = data["profile"]
    assert 0 <= profile["cost_s"] <= profile["held_s"] < data["duration_s"]
    assert any(
        n.startswith("5 steps ran under torch.profiler: the capture held the job")
        for n in data["notes"]
    ), data["notes"]
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert timeline["span_us"] is None and timeline["cpu_ops"] > 0 and timeline["steps"] == 4
    assert "GPU timeline of the capture: no GPU events" in proc.stderr
    # read back from the store as the report is built again later
    again = doctor("--store", str(store), "report", "last", "--format", "json")
    assert json.loads(again.stdout)["gpu_timeline"] == timeline


def test_a_capture_read_by_the_time_the_job_ends_is_kept() -> None:
    """A capture whose reading ended between the doctor's last look and the job's end:
    the end's wait returns it (it was dropped, and the report had no GPU timeline, in one
    short run in three)."""
    captures = Captures()
    facts = {7: {"profile": {"capture": 1, "trace": str(H200 / "h200_many_small_ops.json.gz")}}}
    assert captures.poll(facts) == []  # the reading starts on its own thread
    assert concurrent.futures.wait([f for _, f in captures._pending], timeout=60).done
    found = captures.finish(facts, timeout_s=30)
    assert [pid for pid, _ in found] == [7] and found[0][1].kernels > 0


def test_a_gpu_capture_joins_the_live_findings() -> None:
    """A recorded H200 session with a capture of a launch-bound job's steps: the
    timeline's findings join the live ones (the live rule's host-sync stays the live
    one), through the store's record of it."""
    timeline = load_recorded_session("host_sync")
    main = timeline.main_pid()
    assert main is not None
    analysed = analyse(kineto.read(H200 / "h200_many_small_ops.json.gz"))
    apply_record(timeline, "gpu_timeline", {"pid": main, "timeline": analysed.to_dict()})
    report = build(timeline, 7, "en")
    ids = [f.id for f in report.findings]
    assert "launch-bound" in ids and ids.count("host-sync") == 1
    data = report.to_dict()
    assert data["gpu_timeline"]["kernels_per_step"] == pytest.approx(251)
    assert "GPU timeline of the capture: compute 2%" in summary(report)


def test_the_profile_screen_draws_one_step_of_the_gpu() -> None:
    """The TUI's profile screen (p) shows the capture's GPU timeline: its shares, one
    step drawn cell by cell (the launch-bound job's GPU nearly empty, the fp32 job's
    busy), the top kernels."""
    from gpudoctor.tui.screens import timeline_text

    sparse = analyse(kineto.read(H200 / "h200_many_small_ops.json.gz"))
    dense = analyse(kineto.read(H200 / "h200_fp32_gemm.json.gz"))
    assert len(sparse.picture) == len(dense.picture) == 60
    assert max(sparse.picture) <= 2 and sum(v >= 6 for v in dense.picture) >= 15
    text = str(timeline_text(sparse))
    assert "one step on the GPU:" in text and "251 kernels a step" in text
    assert "gemm" in text.lower()


@pytest.mark.parametrize(
    ("name", "captured"),
    [
        ("healthy", True),  # small batch on an H200: GPU idle, nothing on the host says why
        ("convnet", True),
        ("dataloader_bound", False),  # the input explains the idle GPU
        ("host_sync", False),  # the syncs do
        ("out_of_memory", False),
    ],
)
def test_the_doctor_captures_by_itself_only_when_nothing_explains_an_idle_gpu(
    name: str, captured: bool
) -> None:
    from gpudoctor.diagnosis.auto_profile import should_capture

    window = load_recorded_session(name).window()
    assert (should_capture(window) is not None) == captured
    # never twice, nor over a capture someone asked for
    asked = dataclasses.replace(window, facts={**window.facts, "profile": {"capture": 1}})
    assert should_capture(asked) is None


def test_a_job_that_profiles_itself_keeps_its_profiler(tmp_path: Path) -> None:
    """The doctor's capture never starts over the job's own torch.profiler: it says it
    skipped, and the job's profile and output are its own."""
    script = tmp_path / "own_profiler.py"
    script.write_text(
        "import torch\nmodel = torch.nn.Linear(8, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx = torch.randn(16, 8)\n"
        "with torch.profiler.profile() as prof:\n"
        "    for i in range(40):\n"
        "        opt.zero_grad(); model(x).sum().backward(); opt.step()\n"
        "names = {e.key for e in prof.key_averages()}\n"
        "print('own profile', 'aten::addmm' in names)\n"
    )
    report = tmp_path / "r.json"
    proc = doctor(
        "run", "--headless", "--no-stacks", "--report", str(report), "--profile-steps", "3",
        "--", PY, str(script),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "own profile True" in proc.stdout
    data = json.loads(report.read_text())
    assert data["profile"] is None and data["steps"]["count"] == 40


def test_a_captures_cost_is_said_against_as_many_ordinary_steps() -> None:
    """The note sets the time a capture held the job against as many ordinary steps:
    what is over them is its cost, as a share of the run; within them, it says so."""
    from gpudoctor.report.build import _capture_note
    from gpudoctor.report.values import Profile

    window = load_recorded_session("healthy").window()
    step_s = window.step_median_ms / 1000
    slow = {"steps": 5, "held_ms": (5 * step_s + 1.5) * 1000}
    note = _capture_note(Profile.of(slow, window.step_median_ms), run_s=60.0)
    assert "5 steps ran under torch.profiler: the capture held the job" in note
    assert "1.5 s more than 5 ordinary steps take, 2.5% of the run" in note, note
    quick = {"steps": 5, "held_ms": 5 * step_s * 1000}
    held = Profile.of(quick, window.step_median_ms)
    assert "no longer than 5 ordinary steps take" in _capture_note(held, 60.0)
