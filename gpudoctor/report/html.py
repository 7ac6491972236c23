"""`report --format html`: the report as one self-contained page to attach to a ticket
or open on a laptop: the summary, the run over time as charts, the findings with their
evidence and remedies, the speed of light, where the time outside the model goes.

Nothing is fetched when it is opened: the charts are SVG drawn by pygal inside the page
(its tooltip script, which it would load from the web, is left out), the style is in
the page, and every text the run gave (the command, evidence, code lines) is escaped.
The report's texts are the same as the Markdown's, secrets masked alike.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import Any

import pygal
from pygal.style import Style

from gpudoctor.diagnosis.hotspots import state_words, where_words
from gpudoctor.i18n import _, language
from gpudoctor.prescribe.batch_size import reason_words
from gpudoctor.prescribe.loss import LossCheck
from gpudoctor.report.render import (
    extra_pairs_words,
    judged_words,
    predicted_words,
    profile_title,
    side_words,
    summary_items,
    unit_words,
    verdict_words,
)
from gpudoctor.report.values import Report
from gpudoctor.series import Point, RunSeries, by_time, marker_words, rate_lines, split_labels

SCRIPT = re.compile(r"<script\b.*?</script>", re.S)
# Latin first, then the CJK fonts of each platform (Linux: Noto/Source Han, WenQuanYi;
# macOS: PingFang; Windows: Microsoft YaHei): a Chinese page needs one of them, and a
# browser that falls back on its own may find none and draw empty boxes
FONTS = (
    "'DejaVu Sans', Helvetica, Arial, 'Noto Sans CJK SC', 'Source Han Sans SC', "
    "'PingFang SC', 'Microsoft YaHei', 'WenQuanYi Zen Hei', 'WenQuanYi Micro Hei', sans-serif"
)
MONO_FONTS = (
    "'DejaVu Sans Mono', Menlo, Consolas, 'Noto Sans Mono CJK SC', 'WenQuanYi Zen Hei Mono', "
    "monospace"
)
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MARKER_COLORS = ("#7f7f7f", "#a0a0a0", "#5a5a5a", "#b8b8b8", "#404040", "#cccccc")
STYLE = Style(
    background="white",
    plot_background="white",
    foreground="#333",
    foreground_strong="#111",
    foreground_subtle="#ddd",
    font_family=FONTS,
    colors=COLORS,
)
PAGE_CSS = """
body { font-family: FONTS; margin: 2em auto;
       max-width: 1000px; color: #222; }
code, pre { font-family: MONO_FONTS; background: #f4f4f4; }
.finding { border-left: 4px solid #999; padding: 0.2em 0.8em; margin: 1em 0; }
.high { border-color: #d62728; } .medium { border-color: #ff7f0e; } .low { border-color: #1f77b4; }
.chart { margin: 1em 0; } table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
""".replace("MONO_FONTS", MONO_FONTS).replace("FONTS", FONTS)


def chart(
    title: str,
    y_title: str,
    series: dict[str, list[Point]],
    markers: list[tuple[str, float]],
    x_end: float,
    fill: bool = False,
) -> str:
    """One line chart over the run (seconds since the start), as inline SVG, with grey
    dashed markers where each finding was first raised, a profiler capture, an
    out-of-memory error, the job's end."""
    data = {name: points for name, points in series.items() if points}
    style = Style(**{**STYLE.to_dict(), "colors": COLORS[: len(data)] + MARKER_COLORS})
    drawn = pygal.XY(
        width=CHART_W, height=CHART_H, js=[], style=style, show_dots=False, stroke=True,
        disable_xml_declaration=True, legend_at_bottom=True, truncate_legend=-1,
        x_title=_("seconds since the start"), y_title=y_title, title=title,
        include_x_axis=True, explicit_size=True, xrange=(0, x_end), fill=fill,
    )  # fmt: skip
    top = max((v for points in data.values() for _, v in points), default=1.0) or 1.0
    for name, points in data.items():
        drawn.add(name, points)
    for name, at in markers:
        drawn.add(name, [(at, 0.0), (at, top)], stroke_style={"dasharray": "4, 3"}, fill=False)
    # pygal writes its tooltips' settings as an inline script even with no script to
    # read them: left out, so the page runs no code at all
    return SCRIPT.sub("", str(drawn.render(is_unicode=True)))


def stacked(parts: dict[str, list[Point]]) -> dict[str, list[Point]]:
    """The parts of a step stacked: each line the sum of its part and those before it,
    drawn top first and filled down to the axis, so that each band is its part (the
    first part at the bottom)."""
    totals: dict[float, float] = {}
    out: dict[str, list[Point]] = {}
    for name, points in parts.items():
        line = []
        for x, v in points:
            totals[x] = totals.get(x, 0.0) + v
            line.append((x, round(totals[x], 1)))
        out[name] = line
    return dict(reversed(out.items()))


def charts(s: RunSeries, duration_s: float) -> list[str]:
    out = []
    markers = [(marker_words(kind, what), at) for kind, what, at in s.markers()]

    def add(title: str, y_title: str, series: dict[str, list[Point]]) -> None:
        out.append(chart(title, y_title, series, markers, max(duration_s, 1.0)))

    if s.step_p50_ms:
        add(_("Step time"), "ms", {"p50": s.step_p50_ms, "p90": s.step_p90_ms})
        title = _("Samples a second") if s.samples_per_s else _("Steps a second")
        add(title, _("samples/s") if s.samples_per_s else _("steps/s"), dict(rate_lines(s)))
        add(_("Waiting for data"), _("% of step time"), {_("data wait"): s.data_wait_pct})
        parts = {name: s.split_pct[k] for k, name in split_labels().items() if k in s.split_pct}
        out.append(
            chart(
                _("Where a step goes"), _("% of step time"), stacked(parts), markers,
                max(duration_s, 1.0), fill=True,
            )
        )  # fmt: skip
    if s.gpu_util_pct:
        add(_("GPU utilisation"), "%", {f"GPU {i}": p for i, p in sorted(s.gpu_util_pct.items())})
        add(_("GPU memory used"), "GiB", {f"GPU {i}": p for i, p in sorted(s.gpu_mem_gib.items())})
        if s.gpu_power_w:
            add(_("GPU power"), "W", {f"GPU {i}": p for i, p in sorted(s.gpu_power_w.items())})
    if s.cpu_pct:
        add("CPU", _("% of the machine"), {_("all cores"): s.cpu_pct})
        if 1 < len(s.cpu_core_pct) <= len(COLORS):
            cores = {_("core {n}").format(n=c): p for c, p in sorted(s.cpu_core_pct.items())}
            add(_("CPU by core"), _("% of a core"), cores)
        add(_("The job's CPU"), _("cores"), {_("job"): s.job_cpu_cores})
    return out


CHART_W, CHART_H = 960, 280  # one chart's size, in the page and in the SVG file


def charts_file(series: RunSeries, duration_s: float) -> str | None:
    """The run's charts as one SVG file, one under the other (for a Markdown report to
    show beside it: Markdown renderers show an SVG image, not inline SVG); None when
    there is nothing to draw."""
    drawn = charts(series, duration_s)
    if not drawn:
        return None
    height = CHART_H * len(drawn)
    parts = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        f'width="{CHART_W}" height="{height}" viewBox="0 0 {CHART_W} {height}">',
    ]
    for n, svg in enumerate(drawn):
        # each chart an <svg> of its own, placed below the one before
        parts.append(svg.replace("<svg ", f'<svg x="0" y="{n * CHART_H}" ', 1))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def head(title: str) -> list[str]:
    return [
        "<!DOCTYPE html>",
        f'<html lang="{language()}"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{PAGE_CSS}</style></head><body>",
    ]


def page(
    report: Report,
    series: RunSeries,
    trials: Sequence[dict[str, Any]] = (),
    tunes: Sequence[dict[str, Any]] = (),
) -> str:
    """The session's page; `trials`: the outcomes of trials whose last run it was (as
    `trial --report x.json` writes them); `tunes`: of batch-size searches whose last
    try it was."""
    e = html.escape
    parts = [
        *head(_("gpudoctor report, session {session}").format(session=report.session)),
        "<h1>"
        + e(_("gpudoctor report (session {session})").format(session=report.session))
        + "</h1>",
        "<ul>",
    ]
    # the summary in the Markdown report's words and numbers (render.summary_items)
    for item in summary_items(report):
        nested = item.startswith("  - ")
        text = item[4:] if nested else item[2:]
        inline = "".join(
            f"<code>{e(part)}</code>" if i % 2 else e(part)
            for i, part in enumerate(text.split("`"))
        )
        style = ' style="margin-left:1.5em"' if nested else ""
        parts.append(f"<li{style}>{inline}</li>")
    parts.append("</ul>")
    drawn = charts(series, report.duration_s)
    if drawn:
        parts.append("<h2>" + e(_("The run over time")) + "</h2>")
        parts += [f'<div class="chart">{svg}</div>' for svg in drawn]
    parts.append("<h2>" + e(_("Findings")) + "</h2>")
    if not report.findings:
        parts.append("<p>" + e(_("No findings: nothing measured points at a bottleneck.")) + "</p>")
    for f in report.findings:
        estimated = _(", estimated") if f.estimated else ""
        parts.append(f'<div class="finding {e(f.severity)}">')
        parts.append(f"<h3><code>{e(f.id)}</code> ({e(f.severity)}{estimated}): {e(f.title)}</h3>")
        parts.append(f"<p>{e(f.evidence)}</p>")
        if f.predicted_speedup:
            parts.append(f"<p>{e(predicted_words(f.predicted_speedup))}</p>")
        parts.append("<ul>")
        for r in f.remedies:
            parts.append(
                f"<li><code>{e(r.id)}</code> {e(r.title)} "
                + e(_("(guide: {guide}):").format(guide=r.guide))
                + f" <pre>{e(r.how)}</pre></li>"
            )
        parts.append("</ul></div>")
    if report.profile is not None:
        p = report.profile
        parts.append(f"<h2>{e(profile_title(p, heading=True))}</h2><table>")
        parts.append(
            "<tr>"
            + "".join(
                f"<th>{e(h)}</th>"
                for h in (_("operator"), _("calls"), _("self CPU us"), _("self device us"))
            )
            + "</tr>"
        )
        for op in p.operators:
            parts.append(
                f"<tr><td><code>{e(op.name)}</code></td><td>{op.calls}</td>"
                f"<td>{op.self_cpu_time_total_us}</td><td>{op.self_device_time_total_us}</td></tr>"
            )
        parts.append("</table>")
    for t in trials:
        parts += trial_part(t)
    for t in tunes:
        parts += tune_part(t)
    if report.hotspots:
        parts.append("<h2>" + e(_("Where the time outside the model goes")) + "</h2><table>")
        parts.append(
            "<tr>"
            + "".join(
                f"<th>{e(h)}</th>"
                for h in (_("share"), _("where"), _("state"), _("line"), _("code"))
            )
            + "</tr>"
        )
        for h in report.hotspots:
            parts.append(
                f"<tr><td>{h.share:.0%}</td><td>{e(where_words(h.where))}</td>"
                f"<td>{e(state_words(h.state))}</td>"
                f"<td><code>{e(h.file)}:{h.line}</code></td><td><code>{e(h.code)}</code></td></tr>"
            )
        parts.append("</table>")
    if report.notes:
        parts.append("<h2>" + e(_("Notes")) + "</h2><ul>")
        parts += [f"<li>{e(n)}</li>" for n in report.notes]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def trial_part(t: dict[str, Any]) -> list[str]:
    """A trial this run ended: what was applied, both sides' rates, the verdict."""
    e = html.escape
    low, high = t["ci95"]
    unit = unit_words(t["baseline"].get("unit", "steps"))
    out = [
        "<h2>" + e(_("Trial")) + "</h2>",
        f"<p><b>{e(verdict_words(t['verdict']))}</b>: "
        + e(
            _("speedup {speedup:.2f}x (95% interval {low:.2f}x to {high:.2f}x)").format(
                speedup=t["speedup"], low=low, high=high
            )
        )
        + "</p>",
        "<ul>",
    ]
    for c in t.get("applied", []):
        out.append(
            "<li>"
            + e(_("applied"))
            + f" <code>{e(c['remedy'])}</code>: {e(c.get('change', ''))}</li>"
        )
    for side in ("baseline", "treatment"):
        sessions = ", ".join(str(i) for i in t[side]["sessions"])
        out.append(
            "<li>"
            + e(
                _("{side}: {rate:.1f} {unit}, sessions {sessions}").format(
                    side=side_words(side), rate=t[side]["samples_per_s"], unit=unit,
                    sessions=sessions,
                )
            )
            + "</li>"
        )  # fmt: skip
    p = t.get("predicted") or {}
    if p.get("low") is not None:
        out.append(
            "<li>"
            + e(
                _("predicted: {low:.2f}x to {high:.2f}x ({basis})").format(
                    low=p["low"], high=p["high"], basis=p["basis"]
                )
            )
            + "</li>"
        )
    if t.get("extra_pairs"):
        out.append("<li>" + e(extra_pairs_words(int(t["extra_pairs"]))) + "</li>")
    judged = t.get("judged")
    if judged:
        low, high = judged["ci"]
        words = judged_words(int(judged["looks"]), low, high, judged.get("why", "looks"))
        out.append("<li>" + e(words) + "</li>")
    loss = t.get("loss")
    if loss and any(c.get("changes_numerics") for c in t.get("applied", [])):
        words = _("changes numerics: {loss}").format(loss=LossCheck.from_dict(loss).words())
        out.append("<li>" + e(words) + "</li>")
    out.append(
        "<li>" + e(_("treatment:")) + f" <code>{e(str(t.get('treatment_shown', '')))}</code></li>"
    )
    out.append("</ul>")
    return out


def tune_part(t: dict[str, Any]) -> list[str]:
    """A batch-size search this run ended: the sizes tried, what each did, the answer."""
    e = html.escape
    head_row = (
        _("batch size"), _("result"), _("samples/s"), _("peak memory"), _("session"),
    )  # fmt: skip
    out = [
        "<h2>" + e(_("Batch-size search (tune)")) + "</h2>",
        "<p>"
        + _("largest that fits: {largest}; fastest: {fastest}; stopped by: {why}").format(
            largest=f"<b>{t['largest_fitting']}</b>",
            fastest=f"<b>{t['fastest']}</b>",
            why=e(str(t["stopped_by"])),
        )
        + "</p>",
        "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head_row) + "</tr>",
    ]
    sessions = t.get("sessions") or {}
    for tried in t["tries"]:
        rate = tried["samples_per_s"]
        peak = tried["peak_bytes"]
        out.append(
            f"<tr><td>{tried['batch_size']}</td><td>{e(reason_words(str(tried['reason'])))}</td>"
            f"<td>{rate if rate is not None else ''}</td>"
            f"<td>{f'{peak / 2**20:.0f} MiB' if peak else ''}</td>"
            f"<td>{sessions.get(str(tried['batch_size']), '')}</td></tr>"
        )
    out.append("</table>")
    out.append(
        "<p>" + e(_("command:")) + f" <code>{e(' '.join(t.get('command') or []))}</code></p>"
    )
    return out


def compare_page(outcome: str, runs: list[tuple[int, RunSeries]]) -> str:
    """`compare A B --format html`: the comparison as the command line words it, and
    the two runs over time overlaid (each from its own start), one chart a measure."""
    e = html.escape
    (a_id, a), (b_id, b) = runs
    # the baseline first, as the command line has them (a session against itself too)
    labels = [
        _("baseline (session {session})").format(session=a_id),
        _("treatment (session {session})").format(session=b_id),
    ]
    parts = [
        *head(_("gpudoctor compare, sessions {a} and {b}").format(a=a_id, b=b_id)),
        "<h1>"
        + e(_("gpudoctor compare: session {a} against session {b}").format(a=a_id, b=b_id))
        + "</h1>",
        f"<pre>{e(outcome.strip())}</pre>",
        "<h2>" + e(_("The two runs over time")) + "</h2>",
        "<p>"
        + e(_("Each from its own start; the grey dashed lines: where each run ended."))
        + "</p>",
    ]
    end = max(a.until_s, b.until_s, 1.0)
    ends = [
        (_("{run} ended").format(run=label), s.ended_at_s)
        for label, (_id, s) in zip(labels, runs, strict=True)
        if s.ended_at_s is not None
    ]
    both_samples = bool(a.samples_per_s and b.samples_per_s)

    def overlay(title: str, y_title: str, line: Callable[[RunSeries], list[Point]]) -> None:
        data = {label: line(s) for label, (_id, s) in zip(labels, runs, strict=True)}
        if any(data.values()):
            parts.append(f'<div class="chart">{chart(title, y_title, data, ends, end)}</div>')

    overlay(_("Step time, median"), "ms", lambda s: s.step_p50_ms)
    if both_samples:
        # a distributed job's: all its ranks' together
        overlay(
            _("Samples a second"),
            _("samples/s"),
            lambda s: s.ranks_samples_per_s or s.samples_per_s,
        )
    else:
        overlay(_("Steps a second"), _("steps/s"), lambda s: s.steps_per_s)
    overlay(_("Waiting for data"), _("% of step time"), lambda s: s.data_wait_pct)
    overlay(_("GPU utilisation, mean over the GPUs"), "%", lambda s: mean_over(s.gpu_util_pct))
    overlay(_("GPU memory used, all GPUs"), "GiB", lambda s: sum_over(s.gpu_mem_gib))
    overlay("CPU", _("% of the machine"), lambda s: s.cpu_pct)
    overlay(_("The job's CPU"), _("cores"), lambda s: s.job_cpu_cores)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def mean_over(by_gpu: dict[int, list[Point]]) -> list[Point]:
    return [(x, round(sum(ys) / len(ys), 1)) for x, ys in by_time(by_gpu)]


def sum_over(by_gpu: dict[int, list[Point]]) -> list[Point]:
    return [(x, round(sum(ys), 2)) for x, ys in by_time(by_gpu)]
