"""Kineto traces (torch.profiler's `export_chrome_trace`, `tensorboard_trace_handler`)
read as a stream: the events are parsed one at a time (ijson) and only what the GPU
timeline needs is kept (diagnosis/gpu_timeline.py), so a trace of a gigabyte is read in
far less memory than it takes on disk.

Timestamps with a fraction of a microsecond (nanosecond traces) are rounded inward to
whole microseconds, the start up and the end down, as Holistic Trace Analysis does (the
events of such traces overlap otherwise: pytorch/pytorch#122425), so that its numbers
and ours agree.

A path is a file (`.json`, `.json.gz`, `.pt.trace.json[.gz]`) or a folder of them (one
file per rank, as `tensorboard_trace_handler` writes them). The rank is the one the
trace's `distributedInfo` names, else 0. Anything that is not such a trace raises
TraceError with one line that says what is wrong.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import ijson  # type: ignore[import-untyped]

from gpudoctor.diagnosis.gpu_timeline import GpuEvent, HostCall, RankTrace
from gpudoctor.i18n import _

_GPU_CATS = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
    "cuda_sync": "sync",  # the device waiting on a stream or an event (on the timeline)
}  # fmt: skip
_CALL_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime"}
_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
HEAD_BYTES = 1 << 20  # distributedInfo and deviceProperties come before the events


class TraceError(Exception):
    """Not a trace, or a broken one: the message is one line for the user."""


def trace_files(paths: list[Path]) -> list[Path]:
    """The trace files the paths name (a folder: the traces in it, sorted)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(
                f for f in p.iterdir() if f.is_file() and re.search(r"\.json(\.gz)?$", f.name)
            )
            if not found:
                raise TraceError(_("{path}: no trace files (.json, .json.gz) in it").format(path=p))
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise TraceError(_("{path}: no such file or folder").format(path=p))
    return out


def _open(path: Path) -> IO[bytes]:
    f = path.open("rb")
    magic = f.read(2)
    f.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f)  # type: ignore[return-value]
    return f


def _head(path: Path) -> dict[str, Any]:
    """The small top-level objects before the events: distributedInfo, deviceProperties."""
    with _open(path) as f:
        text = f.read(HEAD_BYTES).decode("utf-8", "replace")
    out: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    for key in ("distributedInfo", "deviceProperties"):
        m = re.search(rf'"{key}"\s*:\s*', text)
        if m is None:
            continue
        try:
            out[key], _end = decoder.raw_decode(text, m.end())
        except ValueError:
            continue
    return out


def _events(f: IO[bytes]) -> Iterator[dict[str, Any]]:
    return ijson.items(f, "traceEvents.item", use_float=True)  # type: ignore[no-any-return]


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _inward(ts: float, dur: float) -> tuple[float, float]:
    """Whole microseconds: the start rounded up, the end down (see the docstring)."""
    if ts == int(ts) and dur == int(dur):
        return ts, dur
    start = float(math.ceil(ts))
    return start, float(math.floor(ts + dur)) - start


def read(path: Path) -> RankTrace:
    """One rank's trace."""
    try:
        head = _head(path)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(
            _("{path}: cannot be read ({error})").format(path=path, error=exc)
        ) from exc
    info = head.get("distributedInfo")
    rank = _int(info.get("rank")) if isinstance(info, dict) else 0
    devices = head.get("deviceProperties")
    device = major = None
    if isinstance(devices, list) and devices and isinstance(devices[0], dict):
        device = devices[0].get("name")
        major = devices[0].get("computeMajor")
    trace = RankTrace(
        rank=max(rank, 0), path=str(path), device=device,
        compute_major=major if isinstance(major, int) else None,
    )  # fmt: skip
    gpu, calls, steps = trace.gpu, trace.calls, trace.steps
    names: dict[str, str] = {}  # each name kept once: a kernel runs thousands of times
    seen = 0
    try:
        with _open(path) as f:
            for e in _events(f):
                seen += 1
                if not isinstance(e, dict) or "dur" not in e:
                    continue
                cat = e.get("cat")
                args = e.get("args") or {}
                if cat in _GPU_CATS:
                    stream = _int(args.get("stream"))
                    corr = _int(args.get("correlation"))
                    if stream >= 0 and corr >= 0:
                        ts, dur = _inward(float(e["ts"]), float(e["dur"]))
                        name = str(e.get("name", ""))
                        name = names.setdefault(name, name)
                        gpu.append(GpuEvent(ts, dur, stream, corr, name, _GPU_CATS[cat]))
                elif cat in _CALL_CATS:
                    ts, dur = _inward(float(e["ts"]), float(e["dur"]))
                    corr = _int(args.get("correlation"))
                    name = str(e.get("name", ""))
                    calls.append(HostCall(ts, dur, corr, names.setdefault(name, name)))
                else:
                    name = str(e.get("name", ""))
                    m = _STEP.match(name)
                    if m is not None and cat != "gpu_user_annotation":
                        ts, dur = _inward(float(e["ts"]), float(e["dur"]))
                        steps.append((ts, dur, int(m.group(1))))
                    elif cat == "cpu_op":
                        trace.cpu_ops += 1
                        op = trace.cpu_time.setdefault(name, [0, 0.0])
                        op[0] += 1
                        op[1] += float(e["dur"])
    except (ijson.JSONError, ijson.IncompleteJSONError) as exc:
        raise TraceError(
            _("{path}: not a complete trace: {error}").format(path=path, error=_first_line(exc))
        ) from exc
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise TraceError(
            _("{path}: cannot be read ({error})").format(path=path, error=_first_line(exc))
        ) from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(
            _("{path}: an event is not in Kineto's form ({error})").format(
                path=path, error=_first_line(exc)
            )
        ) from exc
    if not seen:
        raise TraceError(_("{path}: not a profiler trace (no traceEvents)").format(path=path))
    return trace


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def read_all(paths: list[Path]) -> list[RankTrace]:
    traces = [read(p) for p in trace_files(paths)]
    # a folder of one job's ranks: each names its rank; files without distributedInfo
    # all say 0, then they are numbered in order
    ranks = [t.rank for t in traces]
    if len(set(ranks)) < len(ranks):
        for i, t in enumerate(traces):
            t.rank = i
    return traces


__all__ = ["TraceError", "read", "read_all", "trace_files"]
