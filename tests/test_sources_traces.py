"""traces source: SWE-agent .traj, mini-swe-agent .traj.json (dict and bare list), OpenAI-style JSONL."""

from __future__ import annotations

import json

import pytest
from sources_fixtures import SAMPLES, run_reader

from midtrain.sources.traces import (
    TraceFormatError,
    TraceReader,
    TracesConfig,
    load_trajectories,
    parse_trajectory,
    render_plain,
)

TRACES = SAMPLES / "traces"


def test_every_sample_format_parses_to_normalized_messages():
    trajs = {t.instance_id: t for t in load_trajectories(TRACES)}
    assert set(trajs) == {f"acme__minicalc-{n}" for n in (11, 14, 15, 16, 17)}
    assert {t.format for t in trajs.values()} == {"swe-agent", "mini-swe-agent", "mini-swe-agent-list", "openai"}
    for t in trajs.values():
        assert all(set(m) <= {"role", "content", "tool_calls", "name", "tool_call_id"} for m in t.messages)
        assert {m["role"] for m in t.messages} <= {"system", "user", "assistant", "tool"}
    swe = trajs["acme__minicalc-11"]
    assert [m["role"] for m in swe.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert swe.exit_status == "submitted" and swe.resolved is None
    oa = trajs["acme__minicalc-16"]
    assert oa.resolved is True and oa.repo == "acme/minicalc" and oa.tools and len(oa.tools) == 3
    call = oa.messages[2]["tool_calls"][0]
    assert call["function"] == {
        "name": "str_replace_editor",
        "arguments": {"command": "view", "path": "/repo/minicalc/parse.py"},
    }
    assert oa.messages[1]["content"].startswith("Whitespace around operators")  # content parts joined
    assert oa.messages[3] == {
        "role": "tool",
        "content": oa.messages[3]["content"],
        "name": "str_replace_editor",
        "tool_call_id": "call_1",
    }


def test_swe_agent_steps_without_history_and_nebius_rows():
    steps = json.loads((TRACES / "acme__minicalc-11.traj").read_text())
    steps.pop("history")
    t = parse_trajectory(steps, name="x/acme__minicalc-11.traj")
    assert t.instance_id == "acme__minicalc-11" and [m["role"] for m in t.messages] == ["assistant", "user"] * 3
    assert t.messages[0]["content"].startswith("Let me find the division.")
    nebius = {
        "instance_id": "i-1",
        "target": False,
        "trajectory": [
            {"role": "system", "text": "sys"},
            {"role": "user", "text": "task"},
            {"role": "ai", "text": "answer"},
        ],
    }
    t = parse_trajectory(nebius)
    assert t.resolved is False and [m["role"] for m in t.messages] == ["system", "user", "assistant"]


def test_plain_rendering_and_loss_spans():
    t = next(t for t in load_trajectories(TRACES) if t.instance_id == "acme__minicalc-16")
    text, spans = render_plain(t.messages)
    assistant = [m for m in t.messages if m["role"] == "assistant"]
    assert len(spans) == len(assistant)
    first = text[spans[0][0] : spans[0][1]]
    assert first.startswith(
        "Let me look at the parser.\n<tool_call>\n<function=str_replace_editor>\n"
        "<parameter=command>\nview\n</parameter>"
    )
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
    reader = TraceReader([str(inputs)], TracesConfig(format="plain", only_resolved=True, resolved_report=str(report)))
    docs = run_reader(reader)
    assert sorted(d.metadata["instance_id"] for d in docs) == ["acme/minicalc#11", "acme/minicalc#16"]  # canonical
    assert sorted(d.metadata["instance_id_original"] for d in docs) == ["acme__minicalc-11", "acme__minicalc-16"]
    stats = {k: v.total for k, v in reader.stats.stats.items()}
    assert stats["dropped/unresolved"] == 2 and stats["dropped/resolved_unknown"] == 1  # 14 + 17; 15 unknown
    assert stats["error/malformed_json"] == 1 and stats["error/bad_trajectory"] == 2
    assert stats["error/invalid_utf8"] == 1
    d = next(d for d in docs if d.metadata["instance_id"] == "acme/minicalc#11")
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
    d = next(d for d in docs if d.metadata["instance_id"] == "acme/minicalc#16")
    assert d.text.startswith("<|im_start|>system\n") and "<tools>" in d.text
    spans = d.metadata["loss_spans"]
    assert len(spans) == 3
    for s, e in spans:
        assert d.text[:s].endswith("<|im_start|>assistant\n") and d.text[s:e].endswith("<|im_end|>")
    assert '{"name": "str_replace_editor", "arguments": {"command": "view"' in d.text[spans[0][0] : spans[0][1]]
    assert "<tool_response>" not in "".join(d.text[s:e] for s, e in spans)


def test_auto_format_falls_back_to_plain_when_the_tokenizer_is_unusable(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not a tokenizer")
    docs = run_reader(TraceReader([str(TRACES / "acme__minicalc-15.traj.json")], TracesConfig(tokenizer=str(bad))))
    assert [d.metadata["render_format"] for d in docs] == ["plain"]
    with pytest.raises(Exception, match="key must be a string"):  # explicit chat_template: fail loudly
        run_reader(
            TraceReader(
                [str(TRACES / "acme__minicalc-15.traj.json")], TracesConfig(format="chat_template", tokenizer=str(bad))
            )
        )


def test_cleaning_cuts_long_outputs_drops_dummies_and_hides_home_paths(tmp_path):
    long_output = "".join(f"line {i}\n" for i in range(5000))  # ~44K characters
    good = {
        "instance_id": "good",
        "messages": [
            {"role": "user", "content": "Fix the parser in /home/jdoe/proj/minicalc/parse.py"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "bash", "arguments": {"command": "cat /Users/Jane.Doe/proj/log.txt"}}}
                ],
            },
            {"role": "tool", "name": "bash", "content": long_output},
            {"role": "assistant", "content": "Done.\n```\nsubmit\n```"},
            {"role": "user", "content": "   "},  # an empty final turn
        ],
    }
    dummy = {
        "instance_id": "dummy",
        "messages": [{"role": "user", "content": "Blah blah blah"}, {"role": "assistant", "content": "```\nls\n```"}],
    }
    idle = {
        "instance_id": "idle",
        "messages": [
            {"role": "user", "content": "Fix the bug"},
            {"role": "assistant", "content": "I think it is fine as is."},
        ],
    }
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


