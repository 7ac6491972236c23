"""The message catalogues (issue 18), with Babel: extract the messages marked `_()` and
`ngettext()` in gpudoctor/, merge them into each language's .po (translations are
edited there, by hand), and compile the .mo the package ships.

    python scripts/i18n.py update   # after changing messages: merge, then compile
    python scripts/i18n.py check    # exit 1, saying what, when a message has no
                                    # translation or a .mo is not its .po compiled
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpudoctor"
LOCALES = PACKAGE / "locale"
DOMAIN = "gpudoctor"
TRANSLATED = ("zh",)  # English is the messages as written
KEYWORDS = {"_": None, "ngettext": (1, 2), "N_": None, "pgettext": ((1, "c"), 2)}


def extracted() -> Catalog:
    catalog = Catalog(project=DOMAIN, charset="utf-8")
    for _file, _line, message, _comments, context in extract_from_dir(
        str(PACKAGE), method_map=[("**.py", "python")], keywords=KEYWORDS
    ):
        catalog.add(message, context=context)
    return catalog


def po_path(lang: str) -> Path:
    return LOCALES / lang / "LC_MESSAGES" / f"{DOMAIN}.po"


def read(lang: str) -> Catalog:
    path = po_path(lang)
    if not path.exists():
        return Catalog(locale=lang, project=DOMAIN, charset="utf-8")
    with path.open("rb") as f:
        return read_po(f, locale=lang, domain=DOMAIN)


def compiled(catalog: Catalog) -> bytes:
    out = io.BytesIO()
    write_mo(out, catalog)
    return out.getvalue()


def update() -> None:
    template = extracted()
    for lang in TRANSLATED:
        catalog = read(lang)
        catalog.update(template, no_fuzzy_matching=True)
        catalog.obsolete.clear()
        path = po_path(lang)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            write_po(f, catalog, width=100, omit_header=False, sort_output=True, no_location=True)
        path.with_suffix(".mo").write_bytes(compiled(read(lang)))
        missing = untranslated(read(lang))
        print(f"{path.relative_to(ROOT)}: {len(catalog)} messages, {len(missing)} untranslated")


def untranslated(catalog: Catalog) -> list[str]:
    out = []
    for m in catalog:
        if not m.id:
            continue
        strings = m.string if isinstance(m.string, tuple) else (m.string,)
        if m.fuzzy or not all(strings):
            out.append(m.id if isinstance(m.id, str) else m.id[0])
    return out


def check() -> list[str]:
    problems = []
    wanted = {m.id for m in extracted() if m.id}
    for lang in TRANSLATED:
        catalog = read(lang)
        have = {m.id for m in catalog if m.id}
        name = po_path(lang).relative_to(ROOT)
        problems += [
            f"{name}: not in the catalogue: {i!r}" for i in sorted(map(str, wanted - have))
        ]
        problems += [f"{name}: no translation: {i!r}" for i in untranslated(catalog)]
        mo = po_path(lang).with_suffix(".mo")
        if not mo.exists() or mo.read_bytes() != compiled(catalog):
            problems.append(
                f"{mo.relative_to(ROOT)}: not the .po compiled (run scripts/i18n.py update)"
            )
    return problems


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "update":
        update()
        return 0
    if what == "check":
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
