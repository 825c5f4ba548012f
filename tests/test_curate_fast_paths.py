"""The curation steps' fast paths give exactly what the datatrove code they replace gives.

Text simplification (MinHash shingles and benchmark n-grams), letter counts (quality), MinHash signatures:
each is compared with datatrove's own function on real code and on random text mixing ASCII, accents,
combining marks, every punctuation character datatrove knows, other scripts, whitespace of all kinds.
"""

from __future__ import annotations

import json
import random
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from datatrove.data import Document
from datatrove.pipeline.dedup.minhash import MinhashDedupSignature
from datatrove.utils.text import PUNCTUATION_TRANS, TextNormConfig, ngrams, simplify_text

from midtrain.curate.decontam import DecontamConfig, SweBenchNgramFilter
from midtrain.curate.dedup import CodeMinhashSignature, DedupConfig
from midtrain.curate.text import alpha_count, simplified_words, word_ngrams

STDLIB = Path(sysconfig.get_paths()["stdlib"])
ALPHABET = (
    "abcXYZ 0129\n\t\r\x0b\x1c.,;!'\"_-éèüßÅﬁİı\u0301\u0300\u0327\u00a0\u2000\u2003\u200b"
    "٣४Ⅻ🙂‐—«»日本語한"
    "\u037e\u1fed\ufb2c" + "".join(map(chr, PUNCTUATION_TRANS))
)
NORMS = [
    TextNormConfig(),
    TextNormConfig(norm_weekdays=True, norm_monthnames=True),
    TextNormConfig(lowercase=False),
    TextNormConfig(norm_unicode_diacritics=False),
    TextNormConfig(remove_punctuation=False),
]


def random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 80))) for _ in range(n)]


def real_texts() -> list[str]:
    files = sorted(STDLIB.glob("*.py"))[:40] + sorted((STDLIB / "encodings").glob("*.py"))[:10]
    return [p.read_text(errors="replace") for p in files]


@pytest.mark.parametrize("norm", NORMS, ids=lambda n: str(n)[15:60])
def test_simplified_words_are_datatrove_simplify_text_split(norm):
    for text in random_texts(1500) + real_texts() + ["Monday 12.5 ÉCOLE naïve — café", ""]:
        assert simplified_words(text, norm) == simplify_text(text, norm).split(), text[:80]


def test_alpha_count_and_word_ngrams_match_the_plain_definitions():
    for text in random_texts(500, seed=1) + real_texts():
        assert alpha_count(text) == sum(map(str.isalpha, text))
        words = text.split()
        for n in (1, 3, 5):
            assert word_ngrams(words, n) == [" ".join(g) for g in ngrams(words, n)]


def test_minhash_shingles_and_signatures_are_datatrove_s(tmp_path):
    step = CodeMinhashSignature(str(tmp_path), DedupConfig().minhash())
    for text in real_texts()[:15] + random_texts(50, seed=2):
        shingles = step.get_shingles(text)
        assert np.array_equal(shingles, MinhashDedupSignature.get_shingles(step, text))
        if shingles.size:
            assert step.get_signature(shingles) == MinhashDedupSignature.get_signature(step, shingles)
    rng = np.random.default_rng(0)
    for n in (1, 511, 512, 513, 6000):  # block edges; values near 2**64 exercise the wrap-around
        shingles = rng.integers(0, 2**64, size=(n, 1), dtype=np.uint64, endpoint=False)
        assert step.get_signature(shingles) == MinhashDedupSignature.get_signature(step, shingles)


