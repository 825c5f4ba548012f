"""Agent trajectories -> normalized message lists -> one document each (chat template or plain roles).

Formats read (auto-detected per record):

- SWE-agent ``.traj``: ``{"trajectory": [{response, thought, action, observation, ...}], "history": [...],
  "info": {exit_status, submission, ...}}`` (``history`` is used when present: it is the model's context).
- mini-swe-agent ``.traj.json``: ``{"messages": [{role, content}], "info": {exit_status, submission, ...},
  "trajectory_format": "mini-swe-agent-1"}``, or the older bare list of messages.
- OpenAI-style records (``.json``/``.jsonl``; OpenHands exports, nvidia/open-swe-traces and similar):
  ``{"messages": [...with tool_calls / role "tool"...], "tools": [...], "instance_id", "resolved", "repo",
  "license"}`` (``tools`` entries may be JSON strings, as in nvidia/Open-SWE-Traces; ``resolved`` 1 / 0, and
  -1 = not evaluated, which is unknown); nebius/SWE-agent-trajectories rows (``trajectory`` of
  ``{role: system|user|ai, text, system_prompt, mask}``, ``target``) too: a system turn's prompt is in
  ``system_prompt`` when ``text`` is empty, and an assistant turn with ``mask`` true (the producer left it out
  of training) is kept as context but has no loss span.

:func:`parse_trajectory` / :func:`load_trajectories` give the normalized form used everywhere (the SFT probe
renders the same list): ``[{"role": "system"|"user"|"assistant"|"tool", "content": str, "tool_calls"?:
[{"type": "function", "function": {"name", "arguments"}}], "name"?}]``.

Rendering: the base model's chat template when the tokenizer has one (ChatML-style templates, e.g. Qwen;
``loss_spans`` = each assistant turn from after its header through ``<|im_end|>``), else a plain
role-tagged format with tool calls as text in Qwen3-Coder's ``<function=...>`` form.

Cleaning before rendering (:func:`clean_messages`, each step counted): empty final turns are removed; a tool
output (a ``tool`` turn, or an observation turn after the first assistant turn) longer than
``max_tool_output_chars`` keeps its head and its last ``tool_output_tail_chars`` around a marker saying how
much was cut; home directories (``/home/<name>``, ``/Users/<name>``, ``C:\\Users\\<name>``) become
``<name>=user``. A trajectory is dropped when no assistant turn acts (a tool call or a command block) or a
turn is placeholder text ("Blah blah blah", "lorem ipsum", "asdf").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from datatrove.data import Document

from midtrain.config import require
from midtrain.formats.chat_format import CHATML
from midtrain.formats.instance_id import canonical_instance
from midtrain.formats.tokenizer import load_tokenizer
from midtrain.sources.common import (
    TOO_LONG,
    TRUNCATED,
    ReaderConfig,
    SourceReader,
    file_units,
    iter_lines,
    log,
    make_document,
    open_input,
    read_capped,
    walk_files,
)

TRACE_SUFFIXES = (".traj", ".traj.json", ".json", ".jsonl", ".jsonl.gz")
_ROLES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "gpt": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "ipython": "tool",
}


class TraceFormatError(ValueError):
    """A record that is not a trajectory in any known format (the message says what is wrong)."""


class InputTooLarge(ValueError):
    """A record or file over the reader's size caps (left unread, counted)."""


@dataclass
class Trajectory:
    messages: list[dict]
    instance_id: str | None = None
    resolved: bool | None = None
    exit_status: str | None = None
    format: str = ""
    tools: list[dict] | None = None
    repo: str | None = None
    license: str | None = None


