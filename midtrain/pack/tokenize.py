"""Tokenize curated documents into per-task Megatron indexed files: a datatrove step, so it scales out with
the local or Slurm executor like every other data stage.

Each task writes, under the cache folder of one input and one tokenizer:

- ``NNNNN.bin/.idx``       one index document (one sequence) per source document: its tokens + EOS;
- ``NNNNN.mask.bin/.idx``  uint8, same layout: 1 where the token is a loss target (everything, unless the
                           document carries ``metadata["loss_spans"]``: char spans mapped to tokens through
                           the fast tokenizer's offsets);
- ``NNNNN.docs.jsonl``     per document: id, source, repo, tokens, natural split points (token offsets where
                           a file of a packed repository starts: ``metadata["file_offsets"]`` from the repos
                           source, else the source's header regex) and whether it carries loss spans;
- ``NNNNN.json``           the task's totals (documents, tokens per source, drops by reason).

Documents that cannot be used are counted by reason and logged with their id, never fatal.
"""

from __future__ import annotations

import json
import logging
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from datatrove.data import DocumentsPipeline
from datatrove.utils.batching import batched
from datatrove.utils.tokenization import PipelineStepWithTokenizer

from midtrain.formats.shards import token_dtype
from midtrain.formats.tokenizer import file_stamp, per_process
from midtrain.locations import local_folder
from midtrain.pack.mixture import valid_draw

log = logging.getLogger(__name__)

TASK_FILES = (".bin", ".idx", ".mask.bin", ".mask.idx", ".docs.jsonl", ".json")  # one task's output, .json last


def _char_to_token(encoding, pos: int, n_chars: int, n_tokens: int) -> int:
    """First token covering char ``pos`` (or the next char that has one); n_tokens past the end."""
    while pos < n_chars:
        t = encoding.char_to_token(pos)
        if t is not None:
            return t
        pos += 1
    return n_tokens


def spans_to_mask(encoding, spans: list, n_chars: int) -> np.ndarray:
    """Per-token 0/1 target mask from [char_start, char_end) spans (tokens starting inside a span)."""
    n = len(encoding.ids)
    mask = np.zeros(n, np.uint8)
    for span in spans:
        if not (
            isinstance(span, (list, tuple))
            and len(span) == 2
            and all(isinstance(v, int) for v in span)
            and 0 <= span[0] <= span[1] <= n_chars
        ):
            raise ValueError(f"bad loss span {span!r} (need [start, end) within 0..{n_chars})")
        a = _char_to_token(encoding, span[0], n_chars, n)
        b = _char_to_token(encoding, span[1], n_chars, n)
        mask[a:b] = 1
    return mask


