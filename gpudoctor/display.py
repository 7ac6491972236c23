"""Snapshot values turned into what the panels show: strings, bars and colour bands.

The widgets only render what this returns (no arithmetic in the screens). No Textual
here: the bands are style names the stylesheet and the widgets map to colours.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from gpudoctor.diagnosis.ranks import RankMeasure
from gpudoctor.i18n import _
from gpudoctor.model import GpuSample, HostSample
from gpudoctor.units import cell_width, pad

NA = "N/A"

# Colour bands for utilisation and memory (nvitop's device panel uses the same three
# bands: light < 10%, moderate < 80%, heavy above).
BAND_LIGHT_PCT = 10.0
BAND_HEAVY_PCT = 80.0
# A GPU is hot above this (NVIDIA data-centre parts slow down from about 85 C).
HOT_C = 85

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}


def severity_words(severity: str) -> str:
    """A finding's severity as the screens show it, in the person's language (the
    reports' and JSON's id stays "high", "medium", ...)."""
    words = {"high": _("HIGH"), "medium": _("MEDIUM"), "low": _("LOW"), "info": _("INFO")}
    return words.get(severity, severity.upper())


SPLIT_PARTS = (  # (key, label, bar character) in the order a step goes
    ("data_wait", "Data wait", "D"),
    ("forward", "Forward", "F"),
    ("backward", "Backward", "B"),
    ("optimizer", "Optimizer", "O"),
    ("other", "other (.)", "."),
)
SPARK = " ▁▂▃▄▅▆▇█"


def band(pct: float | None) -> str:
    if pct is None:
        return "dim"
    if pct < BAND_LIGHT_PCT:
        return "green"
    if pct < BAND_HEAVY_PCT:
        return "yellow"
    return "red"


def pct(value: float | None, digits: int = 0) -> str:
    return NA if value is None else f"{value:.{digits}f}%"


def mib(value: int | None) -> str:
    return NA if value is None else f"{value / 2**20:,.0f}MiB"


def gib(value: float | None) -> str:
    return NA if value is None else f"{value / 2**30:.1f}G"


def gib_pair(g: GpuSample) -> str:
    """GPU memory used/total in GiB, short: "70/141G"."""
    if g.mem_used_bytes is None or not g.mem_total_bytes:
        return NA
    return f"{g.mem_used_bytes / 2**30:.0f}/{g.mem_total_bytes / 2**30:.0f}G"


def watts(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}W"


def rate(bytes_per_s: float | None) -> str:
    """MB/s with one decimal (nvidia-smi and iostat use decimal megabytes)."""
    if bytes_per_s is None:
        return NA
    return f"{bytes_per_s / 1e6:.1f}MB/s"


def bar(fraction: float | None, width: int) -> str:
    if fraction is None or width <= 0:
        return " " * max(0, width)
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def sparkline(values: tuple[float, ...], width: int, top: float | None = None) -> str:
    """One character per value (the newest at the right), scaled to `top` or the max."""
    values = values[-width:] if width > 0 else ()
    if not values:
        return ""
    high = top if top is not None else max(values)
    if high <= 0:
        return SPARK[1] * len(values)
    return "".join(SPARK[min(8, max(1, round(v / high * 8)))] for v in values)


def duration(seconds: float) -> str:
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:d}:{s:02d}"


def ms(value: float | None) -> str:
    if value is None:
        return NA
    if 0 < value < 1:
        return f"{value * 1000:.0f} µs"
    return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"


# -- GPU -------------------------------------------------------------------------------


def gpu_cells(g: GpuSample) -> dict[str, str]:
    """The nvidia-smi row of one GPU, field by field."""
    used, total = g.mem_used_bytes, g.mem_total_bytes
    mem_pct = used / total * 100 if used is not None and total else None
    power = (
        f"{g.power_w:.0f}W / {g.power_limit_w:.0f}W"
        if g.power_w is not None and g.power_limit_w is not None
        else (f"{g.power_w:.0f}W" if g.power_w is not None else NA)
    )
    return {
        "index": str(g.index),
        "name": g.name,
        "util": pct(g.util_gpu_pct),
        "util_band": band(g.util_gpu_pct),
        "mem": f"{mib(used)} / {mib(total)}",
        "mem_fraction": "" if mem_pct is None else f"{mem_pct / 100:.3f}",
        "mem_band": band(mem_pct),
        "power": power,
        "temp": NA if g.temp_c is None else f"{g.temp_c}C",
        "temp_band": "red" if g.temp_c is not None and g.temp_c >= HOT_C else "",
        "fan": pct(g.fan_pct),
        "sm_clock": NA if g.sm_clock_mhz is None else f"{g.sm_clock_mhz}MHz",
        "pcie": f"rx {rate(g.pcie_rx_bytes_per_s)} tx {rate(g.pcie_tx_bytes_per_s)}",
        "throttle": throttle_text(g.clock_event_reasons),
    }


# Clock-event reasons that do not slow anything down: not shown as throttling.
HARMLESS_REASONS = frozenset({"gpu-idle", "applications-clocks", "display-clocks"})


def throttle_text(reasons: tuple[str, ...] | None) -> str:
    active = [r for r in reasons or () if r not in HARMLESS_REASONS]
    return (_("throttled: ") + ", ".join(active)) if active else ""


# -- host ------------------------------------------------------------------------------


def host_lines(h: HostSample, width: int, core_rows: int = 4) -> list[tuple[str, str]]:
    """(text, style) lines of the host panel; per-core bars fold into one summary line
    when the panel has no room (width, or `core_rows` rows) for a readable bar each."""
    out: list[tuple[str, str]] = []
    cores = h.cpu_pct_per_core
    cell = 16  # "cpu12 ████ 100%" plus a space
    per_row = max(1, width // cell)
    if width >= cell and len(cores) <= per_row * max(1, core_rows):
        row: list[str] = []
        for i, c in enumerate(cores):
            row.append(pad(_("cpu{n}").format(n=i), 5) + f" {bar(c / 100, 4)} {c:3.0f}%")
            if len(row) == per_row:
                out.append((" ".join(row), band(max(cores[i - per_row + 1 : i + 1]))))
                row = []
        if row:
            out.append((" ".join(row), band(max(cores[-len(row) :]))))
    else:
        busy = max(cores, default=0.0)
        out.append(
            (
                _("CPU {cpu:3.0f}% over {cores} cores (busiest {busy:.0f}%)").format(
                    cpu=h.cpu_pct, cores=len(cores), busy=busy
                ),
                band(h.cpu_pct),
            )
        )
    load = _("load {load:.2f}   iowait {iowait}")
    out.append((load.format(load=h.load_1m, iowait=pct(h.iowait_pct, 1)), ""))
    others = h.others_cpu_cores
    if others is not None and others >= 0.25:  # as the host reader starts naming them
        niced = h.others_niced_cpu_cores or 0.0
        words = (
            _("others {cores:.1f} cores ({niced:.1f} niced)")
            if niced >= 0.25
            else _("others {cores:.1f} cores")
        )
        out.append((words.format(cores=others, niced=niced), ""))
    mem_pct = h.mem_used_bytes / h.mem_total_bytes * 100 if h.mem_total_bytes else None
    mem = _("mem  {bar} {used} / {total}").format(
        bar=bar((mem_pct or 0) / 100, 6), used=gib(h.mem_used_bytes), total=gib(h.mem_total_bytes)
    )
    out.append((mem, band(mem_pct)))
    swap = _("swap {used} / {total}")
    out.append((swap.format(used=gib(h.swap_used_bytes), total=gib(h.swap_total_bytes)), ""))
    disk = _("disk r {read} w {write}")
    read, write = rate(h.disk_read_bytes_per_s), rate(h.disk_write_bytes_per_s)
    out.append((disk.format(read=read, write=write), ""))
    net = _("net  rx {rx} tx {tx}")
    out.append((net.format(rx=rate(h.net_rx_bytes_per_s), tx=rate(h.net_tx_bytes_per_s)), ""))
    return out


# -- job -------------------------------------------------------------------------------


def split_bar(split: dict[str, float], width: int) -> tuple[str, str]:
    """A stacked bar of where a step goes, and its legend."""
    if not split or width <= 0:
        return "", _("no steps yet")
    cells: list[str] = []
    for key, _label, char in SPLIT_PARTS:
        cells.append(char * round(split.get(key, 0.0) * width))
    text = "".join(cells)[:width].ljust(width, ".")
    # the bar's letters are the labels' initials; the legend breaks between items where
    # two-digit values would not fit, so its height does not move with the numbers
    items = [f"{split_label(key)} {split.get(key, 0.0):.0%}" for key, _label, _char in SPLIT_PARTS]
    widest = [cell_width(f"{split_label(key)} 99%") for key, _label, _char in SPLIT_PARTS]
    lines, used = [items[0]], widest[0]
    for item, room in zip(items[1:], widest[1:], strict=True):
        if used + 2 + room <= width:
            lines[-1] += "  " + item
            used += 2 + room
        else:
            lines.append(item)
            used = room
    return text, "\n".join(lines)


def split_label(key: str) -> str:
    """A part of the step in the person's language (SPLIT_PARTS has the English)."""
    words = {
        "data_wait": _("Data wait"),
        "forward": _("Forward"),
        "backward": _("Backward"),
        "optimizer": _("Optimizer"),
        "other": _("other (.)"),
    }
    return words.get(key, key)


