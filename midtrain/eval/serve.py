"""A small OpenAI-compatible chat server for an exported checkpoint on CPU (transformers, greedy), for the
agent leg run here and for checking that an export serves as a chat model.

It does what the cluster's vLLM server does with ``--enable-auto-tool-choice --tool-call-parser hermes``:
the export's chat template renders the conversation (with the request's tools), generation stops where the
export's generation_config.json says, and ``<tool_call>{json}</tool_call>`` blocks in the reply become
``tool_calls``. Not for throughput: one request at a time.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any, cast

from midtrain.eval.endpoint import ChatEndpoint, EndpointError

COMMAND = re.compile(r"```(?:bash|mswea_bash_command)[ \t]*\n(.*?)\n```", re.S)  # eval.command_accuracy's
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """hermes' reading of a reply: (content outside the blocks, [OpenAI tool calls]); a block that is not
    JSON with a name is left in the content, as the parser leaves it."""
    calls, kept = [], text
    for i, m in enumerate(TOOL_CALL.finditer(text)):
        try:
            body = json.loads(m.group(1))
            name = body["name"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        args = body.get("arguments", {})
        calls.append(
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
        )
        kept = kept.replace(m.group(0), "")
    return kept.strip(), calls


class ChatServer(ChatEndpoint):
    """Serve MODEL_DIR (an HF export) at http://127.0.0.1:<port>/v1 (chat completions, models).

    ``max_context`` is vLLM's --max-model-len: a request whose prompt plus max_tokens exceeds it is refused
    with vLLM's 400 (None = the export's max_position_embeddings). With ``log_path`` each reply's outcome
    (tokens, finish reason, the stop token) is appended there."""

    def __init__(
        self,
        model_dir: str | Path,
        name: str = "midtrain",
        max_new_tokens: int = 256,
        max_context: int | None = None,
        log_path: str | Path | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        super().__init__(name, log_path)
        self.max_new_tokens = max_new_tokens
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.max_context = max_context or getattr(self.model.config, "max_position_embeddings", None)
        has_gen = (Path(model_dir) / "generation_config.json").is_file()
        self.gen = (
            GenerationConfig.from_pretrained(model_dir)
            if has_gen
            else GenerationConfig(eos_token_id=self.tok.eos_token_id)
        )
        self.lock = threading.Lock()  # one generation at a time

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        import torch

        messages = [{**m, "content": m.get("content") or ""} for m in req.get("messages") or []]
        # a BatchEncoding with return_dict=True: transformers types the result as a union of every mode's
        enc: Any = self.tok.apply_chat_template(
            messages, tools=req.get("tools"), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        ids = enc["input_ids"]
        limit = min(
            int(req.get("max_tokens") or req.get("max_completion_tokens") or self.max_new_tokens), self.max_new_tokens
        )
        if self.max_context and ids.shape[1] + limit > self.max_context:
            raise EndpointError(
                400,
                f"This model's maximum context length is {self.max_context} tokens. However, "
                f"you requested {ids.shape[1] + limit} tokens ({ids.shape[1]} in the messages, "
                f"{limit} in the completion). Please reduce the length of the messages or "
                "completion.",
            )
        with self.lock, torch.no_grad():
            out = self.model.generate(ids, generation_config=self.gen, do_sample=False, max_new_tokens=limit)[
                0, ids.shape[1] :
            ].tolist()
        eos = self.gen.eos_token_id if isinstance(self.gen.eos_token_id, list) else [self.gen.eos_token_id]
        stopped = bool(out) and out[-1] in eos
        # one sequence in, one str out (transformers types decode's result as str | list[str])
        text = cast(str, self.tok.decode(out[:-1] if stopped else out, skip_special_tokens=False))
        content, calls = parse_tool_calls(text)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else ("stop" if stopped else "length")
        stop_token = self.tok.convert_ids_to_tokens(out[-1]) if stopped else None
        self.record(
            {
                "prompt_tokens": ids.shape[1],
                "completion_tokens": len(out),
                "finish_reason": finish,
                "stop_token": stop_token,
                "tool_calls": len(calls),
                # text-format actions (mini-swe-agent's ```bash blocks): what a text-format agent parses
                "bash_blocks": len(COMMAND.findall(content)),
            }
        )
        return self.envelope(message, finish, ids.shape[1], len(out), midtrain={"stop_token": stop_token})