class TokenizeStep(PipelineStepWithTokenizer):
    """Tokenize documents (EOS appended) into this task's indexed files; see the module docstring."""

    name = "midtrain tokenize"
    type = "🔢 - TOKENIZER"

    def __init__(
        self,
        output_folder: str,
        tokenizer_file: str,
        eos_token: str,
        boundaries: dict[str, str] | None = None,
        batch_size: int = 1000,
    ) -> None:
        super().__init__(tokenizer_file, eos_token)
        self.output_folder = str(output_folder)
        self.batch_size = batch_size
        self.boundaries = dict(boundaries or {})  # source -> regex where a natural split point starts

    @cached_property
    def tokenizer(self) -> Any:
        # datatrove's load and EOS post-processor, once per tokenizer file and EOS token in a process: an
        # in-process pack (the demo, a sweep, a test) runs a TokenizeStep per input and task, and
        # encode_batch only reads it
        build = PipelineStepWithTokenizer.tokenizer.func
        path = self.tokenizer_name_or_path
        if not (path and os.path.isfile(path)):
            return build(self)  # a hub name or missing file: datatrove as is
        return per_process(("pack_tokenizer", file_stamp(Path(path)), self.eos_token), lambda: build(self))

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        # An object-store cache: written locally, uploaded with the task's .json (its completion mark) last.
        with local_folder(self.output_folder, last=(".json",)) as out:
            self._tokenize(data, out, rank)
        return
        yield  # a generator, as datatrove steps are

    def _tokenize(self, data: DocumentsPipeline, out: Path, rank: int) -> None:
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

        out.mkdir(parents=True, exist_ok=True)
        prefix = out / f"{rank:05d}"
        tmp = out / f".{rank:05d}.tmp"
        tok = self.tokenizer  # datatrove appends EOS through the post-processor
        eos_id = tok.token_to_id(self.eos_token)
        if eos_id is None:
            raise ValueError(f"EOS token {self.eos_token!r} is not in the tokenizer {self.tokenizer_name_or_path}")
        dtype = token_dtype(tok.get_vocab_size())
        patterns = {s: re.compile(p, re.MULTILINE) for s, p in self.boundaries.items()}
        ids_out = IndexedDatasetBuilder(f"{tmp}.bin", dtype=dtype)
        mask_out = IndexedDatasetBuilder(f"{tmp}.mask.bin", dtype=np.uint8)
        totals: dict[str, Any] = {
            "documents": 0,
            "tokens": 0,
            "tokens_by_source": {},
            "documents_by_source": {},
            "dropped": {},
            "with_loss_spans": 0,
            "first_valid": {},
        }  # source -> [draw, id]: the document a validation split takes first
        with open(f"{tmp}.docs.jsonl", "w") as meta_out:
            for batch in batched(data, self.batch_size):
                batch = [d for d in batch if self._usable(d, totals)]
                with self.track_time(unit="batch"):
                    encodings = tok.encode_batch([d.text for d in batch])
                for doc, enc in zip(batch, encodings):
                    ids = enc.ids
                    n = len(ids)
                    spans = doc.metadata.get("loss_spans")
                    if spans is not None:
                        try:
                            mask = spans_to_mask(enc, spans, len(doc.text))
                        except ValueError as e:
                            self._drop(totals, "bad_loss_spans", doc, str(e))
                            continue
                        mask[-1] = mask[-2] if n > 1 else 1  # EOS is a target when the text ends in one
                        totals["with_loss_spans"] += 1
                    else:
                        mask = np.ones(n, np.uint8)
                    source = str(doc.metadata.get("source") or "unknown")
                    # Natural split points: the file header offsets the repos source records, else the
                    # source's header pattern.
                    offsets = doc.metadata.get("file_offsets")
                    if not (isinstance(offsets, list) and all(isinstance(o, int) for o in offsets)):
                        offsets = [m.start() for m in patterns[source].finditer(doc.text)] if source in patterns else []
                    bounds = [_char_to_token(enc, o, len(doc.text), n) for o in offsets if 0 < o < len(doc.text)]
                    ids_out.add_document(np.asarray(ids, dtype=dtype), [n])
                    mask_out.add_document(mask, [n])
                    meta_out.write(
                        json.dumps(
                            {
                                "id": doc.id,
                                "source": source,
                                "repo": doc.metadata.get("repo"),
                                "tokens": n,
                                "bounds": sorted(set(bounds)),
                                "spans": spans is not None,
                            }
                        )
                        + "\n"
                    )
                    totals["documents"] += 1
                    totals["tokens"] += n
                    totals["tokens_by_source"][source] = totals["tokens_by_source"].get(source, 0) + n
                    totals["documents_by_source"][source] = totals["documents_by_source"].get(source, 0) + 1
                    draw = valid_draw(doc.id)
                    if source not in totals["first_valid"] or draw < totals["first_valid"][source][0]:
                        totals["first_valid"][source] = [draw, doc.id]
                    self.stat_update("documents")
                    self.stat_update("tokens", value=n)
        ids_out.finalize(f"{tmp}.idx")
        mask_out.finalize(f"{tmp}.mask.idx")
        Path(f"{tmp}.json").write_text(
            json.dumps(
                {
                    "rank": rank,
                    "eos_id": eos_id,
                    "dtype": np.dtype(dtype).name,
                    "vocab_size": tok.get_vocab_size(),
                    **totals,
                },
                indent=1,
            )
        )
        # Rename last-to-first-checked: the .json marks a complete task output.
        for suffix in TASK_FILES:
            Path(f"{tmp}{suffix}").replace(f"{prefix}{suffix}")
        if totals["dropped"]:
            log.warning("tokenize task %d dropped %s", rank, totals["dropped"])

    def _usable(self, doc, totals: dict) -> bool:
        if not isinstance(doc.text, str) or not doc.text:
            self._drop(totals, "empty_text", doc, "no text")
            return False
        return True

    def _drop(self, totals: dict, reason: str, doc, why: str) -> None:
        totals["dropped"][reason] = totals["dropped"].get(reason, 0) + 1
        self.stat_update(f"dropped_{reason}")
        log.warning("tokenize: dropped document %s (%s): %s", getattr(doc, "id", "?"), reason, why)


class TokenizedShard:
    """One tokenize task's output, memory-mapped: tokens, target masks and per-document metadata."""

    def __init__(self, prefix: str | Path, origin: str | None = None) -> None:
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        self.prefix = Path(prefix)
        self.origin = origin or str(prefix)  # where the files came from (a URL when these are local copies)
        self.info = json.loads(Path(f"{prefix}.json").read_text())
        self.ids = IndexedDataset(str(prefix), mmap=True)
        self.masks = IndexedDataset(f"{prefix}.mask", mmap=True)
        with open(f"{prefix}.docs.jsonl") as f:
            self.docs = [json.loads(line) for line in f]
        if len(self.docs) != len(self.ids):
            raise ValueError(f"{prefix}: {len(self.docs)} metadata rows for {len(self.ids)} tokenized documents")

    def tokens(self, doc: int, start: int = 0, length: int | None = None) -> np.ndarray:
        return self.ids.get(doc, start, length)

    def mask(self, doc: int, start: int = 0, length: int | None = None) -> np.ndarray:
        return self.masks.get(doc, start, length)