RANK_WIDTHS = (4, 8, 9, 8, 9, 4)  # the columns of a rank's line, in terminal columns


def rank_columns() -> list[int]:
    """The columns' widths: as wide as their names in the person's language."""
    return [max(w, cell_width(n)) for n, w in zip(rank_names(), RANK_WIDTHS, strict=True)]


def rank_names() -> tuple[str, ...]:
    return (_("rank"), _("step p50"), _("data wait"), _("own work"), _("comm wait"), "GPU")


def rank_header() -> str:
    """`rank  step p50  data wait  own work  comm wait  GPU`, the names over their columns."""
    *names, last = rank_names()
    cells = [pad(n, w, right=True) for n, w in zip(names, rank_columns(), strict=False)]
    return "  ".join([*cells, last])


def rank_rows(ranks: Sequence[RankMeasure], room: int) -> list[str]:
    """One line a rank (rank, step p50, data wait, own work, comm wait, the GPU util of
    its device), in rank order; more ranks than `room` lines: the slowest by own work,
    one line for those between, and the fastest."""
    widths = rank_columns()

    def row(r: RankMeasure) -> str:
        name = str(r.rank) if r.rank is not None else f"pid {r.pid}"
        device = r.gpu_util_pct  # its node's doctor read it (another node's: sent)
        cells = (
            name, ms(r.median_ms), pct(r.data_wait_fraction * 100), ms(r.own_ms),
            ms(r.comm_wait_ms), pct(device),
        )  # fmt: skip
        return "  ".join(pad(c, w, right=True) for c, w in zip(cells, widths, strict=True))

    if len(ranks) <= room:
        return [row(r) for r in ranks]
    by_own = sorted(ranks, key=lambda r: r.own_ms, reverse=True)
    slowest, middle, fastest = by_own[: room - 2], by_own[room - 2 : -1], by_own[-1]
    between = "  " + _("... {n} ranks with own work from {low} to {high}").format(
        n=len(middle), low=ms(middle[-1].own_ms), high=ms(middle[0].own_ms)
    )
    return [row(r) for r in slowest] + [between, row(fastest)]


def command_words(argv: Sequence[str], cwd: str | None = None, width: int | None = None) -> str:
    """A command the way a person names it: the program by its name (`python`, not
    `/home/u/.venv/bin/python`), paths under the working directory relative to it
    (`python sample_jobs/dataloader_bound.py --num-workers 0`); when that is wider than
    `width`, every path by its file's name (`python dataloader_bound.py --num-workers 0`)."""
    base = (cwd or os.getcwd()).rstrip("/") + "/"
    out = []
    for i, word in enumerate(argv):
        if i == 0 and "/" in word:
            word = os.path.basename(word)
        elif word.startswith(base):
            word = word[len(base) :]
        out.append(word)
    text = " ".join(out)
    if width is not None and len(text) > width:
        text = " ".join(os.path.basename(w) if "/" in w and not w.endswith("/") else w for w in out)
    return text
