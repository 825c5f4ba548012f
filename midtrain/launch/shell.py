"""Getting values into generated sbatch scripts safely, and checking the scripts.

Two places take values: ``#SBATCH`` directives (parsed by sbatch, not by bash, with its own quote rules)
and the script body (bash). Directive values must match a conservative character set; body values go
through :func:`shlex.quote`. Newlines and other control characters are rejected everywhere: a newline in
a job name or an override would start a new command. Every rendered script is checked with ``bash -n``.
"""

from __future__ import annotations

import re
import shlex
import subprocess

from midtrain.config import ConfigError


class LaunchError(ConfigError):
    """A value that cannot go into a job script, or a failed submission; the message names the field."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# sbatch splits directive lines on whitespace and interprets quotes itself: allow only plain tokens.
_DIRECTIVE = re.compile(r"^[A-Za-z0-9_.:/@%,=+\-\[\]]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def clean(value: object, what: str) -> str:
    """``str(value)``, rejecting newlines and control characters with a message naming ``what``."""
    text = str(value)
    bad = _CONTROL.search(text)
    if bad:
        raise LaunchError(
            f"{what}: {text!r} contains a control character ({bad.group()!r}); "
            "newlines and control characters cannot go into a job script"
        )
    return text


def q(value: object, what: str) -> str:
    """Shell-quoted ``value`` for the script body."""
    return shlex.quote(clean(value, what))


def qargv(argv: list[str], what: str) -> str:
    """A whole argument vector, each word quoted."""
    return " ".join(q(a, f"{what}[{i}]") for i, a in enumerate(argv))


def directive(value: object, what: str) -> str:
    """A value for an ``#SBATCH --opt=VALUE`` line: plain characters only (no spaces, quotes or $)."""
    text = clean(value, what)
    if not text or not _DIRECTIVE.match(text):
        raise LaunchError(
            f"{what}: {text!r} cannot go into an #SBATCH line; use letters, digits and "
            "_ . : / @ % , = + - [ ] only (no spaces, quotes or $)"
        )
    return text


def env_name(name: str, what: str) -> str:
    if not _ENV_NAME.match(clean(name, what)):
        raise LaunchError(f"{what}: {name!r} is not a valid environment variable name")
    return name


def exports(env: dict[str, str], what: str) -> str:
    """``export NAME=value`` lines, values quoted."""
    return "\n".join(f"export {env_name(k, what)}={q(v, f'{what}.{k}')}" for k, v in env.items())


def check_bash(text: str, what: str = "script") -> None:
    """Parse ``text`` with ``bash -n``; raise LaunchError with bash's message if it does not parse."""
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LaunchError(f"{what}: generated script does not parse (bash -n): {proc.stderr.strip()}")