@dataclass
class TracesConfig(ReaderConfig):
    """Trace documents."""

    format: Literal["auto", "chat_template", "plain"] = "auto"  # auto: the chat template if the tokenizer has one
    tokenizer: str | None = None  # tokenizer.json / HF model dir for the chat template; None = the default (Qwen3)
    only_resolved: bool = False  # keep only trajectories known to be resolved
    resolved_report: str | None = None  # SWE-bench harness report JSON with resolved_ids (for .traj files)
    keep_messages: bool = False  # also store the normalized messages in metadata (not redacted by curation!)
    extra_metadata: dict[str, str] = field(default_factory=dict)
    max_tool_output_chars: int = 16_000  # longer tool outputs keep head + tail around a marker; 0 = no limit
    tool_output_tail_chars: int = 4_000
    require_actions: bool = True  # drop trajectories where no assistant turn calls a tool or runs a command
    drop_placeholder_text: bool = True

    def check(self) -> None:
        super().check()
        require(
            self.max_tool_output_chars == 0 or self.max_tool_output_chars >= 200,
            "max_tool_output_chars",
            "must be 0 (no limit) or at least 200",
        )
        require(
            0 <= self.tool_output_tail_chars < max(self.max_tool_output_chars, 1) or not self.max_tool_output_chars,
            "tool_output_tail_chars",
            "must be below max_tool_output_chars",
        )


# -- parsing ---------------------------------------------------------------------------------------------
def _text(content: Any) -> str:
    """Message content as text: strings as is, OpenAI/Anthropic part lists joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, dict) and p.get("type") in ("image_url", "image"):
                parts.append("[image]")
        return "\n".join(parts)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    raise TraceFormatError(f"message content of type {type(content).__name__} is not text")


def _tool_calls(raw: Any) -> list[dict]:
    calls = []
    for c in raw or []:
        if not isinstance(c, dict):
            raise TraceFormatError("tool_calls entries must be objects")
        fn = f if isinstance(f := c.get("function"), dict) else c
        name = fn.get("name")
        if not name:
            raise TraceFormatError("tool call without a function name")
        args = fn.get("arguments", fn.get("parameters", {}))
        if isinstance(args, str):
            try:
                parsed = json.loads(args)
                args = parsed if isinstance(parsed, dict) else args
            except json.JSONDecodeError:
                pass  # kept as the raw string the model wrote
        call = {"type": "function", "function": {"name": str(name), "arguments": args}}
        if c.get("id"):
            call["id"] = str(c["id"])
        calls.append(call)
    return calls


def normalize_messages(raw: list) -> list[dict]:
    """Normalize a message list (any of the supported role/content spellings)."""
    if not isinstance(raw, list) or not raw:
        raise TraceFormatError("no messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise TraceFormatError(f"message {i} is not an object")
        if m.get("role") == "exit" and i == len(raw) - 1:
            continue  # mini-swe-agent 2.x ends with {"role": "exit"}: its exit status and submission, not a turn
        role = _ROLES.get(str(m.get("role") or m.get("from") or "").lower())
        if role is None:
            raise TraceFormatError(f"message {i} has unknown role {m.get('role')!r}")
        content = next((m[k] for k in ("content", "text", "value") if m.get(k) is not None), None)
        if not content and isinstance(m.get("system_prompt"), str):
            content = m["system_prompt"]  # nebius/SWE-agent-trajectories: the system turn's text is null
        msg: dict[str, Any] = {"role": role, "content": _text(content)}
        if role == "assistant" and m.get("mask") is True:
            msg["masked"] = True  # nebius: a turn the producer excluded from training (context, no loss)
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m["tool_calls"])
        if role == "assistant" and isinstance(m.get("reasoning_content"), str) and m["reasoning_content"].strip():
            msg["reasoning_content"] = m["reasoning_content"]  # the model's thinking: the template renders it
        if role == "tool" and m.get("name"):
            msg["name"] = str(m["name"])
        if role == "tool" and m.get("tool_call_id"):
            msg["tool_call_id"] = str(m["tool_call_id"])
        out.append(msg)
    if not any(m["role"] == "assistant" for m in out):
        raise TraceFormatError("no assistant message")
    return out


def _swe_agent_steps(steps: list) -> list[dict]:
    msgs = []
    for i, s in enumerate(steps):
        if not isinstance(s, dict):
            raise TraceFormatError(f"trajectory step {i} is not an object")
        response = s.get("response")
        if not response:
            thought, action = s.get("thought") or "", s.get("action") or ""
            response = f"{thought}\n\n```\n{action}\n```" if action else thought
        msgs.append({"role": "assistant", "content": str(response)})
        if s.get("observation") is not None:
            msgs.append({"role": "user", "content": _text(s.get("observation"))})
    return msgs


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):  # 1 / 0; anything else (Open-SWE-Traces' -1: not evaluated) is unknown
        return True if v == 1 else False if v == 0 else None
    if isinstance(v, str) and v.lower() in ("true", "false", "resolved", "unresolved"):
        return v.lower() in ("true", "resolved")
    return None


def _tools(raw: Any) -> list[dict] | None:
    """A record's tool schemas: objects, or JSON strings of them (nvidia/Open-SWE-Traces stores each as text)."""
    if isinstance(raw, str) and raw.lstrip()[:1] == "[":
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TraceFormatError(f"'tools' is malformed JSON: {e}") from None
    if not isinstance(raw, list):
        return None
    tools = []
    for i, t in enumerate(raw):
        if isinstance(t, str):
            try:
                t = json.loads(t)
            except json.JSONDecodeError as e:
                raise TraceFormatError(f"tools entry {i} is malformed JSON: {e}") from None
        if not isinstance(t, dict):
            raise TraceFormatError(f"tools entry {i} is not an object")
        tools.append(t)
    return tools


