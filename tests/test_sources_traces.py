"""traces source: SWE-agent .traj, mini-swe-agent .traj.json (dict and bare list), OpenAI-style JSONL."""

from __future__ import annotations

import json

import pytest

from midtrain.sources.traces import (TraceFormatError, TraceReader, TracesConfig, load_trajectories,
                                     parse_trajectory, render_plain)
from sources_fixtures import SAMPLES, run_reader

TRACES = SAMPLES / "traces"


def test_every_sample_format_parses_to_normalized_messages():
    trajs = {t.instance_id: t for t in load_trajectories(TRACES)}
    assert set(trajs) == {f"acme__minicalc-{n}" for n in (11, 14, 15, 16, 17)}
    assert {t.format for t in trajs.values()} == {"swe-agent", "mini-swe-agent", "mini-swe-agent-list", "openai"}
    for t in trajs.values():
        assert all(set(m) <= {"role", "content", "tool_calls", "name", "tool_call_id"} for m in t.messages)
        assert {m["role"] for m in t.messages} <= {"system", "user", "assistant", "tool"}
    swe = trajs["acme__minicalc-11"]
    assert [m["role"] for m in swe.messages] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert swe.exit_status == "submitted" and swe.resolved is None
    oa = trajs["acme__minicalc-16"]
    assert oa.resolved is True and oa.repo == "acme/minicalc" and oa.tools and len(oa.tools) == 3
    call = oa.messages[2]["tool_calls"][0]
    assert call["function"] == {"name": "str_replace_editor",
                                "arguments": {"command": "view", "path": "/repo/minicalc/parse.py"}}
    assert oa.messages[1]["content"].startswith("Whitespace around operators")  # content parts joined
    assert oa.messages[3] == {"role": "tool", "content": oa.messages[3]["content"], "name": "str_replace_editor",
                              "tool_call_id": "call_1"}


def test_swe_agent_steps_without_history_and_nebius_rows():
    steps = json.loads((TRACES / "acme__minicalc-11.traj").read_text())
    steps.pop("history")
    t = parse_trajectory(steps, name="x/acme__minicalc-11.traj")
    assert t.instance_id == "acme__minicalc-11" and [m["role"] for m in t.messages] == ["assistant", "user"] * 3
    assert t.messages[0]["content"].startswith("Let me find the division.")
    nebius = {"instance_id": "i-1", "target": False, "trajectory": [
        {"role": "system", "text": "sys"}, {"role": "user", "text": "task"}, {"role": "ai", "text": "answer"}]}
    t = parse_trajectory(nebius)
    assert t.resolved is False and [m["role"] for m in t.messages] == ["system", "user", "assistant"]


def test_plain_rendering_and_loss_spans():
    t = next(t for t in load_trajectories(TRACES) if t.instance_id == "acme__minicalc-16")
    text, spans = render_plain(t.messages)
    assistant = [m for m in t.messages if m["role"] == "assistant"]
    assert len(spans) == len(assistant)
    first = text[spans[0][0]:spans[0][1]]
    assert first.startswith("Let me look at the parser.\n<tool_call>\n<function=str_replace_editor>\n"
                            "<parameter=command>\nview\n</parameter>")
    for (s, e), m in zip(spans, assistant):
        assert text[s:e].startswith(m["content"]) and text[:s].endswith("### Assistant\n")
    assert "### Tool (str_replace_editor)\n" in text
    # nothing outside the spans belongs to an assistant turn
    outside = "".join(text[a:b] for a, b in zip([0] + [e for _, e in spans], [s for s, _ in spans] + [len(text)]))
    assert "Let me look at the parser." not in outside and "Whitespace around operators" in outside


def test_reader_plain_only_resolved_and_bad_records(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for f in TRACES.iterdir():
        (inputs / f.name).write_bytes(f.read_bytes())
    (inputs / "broken.traj").write_text('{"trajectory": [')
    (inputs / "empty.traj.json").write_text("[]")
    (inputs / "badrole.json").write_text(json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}))
    (inputs / "latin.jsonl").write_bytes(b'{"messages": "caf\xe9"}\n')
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"resolved_ids": ["acme__minicalc-11"], "unresolved_ids": ["acme__minicalc-14"]}))
    reader = TraceReader([str(inputs)], TracesConfig(format="plain", only_resolved=True,
                                                       resolved_report=str(report)))
    docs = run_reader(reader)
    assert sorted(d.metadata["instance_id"] for d in docs) == ["acme__minicalc-11", "acme__minicalc-16"]
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["dropped/unresolved"] == 2 and stats["dropped/resolved_unknown"] == 1  # 14 + 17; 15 unknown
    assert stats["error/malformed_json"] == 1 and stats["error/bad_trajectory"] == 2
    assert stats["error/invalid_utf8"] == 1
    d = next(d for d in docs if d.metadata["instance_id"] == "acme__minicalc-11")
    assert d.metadata["source"] == "trace" and d.metadata["render_format"] == "plain"
    assert d.metadata["resolved"] is True and d.metadata["exit_status"] == "submitted"
    for s, e in d.metadata["loss_spans"]:
        assert 0 <= s < e <= len(d.text)


