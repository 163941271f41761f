"""Every command's --help names its options' defaults (and says nothing for those without)."""

from __future__ import annotations

import argparse

from memwarden.api.cli.main import build_parser


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(parsers(child))
    return found


def test_every_option_with_a_default_shows_it_in_help() -> None:
    checked = 0
    for parser in parsers(build_parser()):
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
                assert f"(default: {action.default})" in text, (parser.prog, action.dest)
                checked += 1
    assert checked >= 20


def test_serve_help_names_host_and_port_defaults_and_no_none() -> None:
    serve = next(p for p in parsers(build_parser()) if p.prog.endswith(" serve"))
    text = " ".join(serve.format_help().split())
    assert "(default: 127.0.0.1)" in text
    assert "(default: 8000)" in text
    assert "default: None" not in text
