"""`gpudoctor remedies [--lang en|zh]`: the remedy catalogue."""

from __future__ import annotations

import argparse

from gpudoctor.cli.common import lang_of
from gpudoctor.diagnosis.remedies import CATALOGUE, section_title


def remedies(args: argparse.Namespace) -> int:
    lang = lang_of(args)
    for remedy in CATALOGUE.values():
        section = section_title(remedy.guide_section, lang)
        extra = (
            (" (超出指南)" if lang == "zh" else " (beyond the guide)")
            if remedy.beyond_guide
            else ""
        )
        print(f"{remedy.id}: {remedy.title[lang]}{extra}")
        print(f"  {'指南' if lang == 'zh' else 'guide'}: [{remedy.guide_section}] {section}")
        print(f"  {remedy.explanation[lang]}")
        for line in remedy.snippet.splitlines():
            print(f"    {line}")
        print()
    return 0
