"""The script's command-line options, as argparse parsed them: a rerun can apply a
remedy through the script's own flag (`--num-workers 4`). Installed at start-up, since
a script may parse its options before it imports torch; it only records."""

from __future__ import annotations

from typing import Any

from .agent import Agent
from .invisible import ClassPatch, drop_own_frame, unseen


class ArgparseHooks:
    name = "argparse"

    def __init__(self, agent: Agent) -> None:
        import argparse

        self.agent = agent
        self.options: dict[str, dict[str, Any]] = {}
        self.enabled = True
        owner = argparse.ArgumentParser
        patch: ClassPatch

        def parse_known_args(parser: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                result = patch.original(parser, type(parser))(*args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)
                raise
            self.record(parser, result)
            return result

        patch = ClassPatch(
            owner, "parse_known_args", unseen(parse_known_args), self.wanted, lambda: False
        )
        patch.thread = None  # any thread: a parser may run anywhere
        patch.install()
        self.patch = patch

    def wanted(self, parser: Any) -> bool:
        return self.enabled

    def record(self, parser: Any, result: Any) -> None:
        """Every parser's options (subcommands' too), first definition of a flag kept."""
        try:
            namespace = result[0]
            for action in parser._actions:
                if not action.option_strings or action.dest == "help":
                    continue
                key = action.option_strings[-1]
                if key in self.options:
                    continue
                value = getattr(namespace, action.dest, None)
                if not isinstance(value, (int, float, str, bool, type(None))):
                    value = repr(value)
                self.options[key] = {
                    "dest": action.dest,
                    "strings": list(action.option_strings),
                    "value": value,
                    "takes_value": action.nargs != 0,
                }
            if self.options:
                self.agent.fact("script_options", dict(self.options))
        except Exception as exc:
            self.agent.error("argparse", exc, self)

    def disable(self) -> None:
        self.enabled = False

    def facts(self) -> dict[str, Any]:
        return {}
