"""Exact and near-duplicate removal across all tasks of a prep run, per document and per repository file.

The unit of deduplication is a *unit*: a whole document, or, for repository documents, each file (so forks
and vendored copies collapse file by file). Units are listed in the same order by every stage that reads
the filtered documents, so a unit is named by (task rank, position), as datatrove's MinHash expects:

1. ``dedup_hash``      datatrove ExactDedupSignature: every task writes the whitespace-normalised content hash
                       (xxhash64) of its units, sorted and split into one file per finder task (hash range);
2. ``dedup_exact``     datatrove ExactFindDedups, ``finder_tasks`` tasks: each merges its hash range over all
                       tasks' files and lists every copy but the one with the smallest stable key (below);
3. ``dedup_sig``       every task computes datatrove MinHash signatures of the units still in play
                       (a whitespace word tokenizer: no spaCy);
4. ``dedup_buckets``   datatrove MinhashDedupBuckets, one task per bucket;
5. ``dedup_cluster``   datatrove MinhashDedupCluster (one task), then in each cluster the unit with the
                       smallest stable key is kept, as in the exact step;
6. ``dedup_filter``    every task drops duplicate documents (``dropped_exact_duplicate``,
                       ``dropped_near_duplicate``), cuts duplicate files out of repositories
                       (``removed_exact_duplicate_file`` ...) and drops a repository when (almost) all of it
                       is duplicate (``dropped_duplicate_repo``: a fork) - a rule on one document at a time,
                       given the removal lists, so it needs no state shared between tasks.

Only ``dedup_cluster`` is one task (as in datatrove); its memory is the near-duplicate units, not all units.
"""

from __future__ import annotations

import heapq
import logging
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import xxhash
from datatrove.data import Document, DocumentsPipeline
from datatrove.io import get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.dedup.exact_dedup import ExactDedupConfig, ExactDedupSignature, ExactFindDedups
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
from datatrove.utils.binaryio import read_tuples_from_file
from datatrove.utils.hashes.xxhash import xxhash64
from datatrove.utils.hashing import HashConfig, create_hash_func
from datatrove.utils.typeshelper import ExtensionHelperSD

from midtrain.config import Config, require
from midtrain.curate.base import CurationStep, Drop, FileSpan, is_repo_doc, remove_files, repo_files
from midtrain.curate.text import CodeWordTokenizer, simplified_words, word_ngrams

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
    finder_tasks: int = 0  # exact-dedup finder tasks (hash ranges); 0: as many as the prep run has tasks

    def check(self) -> None:
        require(self.ngrams >= 1, "ngrams", "must be >= 1")
        require(
            self.num_buckets >= 1 and self.hashes_per_bucket >= 1,
            "num_buckets",
            "num_buckets and hashes_per_bucket must be >= 1",
        )
        require(0.0 < self.max_repo_duplicate_fraction <= 1.0, "max_repo_duplicate_fraction", "must be in (0, 1]")
        require(self.finder_tasks >= 0, "finder_tasks", "must be >= 0 (0: as many as the prep run's tasks)")

    def minhash(self) -> MinhashConfig:
        return MinhashConfig(
            n_grams=self.ngrams,
            num_buckets=self.num_buckets,
            hashes_per_bucket=self.hashes_per_bucket,
            seed=self.seed,
            hash_config=HashConfig(precision=64, hash_fc="xxhash"),
        )


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
                block = doc.text[f.start : f.end]
                first, _, rest = block.partition("\n")
                body = rest if f.path and f.path in first else block
                if len(body.strip()) >= min_file_chars:
                    out.append(Unit(body, f))
            return out
    text = doc.text
    span = doc.metadata.get("context_span") if doc.metadata.get("source") == "pr" else None
    if (
        isinstance(span, list)
        and len(span) == 2
        and all(isinstance(o, int) for o in span)
        and 0 <= span[0] <= span[1] <= len(text)
    ):
        # a pull request's own text: the files read at its base commit are shared by every PR of the
        # repository, and compared whole they make different work look the same (the PR is still cut whole)
        text = text[: span[0]] + text[span[1] :]
    return [Unit(text, None)] if text.strip() else []


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
# exact: datatrove's sharded exact dedup (signatures -> finder tasks per hash range -> removal lists)
#
# Which copy is kept: the unit with the smallest (content hash, document key, unit index in its document), where
# the document key is xxhash64 of the document's id and text. Nothing in it depends on where the document sits
# (task, file, position), so every task count keeps the same copies. All duplicate files of one document share
# its key, so a fork loses all its shared files to the same original and is dropped whole (duplicate_repo).
# datatrove's own finder keeps the copy with the highest 16-bit priority, then the lowest position in its task's
# file, which depends on the task count. So the subclasses below write a wider record (hash, key, part, position)
# and keep by it; datatrove's stage structure and file layout (hash-range folders, .c4_sig, .c4_dup) stay.