# -- the public trajectory sets as published (fixtures: tests/data/datasets, see its README) ------------------
import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow.parquet as pq  # noqa: E402
from sources_fixtures import read_documents  # noqa: E402

from midtrain.cli import main  # noqa: E402

DATASETS = Path(__file__).resolve().parent / "data" / "datasets"
NO_CURATION = [f"{s}.enabled=false" for s in ("license", "decontam", "quality", "redact", "dedup")]


def _fixture_module():
    spec = importlib.util.spec_from_file_location("make_fixtures", DATASETS / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prep_traces(tmp_path, dataset, *overrides, name="out"):
    out = tmp_path / name
    assert (
        main(["prep", "traces", *NO_CURATION, *overrides, "--input", str(DATASETS / dataset), "--output", str(out)])
        == 0
    )
    return {d["metadata"]["instance_id_original"]: d for d in read_documents(out)}, json.loads(
        (out / "stats.json").read_text()
    )


def test_open_swe_traces_tools_as_json_strings_and_resolved_minus_one(tmp_path):
    """nvidia/Open-SWE-Traces: `tools` is a list of JSON strings (old code: the chat template raised on them
    and the rest of the Parquet file was lost) and resolved -1 means not evaluated, not resolved."""
    tools = _fixture_module().REBENCH_TOOLS
    docs, stats = prep_traces(tmp_path, "nvidia__Open-SWE-Traces", "traces.keep_messages=true")
    assert stats["errors"] == [] and len(docs) == 3
    resolved = {i: d["metadata"]["resolved"] for i, d in docs.items()}
    assert resolved == {
        "python-attrs__attrs-700": True,
        "altair-viz__altair-701": False,
        "open-telemetry__opentelemetry-python-702": None,
    }
    doc = docs["python-attrs__attrs-700"]
    assert doc["metadata"]["render_format"] == "chat_template" and doc["metadata"]["tools"] == [tools[0], tools[2]]
    assert (
        "<tools>\n"
        + json.dumps(tools[0], ensure_ascii=False)
        + "\n"
        + json.dumps(tools[2], ensure_ascii=False)
        + "\n</tools>"
        in doc["text"]
    )
    assert doc["metadata"]["license"] == "MIT" and doc["metadata"]["repo"] == "python-attrs/attrs"
    _, stats = prep_traces(tmp_path, "nvidia__Open-SWE-Traces", "traces.only_resolved=true", name="resolved")
    assert stats["documents_out"] == 1
    assert stats["drops"] == {"source/dropped/resolved_unknown": 1, "source/dropped/unresolved": 1}


def test_a_row_that_fails_to_render_costs_only_itself(tmp_path):
    """A chat template that raises on one row (here one that requires alternating roles, as many published
    templates do) loses that row, counted with its reason, and every other row of the file is kept."""
    from midtrain.formats.tokenizer import load_tokenizer

    tok = load_tokenizer()
    tok.chat_template = (
        "{%- for m in messages %}{%- if loop.index0 > 0 and m.role == messages[loop.index0 - 1].role %}"
        "{{- raise_exception('Conversation roles must alternate') }}{%- endif %}"
        "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
    )
    tok.save_pretrained(str(tmp_path / "tok"))
    turns = lambda *roles: [{"role": r, "content": f"{r} turn\n```\nls\n```"} for r in roles]  # noqa: E731
    import pyarrow as pa

    table = tmp_path / "t" / "rows.parquet"
    table.parent.mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"instance_id": "a", "messages": turns("user", "assistant")},
                {"instance_id": "b", "messages": turns("user", "assistant", "assistant")},
                {"instance_id": "c", "messages": turns("user", "assistant")},
            ]
        ),
        table,
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                "prep",
                "traces",
                *NO_CURATION,
                "traces.format=chat_template",
                f"traces.tokenizer={tmp_path / 'tok'}",
                "--input",
                str(table),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert sorted(d["metadata"]["instance_id"] for d in read_documents(out)) == ["a", "c"]
    stats = json.loads((out / "stats.json").read_text())
    [err] = stats["errors"]
    assert err["reason"] == "render_failed" and err["where"].endswith("rows.parquet[1]")
    assert "Conversation roles must alternate" in err["detail"]