def test_benchmark_ngram_match_is_the_first_matching_ngram_of_the_document(tmp_path):
    """The vocabulary shortcut finds the same n-gram a scan of every n-gram of the document finds."""
    texts = real_texts()
    rng = random.Random(3)
    rows = []
    for i in range(30):
        words = texts[i % len(texts)].split()
        start = rng.randrange(max(1, len(words) - 40))
        rows.append(
            {
                "instance_id": f"o__r-{i}",
                "problem_statement": " ".join(words[start : start + 30]),
                "patch": "+++ b/x.py\n+" + " ".join(words[start + 5 : start + 25]) + "\n",
            }
        )
    inst = tmp_path / "inst.jsonl"
    inst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    step = SweBenchNgramFilter(DecontamConfig(instances=[str(inst)]))
    index = step._load()
    step._index = index
    hits = 0
    for i, text in enumerate(texts + random_texts(20, seed=4)):
        words = simplify_text(text).split()
        every = [" ".join(g) for g in ngrams(words, step.cfg.ngram_size)]
        expected = next((g for g in every if index._hash(g) in index.grams), None)
        doc = Document(text=text, id=str(i), metadata={})
        try:
            step.process(doc)
            found = None
        except Exception as e:  # noqa: BLE001 - Drop carries the match in the metadata
            assert type(e).__name__ == "Drop"
            found = doc.metadata["contaminated_ngram"]
        assert found == expected
        hits += found is not None
    assert hits >= 10


def test_redaction_scans_find_what_the_regular_expressions_find():
    """Keyword, IP and file-header scans by string search == the regular expressions they stand for."""
    from midtrain.curate import secrets as s

    rng = random.Random(5)
    pieces = [
        "pass",
        "passecret",
        "key",
        "tokenkey",
        "AUTH",
        " ",
        "\n",
        "1.2.3.4",
        "10.0.0.255.7",
        "::",
        "fe80::1",
        "2001:db8::ff00:42:8329",
        "a:b:c",
        "dead:beef:",
        ".",
        ":",
        "<|file_sep|>",
        "diff --git a/",
        "x/y.py",
        "tests/t.py",
        "_",
        "9",
        "ab",
        "credential",
        "signature",
    ]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(3000)] + real_texts()
    for text in texts:
        low = text.lower()
        assert s._literal_matches(low, s.KEYWORDS) == [m.span() for m in s.KEYWORD_RE.finditer(low)]
        assert [m.span() for m in s._runs_matching(s.IPV4_CANDIDATE_RE, text, s._IPV4_HINT, s._IPV4_CHARS, 0)] == [
            m.span() for m in s.IPV4_CANDIDATE_RE.finditer(text)
        ]
        assert [m.span() for m in s._runs_matching(s.IPV6_RE, text, s._IPV6_HINT, s._IPV6_CHARS, 1)] == [
            m.span() for m in s.IPV6_RE.finditer(text)
        ]
        assert s._file_headers(text) == [(m.start(), m.group(1)) for m in s._FILE_HEADER_RE.finditer(text)]


def test_blob_prefilter_counts_what_the_blob_pattern_matches():
    from midtrain.curate.quality import _BLOB_RE, _blob_chars

    rng = random.Random(6)
    b64 = "AbZ09+/="
    pieces = ["x", " ", "\n", "é", "日", "0x1f, ", "0X2A,", "_", "-", b64 * 14, b64 * 16, "Q" * 119, "Q" * 121]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 60))) for _ in range(2000)] + real_texts()
    for text in texts:
        assert _blob_chars(text) == sum(len(m.group()) for m in _BLOB_RE.finditer(text))


def test_document_writer_records_are_datatrove_s(tmp_path):
    """DocumentWriter's record of a document is byte for byte the one datatrove's JsonlWriter makes."""
    import orjson
    from datatrove.pipeline.writers import JsonlWriter

    from midtrain.formats.documents import DocumentWriter

    docs = [
        Document(
            text="def f():\n    return 1\n",
            id="repo:a",
            metadata={
                "source": "repo",
                "files": ["a.py"],
                "file_offsets": [0],
                "identity": {"method": "none", "repo": None},
                "loss_spans": [(0, 3)],
                "empty": "",
                "zero": 0,
                "none": None,
            },
        ),
        Document(text="", id="", metadata={}),
        Document(text="x", id="1", metadata={"nested": {"l": [[1, 2]]}}),
    ]
    for expand in (False, True):
        ours = DocumentWriter(str(tmp_path / f"a{expand}"), expand_metadata=expand)
        theirs = JsonlWriter(str(tmp_path / f"b{expand}"), expand_metadata=expand)
        for d in docs:
            assert orjson.dumps(ours.adapter(d)) == orjson.dumps(theirs.adapter(d))
