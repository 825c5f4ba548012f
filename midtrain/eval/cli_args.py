"""`key=value` overrides accepted anywhere on a command line (argparse stops at the first option)."""

from __future__ import annotations

import argparse


def accept_trailing_overrides(p: argparse.ArgumentParser, dest: str = "overrides") -> None:
    """Let ``key=value`` words after the options join ``dest`` (``cmd --from X a=1`` as well as ``cmd a=1 --from X``).

    The main parser hands a subcommand's words to ``parse_known_args``; leftovers of the form key=value are
    moved to ``dest`` here instead of being rejected as unrecognized.
    """
    parse = p.parse_known_args

    def parse_known_args(args=None, namespace=None):  # noqa: ANN001, ANN202 - argparse's signature
        ns, extra = parse(args, namespace)
        kv = [a for a in extra if "=" in a and not a.startswith("-")]
        setattr(ns, dest, list(getattr(ns, dest, None) or []) + kv)
        return ns, [a for a in extra if a not in kv]

    p.parse_known_args = parse_known_args  # type: ignore[method-assign]
