"""People out of the text fields of commits and pull requests: one scrubber for every field, one leak scan.

:func:`scrub_text` replaces the people a text names by their pseudonyms (:class:`Pseudonyms`): trailers
(``Co-authored-by: Jane Doe <jane@x.org>``), GitHub's noreply e-mails (they hold the login), other e-mails
(masked), the fork owner in a merge subject (``from owner/branch``, ``owner:branch``) and @mentions. Code is
left as written: fenced blocks, `inline code`, doctest lines, and decorators (``@app.route(``,
``@pytest.fixture``, a bare ``@property`` line before a ``def``; ``@command`` followed by "decorator").
:func:`find_leaks` scans a rendered document for what the scrubber must have replaced, so a test (or a
user) can check the prep output as a whole rather than trust each field's code path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from midtrain.sources.common import Pseudonyms

# a domain ends in a name (user@10.0.0.1 is a login at an address: curation redacts the address)
EMAIL = re.compile(r"[\w.+-]+@(?:[\w-]+\.)+[A-Za-z][\w-]*")
# 12345+login@users.noreply.github.com (since 2017) or login@users.noreply.github.com
NOREPLY = re.compile(r"(?:\d+\+)?([A-Za-z0-9](?:[A-Za-z0-9-]){0,38})@users\.noreply\.github\.com", re.IGNORECASE)
TRAILER = re.compile(
    r"^([ \t]*(?:signed-off-by|co-authored-by|reviewed-by|acked-by|tested-by|reported-by|"
    r"suggested-by|helped-by|cc)\s*:\s*)(.*)$",
    re.IGNORECASE | re.MULTILINE,
)
PSEUDONYM = re.compile(r"(?:user|author)_(?:\d+|unknown)")
# @login outside code: GitHub's login alphabet; not an e-mail, a path or a dotted/called decorator
MENTION = re.compile(r"(?<![\w.@/`])@([A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38})(?![\w/(-]|\.\w)")
_DECORATOR_WORD = re.compile(r"\s+decorators?\b", re.IGNORECASE)
_DEF = re.compile(r"\s*(?:async\s+def|def|class|@)\b")
# the fork owner in GitHub's merge subject, and the ``owner:branch`` label a merge line may quote
MERGE_FROM = re.compile(r"(Merge pull request #\d+ from )([A-Za-z0-9][A-Za-z0-9-]{0,38})(?=/)")
MERGE_LABEL = re.compile(r"(?<![\w.@:/-])([A-Za-z0-9][A-Za-z0-9-]{0,38}):(?=\w[\w./-]*)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_DIFF_LINE = (
    "+",
    "-",
    " ",
    "@@",
    "\\",
    "index ",
    "diff --git ",
    "new file mode",
    "deleted file mode",
    "old mode",
    "new mode",
    "similarity index",
    "dissimilarity index",
    "rename from",
    "rename to",
    "copy from",
    "copy to",
    "Binary files",
    "GIT binary patch",
)


def split_ident(text: str) -> tuple[str, str]:
    """'Jane Doe <jane@x.org>' -> ('Jane Doe', 'jane@x.org')."""
    m = re.match(r"\s*(.*?)\s*<([^>]*)>\s*$", text)
    return (m.group(1), m.group(2)) if m else (text.strip(), "")


def noreply_login(email: str) -> str | None:
    """The login a GitHub noreply e-mail holds (``12345+login@users.noreply.github.com``), or None."""
    m = NOREPLY.fullmatch(email.strip())
    return m.group(1) if m else None


def _person(names: Pseudonyms, value: str) -> str:
    """The pseudonym of a trailer's 'Name <email>' (a noreply e-mail's login is the same person)."""
    if PSEUDONYM.fullmatch(value.strip()):
        return value.strip()
    name, email = split_ident(value)
    return names(name, email, noreply_login(email))


def _is_decorator(line: str, m: re.Match, next_line: str) -> bool:
    """``@name`` used as a Python decorator in prose: alone on its line before a ``def``/``class``, or
    followed by the word "decorator"."""
    if _DECORATOR_WORD.match(line, m.end()):
        return True
    return line.strip() == m.group(0) and bool(_DEF.match(next_line))


def _prose_lines(text: str) -> Iterator[tuple[int, str, list[bool]]]:
    """(line index, line, which of its backtick-split parts are prose) of the lines outside fenced code and
    doctests: odd parts of a line split on backticks are `inline code`."""
    fenced = False
    for i, line in enumerate(text.split("\n")):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.lstrip().startswith(">>>"):
            continue
        parts = line.split("`")
        yield i, line, [k % 2 == 0 for k in range(len(parts))]


def scrub_mentions(text: str, names: Pseudonyms) -> str:
    """@mentions of people not known yet become pseudonyms too (known ones are already); code left alone."""
    if "@" not in text:
        return text
    lines = text.split("\n")
    for i, line, prose in _prose_lines(text):
        if "@" not in line:
            continue
        nxt = next((ln for ln in lines[i + 1 :] if ln.strip()), "")
        parts = line.split("`")

        parts = [_sub_mentions(p, nxt, names) if ok else p for p, ok in zip(parts, prose)]
        lines[i] = "`".join(parts)
    return "\n".join(lines)


def _sub_mentions(part: str, next_line: str, names: Pseudonyms) -> str:
    def sub(m: re.Match) -> str:
        if PSEUDONYM.fullmatch(m.group(1)) or _is_decorator(part, m, next_line):
            return m.group(0)
        return names(m.group(1))

    return MENTION.sub(sub, part)


def _merge_owners(text: str, names: Pseudonyms) -> str:
    """The login in a merge subject: ``Merge pull request #N from owner/branch``, ``owner:branch`` labels."""
    text = MERGE_FROM.sub(lambda m: m.group(1) + _keep_or_alias(names, m.group(2)), text)
    if ":" not in text or "Merge" not in text:
        return text
    out = []
    for line in text.split("\n"):
        if line.lstrip().startswith("Merge"):
            line = MERGE_LABEL.sub(
                lambda m: m.group(0) if m.group(1) == "Merge" else _keep_or_alias(names, m.group(1)) + ":", line
            )
        out.append(line)
    return "\n".join(out)