def test_bad_shapes_raise_clear_errors():
    with pytest.raises(TraceFormatError, match="no 'messages'"):
        parse_trajectory({"foo": 1})
    with pytest.raises(TraceFormatError, match="no assistant message"):
        parse_trajectory([{"role": "user", "content": "hi"}])
    with pytest.raises(TraceFormatError, match="tool call without a function name"):
        parse_trajectory({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}]})


@pytest.mark.slow
def test_chat_template_rendering_with_loss_spans():
    """The base model's chat template (Qwen3, from midtrain pack's default tokenizer) with assistant-only spans."""
    reader = TraceReader([str(TRACES)], TracesConfig(format="chat_template"))
    docs = run_reader(reader)
    assert len(docs) == 5 and all(d.metadata["render_format"] == "chat_template" for d in docs)
    d = next(d for d in docs if d.metadata["instance_id"] == "acme__minicalc-16")
    assert d.text.startswith("<|im_start|>system\n") and "<tools>" in d.text
    spans = d.metadata["loss_spans"]
    assert len(spans) == 3
    for s, e in spans:
        assert d.text[:s].endswith("<|im_start|>assistant\n") and d.text[s:e].endswith("<|im_end|>")
    assert '{"name": "str_replace_editor", "arguments": {"command": "view"' in d.text[spans[0][0]:spans[0][1]]
    assert "<tool_response>" not in "".join(d.text[s:e] for s, e in spans)


def test_auto_format_falls_back_to_plain_when_the_tokenizer_is_unusable(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    docs = run_reader(TraceReader([str(TRACES / "acme__minicalc-15.traj.json")], TracesConfig(tokenizer=str(bad))))
    assert [d.metadata["render_format"] for d in docs] == ["plain"]
    with pytest.raises(Exception, match="key must be a string"):  # explicit chat_template: fail loudly
        run_reader(TraceReader([str(TRACES / "acme__minicalc-15.traj.json")],
                               TracesConfig(format="chat_template", tokenizer=str(bad))))


def test_cleaning_cuts_long_outputs_drops_dummies_and_hides_home_paths(tmp_path):
    long_output = "".join(f"line {i}\n" for i in range(5000))  # ~44K characters
    good = {"instance_id": "good", "messages": [
        {"role": "user", "content": "Fix the parser in /home/jdoe/proj/minicalc/parse.py"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "bash", "arguments":
                                                                          {"command": "cat /Users/Jane.Doe/proj/log.txt"}}}]},
        {"role": "tool", "name": "bash", "content": long_output},
        {"role": "assistant", "content": "Done.\n```\nsubmit\n```"},
        {"role": "user", "content": "   "},  # an empty final turn
    ]}
    dummy = {"instance_id": "dummy", "messages": [
        {"role": "user", "content": "Blah blah blah"}, {"role": "assistant", "content": "```\nls\n```"}]}
    idle = {"instance_id": "idle", "messages": [
        {"role": "user", "content": "Fix the bug"}, {"role": "assistant", "content": "I think it is fine as is."}]}
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in (good, dummy, idle)) + "\n")
    reader = TraceReader([str(f)], TracesConfig(format="plain", max_tool_output_chars=2000, tool_output_tail_chars=500))
    [doc] = run_reader(reader)
    assert doc.metadata["instance_id"] == "good"
    text = doc.text
    assert "jdoe" not in text and "Jane.Doe" not in text and "/home/user/proj" in text and "/Users/user/proj" in text
    assert "line 0\n" in text and "line 4999\n" in text and "line 2500\n" not in text
    assert "characters, " in text and "lines of output cut ...]" in text
    assert not text.rstrip().endswith("### User")  # the empty final turn is gone
    assert doc.metadata["n_messages"] == 4 and len(text) < 5000
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["dropped/placeholder_text"] == 1 and stats["dropped/no_actions"] == 1
    assert stats["skip/empty_final_turn"] == 1 and stats["skip/tool_output_cut"] == 1 and stats["skip/home_path"] == 2
