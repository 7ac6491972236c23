"""Secrets kept out of what the doctor writes for people: reports, history, the screens.

Command lines and training output routinely hold secrets (`--wandb-key ...`, a token in
an environment assignment, a dataset URL with a signed query string, a printed config
with an API key). The store keeps the raw command under owner-only permissions (a rerun
needs it); everything shown or shared goes through here first.

What is taken out, each value replaced by MASK:
- the value of an option or a `NAME=value` assignment whose name looks like a secret
  (it holds key, token, secret, password, passwd, credential or auth), as the next word
  (`--hf-token X`) or after `=` or `:` (`--hf-token=X`, `API_KEY: X` in printed text);
- a URL's password (`https://user:MASK@host`) and the values of signing parameters in
  its query (`X-Amz-Signature`, `sig`, `token`, ...);
- well-known token shapes wherever they stand: Hugging Face `hf_...`, GitHub `ghp_...`
  and its kin, OpenAI-style `sk-...`, Slack `xox?-...`, AWS access key ids, JWTs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

MASK = "***"

# A name that looks like a secret's, judged by its words (split at `-`, `_`, `.` and
# camelCase): it ends in one of _LAST_WORDS (`--token`, `--hf-token`, `WANDB_API_KEY`,
# `--auth`), or holds one of _ANY_WORDS anywhere (`--secret-file`, `DB_PASSWORD_X`),
# or its last word ends in one of _GLUED (`--apikey`, `HFTOKEN`). A name that only
# mentions them is not: `--include-tokens-per-second`, `--max-tokens`, a tokenizer,
# `num_key_value_heads`, `--key-name`, an author, Python's KeyError (issue 39).
_SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "credential", "auth")
_LAST_WORDS = frozenset(
    ("key", "token", "secret", "secrets", "password", "passwd", "pwd", "auth", "credential",
     "credentials", "pat", "apikey", "passphrase")
)  # fmt: skip
_ANY_WORDS = frozenset(("secret", "secrets", "password", "passwd", "credential", "credentials"))
_GLUED = ("apikey", "token", "secret", "password", "passwd")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI and the like
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"  # JWTs
)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)([^@\s/]+)(@)", re.I)
# Query parameters that sign a URL or carry a credential (S3, GCS, Azure SAS, generic).
_SIGNING = re.compile(
    r"([?&](?:x-amz-[a-z-]*|x-goog-[a-z-]*|signature|sig|se|sv|skoid|sktid|token|"
    r"access_token|api_key|apikey|key|auth|credential|policy|key-pair-id)=)([^&#\s]+)",
    re.I,
)
# In free text: NAME=value, NAME: value, "NAME": "value", --NAME value (a printed
# config, a logged command line).
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]*"
# Only a name with a secret's word in it starts a match: a harmless name before it
# ("bug --api-key=X") would otherwise take the secret as its own value and hide it.
_SECRET_NAME = (
    r"(?<![A-Za-z0-9_.])(?:[A-Za-z_][A-Za-z0-9_.-]*?)?"
    rf"(?i:{'|'.join(_SECRET_WORDS)})[A-Za-z0-9_.-]*"
)
_ASSIGNED = re.compile(
    rf"""(?P<name>{_SECRET_NAME})(?P<sep>["']?\s*[:=]\s*["']?|\s+)(?P<value>[^\s"',;]+)"""
)


def looks_secret(name: str) -> bool:
    words = [w.lower() for w in _WORD.findall(name.lstrip("-"))]
    if not words:
        return False
    last = words[-1]
    if last in _LAST_WORDS or any(w in _ANY_WORDS for w in words):
        return True
    return bool(last.endswith(_GLUED))


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line as it may be shown: secret option values and assignments masked."""
    out: list[str] = []
    mask_next = False
    for word in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        name, eq, value = word.partition("=")
        if eq and value and (word.startswith("-") or re.fullmatch(_NAME, name)):
            if looks_secret(name):
                out.append(f"{name}={MASK}")
                continue
        elif word.startswith("-") and looks_secret(word):
            mask_next = True  # `--hf-token VALUE`: the next word is the value
        out.append(redact_text(word))
    return out


def redact_text(text: str) -> str:
    """A line of output or any other text as it may be shown."""
    if not text:
        return text
    text = _TOKEN_SHAPES.sub(MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    text = _SIGNING.sub(lambda m: m.group(1) + MASK, text)
    return _mask_all_assigned(text)


def _mask_all_assigned(text: str) -> str:
    """Every secret's `NAME=value` masked. A name left as it is (not a secret's, or
    prose) gives up only its name, not its "value": that may be the next option itself
    (`keyed.py --api-key X`, `KeyError: 'x' --token=X`)."""
    out: list[str] = []
    done = start = 0
    while (m := _ASSIGNED.search(text, start)) is not None:
        masked = _mask_assigned(m)
        if masked == m.group(0):
            start = m.end("name")
            continue
        out += [text[done : m.start()], masked]
        done = start = m.end()
    return "".join(out) + text[done:]


def _mask_assigned(m: re.Match[str]) -> str:
    name, sep, value = m.group("name"), m.group("sep"), m.group("value")
    if value == MASK or not looks_secret(name):
        return m.group(0)
    if not sep.strip() and not m.string[: m.start()].endswith("-"):
        return m.group(0)  # "key value" in prose: only `--key value` is an option
    return f"{name}{sep}{MASK}"


def redact_facts(value: Any, secret: bool = False) -> Any:
    """The probe's facts as a report shows them: a value under a secret-looking name
    (an option the job parsed, `{"--api-key": {"dest": "api_key", "value": ...}}`, or a
    config key) masked, token shapes masked in every string."""
    if isinstance(value, dict):
        names = ("dest", "name", "option")  # what names the secret, shown
        named = secret or any(looks_secret(str(value.get(k, ""))) for k in names)
        return {
            k: redact_facts(v, (named and k not in names) or looks_secret(str(k)))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_facts(v, secret) for v in value]
    if isinstance(value, str):
        return MASK if secret and value else redact_text(value)
    return value