def _keep_or_alias(names: Pseudonyms, login: str) -> str:
    return login if PSEUDONYM.fullmatch(login) or login == "Merge" else names(login)


def scrub_text(text: str, names: Pseudonyms) -> str:
    """A text field (title, description, comment, commit message) with its people replaced by pseudonyms."""
    if not text:
        return text
    text = TRAILER.sub(lambda m: m.group(1) + _person(names, m.group(2)), text)
    text = NOREPLY.sub(lambda m: names(m.group(1)), text)
    text = EMAIL.sub("<EMAIL>", names.scrub(text))
    return scrub_mentions(_merge_owners(text, names), names)


def scrub_message(message: str, names: Pseudonyms) -> str:
    """A commit message with people replaced by their pseudonyms (the one scrubber of every text field)."""
    return scrub_text(message, names)


# -- the leak scan ----------------------------------------------------------------------------------------
def _text_lines(text: str, skip_spans: Iterable[tuple[int, int]]) -> str:
    """``text`` without the spans (files read at the base) and the diff lines (code, shown as written)."""
    for a, b in sorted(skip_spans, reverse=True):
        text = text[:a] + "\n" * text.count("\n", a, b) + text[b:]
    out, in_diff = [], False
    for line in text.split("\n"):
        if line.startswith(("diff --git ", "@@ ")):
            in_diff = True
        elif in_diff and not (line.startswith(_DIFF_LINE) and line):
            in_diff = False
        out.append("" if in_diff else line)
    return "\n".join(out)


def find_leaks(
    text: str, identities: Iterable[str] = (), skip_spans: Iterable[tuple[int, int]] = ()
) -> list[tuple[str, str]]:
    """(kind, what) of each trace of a person in a rendered document: a trailer naming someone, a noreply or
    other e-mail, a login in a merge subject, an @mention (all in its text, outside code, diffs and the
    ``skip_spans`` of read files), and any of ``identities`` (real names, logins, e-mails) anywhere."""
    leaks: list[tuple[str, str]] = []
    prose = _text_lines(text, skip_spans)
    for m in TRAILER.finditer(prose):
        if not PSEUDONYM.fullmatch(m.group(2).strip()):
            leaks.append(("trailer", m.group(0).strip()))
    leaks += [("noreply_email", m.group(0)) for m in NOREPLY.finditer(prose)]
    leaks += [("email", m.group(0)) for m in EMAIL.finditer(prose) if not NOREPLY.fullmatch(m.group(0))]
    for m in MERGE_FROM.finditer(prose):
        if not PSEUDONYM.fullmatch(m.group(2)):
            leaks.append(("merge_owner", m.group(0).strip()))
    lines = prose.split("\n")
    for i, line, ok in _prose_lines(prose):
        nxt = next((ln for ln in lines[i + 1 :] if ln.strip()), "")
        for part, is_prose in zip(line.split("`"), ok):
            if not is_prose:
                continue
            for m in MENTION.finditer(part):
                if not PSEUDONYM.fullmatch(m.group(1)) and not _is_decorator(part, m, nxt):
                    leaks.append(("mention", m.group(0)))
            if part.lstrip().startswith("Merge"):
                for m in MERGE_LABEL.finditer(part):
                    if not PSEUDONYM.fullmatch(m.group(1)) and m.group(1) != "Merge":
                        leaks.append(("merge_owner", f"{m.group(1)}:"))
    for ident in identities:
        if len(ident) >= 3 and re.search(rf"(?<![\w]){re.escape(ident)}(?![\w])", text, re.IGNORECASE):
            leaks.append(("identity", ident))
    return leaks
