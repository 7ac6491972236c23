"""Every screen of the TUI over a recorded session, as a person opens them with its
keys, in the language asked: `python tests/tui_screens.py LANG SESSION.json.gz WIDTH
HEIGHT` prints {screen: its text} as JSON. A fresh interpreter each time: the TUI's key
names are translated when its modules are imported, after the language is chosen."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path


def main() -> None:
    lang, session, width, height = sys.argv[1], Path(sys.argv[2]), *map(int, sys.argv[3:5])
    from gpudoctor import i18n

    i18n.use(lang)
    from conftest import load_session_file
    from rich.console import Console

    from gpudoctor.tui.app import make_replay_app
    from gpudoctor.tui.widgets import FindingsPanel

    app = make_replay_app(load_session_file(session), 7, lang=lang)
    shots: dict[str, str] = {}

    def shot(name: str) -> None:
        console = Console(
            width=width, height=height, file=io.StringIO(), record=True, force_terminal=True
        )
        console.print(
            app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
        )
        shots[name] = console.export_text()

    async def drive() -> None:
        async with app.run_test(size=(width, height)) as pilot:
            await pilot.pause(0.5)
            shot("dashboard")
            for key, name in (("question_mark", "help"), ("h", "plots"), ("r", "ranks")):
                await pilot.press(key)
                await pilot.pause(0.3)
                shot(name)
                await pilot.press("escape")
                await pilot.pause()
            await pilot.press("o")
            await pilot.pause(0.3)
            shot("output")
            await pilot.press("escape")
            findings = app.query_one(FindingsPanel)
            findings.focus()
            findings.highlighted = 0
            await pilot.press("enter")
            await pilot.pause(0.3)
            shot("finding")
            await pilot.press("g")
            await pilot.pause(0.3)
            shot("guide")

    asyncio.run(drive())
    print(json.dumps(shots))


if __name__ == "__main__":
    main()
