"""The run over time, as plots: `h` opens them all; a tall screen keeps two or three of
them on the main screen (HistoryStrip).

Drawn with textual-plotext (Textualize's widget over Plotext): Plotext draws line plots
in braille, filled areas, vertical markers and text on the plot, which is what these
need, and the widget follows the app's theme. The data is the snapshot's RunSeries
(gpudoctor/series.py): the plots never read the timeline.
"""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static
from textual_plotext import PlotextPlot

from gpudoctor.i18n import _
from gpudoctor.series import (
    SPLIT_PARTS,
    Point,
    RunSeries,
    by_time,
    marker_words,
    rate_lines,
    split_labels,
)
from gpudoctor.units import cell_width

# the stretches a person can choose: (key, seconds, words); inf: the whole run
RANGES = (("1", 60.0), ("2", 600.0), ("3", math.inf))


def range_words(index: int) -> str:
    return (_("last minute"), _("last 10 minutes"), _("whole run"))[index]


ZERO_WIDTH = "\u200b"


def plot_text(words: str) -> str:
    """Words for Plotext, which gives every character one column: each wide (CJK)
    character followed by a zero-width space, so that the characters Plotext counts are
    the columns the terminal shows."""
    return "".join(c + ZERO_WIDTH if cell_width(c) == 2 else c for c in words)


STRIP_RANGE_S = 600.0  # the main screen's plots: the last ten minutes
MAX_LINES = 8  # lines in one plot (GPUs, cores) beyond which it draws their spread
PLOT_ROWS = 12  # a plot's height on the plots screen
# the step's parts, drawn stacked: each part's colour (data wait stands out)
SPLIT_COLORS = {
    "data_wait": "red",
    "forward": "blue",
    "backward": "cyan",
    "optimizer": "green",
    "other": "gray",
}


# lines that name no colour of their own (cores, GPUs) take these in turn: the legend
# row below the plot must know each line's colour (Plotext's own cycle is its own)
LINE_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "red", "white", "gray")
# a Plotext colour as Rich writes it, for the legend row
RICH_COLORS = {"gray": "bright_black"}