def parse_trajectory(obj: Any, name: str | None = None) -> Trajectory:
    """One trajectory in any supported format -> :class:`Trajectory` (normalized messages + metadata).

    ``name`` (e.g. the file name) supplies the instance id when the record has none.
    """
    stem = None
    if name:
        stem = Path(name).name
        for suffix in (".traj.json", ".traj", ".json", ".jsonl"):
            stem = stem.removesuffix(suffix)
    if isinstance(obj, list):  # mini-swe-agent's older bare message list
        return Trajectory(normalize_messages(obj), instance_id=stem, format="mini-swe-agent-list")
    if not isinstance(obj, dict):
        raise TraceFormatError(f"a trajectory is an object or a message list, got {type(obj).__name__}")
    info = i if isinstance(i := obj.get("info"), dict) else {}
    instance_id = obj.get("instance_id") or info.get("instance_id") or stem
    resolved = _as_bool(obj.get("resolved", obj.get("target", info.get("resolved"))))
    exit_status = obj.get("exit_status") or info.get("exit_status")
    if (
        "trajectory" in obj
        and isinstance(obj["trajectory"], list)
        and obj["trajectory"]
        and isinstance(obj["trajectory"][0], dict)
        and "role" in obj["trajectory"][0]
    ):
        messages, fmt = normalize_messages(obj["trajectory"]), "nebius"  # role/text rows
    elif "history" in obj and isinstance(obj["history"], list) and obj["history"]:
        messages, fmt = normalize_messages(obj["history"]), "swe-agent"
    elif "trajectory" in obj and isinstance(obj["trajectory"], list):
        messages, fmt = _swe_agent_steps(obj["trajectory"]), "swe-agent"
        if not messages:
            raise TraceFormatError("empty trajectory")
    elif "messages" in obj:
        messages = normalize_messages(obj["messages"])
        fmt = (
            "mini-swe-agent"
            if str(obj.get("trajectory_format", "")).startswith("mini-swe-agent") or "mini_version" in info
            else "openai"
        )
    else:
        raise TraceFormatError("no 'messages', 'history' or 'trajectory' key")
    tools = _tools(obj.get("tools"))
    return Trajectory(
        messages,
        instance_id=str(instance_id) if instance_id else None,
        resolved=resolved,
        exit_status=str(exit_status) if exit_status else None,
        format=fmt,
        tools=tools,
        repo=obj.get("repo"),
        license=obj.get("license"),
    )


