"""A pull request as the trajectory an agent would have made (``pulls.render=agent``): ChatML turns in
mini-swe-agent's bash style (a THOUGHT, one ```bash block per assistant turn, ``<returncode>``/``<output>``
observations), each command really run against the repository at the base commit.

The task is the issue(s) and the description; a locate step (``git grep`` for identifiers the task names that
the base tree holds, else ``ls`` of the changed files' folders); the reads (``sed -n`` windows around the
edited hunks of the changed files, at the base); each commit's diff as a ``git apply`` edit, applied in turn to
the base tree (``git apply --cached`` on a scratch index: the return code and output shown are git's); the
reviews and comments made after a commit as the user's turns; the test and CI results after the last edit;
then the submission. Nothing is shown that the repository at that commit does not say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from midtrain.formats.chat_format import CHATML
from midtrain.sources.git import apply_in_turn, grep_tree, read_blobs
from midtrain.sources.pull_context import WINDOW_LINES, estimate_tokens, relevance, tree_at, windowed

SYSTEM = (
    "You are a helpful assistant that can interact with a computer shell to solve programming tasks.\n"
    "Your response must contain exactly ONE bash code block with ONE command (or commands connected with && "
    "or ||), after a THOUGHT explaining your reasoning."
)
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_IDENT = re.compile(r"`([A-Za-z_][\w.]{2,})`|\b([A-Za-z_]\w*_\w+|[a-z]+[A-Z]\w+|[A-Z][a-z]+[A-Z]\w+)\b")
GREP_LINES = 40  # a locate step's output kept to its first lines (the command says so: | head -n 40)
MAX_TERMS = 3


@dataclass
class AgentTrace:
    messages: list[dict] = field(default_factory=list)

    def say(self, role: str, content: str) -> None:
        self.messages.append({"role": role, "content": content.rstrip("\n")})

    def act(self, thought: str, command: str, returncode: int, output: str) -> None:
        """An assistant's command and its observation: the command's exact output (its line endings kept)."""
        self.say("assistant", f"THOUGHT: {thought}\n\n```bash\n{command}\n```")
        obs = f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>"
        self.messages.append({"role": "user", "content": obs})


def task_terms(text: str, repo: Path, base: str) -> list[str]:
    """Identifiers the task text names (in backticks, snake_case, camelCase) that occur in the base tree, in
    the order the text names them, at most :data:`MAX_TERMS`."""
    seen: list[str] = []
    for m in _IDENT.finditer(text):
        term = (m.group(1) or m.group(2)).rstrip(".")
        if term not in seen:
            seen.append(term)
    out = []
    for term in seen[:20]:
        rc, _ = grep_tree(repo, base, [term])
        if rc == 0:
            out.append(term)
        if len(out) == MAX_TERMS:
            break
    return out


def locate(trace: AgentTrace, repo: Path, base: str, task: str, changed: list[str]) -> None:
    """A real search of the base tree for what the task names; without such names, the changed files' folders."""
    terms = task_terms(task, repo, base)
    if terms:
        rc, output = grep_tree(repo, base, terms)
        lines = output.split("\n")
        command = "git grep -n -I -F " + " ".join(f"-e {_quote(t)}" for t in terms) + f" | head -n {GREP_LINES}"
        shown = "".join(ln + "\n" for ln in lines[:GREP_LINES] if ln)
        trace.act("Let me find where the code the task names lives.", command, 0, shown)
        return
    folders = sorted({p.rsplit("/", 1)[0] if "/" in p else "." for p in changed})[:3]
    entries = tree_at(repo, base)
    listing = []
    for folder in folders:
        prefix = "" if folder == "." else folder + "/"
        names = sorted({e.path[len(prefix) :].split("/", 1)[0] for e in entries if e.path.startswith(prefix)})
        names = [n for n in names if not n.startswith(".")]  # ls leaves dotfiles out
        listing.append((f"{folder}:\n" if len(folders) > 1 else "") + "".join(n + "\n" for n in names))
    trace.act("Let me look at the files where the change belongs.", "ls " + " ".join(folders), 0, "\n".join(listing))


