"""The HF export serves as a chat model: generation stops at the end of a turn, and the tokenizer files load
as transformers 4.x (which vLLM releases pin) reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hf_helpers import bigram_qwen3, make_hf_model

from midtrain.cli import main as cli_main

IM_END, ENDOFTEXT = 151645, 151643


@pytest.fixture(scope="module")
def qwen_tokenizer(tmp_path_factory) -> Path:
    """The offline default Qwen3 tokenizer as transformers 5 saves it (TokenizersBackend, chat_template.jinja)."""
    from midtrain.formats.tokenizer import load_tokenizer

    out = tmp_path_factory.mktemp("qwen_tok")
    load_tokenizer(None).save_pretrained(str(out))
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"
    return out


@pytest.mark.slow
def test_export_writes_chat_eos_and_a_transformers4_tokenizer_config(tmp_path, qwen_tokenizer):
    from transformers import GenerationConfig, PreTrainedTokenizerFast

    from midtrain.train.hf_export import convert_mcore_to_hf

    src = make_hf_model("qwen3", tmp_path / "hf")
    (src / "generation_config.json").unlink()  # a base model directory without one (midtrain's own runs)
    assert cli_main(["convert", "hf2mcore", str(src), str(tmp_path / "mc")]) == 0
    out = convert_mcore_to_hf(tmp_path / "mc", tmp_path / "out", tokenizer=qwen_tokenizer)

    gen = GenerationConfig.from_pretrained(out)
    assert gen.eos_token_id == [IM_END, ENDOFTEXT]  # as Qwen3 chat checkpoints ship it
    assert json.loads((out / "config.json").read_text())["eos_token_id"] == IM_END
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tc["chat_template"] == (qwen_tokenizer / "chat_template.jinja").read_text()
    assert tc["eos_token"] == "<|im_end|>" and tc["pad_token"] == "<|endoftext|>"
    tok = PreTrainedTokenizerFast.from_pretrained(out)
    assert tok.eos_token_id == IM_END
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.slow
def test_generation_stops_at_the_end_of_the_turn(tmp_path, qwen_tokenizer):
    from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

    from midtrain.train.hf_export import chat_files, copy_tokenizer

    tok = PreTrainedTokenizerFast.from_pretrained(qwen_tokenizer)
    reply = tok.encode("Done.") + [IM_END]
    invented = tok.encode("\n") + [tok.convert_tokens_to_ids("<|im_start|>")] + tok.encode("user")
    prompt = tok.encode(" ok")
    chain = prompt + reply + invented
    assert len(set(chain)) == len(chain)  # a bigram chain needs distinct tokens
    out = tmp_path / "model"
    bigram_qwen3(out, chain)
    (out / "generation_config.json").unlink()
    copy_tokenizer(out, qwen_tokenizer, None, "qwen3")
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([prompt])
    n = len(reply) + len(invented)
    # the tokenizer's own EOS (<|endoftext|>) alone: the reply runs on into an invented user turn
    before = model.generate(
        ids, generation_config=GenerationConfig(eos_token_id=tok.eos_token_id, max_new_tokens=n, do_sample=False)
    )[0, len(prompt) :].tolist()
    assert before == reply + invented
    hf_cfg = json.loads((out / "config.json").read_text())
    assert chat_files(out, hf_cfg, None) == [IM_END, ENDOFTEXT]
    after = model.generate(ids, generation_config=GenerationConfig.from_pretrained(out), max_new_tokens=n)[
        0, len(prompt) :
    ].tolist()
    assert after == reply  # ends at <|im_end|>


@pytest.mark.slow
def test_served_export_stops_at_the_end_of_turn(tmp_path, qwen_tokenizer):
    """Our CPU OpenAI-compatible server in front of an export: the reply ends at <|im_end|> (the export's
    generation config), not at the token limit in an invented turn."""
    import urllib.request

    from transformers import PreTrainedTokenizerFast

    from midtrain.eval.serve import ChatServer
    from midtrain.train.hf_export import chat_files, copy_tokenizer

    tok = PreTrainedTokenizerFast.from_pretrained(qwen_tokenizer)
    messages = [{"role": "user", "content": "Say done."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    reply = tok.encode("Done.") + [IM_END]
    invented = tok.encode("\n") + [tok.convert_tokens_to_ids("<|im_start|>")] + tok.encode("user")
    out = tmp_path / "export"
    bigram_qwen3(out, prompt[-1:] + reply + invented)  # the prompt's last token starts the chain
    (out / "generation_config.json").unlink()
    copy_tokenizer(out, qwen_tokenizer, None, "qwen3")
    hf_cfg = json.loads((out / "config.json").read_text())
    chat_files(out, hf_cfg, None)
    (out / "config.json").write_text(json.dumps(hf_cfg))
    with ChatServer(out, max_new_tokens=len(reply) + len(invented)) as server:
        req = urllib.request.Request(
            server.api_base + "/chat/completions",
            data=json.dumps({"model": "midtrain", "messages": messages}).encode(),
            headers={"Content-Type": "application/json"},
        )
        got = json.loads(urllib.request.urlopen(req, timeout=120).read())
    choice = got["choices"][0]
    assert got["midtrain"]["stop_token"] == "<|im_end|>" and choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == "Done."


def test_tool_calls_parse_as_hermes_reads_them():
    from midtrain.eval.serve import parse_tool_calls

    text = (
        'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>\n'
        "<tool_call>\nnot json\n</tool_call>"
    )
    content, calls = parse_tool_calls(text)
    assert [c["function"]["name"] for c in calls] == ["bash"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"command": "ls -la"}
    assert content.startswith("Let me look.") and "not json" in content  # an unparsable block stays text