def iter_trajectory_records(
    path: Path, max_record_bytes: int = 32_000_000, max_input_bytes: int = 256_000_000
) -> Iterator[tuple[str, Any]]:
    """(where, parsed JSON or the exception) per trajectory record of a file, streamed: a record over
    ``max_record_bytes`` or input past ``max_input_bytes`` (decompressed) gives an InputTooLarge."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl") or (name.endswith(".json") and _holds_json_lines(path, max_record_bytes)):
        for lineno, line in iter_lines(path, max_record_bytes, max_input_bytes):
            if line is TRUNCATED:
                yield str(path), InputTooLarge(f"stopped after {max_input_bytes} bytes")
                return
            if line is TOO_LONG:
                yield f"{path}:{lineno}", InputTooLarge(f"record over {max_record_bytes} bytes")
            elif line.strip():
                try:
                    yield f"{path}:{lineno}", json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    yield f"{path}:{lineno}", e
                except RecursionError:
                    yield f"{path}:{lineno}", ValueError("JSON nested too deeply")
        return
    data, left = read_capped(path, max_record_bytes)
    if left:
        yield str(path), InputTooLarge(f"file over {max_record_bytes} bytes")
        return
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        yield str(path), e
        return
    except RecursionError:
        yield str(path), ValueError("JSON nested too deeply")
        return
    # a .json list is either one bare message list or a list of trajectory records
    if isinstance(obj, list) and obj and all(isinstance(o, dict) and "role" not in o for o in obj):
        for i, o in enumerate(obj):
            yield f"{path}[{i}]", o
    else:
        yield str(path), obj


def _holds_json_lines(path: Path, max_record_bytes: int) -> bool:
    """A .json file whose first line is a whole JSON object and which has more lines: JSON Lines."""
    with open_input(path) as f:
        first = f.readline(max_record_bytes + 1)
        try:
            if not isinstance(json.loads(first.decode("utf-8")), dict):
                return False
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return False
        return any(line.strip() for line in iter(lambda: f.readline(1 << 16), b""))


def load_trajectories(path: str | Path) -> Iterator[Trajectory]:
    """Every parseable trajectory in a file or directory (bad records raise TraceFormatError / ValueError)."""
    root = Path(path)
    for f in walk_files(root, TRACE_SUFFIXES):
        for where, obj in iter_trajectory_records(f):
            if isinstance(obj, Exception):
                raise TraceFormatError(f"{where}: {obj}")
            yield parse_trajectory(obj, name=where if where != str(f) else f.name)


# -- cleaning ---------------------------------------------------------------------------------------------
_HOME = re.compile(r"(?<![\w.])(/home/|/Users/|[A-Za-z]:\\+Users\\+)(?!user\b|Shared\b|runner\b)([A-Za-z0-9._-]+)")
# an action in a text-only agent: a fenced command block, a function-call tag, a ReAct-style action line
_TEXT_ACTION = re.compile(r"```|<function[=\s>]|<tool_call>|^\s*(?:Action|ACTION|Command)\s*:", re.MULTILINE)
_PLACEHOLDER = re.compile(
    r"(?i)\b(?:blah[\s,.!]+){2,}|\blorem ipsum\b|^\s*(?:asdf\w*|qwerty|xxx+|todo|tbd|"
    r"placeholder|test(?:ing)?|foo|dummy)[\s.!]*$"
)


def _home_user(m: re.Match) -> str:
    return m.group(1) + "user"


def _scrub_homes(value: Any) -> Any:
    if isinstance(value, str):
        return _HOME.sub(_home_user, value)
    if isinstance(value, dict):
        return {k: _scrub_homes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_homes(v) for v in value]
    return value


def _cut_middle(text: str, max_chars: int, tail_chars: int) -> tuple[str, int]:
    """Head and tail of a long text around a marker (cut at line breaks when one is near); chars cut."""
    if len(text) <= max_chars:
        return text, 0
    head_end = max_chars - tail_chars
    nl = text.rfind("\n", head_end // 2, head_end)
    head_end = nl + 1 if nl >= 0 else head_end
    tail_start = len(text) - tail_chars
    nl = text.find("\n", tail_start, tail_start + tail_chars // 2)
    tail_start = nl + 1 if nl >= 0 else tail_start
    cut = tail_start - head_end
    lines = text.count("\n", head_end, tail_start)
    return f"{text[:head_end]}[... {cut} characters, {lines} lines of output cut ...]\n{text[tail_start:]}", cut


def clean_messages(messages: list[dict], cfg: TracesConfig) -> tuple[list[dict], dict[str, int], str | None]:
    """(cleaned messages, counts of what was changed, drop reason or None); see the module doc."""
    counts = {"empty_final_turn": 0, "tool_output_cut": 0, "home_path": 0}
    msgs = [dict(m) for m in messages]
    while msgs and not msgs[-1]["content"].strip() and not msgs[-1].get("tool_calls"):
        msgs.pop()
        counts["empty_final_turn"] += 1
    seen_assistant = False
    for m in msgs:
        if m["role"] == "assistant":
            seen_assistant = True
        elif cfg.max_tool_output_chars and (m["role"] == "tool" or (m["role"] == "user" and seen_assistant)):
            m["content"], cut = _cut_middle(m["content"], cfg.max_tool_output_chars, cfg.tool_output_tail_chars)
            counts["tool_output_cut"] += bool(cut)
        scrubbed = _HOME.sub(_home_user, m["content"])
        if scrubbed != m["content"]:
            counts["home_path"] += 1
            m["content"] = scrubbed
        if m.get("reasoning_content"):
            thought = _HOME.sub(_home_user, m["reasoning_content"])
            counts["home_path"] += thought != m["reasoning_content"]
            m["reasoning_content"] = thought
        if m.get("tool_calls"):
            calls = _scrub_homes(m["tool_calls"])
            counts["home_path"] += calls != m["tool_calls"]
            m["tool_calls"] = calls
    assistants = [m for m in msgs if m["role"] == "assistant"]
    if not assistants:
        return msgs, counts, "no_assistant_turn"
    if cfg.require_actions and not any(m.get("tool_calls") or _TEXT_ACTION.search(m["content"]) for m in assistants):
        return msgs, counts, "no_actions"
    if cfg.drop_placeholder_text and any(m["role"] != "tool" and _PLACEHOLDER.search(m["content"]) for m in msgs):
        return msgs, counts, "placeholder_text"
    return msgs, counts, None


# -- rendering --------------------------------------------------------------------------------------------
def render_tool_call(call: dict) -> str:
    fn = call["function"]
    args = fn.get("arguments")
    lines = ["<tool_call>", f"<function={fn['name']}>"]
    if isinstance(args, dict):
        for k, v in args.items():
            value = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            lines.append(f"<parameter={k}>\n{value}\n</parameter>")
    elif args:
        lines.append(str(args))
    lines += ["</function>", "</tool_call>"]
    return "\n".join(lines)


def render_plain(messages: list[dict]) -> tuple[str, list[list[int]]]:
    """Role-tagged text (``### Assistant`` ...) and the [start, end) spans of the assistant turns."""
    parts: list[str] = []
    spans: list[list[int]] = []
    pos = 0
    for m in messages:
        title = m["role"].capitalize() + (f" ({m['name']})" if m["role"] == "tool" and m.get("name") else "")
        header = f"### {title}\n"
        body = m["content"].rstrip("\n")
        calls = [render_tool_call(c) for c in m.get("tool_calls") or []]
        body = "\n".join(x for x in [body] + calls if x) + "\n\n"
        if m["role"] == "assistant":
            spans.append([pos + len(header), pos + len(header) + len(body) - 1])
        parts.append(header + body)
        pos += len(header) + len(body)
    return "".join(parts), spans


def _canonical(value: Any) -> str:
    return canonical_instance(value) or str(value)


def _instance(traj: Trajectory) -> str | None:
    return canonical_instance(traj.instance_id, traj.repo)


def chat_template_sha(tokenizer: Any) -> str:
    """A short hash of the tokenizer's chat template text (what a rendering depends on)."""
    import hashlib

    return hashlib.sha256(str(getattr(tokenizer, "chat_template", "") or "").encode()).hexdigest()[:16]


def render_chat_template(
    messages: list[dict], tokenizer: Any, tools: list | None = None
) -> tuple[str, list[list[int]]] | None:
    """The tokenizer's chat template rendering and assistant spans; None when the template is not ChatML-like
    or a span cannot be placed (the caller falls back to the plain format).

    Spans are anchored in the template's structure and the turn's own content, never found by searching the
    text for the end token (an assistant turn may quote ``<|im_end|>``): a turn starts where the rendering of
    the turns before it with the generation prompt ends (a prefix of the whole rendering), and ends at the
    first ``<|im_end|>`` after its own content (and tool calls), which must be followed by the next turn's
    header or the end of the text.
    """

    def render(upto: list[dict], prompt: bool = False) -> str:
        return tokenizer.apply_chat_template(upto, tools=tools or None, tokenize=False, add_generation_prompt=prompt)

    text = render(messages)
    spans: list[list[int]] = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        if k == 0:  # nothing before it to render: the template's assistant header opens the text
            head = render([{"role": "user", "content": "x"}], prompt=True)
            head = head[head.rfind(CHATML.turn_start) :]
            start = len(head) if head.startswith(CHATML.turn_start) and text.startswith(head) else -1
        else:
            before = render(messages[:k], prompt=True)
            start = len(before) if text.startswith(before) else -1
        if start < 0 or (spans and start < spans[-1][1]):
            return None
        cursor = start
        for piece in [m["content"].strip()] + [
            json.dumps(c["function"].get("arguments"), ensure_ascii=False)[1:-1] for c in m.get("tool_calls") or []
        ]:
            # the turn's own text, as far as it appears verbatim (a template may re-serialise tool arguments)
            at = text.find(piece, cursor) if piece else -1
            if at >= 0:
                cursor = at + len(piece)
        end = text.find(CHATML.turn_end, cursor)
        if end < 0:
            return None
        end += len(CHATML.turn_end)
        if text[end:].lstrip("\n") and not text[end:].lstrip("\n").startswith(CHATML.turn_start):
            return None
        spans.append([start, end])
    return text, spans


class TraceReader(SourceReader):
    """datatrove reader over trajectory files (sharded by file)."""

    name = "🤖 agent traces"
    source = "traces"

    config_class: type[TracesConfig] = TracesConfig
    cfg: TracesConfig

    def __init__(
        self,
        inputs: list[str],
        cfg: TracesConfig | None = None,
        report_dir: str | None = None,
        exclusion_dir: str | None = None,
    ):
        super().__init__(inputs, cfg, report_dir, exclusion_dir)
        self._tokenizer: Any = None
        self._resolved: dict[str, bool] | None = None

    def units(self) -> list[tuple[str, tuple[str, str]]]:
        return file_units(self.inputs, TRACE_SUFFIXES)

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        self._template_tokenizer()  # a broken tokenizer for format=chat_template fails the task, not each file
        yield from super().run(data, rank, world_size)

    def _template_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = False
            if self.cfg.format != "plain":
                try:
                    tok = load_tokenizer(self.cfg.tokenizer, shared=True)  # only renders: the process's one copy
                except Exception as e:
                    if self.cfg.format == "chat_template":
                        raise
                    log.warning(
                        "traces: tokenizer %s not usable (%s); rendering the plain format",
                        self.cfg.tokenizer or "(default)",
                        e,
                    )
                    tok = None
                if getattr(tok, "chat_template", None):
                    self._tokenizer = tok
                if self._tokenizer is False and self.cfg.format == "chat_template":
                    raise RuntimeError(
                        f"traces.format=chat_template but tokenizer {self.cfg.tokenizer or '(default)'} "
                        "has no chat template"
                    )
        return self._tokenizer or None

    def _resolved_map(self) -> dict[str, bool]:
        if self._resolved is None:
            self._resolved = {}
            if self.cfg.resolved_report:
                report = json.loads(Path(self.cfg.resolved_report).read_text())
                for key in ("unresolved_ids", "completed_ids", "error_ids"):
                    self._resolved.update(dict.fromkeys(map(_canonical, report.get(key) or []), False))
                self._resolved.update(dict.fromkeys(map(_canonical, report.get("resolved_ids") or []), True))
        return self._resolved

    def unit_path(self, unit: tuple[str, str]) -> Path | None:
        return Path(unit[0])

    def read_unit(self, unit: tuple[str, str], origin: str) -> Iterator[Document]:
        path, rel = Path(unit[0]), unit[1]
        for where, obj in iter_trajectory_records(path, self.cfg.max_record_bytes, self.cfg.max_input_bytes):
            self.stat_update("records")
            if isinstance(obj, InputTooLarge):
                self.error("input_too_large", where, str(obj), origin)
                continue
            if isinstance(obj, UnicodeDecodeError):
                self.error("invalid_utf8", where, str(obj), origin)
                continue
            if isinstance(obj, Exception):
                self.error("malformed_json", where, str(obj), origin)
                continue
            doc = self._record_document(
                partial(parse_trajectory, obj, name=path.name if where == str(path) else None),
                rel if where == str(path) else f"{rel}:{where.rsplit(':', 1)[-1]}",
                where,
                origin,
            )
            if doc is not None:
                yield doc

    def _record_document(self, parse: Any, name: str, where: str, origin: str) -> Document | None:
        """One record's document (None: dropped or failed). A record that cannot be parsed or rendered (a
        chat template that raises on its tools) is counted with its reason; it never costs another record."""
        try:
            traj = parse()
        except TraceFormatError as e:
            self.error("bad_trajectory", where, str(e), origin)
            return None
        try:
            return self._document(traj, name)
        except Exception as e:  # noqa: BLE001 - e.g. a chat template's exception on one record's tools
            self.error("render_failed", where, f"{type(e).__name__}: {e}", origin)
            return None

    def _document(self, traj: Trajectory, where: str) -> Document | None:
        # the canonical instance (one spelling per task: the held-out split's key), the producer's kept beside it
        inst = _instance(traj)
        doc_id = f"trace:{inst or 'unknown'}:{where}"
        if inst in self._resolved_map():
            traj.resolved = self._resolved_map()[inst]
        if self.cfg.only_resolved and traj.resolved is not True:
            self.drop(
                "unresolved" if traj.resolved is False else "resolved_unknown",
                lambda: make_document(
                    render_plain(traj.messages)[0], doc_id, "trace", instance_id=inst, resolved=traj.resolved
                ),
            )
            return None
        messages, counts, reason = clean_messages(traj.messages, self.cfg)
        for what, n in counts.items():
            if n:
                self.skip(what, n)
        if reason:
            self.drop(reason, lambda: make_document(render_plain(traj.messages)[0], doc_id, "trace", instance_id=inst))
            return None
        traj.messages = messages
        rendered = None
        tok = self._template_tokenizer()
        if tok is not None:
            rendered = render_chat_template(traj.messages, tok, traj.tools)
            if rendered is None:
                self.skip("chat_template_fallback_plain")
        fmt = "chat_template" if rendered else "plain"
        text, spans = rendered or render_plain(traj.messages)
        # an assistant turn its producer excluded from training (nebius ``mask``) stays as context, without loss
        spans = [
            sp for sp, m in zip(spans, [m for m in traj.messages if m["role"] == "assistant"]) if not m.get("masked")
        ]
        if len(text.encode("utf-8", "surrogatepass")) > self.cfg.max_doc_bytes:
            # a cut trajectory would teach a wrong ending: count it and leave it out
            self.drop("too_long", lambda: make_document(text, doc_id, "trace"))
            return None
        meta: dict[str, Any] = dict(
            instance_id=inst,
            instance_id_original=traj.instance_id,
            resolved=traj.resolved,
            exit_status=traj.exit_status,
            trace_format=traj.format,
            render_format=fmt,
            loss_spans=spans,
            n_messages=len(traj.messages),
            **self.cfg.extra_metadata,
        )
        if rendered:  # which template rendered it: a probe with another tokenizer's template must not reuse it
            meta["chat_template"] = {"sha": chat_template_sha(tok), "tokenizer": self.cfg.tokenizer or "(default)"}
        if self.cfg.keep_messages:
            meta["messages"] = traj.messages
            meta["tools"] = traj.tools
        return make_document(text, doc_id, "trace", repo=traj.repo, license=traj.license, **meta)
