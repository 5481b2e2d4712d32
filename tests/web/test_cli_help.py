"""Every option and command of ``picoflow-web`` says what it is for in ``--help``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from picoflow_web import cli


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def test_every_option_and_command_has_help() -> None:
    top = cli._parser()
    seen = []
    for parser in parsers(top):
        for action in parser._actions:
            seen.append(action.dest)
            assert action.help and action.help != argparse.SUPPRESS, (parser.prog, action)
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert choice.help, (parser.prog, choice.dest)
    assert {"host", "port", "data_dir", "workers", "command"} <= set(seen)
    serve_help = next(p for p in parsers(top) if p.prog.endswith(" serve")).format_help()
    assert "127.0.0.1" in serve_help and "8000" in serve_help