class RunPlot(PlotextPlot):
    """One measure over the run: `kind` names which (KINDS)."""

    KINDS = ("step", "rate", "wait", "split", "gpu_util", "gpu_mem", "gpu_power", "cpu")

    def __init__(self, kind: str, markers: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind
        self.markers = markers  # numbered where findings, profiles, the end happened
        self.drawn: RunSeries | None = None
        self.title = ""  # what it shows, once drawn (tests read it)
        self.trouble: str | None = None  # why Plotext could not draw it, if it could not
        self._built: tuple[tuple[int, Any, str], RenderResult] | None = None
        # (name, colour, filled) of each line, drawn in a row of its own below the plot:
        # Plotext's legend sits in the plot's top left, over the data there
        self.legend: list[tuple[str, str, bool]] = []

    def draw(self, s: RunSeries | None) -> None:
        if s is self.drawn:
            return
        self.drawn = s
        try:
            self._draw(s)
        except Exception as error:  # Plotext's trouble: one plot says so, the doctor goes on
            self.trouble = f"{type(error).__name__}: {error}"
        else:
            self.trouble = None
        self._built = None
        self.refresh()

    def render(self) -> RenderResult:
        if self.trouble is None:
            # the same drawing at the same size in the same theme: the text already built
            # (Textual renders a widget again for reasons of its own, a layout, a hover;
            # Plotext builds the whole plot each time it is asked)
            key = (id(self.drawn), self.size, self.app.theme)
            if self._built is not None and self._built[0] == key:
                return self._built[1]
            try:
                text = self._render_with_legend()
            except Exception as error:
                self.trouble = f"{type(error).__name__}: {error}"
            else:
                self._built = (key, text)
                return text
        return Text(
            _("{title}: cannot draw ({trouble})").format(
                title=self.title or title_of(self.kind), trouble=self.trouble
            ),
            "dim",
        )

    def _render_with_legend(self) -> RenderResult:
        """The plot, one row shorter, the legend's row below it (blank for a plot whose one
        line is its title: plots side by side keep their axes in line)."""
        width, height = self.size
        if height < 6:
            return super().render()
        self._plot.plotsize(width, height - 1)
        self._plot._set_size(width, height - 1)  # as PlotextPlot.render does
        self._plot.theme(self._get_plotext_theme_name(self.app.theme))
        plot = Text.from_ansi(self._plot.build())
        plot.rstrip()  # its last line's end: the legend's row follows
        return Text.assemble(plot, "\n", legend_row(self.legend, width))

    def _draw(self, s: RunSeries | None) -> None:
        plt = self.plt
        plt.clear_figure()
        self.legend = []
        if s is None or s.empty:
            self.title = title_of(self.kind)
            plt.title(plot_text(_("{title}: no readings yet").format(title=self.title)))
            return
        lines = [line for line in self._lines(s) if line[1]]  # those with readings
        self.title = (
            title_of(self.kind) if self.kind != "rate" or not s.samples_per_s else _("samples/s")
        )
        title = self.title if lines else _("{title}: none measured").format(title=self.title)
        plt.title(plot_text(title))
        until = max(s.until_s, s.since_s + 1.0)
        plt.xlim(s.since_s, until)
        ticks = time_ticks(s.since_s, until)
        plt.xticks([at for at, _ in ticks], [words for _, words in ticks])
        plt.xlabel(plot_text(_("since the start")))
        top = 0.0
        for n, (name, points, color, fill) in enumerate(lines):
            color = color or LINE_COLORS[n % len(LINE_COLORS)]
            xs, ys = [x for x, _ in points], [y for _, y in points]
            # a filled area in half blocks: braille's finer fill costs 5-6x (bench/)
            plt.plot(xs, ys, color=color, marker="sd" if fill else "braille", fillx=fill)
            top = max([top, *ys])
            self.legend.append((name, color, fill))
        if len(self.legend) == 1 and self.kind in ("rate", "wait"):
            self.legend = []  # its one line is what the title says
        if self.kind in PERCENT:
            plt.ylim(0, 100)
            plt.yticks([0, 25, 50, 75, 100])
        else:
            plt.ylim(0, top * 1.05 or 1.0)
        for n, _words, at in numbered_markers(s) if self.markers else []:
            plt.vline(at, "gray")
            plt.text(str(n), at, 0.0, color="gray")
        if s.cursor_s is not None:
            plt.vline(s.cursor_s, "yellow")

    def _lines(self, s: RunSeries) -> list[tuple[str, list[Point], str | None, bool]]:
        """(name, points, colour, filled) of each line, in the order they are drawn."""
        k = self.kind
        if k == "step":
            return [("p50", s.step_p50_ms, "cyan", False), ("p90", s.step_p90_ms, "magenta", False)]
        if k == "rate":
            colors = ("green", "cyan")
            return [(name, p, colors[n], False) for n, (name, p) in enumerate(rate_lines(s))]
        if k == "wait":
            return [(_("data wait %"), s.data_wait_pct, "red", True)]
        if k == "split":
            return stacked(s.split_pct)
        if k == "cpu":
            if len(s.cpu_core_pct) <= MAX_LINES:
                return [
                    (_("core {n}").format(n=c), p, None, False)
                    for c, p in sorted(s.cpu_core_pct.items())
                ]
            return spread(s.cpu_core_pct, "cores") + [(_("all"), s.cpu_pct, "white", False)]
        by_gpu = {"gpu_util": s.gpu_util_pct, "gpu_mem": s.gpu_mem_gib, "gpu_power": s.gpu_power_w}
        series = by_gpu[k]
        if len(series) <= MAX_LINES:
            return [(f"GPU {i}", p, None, False) for i, p in sorted(series.items())]
        return spread(series, "GPUs")


def legend_row(legend: list[tuple[str, str, bool]], width: int) -> Text:
    """Each line's mark in its colour and its name, cut with an ellipsis at `width`."""
    row = Text(no_wrap=True, overflow="ellipsis")
    row.append("  ")
    for name, color, fill in legend:
        row.append("██" if fill else "──", RICH_COLORS.get(color, color))
        row.append(f" {name}   ")
    row.rstrip()
    if row.cell_len > width:
        row.truncate(max(0, width - 1))
        row.append("…")
    return row


PERCENT = ("wait", "split", "gpu_util", "cpu")  # plots from 0 to 100%


def title_of(kind: str) -> str:
    """A plot's title (RunPlot.KINDS) in the person's language."""
    return {
        "step": _("step time, ms (p50, p90)"),
        "rate": _("steps/s"),
        "wait": _("waiting for data, % of step"),
        "split": _("where a step goes, % (stacked)"),
        "gpu_util": _("GPU utilisation, %"),
        "gpu_mem": _("GPU memory used, GiB"),
        "gpu_power": _("GPU power, W"),
        "cpu": _("CPU by core, %"),
    }[kind]


def stacked(parts: dict[str, list[Point]]) -> list[tuple[str, list[Point], str | None, bool]]:
    """The step's parts as stacked areas: each part's line is the sum of it and the
    parts before it, drawn from the top down so that each fills down to the next."""
    order = [k for k in SPLIT_PARTS if k in parts]
    totals: dict[float, float] = {}
    cumulative: list[tuple[str, list[Point]]] = []
    for k in order:
        line = []
        for x, y in parts[k]:
            totals[x] = totals.get(x, 0.0) + y
            line.append((x, round(totals[x], 1)))
        cumulative.append((k, line))
    names = split_labels()
    return [(names[k], line, SPLIT_COLORS[k], True) for k, line in reversed(cumulative)]


def spread(
    series: dict[int, list[Point]], what: str
) -> list[tuple[str, list[Point], str | None, bool]]:
    """Many lines (a 64-core host, a 16-GPU node) as their lowest and highest at each
    time: one line each would be unreadable. `what`: "cores" or "GPUs"."""
    at = by_time(series)
    n = len(series)
    highest, lowest = (
        (_("highest of {n} cores"), _("lowest of {n} cores"))
        if what == "cores"
        else (_("highest of {n} GPUs"), _("lowest of {n} GPUs"))
    )
    return [
        (highest.format(n=n), [(x, max(ys)) for x, ys in at], "red", False),
        (lowest.format(n=n), [(x, min(ys)) for x, ys in at], "blue", False),
    ]


# the steps between time ticks (seconds): the first giving at most TICKS of them
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
TICKS = 5


def time_ticks(since_s: float, until_s: float) -> list[tuple[float, str]]:
    """Round times between since and until, in words a person reads: 40 s, 2 min,
    1 h 30, 3 d 4 h."""
    span = until_s - since_s
    step = next(
        (t for t in TICK_STEPS if span / t <= TICKS), 86400 * math.ceil(span / 86400 / TICKS)
    )
    first = math.ceil(since_s / step) * step
    return [(float(at), clock(at, step)) for at in range(int(first), int(until_s) + 1, step)]


def clock(seconds: int, step: int) -> str:
    """A tick's time, as precise as the ticks' step needs."""
    s = seconds
    if s == 0:
        return "0"
    if step < 60:
        if s < 120:
            return f"{s} s"
        h, m, sec = s // 3600, s // 60 % 60, s % 60
        return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"
    if step < 3600:
        h, m = divmod(s // 60, 60)
        return f"{m} min" if h == 0 else f"{h} h {m:02d}"
    if step < 86400:
        d, h = divmod(s // 3600, 24)
        return f"{h} h" if d == 0 else f"{d} d {h} h"
    return f"{s // 86400} d"


def numbered_markers(s: RunSeries) -> list[tuple[int, str, float]]:
    """The markers as (number, words, seconds): those closer than a fiftieth of the
    stretch share a number (one place on a plot: findings first raised together)."""
    near = max(1.0, (s.until_s - s.since_s) / 50)
    groups: list[tuple[list[tuple[str, str]], float]] = []
    for kind, what, at in s.markers():
        if groups and at - groups[-1][1] < near:
            groups[-1][0].append((kind, what))
        else:
            groups.append(([(kind, what)], at))
    return [(n, joined(markers), at) for n, (markers, at) in enumerate(groups, start=1)]


def joined(markers: list[tuple[str, str]]) -> str:
    """Markers at one place in words: "a, b first seen; profile"."""
    seen = [what for kind, what in markers if kind == "seen"]
    rest = [marker_words(kind) for kind, _what in markers if kind != "seen"]
    return "; ".join(([marker_words("seen", ", ".join(seen))] if seen else []) + rest)


def markers_legend(s: RunSeries | None) -> Text:
    """The numbered markers' legend (the plots carry the numbers)."""
    out = Text()
    if s is None:
        return out
    for n, words, at in numbered_markers(s):
        out.append(f"{n}", "bold")
        out.append(" " + _("{words} at {at:.0f} s").format(words=words, at=at) + "   ")
    if s.cursor_s is not None:
        out.append(_("yellow line"), "yellow")
        out.append(_(": the replay's position ({at:.0f} s)").format(at=s.cursor_s))
    return out


def plot_kinds(s: RunSeries | None) -> list[str]:
    """The plots worth drawing for a run: no GPU plots on a CPU-only machine."""
    kinds = ["step", "rate", "wait", "split"]
    if s is None or s.gpu_util_pct:
        kinds += ["gpu_util", "gpu_mem"]
        if s is None or s.gpu_power_w:
            kinds.append("gpu_power")
    return kinds + ["cpu"]


class PlotsScreen(Screen[None]):
    """Every plot, for the stretch chosen (1, 2, 3); a replay's seek keys move the
    yellow line; Esc goes back."""

    BINDINGS = [
        Binding("escape,q,h", "dismiss", _("Back")),
        Binding("1", "range(0)", _("Last min")),
        Binding("2", "range(1)", _("Last 10 min")),
        Binding("3", "range(2)", _("Whole run")),
        Binding("down,j", "scroll_plots(3)", show=False),
        Binding("up,k", "scroll_plots(-3)", show=False),
        # a page: space (a replay's page keys move its position a minute)
        Binding("space", "scroll_plots(0.8)", show=False),
    ]

    def __init__(self, series: RunSeries | None, range_index: int = 2) -> None:
        super().__init__()
        self.series = series
        self.range_index = range_index
        self.kinds = plot_kinds(series)
        self._drawn: tuple[RunSeries | None, int] | None = None  # what draw() last showed

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="plots-range")
        with VerticalScroll(id="plots-scroll"), Grid(id="plots-grid"):
            for kind in self.kinds:
                yield RunPlot(kind, classes="run-plot")
        yield Static(id="plots-markers")
        yield Footer()

    def on_mount(self) -> None:
        self._columns()
        self.draw(self.series)

    def on_resize(self) -> None:
        self._columns()

    def _columns(self) -> None:
        """Two plots a row from 120 columns, three from 200; rows fill the screen's
        height when they fit in it."""
        width, height = self.app.size
        columns = 3 if width >= 200 else 2 if width >= 120 else 1
        grid = self.query_one("#plots-grid", Grid)
        grid.styles.grid_size_columns = columns
        rows = -(-len(self.kinds) // columns)
        room = max(PLOT_ROWS, (height - 5) // rows) if rows else PLOT_ROWS
        grid.styles.grid_rows = str(min(room, 2 * PLOT_ROWS))
        grid.styles.height = "auto"

    def draw(self, series: RunSeries | None) -> None:
        drawn = self._drawn
        if drawn is not None and drawn[0] is series and drawn[1] == self.range_index:
            return  # each snapshot brings the same series until it is drawn again
        self.series = series
        self._drawn = (series, self.range_index)
        words = range_words(self.range_index)
        if series is not None:
            words += _(" ({since:.0f} s to {until:.0f} s)").format(
                since=series.since_s, until=series.until_s
            )
        self.query_one("#plots-range", Static).update(
            Text.assemble(("  " + words, "bold"), _("   1 last minute  2 last 10 min  3 all"))
        )
        for plot in self.query(RunPlot):
            plot.draw(series)
        self.query_one("#plots-markers", Static).update(markers_legend(series))

    def action_scroll_plots(self, by: float) -> None:
        """Down or up a few rows, or (a fraction) most of a screen."""
        scroll = self.query_one("#plots-scroll", VerticalScroll)
        rows = by if abs(by) >= 1 else by * scroll.size.height
        scroll.scroll_relative(y=round(rows), animate=False)

    def action_range(self, index: int) -> None:
        self.range_index = index
        setter = getattr(self.app, "set_plot_range", None)  # the doctor's app
        if setter is not None:
            setter(index)


class HistoryStrip(Horizontal):
    """The main screen's plots on a tall terminal: the step time, and the GPU's
    utilisation (the CPU's on a CPU-only machine), and on a wide one the data wait."""

    def compose(self) -> ComposeResult:
        # no markers: their names are on the plots screen, not here
        yield RunPlot("step", markers=False, classes="strip-plot")
        yield RunPlot("wait", markers=False, classes="strip-plot wide-only")
        yield RunPlot("gpu_util", markers=False, classes="strip-plot")

    def draw(self, s: RunSeries | None) -> None:
        plots = list(self.query(RunPlot))
        plots[-1].kind = "gpu_util" if s is None or s.gpu_util_pct else "cpu"
        for plot in plots:
            plot.draw(s)
