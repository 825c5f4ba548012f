"""The chat markup a model family's tokenizer uses: where a turn starts and ends, and what ends a document.

It lives at the bottom layer because three stages read it: trace rendering (``midtrain/sources/``) finds
assistant turns by it, SFT (``midtrain/sft/``) splits long trajectories at its turn headers, and the Hugging
Face export (``midtrain/train/``) makes the turn end a generation stop. A model family names its format in
its spec (``midtrain/train/families/``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatFormat:
    name: str
    turn_start: str  # opens a turn; the role and a newline follow
    turn_end: str  # closes a turn: a chat model's generation stops here
    text_eos: str  # ends a document (base models) and pads

    def header(self, role: str) -> str:
        """What precedes a turn's content."""
        return f"{self.turn_start}{role}\n"


# Qwen's (and SmolLM2's) template: <|im_start|>role\n ... <|im_end|>
CHATML = ChatFormat("chatml", "<|im_start|>", "<|im_end|>", "<|endoftext|>")
