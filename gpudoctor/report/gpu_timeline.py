"""`gpudoctor trace`'s report: the GPU timeline of each rank (diagnosis/gpu_timeline.py),
the ranks side by side, and the findings in the report's finding form (DESIGN.md
sections 4, 6 and 10), as data (`to_dict`, what `--json` prints) and as text in the
look of the end-of-run summary. A figure that cannot be computed from a trace is None
(null), and the text says why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpudoctor.diagnosis.gpu_timeline import (
    RankTimeline,
    RankTrace,
    Straggler,
    analyse,
    straggler,
)
from gpudoctor.diagnosis.timeline_rules import diagnose
from gpudoctor.i18n import _
from gpudoctor.model import Finding
from gpudoctor.report.findings import finding_line
from gpudoctor.units import ms_text

SHOWN_KERNELS = 5  # in the text; the JSON has gpu_timeline.TOP_KERNELS
NAME_WIDTH = 70  # kernel names in the text: C++ templates run to hundreds of characters


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


class TraceReport:
    def __init__(self, traces: Sequence[RankTrace], lang: str = "en") -> None:
        self.ranks = sorted((analyse(t) for t in traces), key=lambda r: r.rank)
        self.straggler: Straggler | None = straggler(traces)
        # each rank's findings; the report's are the ranks' together, the same finding on
        # several ranks said once, for the rank where it is worst
        per_rank = {r.rank: diagnose(r) for r in self.ranks}
        best: dict[str, tuple[int, Finding]] = {}
        for rank, found in per_rank.items():
            for f in found:
                kept = best.get(f.id)
                if kept is None or f.rank_key() < kept[1].rank_key():
                    best[f.id] = (rank, f)
        self.findings = [
            (rank, finding_line(f, {}, 0, lang))
            for rank, f in sorted(best.values(), key=lambda rf: rf[1].rank_key())
        ]
        self.multi = len(self.ranks) > 1

    # -- as data ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        s = self.straggler
        return {
            "ranks": [rank_dict(r) for r in self.ranks],
            "straggler": None
            if s is None
            else {
                "rank": s.rank,
                "last_share_pct": round(100 * s.last_share, 1),
                "collectives": s.collectives,
                "median_late_us": round(s.median_late_us, 1),
            },
            "findings": [{"rank": rank, **f.to_dict()} for rank, f in self.findings],
        }

    # -- as text ---------------------------------------------------------------------------

    def text(self) -> str:
        lines = [
            _("gpudoctor: the GPU timeline of {n} trace(s)").format(n=len(self.ranks)),
        ]
        for r in self.ranks:
            lines += _rank_lines(r)
        if self.multi:
            lines.append("  " + _("across ranks:"))
            for r in self.ranks:
                lines.append(
                    "    "
                    + _("rank {rank}: compute {compute}, idle {idle}").format(
                        rank=r.rank, compute=_pct(r, r.compute_us), idle=_pct(r, r.idle_us)
                    )
                )
            s = self.straggler
            if s is None:
                lines.append(
                    "    " + _("no collectives to compare: no straggler can be named from them")
                )
            else:
                lines.append(
                    "    "
                    + _(
                        "rank {rank} arrives last at {share:.0%} of {n} collectives, by {late} "
                        "at the median: the other ranks wait for it inside the collective"
                    ).format(
                        rank=s.rank,
                        share=s.last_share,
                        n=s.collectives,
                        late=ms_text(s.median_late_us * 1e-3),
                    )  # fmt: skip
                )
        if not self.findings:
            lines.append("  " + _("no findings: nothing on the timeline points at a bottleneck"))
        for rank, f in self.findings:
            where = _(" (rank {rank})").format(rank=rank) if self.multi else ""
            lines.append(f"  [{f.severity}] {f.id}{where}: {f.title}")
            lines.append(f"      {f.evidence}")
            lines += [f"      -> {m.id}: {m.how}" for m in f.remedies]
        return "\n".join(lines) + "\n"


def _pct(r: RankTimeline, us: float | None) -> str:
    value = r.pct(us)
    return "-" if value is None else f"{value:.1f}%"


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"


def rank_dict(r: RankTimeline) -> dict[str, Any]:
    return {
        "rank": r.rank,
        "path": r.path,
        "device": r.device,
        "span_us": _round(r.span_us, 1),
        "steps": r.steps,
        "temporal": {
            "idle_pct": _round(r.pct(r.idle_us)),
            "compute_pct": _round(r.pct(r.compute_us)),
            "non_compute_pct": _round(r.pct(r.non_compute_us)),
        },
        "idle": [
            {
                "stream": s.stream,
                "host_wait_us": round(s.host_wait_us, 1),
                "kernel_wait_us": round(s.kernel_wait_us, 1),
                "other_us": round(s.other_us, 1),
            }
            for s in r.idle
        ],
        "gpu_idle": {
            "host_wait_us": round(r.gpu_idle.host_wait_us, 1),
            "kernel_wait_us": round(r.gpu_idle.kernel_wait_us, 1),
            "other_us": round(r.gpu_idle.other_us, 1),
        },
        "comm_overlap_pct": _round(r.comm_overlap_pct),
        "communication_pct": _round(r.pct(r.communication_us)) if r.span_us else None,
        "memory_pct": _round(r.pct(r.memory_us)) if r.span_us else None,
        "top_kernels": [
            {
                "name": k.name,
                "time_us": round(k.time_us, 1),
                "count": k.count,
                "share_pct": round(k.share_pct, 2),
            }
            for k in r.top_kernels
        ],  # fmt: skip
        "kernels": r.kernels,
        "kernels_per_step": _round(r.launches_per_step, 1),
        "kernel_median_us": _round(r.kernel_median_us),
        "launch_median_us": _round(r.launch_median_us),
        "fp32_matmul_share_pct": _round(100 * r.matmul_fp32_us / r.kernel_us)
        if r.kernel_us
        else None,
        "pageable_copies": r.pageable_copies,
        "sync_calls": [{"name": n, "count": c, "time_us": round(t, 1)} for n, c, t in r.sync_calls],
        "cpu_ops": r.cpu_ops,
        "top_cpu_ops": [
            {"name": n, "calls": c, "time_us": round(t, 1)} for n, c, t in r.top_cpu_ops
        ]
        if r.span_us is None
        else [],
    }


def _rank_lines(r: RankTimeline) -> list[str]:
    head = _("rank {rank}").format(rank=r.rank)
    if r.device:
        head += f" ({r.device})"
    lines = [f"  {head}: {r.path}"]
    if r.span_us is None:
        lines.append(
            "    "
            + _(
                "no GPU events in this trace (a CPU-only capture): no GPU timeline; "
                "{ops} host operators"
            ).format(ops=r.cpu_ops)
        )
        for name, calls, us in r.top_cpu_ops[:SHOWN_KERNELS]:
            lines.append(f"      {ms_text(us * 1e-3):>10}  {calls:>6}x  {_short(name)}")
        return lines
    steps = _(", {n} steps").format(n=r.steps) if r.steps else _(", no ProfilerStep marks")
    lines.append(
        "    "
        + _("{span} from the first GPU event to the last{steps}").format(
            span=ms_text(r.span_us * 1e-3), steps=steps
        )
    )
    lines.append(
        "    "
        + _("compute {compute}, communication and memory {other}, idle {idle}").format(
            compute=_pct(r, r.compute_us), other=_pct(r, r.non_compute_us), idle=_pct(r, r.idle_us)
        )  # fmt: skip
    )
    g = r.gpu_idle
    lines.append(
        "    "
        + _(
            "GPU idle (no stream busy): host wait {host}, kernel wait {kernel}, other {other}"
        ).format(
            host=ms_text(g.host_wait_us * 1e-3),
            kernel=ms_text(g.kernel_wait_us * 1e-3),
            other=ms_text(g.other_us * 1e-3),
        )  # fmt: skip
    )
    for s in r.idle[:3]:
        lines.append(
            "    "
            + _(
                "stream {stream} idle: host wait {host}, kernel wait {kernel}, other {other}"
            ).format(
                stream=s.stream,
                host=ms_text(s.host_wait_us * 1e-3),
                kernel=ms_text(s.kernel_wait_us * 1e-3),
                other=ms_text(s.other_us * 1e-3),
            )  # fmt: skip
        )
    if r.comm_overlap_pct is None:
        lines.append("    " + _("no communication kernels: no overlap to measure"))
    else:
        lines.append(
            "    "
            + _("communication {comm} of the time, {overlap:.1f}% of it beside computation").format(
                comm=_pct(r, r.communication_us), overlap=r.comm_overlap_pct
            )
        )
    if r.kernels:
        per_step = (
            _(" ({n:.0f} a step)").format(n=r.launches_per_step) if r.launches_per_step else ""
        )
        launch = (
            _(", launch calls {launch} median").format(launch=ms_text(r.launch_median_us * 1e-3))
            if r.launch_median_us is not None
            else _(", no launch calls in the trace")
        )
        lines.append(
            "    "
            + _("{n} kernels{per_step}, {median} median{launch}").format(
                n=r.kernels,
                per_step=per_step,
                median=ms_text((r.kernel_median_us or 0) * 1e-3),
                launch=launch,
            )  # fmt: skip
        )
        for k in r.top_kernels[:SHOWN_KERNELS]:
            lines.append(
                f"      {k.share_pct:5.1f}%  {ms_text(k.time_us * 1e-3):>10}  {_short(k.name)}"
            )
    return lines


def timeline_words(d: Mapping[str, Any]) -> str:
    """One line of a report's `gpu_timeline`: where the captured steps' GPU time went."""
    t = d.get("temporal") or {}
    if t.get("idle_pct") is None:
        return _("GPU timeline of the capture: no GPU events (a CPU-only capture)")
    idle = d.get("gpu_idle") or {}
    span = float(d.get("span_us") or 0.0)
    host = 100.0 * float(idle.get("host_wait_us") or 0.0) / span if span else 0.0
    words = _(
        "GPU timeline of the capture: compute {compute:.0f}%, communication and memory "
        "{other:.0f}%, idle {idle:.0f}% ({host:.0f}% waiting for the host)"
    ).format(
        compute=t.get("compute_pct") or 0.0, other=t.get("non_compute_pct") or 0.0,
        idle=t["idle_pct"], host=host,
    )  # fmt: skip
    if d.get("kernels_per_step") is not None:
        words += _("; {n:.0f} kernels a step, {median} median").format(
            n=d["kernels_per_step"], median=ms_text(float(d.get("kernel_median_us") or 0) * 1e-3)
        )
    return words
