"""The project's own guide (issue 16): one section per guide id, in English and Chinese,
shipped inside the package (`en.md`, `zh.md`) so an installed wheel has it. The remedy
catalogue cites these ids; `gpudoctor guide [ID] [--lang]` prints them and the TUI's
finding screen opens a remedy's section with `g`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LANGS = ("en", "zh")
_HEADING = re.compile(r"^## \[(?P<id>[a-z0-9-]+)\] (?P<title>.+)$")


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    body: str  # Markdown, without the heading

    def text(self) -> str:
        return f"[{self.id}] {self.title}\n\n{self.body}\n"


@cache
def sections(lang: str = "en") -> dict[str, Section]:
    """The guide's sections in their order, by id."""
    if lang not in LANGS:
        raise ValueError(f"no guide in {lang!r}: {', '.join(LANGS)}")
    text = (Path(__file__).parent / f"{lang}.md").read_text(encoding="utf-8")
    out: dict[str, Section] = {}
    current: tuple[str, str] | None = None
    lines: list[str] = []
    for line in [*text.splitlines(), "## [end] end"]:
        m = _HEADING.match(line)
        if m is None:
            lines.append(line)
            continue
        if current is not None:
            out[current[0]] = Section(current[0], current[1], "\n".join(lines).strip())
        current, lines = (m["id"], m["title"]), []
    return out


def section(section_id: str, lang: str = "en") -> Section | None:
    return sections(lang).get(section_id)
