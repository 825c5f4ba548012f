"""The one command-line parser of `midtrain`: argparse, plus ``key=value`` overrides anywhere on the line.

Every subcommand that changes a config with dotted overrides (``optim.lr=1e-3``, ``redact.enabled=false``)
declares them the plain argparse way, as a positional named ``overrides``::

    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("recipe")
        p.add_argument("--output", required=True)
        p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

and reads ``args.overrides`` (a list of ``"key=value"`` strings, in command-line order) in ``run(args)``.
Nothing else is needed: `midtrain` builds every (sub)parser with :class:`OverrideParser`, which takes each
``key=value`` word out of the command line before argparse sees it, so overrides may come before, between
or after the options — also after an option that takes several values (``--input a b x.y=1``), which plain
argparse would hand to that option. A word is an override when it looks like ``name.name...=value`` (a
Python-identifier-like dotted key, then ``=``); the value of an option that takes exactly one value
(``--site-set train.nodes=2``, ``--note base=TEXT``) is never taken, and everything after ``--`` is left
as it is. A subcommand without an ``overrides`` positional (e.g. ``report NAME=DIR``) is parsed by plain
argparse rules. Any other stray word left in ``overrides`` is an error naming it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any

OVERRIDES_DEST = "overrides"
_OVERRIDE = re.compile(r"^[A-Za-z_][\w-]*(\.[A-Za-z_0-9][\w-]*)*=")


def is_override(word: str) -> bool:
    """``a.b.c=value`` (a dotted field name, then ``=``)."""
    return bool(_OVERRIDE.match(word))


class OverrideParser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose subcommands take ``key=value`` overrides anywhere (see the module doc).

    Subparsers made with ``add_subparsers()`` are of this class too, so nested commands (``submit train``)
    get the same behaviour.
    """

    def _overrides_action(self) -> argparse.Action | None:
        for action in self._actions:
            if action.dest == OVERRIDES_DEST and not action.option_strings:
                return action
        return None

    def _values_taken(self, word: str) -> int:
        """How many following words the option ``word`` consumes for sure (0 for flags and ``--opt=v``)."""
        if "=" in word:
            return 0
        action = self._option_string_actions.get(word)
        if action is None and word.startswith("--") and self.allow_abbrev:
            matches = {a for opt, a in self._option_string_actions.items() if opt.startswith(word)}
            action = matches.pop() if len(matches) == 1 else None
        if action is None:
            return 0  # unknown (argparse reports it) or -iVALUE with its value attached
        if action.nargs is None or action.nargs == "?":
            return 1
        if isinstance(action.nargs, int):
            return action.nargs
        return 0  # "*", "+", REMAINDER: overrides among its values are taken out below

    def split_overrides(self, args: Sequence[str]) -> tuple[list[str], list[str]]:
        """(the other words, the overrides) of a command line, both in order."""
        rest: list[str] = []
        found: list[str] = []
        i = 0
        while i < len(args):
            word = args[i]
            if word == "--":
                rest += args[i:]
                break
            if word.startswith("-") and len(word) > 1 and not word[1:2].isdigit():
                n = self._values_taken(word)
                rest += args[i : i + 1 + n]
                i += 1 + n
                continue
            (found if is_override(word) else rest).append(word)
            i += 1
        return rest, found

    def parse_known_args(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        action = self._overrides_action()
        if action is None:
            return super().parse_known_args(args, namespace)
        words = list(sys.argv[1:] if args is None else args)
        rest, found = self.split_overrides(words)
        ns, extra = super().parse_known_args(rest, namespace)
        stray = [w for w in getattr(ns, OVERRIDES_DEST, None) or [] if not is_override(w)]
        if stray and "--" not in words:
            self.error(f"unrecognized argument {stray[0]!r}: overrides are key=value (e.g. optim.lr=1e-3)")
        setattr(ns, OVERRIDES_DEST, found + list(getattr(ns, OVERRIDES_DEST, None) or []))
        return ns, extra

    def add_subparsers(self, **kwargs: Any) -> argparse._SubParsersAction:
        kwargs.setdefault("parser_class", OverrideParser)
        return super().add_subparsers(**kwargs)