SIG_EXT, DUP_EXT = ExtensionHelperSD.stage_1_signature, ExtensionHelperSD.stage_2_duplicates
SIG_DTYPE = np.dtype([("hash", "<u8"), ("key", "<u8"), ("part", "<u4"), ("unit", "<u4")])


def _unit_text(doc: Document) -> str:  # datatrove's content getter (unused: units are hashed by exact_hash)
    return doc.text


def document_key(doc: Document) -> int:
    """The stable tie-break between exact copies: the lower key keeps its copy."""
    return _exact_hash(f"{doc.id}\0{doc.text}")


class ExactUnitSignature(ExactDedupSignature):
    """datatrove's exact-dedup stage 1 over dedup units: per task, one sorted signature file per finder task
    (``<finder:04d>/<rank:05d>.c4_sig``, split by hash range), records (hash, document key, part, unit position)."""

    name = "💥 exact signatures"

    def __init__(self, output_folder: str, min_file_chars: int, finder_workers: int):
        super().__init__(output_folder, ExactDedupConfig(content_getter=_unit_text), finder_workers)
        self.min_file_chars = min_file_chars

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        hashes, keys, parts = array("Q"), array("Q"), array("I")  # 20 bytes a unit until saved
        for doc in data or []:
            with self.track_time():
                key = document_key(doc)
                for part, u in enumerate(safe_units(doc, self.min_file_chars)):
                    hashes.append(exact_hash(u.text))
                    keys.append(key)
                    parts.append(part)
                    self.stat_update("units")
        sigs = np.empty(len(hashes), dtype=SIG_DTYPE)
        sigs["hash"], sigs["key"], sigs["part"], sigs["unit"] = hashes, keys, parts, np.arange(len(hashes))
        self.save_hashes(rank, sigs)
        if False:  # a generator step that yields nothing (the stage ends here)
            yield

    def save_hashes(self, rank: int, signatures: np.ndarray) -> None:
        sigs = np.sort(signatures, order=["hash", "key", "part", "unit"])
        per_worker = np.iinfo(np.uint64).max // self.finder_workers
        bounds = np.array([(w + 1) * per_worker for w in range(self.finder_workers - 1)], dtype=np.uint64)
        for w, chunk in enumerate(np.split(sigs, np.searchsorted(sigs["hash"], bounds, side="right"))):
            with self.output_folder.open(f"{w:04d}/{rank:05d}{SIG_EXT}", mode="wb") as f:
                f.write(chunk.tobytes())


class ExactUnitFind(ExactFindDedups):
    """datatrove's exact-dedup stage 2, one task per hash range: merges that range's sorted signature files and
    writes the positions of every copy but the one with the smallest key (``<finder:05d>/<rank:05d>.c4_dup``).
    Its memory is one buffered record per signature file, whatever the number of units."""

    name = "💥 exact find"

    def __init__(self, signature_folder: str, output_folder: str):
        super().__init__(signature_folder, output_folder, ExactDedupConfig(content_getter=_unit_text))

    def _records(self, name: str) -> Iterator[tuple[int, int, int, str, int]]:
        stem = name.rsplit("/", 1)[-1].removesuffix(SIG_EXT)
        with self.data_folder.open(name, "rb") as f:
            for h, key, part, unit in read_tuples_from_file(f, "QQII", lines_to_buffer=1024):
                yield h, key, part, stem, unit

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        if self.data_folder.exists(f"{world_size:04d}"):
            raise ValueError(
                f"exact dedup: signatures in {self.data_folder.path} were split for more than "
                f"{world_size} finder tasks; run the finder with as many tasks as finder_workers"
            )
        names = self.data_folder.list_files(subdirectory=f"{rank:04d}", glob_pattern="*" + SIG_EXT)
        last = None
        with self.track_time(), self.output_folder.get_output_file_manager(mode="wb") as out:
            for h, _key, _part, stem, unit in heapq.merge(*(self._records(n) for n in sorted(names))):
                self.stat_update("units")
                if h == last:
                    out.write(f"{rank:05d}/{stem}{DUP_EXT}", struct.pack("<I", unit))
                    self.stat_update("exact_duplicates")
                last = h
        if False:
            yield


def exact_removals(folder: str | None, rank: int) -> set[int]:
    """The unit positions of task ``rank`` that are exact duplicates, from every finder task's output."""
    if not folder:
        return set()
    df = get_datafolder(folder)
    out: set[int] = set()
    for name in df.list_files(glob_pattern=f"*/{rank:05d}{DUP_EXT}"):
        with df.open(name, "rb") as f:
            out.update(np.frombuffer(f.read(), dtype="<u4").tolist())
    return out


# ----------------------------------------------------------------------------------------------------------
# near: MinHash over the units still in play


def _load_removals(folder: str | None, name: str) -> set[int]:
    if not folder:
        return set()
    df = get_datafolder(folder)
    if not df.exists(name):
        return set()
    with df.open(name, "rb") as f:
        return set(np.frombuffer(f.read(), dtype="<u4").tolist())


