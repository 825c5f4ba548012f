"""CI/build/test logs -> cleaned documents that keep the failure context whole.

Input: text log files (``.log``/``.txt``/``.out``, optionally ``.gz``) or JSONL records with the log in
``text`` (or ``log``/``content``) and optional ``id``, ``repo``, ``license``, ``job``, ``conclusion``.
Cleaning, in order: ANSI escapes and carriage-return progress redraws removed; leading timestamps removed
(GitHub Actions ISO stamps, ``[12:34:56]``, ``2024-01-02 12:34:56,789`` ...); runs of near-identical lines
(same text once digits and hex ids are masked) collapsed to their first lines plus a count marker; then,
if still over ``max_doc_bytes``, the head, every failure window (error lines with ``context_lines`` either
side) and the tail are kept, each cut marked ``[... N lines cut ...]``. Failure windows are never collapsed
or cut inside. The tool (pytest, cargo, npm, pip, make, cmake, github-actions) and status go in metadata.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from datatrove.data import Document

from midtrain.config import require
from midtrain.sources.common import (
    TOO_LONG,
    TRUNCATED,
    ReaderConfig,
    SourceReader,
    decode_utf8,
    file_units,
    iter_lines,
    make_document,
    read_capped,
    stable_hash,
)

LOG_SUFFIXES = (".log", ".txt", ".out", ".log.gz", ".txt.gz", ".jsonl", ".jsonl.gz")

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
TIMESTAMP = re.compile(
    r"^(?:\ufeff)?(?:"
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s?"  # ISO / GitHub Actions / logging
    r"|\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]\s?"
    r"|\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?\s"  # [12:34:56] / 12:34:56.123
    r")"
)
FAILURE = re.compile(  # case-insensitive; kept free of leading \w+ so a line is scanned in linear time
    r"\berror\b|error:|exception:|\bfailed\b|\bfail\b|traceback \(most recent call last\)|panicked at|npm err!|"
    r"\bfatal\b|\bexception\b|make(\[\d+\])?: \*\*\*|^e {3}|undefined reference|error\[e\d+\]|"
    r"process completed with exit code [1-9]",
    re.IGNORECASE,
)
_MASK = re.compile(r"0x[0-9a-f]+|\b[0-9a-f]{7,}\b|\d+(\.\d+)*", re.IGNORECASE)

TOOLS = [  # (tool, pattern) the first that matches names the log's tool
    (
        "github-actions",
        re.compile(r"^##\[(group|error|endgroup)\]|^Run actions/|Process completed with exit code", re.M),
    ),
    (
        "pytest",
        re.compile(
            r"=+ test session starts =+|^collected \d+ items?|^=+ FAILURES =+$|short test summary info"
            r"|^=* ?\d+ (passed|failed)(, \d+ \w+)* in [\d.]+s",
            re.M,
        ),
    ),
    ("cargo", re.compile(r"^\s*(Compiling|Finished|Running) .*|^error\[E\d+\]|cargo (build|test)", re.M)),
    ("npm", re.compile(r"^npm (ERR!|WARN|error|warn)|^> [\w@/.-]+@[\d.]+ \w+", re.M)),
    ("cmake", re.compile(r"^-- (Configuring|Generating|The C)|CMake Error", re.M)),
    ("make", re.compile(r"^make(\[\d+\])?: |^make: \*\*\*", re.M)),
    (
        "pip",
        re.compile(
            r"^(Collecting|Requirement already satisfied|Installing collected packages"
            r"|ERROR: (Could not|No matching))",
            re.M,
        ),
    ),
]


@dataclass
class BuildLogsConfig(ReaderConfig):
    """Build-log cleaning."""

    max_doc_bytes: int = 200_000
    max_input_bytes: int = 32_000_000  # a bigger log keeps its first and last 16 MB (decompressed)
    context_lines: int = 10  # kept either side of every failure line
    collapse_min_run: int = 6  # runs of at least this many near-identical lines are collapsed ...
    collapse_keep: int = 2  # ... to this many lines and a marker
    head_lines: int = 40  # kept at the start when the log must be cut
    tail_lines: int = 60  # kept at the end when the log must be cut
    min_chars: int = 20  # logs shorter than this after cleaning are dropped

    def check(self) -> None:
        super().check()
        require(self.context_lines >= 0, "context_lines", "must be >= 0")
        require(
            self.collapse_min_run > self.collapse_keep >= 1,
            "collapse_min_run",
            "must be larger than collapse_keep, which must be >= 1",
        )


def strip_ansi(text: str) -> str:
    text = ANSI.sub("", text)
    # a progress bar redraws its line with \r: keep what was shown last
    return "\n".join(
        line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r") for line in text.split("\n")
    )


def strip_timestamps(lines: list[str]) -> list[str]:
    return [TIMESTAMP.sub("", line, count=1) for line in lines]


# every FAILURE alternative contains one of these (lower-cased): a cheap substring test skips the regex on
# the many ordinary lines
_FAILURE_KEYS = (
    "error",
    "fail",
    "traceback",
    "panicked",
    "npm err",
    "fatal",
    "exception",
    "***",
    "undefined reference",
    "exit code",
)


def is_failure_line(line: str) -> bool:
    low = line.lower()
    return (line[:4].lower() == "e   " or any(k in low for k in _FAILURE_KEYS)) and FAILURE.search(line) is not None


def failure_lines(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if is_failure_line(line)]


def _protected(lines: list[str], context: int) -> list[bool]:
    keep = [False] * len(lines)
    for i in failure_lines(lines):
        for j in range(max(0, i - context), min(len(lines), i + context + 1)):
            keep[j] = True
    return keep


def collapse_repeats(lines: list[str], min_run: int, keep: int, protected: list[bool]) -> tuple[list[str], int]:
    """Collapse runs of near-identical lines outside failure windows; returns (lines, lines removed)."""
    out: list[str] = []
    removed = 0
    i = 0
    n = len(lines)
    keys = [_MASK.sub("#", line).strip() for line in lines]
    while i < n:
        key = keys[i]
        j = i + 1
        while j < n and keys[j] == key and not protected[j] and not protected[i]:
            j += 1
        run = j - i
        if run >= min_run and key:
            out.extend(lines[i : i + keep])
            out.append(f"[... {run - keep - 1} similar lines collapsed ...]")
            out.append(lines[j - 1])
            removed += run - keep - 1
        else:
            out.extend(lines[i:j])
        i = j
    return out, removed


def cap_lines(lines: list[str], max_bytes: int, context: int, head: int, tail: int) -> tuple[list[str], int]:
    """Keep head, failure windows and tail within max_bytes, marking each cut; returns (lines, lines cut)."""
    if sum(len(x) + 1 for x in lines) <= max_bytes:
        return lines, 0
    n = len(lines)
    keep = [False] * n
    for i in range(min(head, n)):
        keep[i] = True
    for i in range(max(0, n - tail), n):
        keep[i] = True
    budget = max_bytes - sum(len(lines[i]) + 1 for i in range(n) if keep[i])
    # failure windows, last failures first (the final error is usually the one that matters)
    for i in reversed(failure_lines(lines)):
        window = [j for j in range(max(0, i - context), min(n, i + context + 1)) if not keep[j]]
        cost = sum(len(lines[j]) + 1 for j in window)
        if cost > budget:
            continue
        budget -= cost
        for j in window:
            keep[j] = True
    out, cut, run = [], 0, 0
    for i in range(n):
        if keep[i]:
            if run:
                out.append(f"[... {run} lines cut ...]")
                cut += run
                run = 0
            out.append(lines[i])
        else:
            run += 1
    if run:
        out.append(f"[... {run} lines cut ...]")
        cut += run
    # head and tail alone may still exceed a tiny cap: cut characters, marked
    text_len = sum(len(x) + 1 for x in out)
    if text_len > max_bytes:
        joined = "\n".join(out)[: max(0, max_bytes - 60)]
        out = joined.split("\n") + [f"[... log cut at {max_bytes} characters ...]"]
    return out, cut


def detect_tool(text: str) -> str | None:
    for tool, pattern in TOOLS:
        if pattern.search(text):
            return tool
    return None


def clean_log(text: str, cfg: BuildLogsConfig) -> tuple[str, dict[str, int]]:
    """The cleaned log and counts of what was changed (collapsed / cut lines)."""
    lines = strip_timestamps(strip_ansi(text).split("\n"))
    while lines and not lines[-1].strip():
        lines.pop()
    protected = _protected(lines, cfg.context_lines)
    lines, collapsed = collapse_repeats(lines, cfg.collapse_min_run, cfg.collapse_keep, protected)
    lines, cut = cap_lines(lines, cfg.max_doc_bytes, cfg.context_lines, cfg.head_lines, cfg.tail_lines)
    return "\n".join(lines) + "\n", {"collapsed_lines": collapsed, "cut_lines": cut}


class BuildLogReader(SourceReader):
    """datatrove reader over log files and JSONL log records (sharded by file)."""

    name = "🛠 build logs"
    source = "buildlogs"

    config_class = BuildLogsConfig
    cfg: BuildLogsConfig

    def units(self) -> list[tuple[str, tuple[str, str]]]:
        return file_units(self.inputs, LOG_SUFFIXES)

    def unit_path(self, unit: tuple[str, str]) -> Path:
        return Path(unit[0])

    def read_unit(self, unit: tuple[str, str], origin: str) -> Iterator[Document]:
        path, rel = Path(unit[0]), unit[1]
        name = path.name.removesuffix(".gz")
        try:
            if name.endswith(".jsonl"):
                yield from self._jsonl(path, rel, origin)
                return
            # streamed with a cap: a log that expands to gigabytes keeps its head and its tail (the failure)
            raw, left = read_capped(path, self.cfg.max_input_bytes, head_and_tail=True)
        except (OSError, EOFError, zlib.error) as e:
            self.stat_update("records")
            self.error("bad_gzip" if path.name.endswith(".gz") else "unreadable_file", str(path), str(e), origin)
            return
        if left:
            self.skip("input_bytes_cut", left)
            half = self.cfg.max_input_bytes - self.cfg.max_input_bytes // 2
            raw = raw[:half] + f"\n[... {left} bytes of log cut ...]\n".encode() + raw[half:]
        self.stat_update("records")
        if b"\0" in raw[:8192]:
            self.error("binary_file", str(path), "not a text log", origin)
            return
        text = decode_utf8(raw)
        if text is None:
            # logs are often mostly ASCII with a few stray bytes (latin-1 test names, binary output): keep
            # them, with the undecodable bytes replaced, and count it
            text = raw.decode("utf-8", "replace")
            self.skip("invalid_utf8_replaced")
        doc = self._document(text, f"buildlog:{rel}", None, None, {})
        if doc:
            yield doc

    def _jsonl(self, path: Path, rel: str, origin: str) -> Iterator[Document]:
        for lineno, line in iter_lines(path, self.cfg.max_record_bytes, self.cfg.max_input_bytes):
            where = f"{path}:{lineno}"
            if line is TRUNCATED:
                self.error("input_too_large", str(path), f"stopped after {self.cfg.max_input_bytes} bytes", origin)
                return
            if line is not TOO_LONG and not line.strip():
                continue
            self.stat_update("records")
            if line is TOO_LONG:
                self.error("record_too_large", where, f"over {self.cfg.max_record_bytes} bytes", origin)
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as e:
                self.error("invalid_utf8", where, str(e), origin)
                continue
            except (json.JSONDecodeError, RecursionError) as e:
                self.error("malformed_json", where, str(e) or "nested too deeply", origin)
                continue
            text = rec.get("text") or rec.get("log") or rec.get("content") if isinstance(rec, dict) else None
            if not isinstance(text, str):
                self.error("bad_record", where, "no log text in 'text', 'log' or 'content'", origin)
                continue
            doc_id = f"buildlog:{rec.get('id') or f'{rel}:{lineno}'}"
            doc = self._document(
                text,
                doc_id,
                rec.get("repo"),
                rec.get("license"),
                {k: rec[k] for k in ("job", "conclusion", "workflow") if k in rec},
            )
            if doc:
                yield doc

    def _document(self, text: str, doc_id: str, repo: str | None, license: str | None, extra: dict) -> Document | None:
        cleaned, counts = clean_log(text, self.cfg)
        if len(cleaned.strip()) < self.cfg.min_chars:
            self.drop("too_short", lambda: make_document(cleaned, doc_id, "buildlog", repo=repo, license=license))
            return None
        if counts["collapsed_lines"]:
            self.skip("collapsed_lines", counts["collapsed_lines"])
        if counts["cut_lines"]:
            self.skip("cut_lines", counts["cut_lines"])
        failed = bool(failure_lines(cleaned.split("\n")))
        return make_document(
            cleaned,
            doc_id,
            "buildlog",
            repo=repo,
            license=license,
            tool=detect_tool(cleaned),
            status="failure" if failed else "success",
            original_chars=len(text),
            content_hash=stable_hash(cleaned),
            **extra,
        )