def read_files(
    trace: AgentTrace,
    repo: Path,
    base: str,
    changed: list[str],
    hunks: dict[str, list[tuple[int, int]]],
    budget_tokens: int,
) -> list[str]:
    """``sed -n`` windows of the changed files at the base, source first, within ``budget_tokens``; the paths read."""
    entries = {e.path: e for e in tree_at(repo, base) if e.mode not in ("160000", "120000")}
    wanted = sorted((p for p in dict.fromkeys(changed) if p in entries), key=relevance)
    blobs = dict(read_blobs(repo, sorted({entries[p].sha for p in wanted})))
    read, left = [], budget_tokens
    for path in wanted:
        data = blobs[entries[path].sha]
        if b"\0" in data[:8192]:
            continue
        text = data.decode("utf-8", "replace")
        lines = text.split("\n")
        if text.endswith("\n"):
            lines = lines[:-1]
        spans = _spans(hunks.get(path) or [(1, min(len(lines), 2 * WINDOW_LINES))], len(lines))
        command = f"sed -n '{';'.join(f'{a},{b}p' for a, b in spans)}' {_quote(path)}"
        output = "".join(ln + "\n" for a, b in spans for ln in lines[a - 1 : b])
        if spans[-1][1] == len(lines) and not text.endswith("\n"):  # sed keeps a missing last line ending missing
            output = output[:-1]
        cost = estimate_tokens(command + output)
        if cost > left:
            continue
        left -= cost
        trace.act(f"Let me read {path} around the lines the change is about.", command, 0, output)
        read.append(path)
    return read


def _spans(hunks: list[tuple[int, int]], n_lines: int) -> list[tuple[int, int]]:
    """The line ranges :func:`windowed` shows around the hunks (merged, within the file)."""
    view = windowed("\n".join(str(i) for i in range(1, n_lines + 1)), hunks, WINDOW_LINES)
    if view is None:
        return [(1, min(n_lines, 2 * WINDOW_LINES))]
    return [(int(a), int(b)) for a, b in (r.split("-") for r in view[1].split(", "))]


def edit(trace: AgentTrace, repo: Path, base: str, edits: list[tuple[str, str, list[str]]]) -> bool:
    """Each (thought, diff, the user's turns after it) as a ``git apply`` heredoc, applied in turn to the base
    tree for real, the bytes the heredoc passes; False when one does not apply (git's error shown, the rest
    left out)."""
    patches = [d.rstrip("\n") + "\n" for _, d, _ in edits]  # a blank context line is " ": never stripped
    results = apply_in_turn(repo, base, patches)
    for (thought, _, after), patch, (rc, output) in zip(edits, patches, results):
        end = next(e for e in ("EOF", "EOF_PATCH", "END_OF_PATCH_7f3a") if f"\n{e}\n" not in f"\n{patch}")
        trace.act(thought, f"git apply <<'{end}'\n{patch}{end}", rc, output)
        if rc:
            return False
        for text in after:
            trace.say("user", text)
    return True


def submit(trace: AgentTrace, files: list[str]) -> None:
    """The submission: the files the edits changed, and mini-swe-agent's end-of-task command."""
    what = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    trace.say("assistant", f"THOUGHT: The change is made ({what}).\n\n```bash\n{SUBMIT}\n```")


def render_chatml(messages: list[dict]) -> tuple[str, list[list[int]]]:
    """ChatML text (``<|im_start|>role ... <|im_end|>``) and the [start, end) spans of the assistant turns."""
    parts: list[str] = []
    spans: list[list[int]] = []
    pos = 0
    for m in messages:
        head = CHATML.header(m["role"])
        body = m["content"] + CHATML.turn_end + "\n"
        if m["role"] == "assistant":
            spans.append([pos + len(head), pos + len(head) + len(body) - 1])
        parts.append(head + body)
        pos += len(head) + len(body)
    return "".join(parts), spans


def _quote(s: str) -> str:
    return s if re.fullmatch(r"[\w./-]+", s) else "'" + s.replace("'", "'\\''") + "'"
