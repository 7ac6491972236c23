"""`gpudoctor remedies [--lang en|zh]`: the remedy catalogue; `gpudoctor guide [ID]`: the
guide it cites."""

from __future__ import annotations

import argparse

from gpudoctor import guide as the_guide
from gpudoctor.cli.common import UsageError, lang_of
from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.i18n import _


def remedies(args: argparse.Namespace) -> int:
    lang = lang_of(args)
    for remedy in CATALOGUE.values():
        cited = the_guide.section(remedy.guide_section, lang)
        section = cited.title if cited is not None else remedy.guide_section
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


def guide(args: argparse.Namespace) -> int:
    lang = lang_of(args)
    sections = the_guide.sections(lang)
    if args.section is None:
        for s in sections.values():
            print(f"{s.id:<12} {s.title}")
        hint = (
            "gpudoctor guide ID [--lang en|zh] 打印一节"
            if lang == "zh"
            else ("gpudoctor guide ID [--lang en|zh] prints a section")
        )
        print(f"\n{hint}")
        return 0
    section = sections.get(args.section)
    if section is None:
        raise UsageError(
            "gpudoctor guide: "
            + _("no section {section!r} (one of: {known})").format(
                section=args.section, known=", ".join(sections)
            )
        )
    print(section.text(), end="")
    return 0