def test_nebius_system_prompt_and_masked_turns(tmp_path):
    """nebius/SWE-agent-trajectories: the system turn's text is null and its prompt (the command documentation)
    is in system_prompt; an assistant turn with mask=true is context without a loss span."""
    docs, _ = prep_traces(
        tmp_path, "nebius__SWE-agent-trajectories", "traces.format=plain", "traces.keep_messages=true"
    )
    system = _fixture_module().NEBIUS_SYSTEM
    doc = docs["tobymao__sqlglot-1000"]
    assert doc["metadata"]["messages"][0] == {"role": "system", "content": system}  # old code: ""
    assert doc["text"].startswith("### System\n" + system.rstrip("\n") + "\n\n### User\n")
    spans = doc["metadata"]["loss_spans"]
    assert [doc["text"][s:e].split("\n")[0] for s, e in spans] == ["Let me look at the parser.", "The fix is in place."]
    assert "I'll open the file." in doc["text"]  # kept as context
    docs, _ = prep_traces(tmp_path, "nebius__SWE-agent-trajectories", name="chat")  # the chat template too
    doc = docs["tobymao__sqlglot-1001"]
    assert len(doc["metadata"]["loss_spans"]) == 2 and "COMMANDS:\nopen:\n" in doc["text"]
    assert all("I'll open the file." not in doc["text"][s:e] for s, e in doc["metadata"]["loss_spans"])


def test_openhands_tool_schemas_are_the_producers_json(tmp_path):
    """SWE-rebench OpenHands: Arrow unified the tools' struct keys across rows, so every tool read back has
    every other tool's parameters (and "enum") as nulls; what is rendered is the producer's JSON again."""
    tools = _fixture_module().REBENCH_TOOLS
    raw = pq.read_table(DATASETS / "nebius__SWE-rebench-openhands-trajectories/data/train-00000-of-00002.parquet")
    assert raw.to_pylist()[0]["tools"][0]["function"]["parameters"]["properties"]["path"] is None  # the quirk
    docs, stats = prep_traces(tmp_path, "nebius__SWE-rebench-openhands-trajectories", "traces.keep_messages=true")
    assert stats["errors"] == [] and len(docs) == 2
    doc = docs["PyPSA__linopy-79"]
    assert doc["metadata"]["tools"] == tools and doc["metadata"]["resolved"] is True
    for tool in tools:
        assert json.dumps(tool, ensure_ascii=False) in doc["text"]
    assert "null" not in doc["text"].split("</tools>")[0]
    assert len(doc["metadata"]["loss_spans"]) == 3
    assert doc["metadata"]["messages"][2]["tool_calls"] == [
        {
            "type": "function",
            "id": "toolu_01",
            "function": {
                "name": "str_replace_editor",
                "arguments": {"command": "view", "path": "/workspace/PyPSA__linopy"},
            },
        }
    ]


def test_truncated_swe_smith_messages_are_reported_as_malformed(tmp_path):
    _, stats = prep_traces(tmp_path, "SWE-bench__SWE-smith-trajectories", "traces.format=plain")
    [err] = stats["errors"]
    assert err["reason"] == "malformed_json" and err["where"].endswith("tool-00000-of-00001.parquet[1]")
    assert "column 'messages' holds malformed JSON" in err["detail"]  # old code: bad_trajectory "no messages"


def test_resolved_values_and_tools_as_json_strings():
    t = parse_trajectory(
        {
            "messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
            "resolved": -1,
            "tools": ['{"type": "function", "function": {"name": "f"}}'],
        }
    )
    assert t.resolved is None and t.tools == [{"type": "function", "function": {"name": "f"}}]
    assert parse_trajectory({"messages": [{"role": "assistant", "content": "a"}], "resolved": 1}).resolved is True
    assert parse_trajectory({"messages": [{"role": "assistant", "content": "a"}], "resolved": 0}).resolved is False
    with pytest.raises(TraceFormatError, match="tools entry 0 is not an object"):
        parse_trajectory({"messages": [{"role": "assistant", "content": "a"}], "tools": ["[1]"]})


def test_a_json_trace_file_holding_json_lines(tmp_path):
    """A .json file that holds JSON Lines (one trajectory a line) is read line by line (old: malformed_json)."""

    def rec(i):
        return {
            "instance_id": f"i-{i}",
            "messages": [
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": f"done {i}\n```\nls\n```"},
            ],
        }

    f = tmp_path / "traces.json"
    f.write_text(json.dumps(rec(1)) + "\n" + json.dumps(rec(2)) + "\n")
    docs = run_reader(TraceReader([str(f)], TracesConfig(format="plain")))
    assert [d.metadata["instance_id"] for d in docs] == ["i-1", "i-2"]
