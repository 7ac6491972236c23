"""The words the doctor writes for a person, in the person's language (issue 18).

Python's convention: messages are marked in the code with `_()` (and `ngettext()` where
English has a plural), extracted, merged and compiled with Babel (scripts/i18n.py), and read at
run time by the standard library's `gettext` from the catalogue shipped in the package,
`gpudoctor/locale/<lang>/LC_MESSAGES/gpudoctor.mo`. A message with numbers in it is
marked with named fields and filled in after translation, the same way in every
language: `_("{share:.0%} of each step waits").format(share=...)`.

One language a process: the command line chooses it (`--lang`, else the locale) before
anything is written. JSON keys, finding and remedy ids stay English: they are the
contract. A message the catalogue lacks is written in English."""

from __future__ import annotations

import gettext
from pathlib import Path

LANGUAGES = ("en", "zh")
DOMAIN = "gpudoctor"
LOCALE_DIR = Path(__file__).with_name("locale")

_current: gettext.NullTranslations = gettext.NullTranslations()
_lang = "en"


def use(lang: str) -> None:
    """Write in `lang` from now on (one of LANGUAGES; English for any other)."""
    global _current, _lang
    _lang = lang if lang in LANGUAGES else "en"
    _current = catalogue(_lang)


def language() -> str:
    return _lang


def catalogue(lang: str) -> gettext.NullTranslations:
    """The compiled catalogue of `lang`; English (the messages as written) without one."""
    return gettext.translation(DOMAIN, LOCALE_DIR, languages=[lang], fallback=True)


def _(message: str) -> str:
    return _current.gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return _current.ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    """`message` where its English is the same as another's and its translation is not
    (`pgettext("clauses", " and ")` joins clauses, `_(" and ")` joins nouns)."""
    return _current.pgettext(context, message)


def N_(message: str) -> str:
    """A message marked for the catalogue and translated later, where it is used
    (gettext's convention for deferred translations): argparse's own words."""
    return message
