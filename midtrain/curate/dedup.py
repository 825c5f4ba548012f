"""Exact and near-duplicate removal across all tasks of a prep run, per document and per repository file.

The unit of deduplication is a *unit*: a whole document, or, for repository documents, each file (so forks
and vendored copies collapse file by file). Units are listed in the same order by every stage that reads
the filtered documents, so a unit is named by (task rank, position), as datatrove's MinHash expects:

1. ``dedup_hash``      every task writes the whitespace-normalised content hash (xxhash64) of its units;
2. ``dedup_exact``     one task keeps the first occurrence of each hash and writes per-rank removal lists;
3. ``dedup_sig``       every task computes datatrove MinHash signatures of the units still in play
                       (a whitespace word tokenizer: no spaCy);
4. ``dedup_buckets``   datatrove MinhashDedupBuckets, one task per bucket;
5. ``dedup_cluster``   datatrove MinhashDedupCluster (one task);
6. ``dedup_filter``    every task drops duplicate documents (``dropped_exact_duplicate``,
                       ``dropped_near_duplicate``), cuts duplicate files out of repositories
                       (``removed_exact_duplicate_file`` ...) and drops a repository when (almost) all of it
                       is duplicate (``dropped_duplicate_repo``: a fork).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import xxhash
from datatrove.data import Document, DocumentsPipeline
from datatrove.io import get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
from datatrove.utils.hashes.xxhash import xxhash64
from datatrove.utils.hashing import HashConfig, create_hash_func

from midtrain.config import Config, require
from midtrain.curate.base import CodeWordTokenizer, CurationStep, Drop, FileSpan, is_repo_doc, remove_files, \
    repo_files, simplified_words, word_ngrams

log = logging.getLogger("midtrain.curate")

@dataclass
class DedupConfig(Config):
    """Exact (normalised whitespace) and MinHash near-duplicate removal."""

    enabled: bool = True
    exact: bool = True
    near: bool = True
    ngrams: int = 5  # MinHash shingle size in words
    num_buckets: int = 14  # LSH bands: with 8 hashes each, pairs above ~0.72 Jaccard are likely caught
    hashes_per_bucket: int = 8
    seed: int = 1
    min_file_chars: int = 100  # smaller repository files (__init__.py, stubs) are not deduplicated
    max_repo_duplicate_fraction: float = 0.9  # drop a repository when this share of its file chars is duplicate

    def check(self) -> None:
        require(self.ngrams >= 1, "ngrams", "must be >= 1")
        require(self.num_buckets >= 1 and self.hashes_per_bucket >= 1, "num_buckets",
                "num_buckets and hashes_per_bucket must be >= 1")
        require(0.0 < self.max_repo_duplicate_fraction <= 1.0, "max_repo_duplicate_fraction", "must be in (0, 1]")

    def minhash(self) -> MinhashConfig:
        return MinhashConfig(n_grams=self.ngrams, num_buckets=self.num_buckets,
                             hashes_per_bucket=self.hashes_per_bucket, seed=self.seed,
                             hash_config=HashConfig(precision=64, hash_fc="xxhash"))


# ----------------------------------------------------------------------------------------------------------
# units


@dataclass
class Unit:
    text: str  # what is compared (a repository file's body, without its path header)
    span: FileSpan | None  # the file block to cut, or None for the whole document


def units(doc: Document, min_file_chars: int) -> list[Unit]:
    """The dedup units of a document, in a stable order (empty-content units are skipped everywhere)."""
    if is_repo_doc(doc):
        files = repo_files(doc)
        if files:
            out = []
            for f in files:
                block = doc.text[f.start:f.end]
                first, _, rest = block.partition("\n")
                body = rest if f.path and f.path in first else block
                if len(body.strip()) >= min_file_chars:
                    out.append(Unit(body, f))
            return out
    return [Unit(doc.text, None)] if doc.text.strip() else []


def safe_units(doc: Document, min_file_chars: int) -> list[Unit]:
    """units(), or none for a document it cannot split: every dedup stage must list the same units."""
    try:
        return units(doc, min_file_chars)
    except Exception as e:  # noqa: BLE001 - the document passes through undeduplicated rather than crash
        log.warning("curate/dedup: cannot list units of %s (%s: %s); not deduplicated", doc.id, type(e).__name__, e)
        return []


_exact_hash = create_hash_func(HashConfig(precision=64, hash_fc="xxhash"))


def exact_hash(text: str) -> int:
    return _exact_hash(" ".join(text.split()))


# ----------------------------------------------------------------------------------------------------------
# exact: hashes per rank, then one task finds the repeats


class ExactHashWriter(PipelineStep):
    type = "🫂 - DEDUP"
    name = "#️⃣ exact hashes"

    def __init__(self, output_folder: str, min_file_chars: int):
        super().__init__()
        self.output_folder = output_folder
        self.min_file_chars = min_file_chars

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        hashes = []
        for doc in data or []:
            with self.track_time():
                for u in safe_units(doc, self.min_file_chars):
                    hashes.append(exact_hash(u.text))
                    self.stat_update("units")
        folder = get_datafolder(self.output_folder)
        with folder.open(f"{rank:05d}.hashes", "wb") as f:
            f.write(np.asarray(hashes, dtype="<u8").tobytes())
        if False:  # a generator step that yields nothing (the stage ends here)
            yield


class ExactFindDuplicates(PipelineStep):
    """Keeps the first occurrence of each hash in (rank, position) order; writes ``{rank:05d}.remove``."""

    type = "🫂 - DEDUP"
    name = "#️⃣ exact find"

    def __init__(self, folder: str):
        super().__init__()
        self.folder = folder

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        assert world_size == 1, "exact duplicate finding runs as one task"
        folder = get_datafolder(self.folder)
        seen: set[int] = set()
        for name in sorted(folder.list_files(glob_pattern="*.hashes")):
            self.stat_update("rank_files")
            with folder.open(name, "rb") as f:
                hashes = np.frombuffer(f.read(), dtype="<u8")
            remove = []
            for i, h in enumerate(hashes.tolist()):
                if h in seen:
                    remove.append(i)
                else:
                    seen.add(h)
            self.stat_update("units", value=len(hashes))
            self.stat_update("exact_duplicates", value=len(remove))
            with folder.open(name.replace(".hashes", ".remove"), "wb") as f:
                f.write(np.asarray(remove, dtype="<u4").tobytes())
        if False:
            yield


def _load_removals(folder: str | None, rank: int, name: str) -> set[int]:
    if not folder:
        return set()
    df = get_datafolder(folder)
    if not df.exists(name):
        return set()
    with df.open(name, "rb") as f:
        return set(np.frombuffer(f.read(), dtype="<u4").tolist())


# ----------------------------------------------------------------------------------------------------------
# near: MinHash over the units still in play


class NearDupUnits(PipelineStep):
    """Turns each document into its units (minus exact duplicates) for the MinHash signature step."""

    type = "🫂 - DEDUP"
    name = "🧩 units"

    def __init__(self, exact_folder: str | None, min_file_chars: int):
        super().__init__()
        self.exact_folder = exact_folder
        self.min_file_chars = min_file_chars

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        exact = _load_removals(self.exact_folder, rank, f"{rank:05d}.remove")
        i = 0
        for doc in data or []:
            for u in safe_units(doc, self.min_file_chars):
                if i not in exact:
                    yield Document(text=u.text, id=f"{doc.id}#{u.span.path if u.span else ''}")
                i += 1


_MERSENNE = np.uint64((1 << 61) - 1)  # datatrove's MinHash modulus
_SHIFT61 = np.uint64(61)
_SIGNATURE_BLOCK = 512  # shingles per block: two 512 x 112 x 8-byte buffers stay in a core's L2 cache


class CodeMinhashSignature(MinhashDedupSignature):
    """datatrove's MinHash signature step with a whitespace word tokenizer (code, logs: no spaCy).

    Shingles are datatrove's (hashes of the word n-grams of the simplified text), made by midtrain's faster
    equivalents of its text simplification and n-gram join.
    """

    def __init__(self, output_folder: str, config: MinhashConfig):
        super().__init__(output_folder, config=config, language=CodeWordTokenizer())

    def get_signature(self, shingles: np.ndarray) -> list[list[int]]:
        """datatrove's signature (per hash function, the least ``(a*x + b) mod (2**61 - 1)`` over the
        shingles, in uint64 arithmetic), the same values, computed in place over blocks of shingles that stay
        in cache, with the modulo as shift-and-add (2**61 = 1 mod 2**61 - 1) instead of a division."""
        if self.config.hash_config.precision != 64:
            return super().get_signature(shingles)
        x = shingles.reshape(-1)
        sig = None
        for i in range(0, len(x), _SIGNATURE_BLOCK):
            block = self._block_minima(x[i:i + _SIGNATURE_BLOCK])
            sig = block if sig is None else np.minimum(sig, block, out=sig)
        return sig.reshape(self.config.num_buckets, -1).tolist()

    def _block_minima(self, block: np.ndarray) -> np.ndarray:
        """Per hash function, the least ``(a*x + b) mod (2**61 - 1)`` over one block of shingles."""
        a, b = self.parameters
        if getattr(self, "_blocks", None) is None:  # two scratch blocks, reused for every document
            self._blocks = (np.empty((_SIGNATURE_BLOCK, a.shape[1]), np.uint64),
                            np.empty((_SIGNATURE_BLOCK, a.shape[1]), np.uint64))
        v, t = self._blocks[0][:len(block)], self._blocks[1][:len(block)]
        np.multiply(block[:, None], a, out=v)
        v += b
        np.right_shift(v, _SHIFT61, out=t)
        v &= _MERSENNE
        v += t  # <= 2**61 + 6: at most one subtraction of the modulus left
        np.subtract(v, _MERSENNE, out=t)
        np.minimum(v, t, out=v)  # v - p wraps above v whenever v < p
        return v.min(axis=0)

    def get_shingles(self, text: str) -> np.ndarray:
        words = simplified_words(text, self.config.norm_config)  # the code word tokenizer: split()
        grams = word_ngrams(words, self.config.n_grams)
        hash_func = xxhash.xxh64_intdigest if self._hash_func is xxhash64 else self._hash_func  # the same, unwrapped
        return np.fromiter(map(hash_func, grams), dtype=np.uint64, count=len(grams)).reshape((-1, 1))


class DedupFilter(CurationStep):
    """Applies the exact and MinHash removal lists to documents and repository files."""

    name = "🫂 dedup filter"
    step_name = "dedup"

    def __init__(self, cfg: DedupConfig, exact_folder: str | None, near_folder: str | None,
                 exclusion_dir: str | None = None):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self.exact_folder = exact_folder
        self.near_folder = near_folder

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        self._exact = _load_removals(self.exact_folder, rank, f"{rank:05d}.remove")
        self._near = _load_removals(self.near_folder, rank, f"{rank:06d}.remove")
        self._i = 0  # unit position (exact lists)
        self._j = 0  # position among units not exactly duplicate (MinHash lists)
        yield from super().run(data, rank, world_size)

    def _verdicts(self, doc: Document) -> Iterator[tuple[Unit, str | None]]:
        for u in safe_units(doc, self.cfg.min_file_chars):
            why = None
            if self._i in self._exact:
                why = "exact_duplicate"
            else:
                if self._j in self._near:
                    why = "near_duplicate"
                self._j += 1
            self._i += 1
            yield u, why

    def process(self, doc: Document) -> None:
        verdicts = list(self._verdicts(doc))  # always consume every unit: positions must stay aligned
        dups = [(u, why) for u, why in verdicts if why]
        if not dups:
            return
        if dups[0][0].span is None:  # a whole document
            raise Drop(dups[0][1])
        total = sum(len(u.text) for u, _ in verdicts)
        dup_chars = sum(len(u.text) for u, _ in dups)
        if dup_chars >= self.cfg.max_repo_duplicate_fraction * total:
            raise Drop("duplicate_repo", f"{dup_chars}/{total} chars in duplicate files")
        for u, why in dups:
            self.exclude_part(doc, doc.text[u.span.start:u.span.end], f"{why}_file", path=u.span.path)
        remove_files(doc, [u.span for u, _ in dups])
        self.changed("dedup_trimmed_files")