KEY_DTYPE = np.dtype([("key", "<u8"), ("part", "<u4")])


class NearDupUnits(PipelineStep):
    """Turns each document into its units (minus exact duplicates) for the MinHash signature step, and writes
    each unit's stable key (document key, part) in the same order to ``<keys_folder>/<rank:06d>.keys``."""

    type = "🫂 - DEDUP"
    name = "🧩 units"

    def __init__(self, exact_folder: str | None, keys_folder: str, min_file_chars: int):
        super().__init__()
        self.exact_folder = exact_folder
        self.keys_folder = keys_folder
        self.min_file_chars = min_file_chars

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        exact = exact_removals(self.exact_folder, rank)
        i, keys = 0, []
        for doc in data or []:
            key = document_key(doc)
            for part, u in enumerate(safe_units(doc, self.min_file_chars)):
                if i not in exact:
                    keys.append((key, part))
                    yield Document(text=u.text, id=f"{doc.id}#{u.span.path if u.span else ''}")
                i += 1
        with get_datafolder(self.keys_folder).open(f"{rank:06d}.keys", "wb") as f:
            f.write(np.array(keys, dtype=KEY_DTYPE).tobytes())


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
            block = self._block_minima(x[i : i + _SIGNATURE_BLOCK])
            sig = block if sig is None else np.minimum(sig, block, out=sig)
        assert sig is not None, "no shingles: no signature"  # as before (it failed on None.reshape)
        return sig.reshape(self.config.num_buckets, -1).tolist()

    def _block_minima(self, block: np.ndarray) -> np.ndarray:
        """Per hash function, the least ``(a*x + b) mod (2**61 - 1)`` over one block of shingles."""
        a, b = self.parameters
        if getattr(self, "_blocks", None) is None:  # two scratch blocks, reused for every document
            self._blocks = (
                np.empty((_SIGNATURE_BLOCK, a.shape[1]), np.uint64),
                np.empty((_SIGNATURE_BLOCK, a.shape[1]), np.uint64),
            )
        v, t = self._blocks[0][: len(block)], self._blocks[1][: len(block)]
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


class NearKeepSmallestKey(PipelineStep):
    """After datatrove's MinhashDedupCluster (``save_cluster_id=True``), in the same task: in each cluster of
    near duplicates, keeps the unit with the smallest (document key, part), as the exact step does, instead of
    the cluster's union-find root (a position, which depends on the task count); writes ``<rank:06d>.remove``.
    Its memory is the members of the clusters, as the cluster step's own."""

    type = "🫂 - DEDUP"
    name = "🎯 near keep"

    def __init__(self, cluster_folder: str, keys_folder: str, output_folder: str):
        super().__init__()
        self.cluster_folder, self.keys_folder, self.output_folder = cluster_folder, keys_folder, output_folder

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        clusters, keys_df = get_datafolder(self.cluster_folder), get_datafolder(self.keys_folder)
        members: dict[int, list[tuple[int, int, int, int]]] = {}
        with self.track_time():
            for name in clusters.list_files(glob_pattern="*.clusters"):
                file = int(name.split(".")[0])
                with clusters.open(name, "rb") as f:
                    pairs = np.frombuffer(f.read(), dtype="<u4").reshape(-1, 2)
                with keys_df.open(f"{file:06d}.keys", "rb") as f:
                    keys = np.frombuffer(f.read(), dtype=KEY_DTYPE)
                for doc, cluster in pairs.tolist():
                    members.setdefault(cluster, []).append((int(keys[doc]["key"]), int(keys[doc]["part"]), file, doc))
            with get_datafolder(self.output_folder).get_output_file_manager(mode="wb") as out:
                for group in members.values():
                    self.stat_update("clusters")
                    for _key, _part, file, doc in sorted(group)[1:]:
                        out.write(f"{file:06d}.remove", struct.pack("<I", doc))
                        self.stat_update("to_remove")
        if False:
            yield


class DedupFilter(CurationStep):
    """Applies the exact and MinHash removal lists to documents and repository files."""

    name = "🫂 dedup filter"
    step_name = "dedup"

    def __init__(
        self, cfg: DedupConfig, exact_folder: str | None, near_folder: str | None, exclusion_dir: str | None = None
    ):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self.exact_folder = exact_folder
        self.near_folder = near_folder

    def run(self, data: DocumentsPipeline, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        self._exact = exact_removals(self.exact_folder, rank)
        self._near = _load_removals(self.near_folder, f"{rank:06d}.remove")
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
        # file units from here: a document is one whole-document unit (returned above) or its file units
        spans = [(u.span, why) for u, why in dups if u.span is not None]
        for span, why in spans:
            self.exclude_part(doc, doc.text[span.start : span.end], f"{why}_file", path=span.path)
        remove_files(doc, [span for span, _ in spans])
        self.change("dedup_trimmed_files")
