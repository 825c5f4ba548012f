"""Assistant loss spans come from the chat template's structure: a turn quoting the end token keeps its span."""

from __future__ import annotations

import pytest

from midtrain.formats.tokenizer import load_tokenizer
from midtrain.sources.traces import render_chat_template


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def test_literal_end_token_inside_an_assistant_turn_keeps_the_whole_turn(tok):
    quoted = "The template closes a turn with <|im_end|>; the parser must not split here.\n```\ngrep im_end x\n```"
    msgs: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": quoted},
        {"role": "tool", "content": "out"},
        {
            "role": "assistant",
            "content": "run it",
            "tool_calls": [
                {"type": "function", "function": {"name": "bash", "arguments": {"cmd": "echo '<|im_end|>'"}}}
            ],
        },
    ]
    rendered = render_chat_template(msgs, tok)
    assert rendered is not None
    text, spans = rendered
    assert len(spans) == 2
    first, second = (text[a:b] for a, b in spans)
    assert first == quoted + "<|im_end|>"
    assert second.endswith("</tool_call><|im_end|>") and "echo '<|im_end|>'" in second and "run it" in second
    # nothing but assistant text is inside a span; every non-span part is the template's or another role's
    assert "<|im_start|>" not in first + second
    assert text[spans[0][1] : spans[1][0]].startswith("\n<|im_start|>user\n<tool_response>\nout")


def test_final_train_loss_averages_the_last_steps():
    from midtrain.sft.probe import final_loss_steps

    assert [final_loss_steps(n) for n in (1, 3, 12, 400)] == [1, 1, 3, 20]


def test_reasoning_content_is_kept_and_trained(tok):
    from midtrain.sources.traces import normalize_messages

    msgs = normalize_messages(
        [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "patched", "reasoning_content": "The bug is in add()."},
        ]
    )
    assert msgs[1]["reasoning_content"] == "The bug is in add()."
    rendered = render_chat_template(msgs, tok)
    assert rendered is not None
    text, spans = rendered
    ((a, b),) = spans
    assert "The bug is in add()." in text[a:b] and text[a:b].endswith("patched<|im_end|>")


def test_reasoning_content_is_scrubbed_like_the_content():
    from midtrain.sources.traces import TracesConfig, clean_messages

    msgs = [
        {"role": "user", "content": "fix"},
        {"role": "assistant", "content": "```\nls\n```", "reasoning_content": "look in /home/alice/repo"},
    ]
    out, counts, reason = clean_messages(msgs, TracesConfig())
    assert reason is None and out[1]["reasoning_content"] == "look in /home/user/repo" and counts["home_path"] == 1
