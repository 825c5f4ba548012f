"""Text helpers the curation steps share: a whitespace word tokenizer for code, entropy, letter counts, and
datatrove's normalised words and word n-grams made faster (MinHash shingles, benchmark n-grams)."""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter

from datatrove.utils.text import (
    DEF_TEXT_NORM_CONFIG,
    MONTHS_PATTERN,
    NUMBERS_PATTERN,
    PUNCTUATION_TRANS,
    WEEKDAYS_PATTERN,
    TextNormConfig,
    simplify_text,
)
from datatrove.utils.word_tokenizers import WordTokenizer


class CodeWordTokenizer(WordTokenizer):
    """Whitespace word tokenizer for code and logs (datatrove's default English one needs spaCy)."""

    def __init__(self) -> None:
        super().__init__("code")

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return text.splitlines()

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in re.finditer(r"\S+", text)]


def shannon_entropy(s: str) -> float:
    if not s:
        return 0.0
    counts = Counter(s)
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_ASCII_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))


def alpha_count(text: str) -> int:
    """How many characters of ``text`` are letters (``str.isalpha``); ASCII text is counted in C."""
    if text.isascii():
        raw = text.encode("ascii")
        return len(raw) - len(raw.translate(None, _ASCII_LETTERS))
    return sum(map(str.isalpha, text))


# ----------------------------------------------------------------------------------------------------------
# normalised words and word n-grams (MinHash shingles, benchmark n-grams)

# datatrove's punctuation table: ASCII punctuation as a bytes table (UTF-8 multi-byte sequences hold no ASCII
# byte, so it applies to the encoded text), the rest as a character class
_ASCII_PUNCT = bytes(32 if i in PUNCTUATION_TRANS else i for i in range(128)) + bytes(range(128, 256))
_WIDE_PUNCT_RE = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(PUNCTUATION_TRANS) if c >= 128) + "]")


_ASCII_NUMBERS_RE = re.compile(r"[0-9]+(?:[.,][0-9]+)?")
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]+")


class _MarksTable(dict):
    """str.translate table deleting the code points of category Mn (nonspacing marks: the diacritics NFD
    splits off), filled in as characters are met: a text meets few of the 1.1 million code points."""

    def __missing__(self, code: int) -> int | None:
        kept = None if unicodedata.category(chr(code)) == "Mn" else code
        self[code] = kept
        return kept


_DROP_MARKS = _MarksTable()


def _without_marks(match: re.Match) -> str:
    return match.group().translate(_DROP_MARKS)


def simplified_words(text: str, norm: TextNormConfig = DEF_TEXT_NORM_CONFIG) -> list[str]:
    """``datatrove.utils.text.simplify_text(text, norm).split()``: the same words, in the same order, made
    without datatrove's per-character loops (a C translate for ASCII text, which has no diacritics to strip;
    the UTF-8 bytes and regular expressions otherwise). The steps keep datatrove's order: lower case,
    numbers, weekdays, months, punctuation to spaces, then diacritics (NFD, nonspacing marks dropped)."""
    if not (norm.remove_punctuation and norm.norm_whitespace):
        return simplify_text(text, norm).split()
    if norm.lowercase:
        text = text.lower()
    if norm.norm_numbers:  # in ASCII text NUMBERS_PATTERN's digits and separators are these: the faster re module
        text = (_ASCII_NUMBERS_RE if text.isascii() else NUMBERS_PATTERN).sub("0", text)
    if norm.norm_weekdays:
        text = WEEKDAYS_PATTERN.sub("WEEKDAY", text)
    if norm.norm_monthnames:
        text = MONTHS_PATTERN.sub("MONTH", text)
    if text.isascii():
        return text.translate(PUNCTUATION_TRANS).split()
    text = text.encode("utf-8", "surrogatepass").translate(_ASCII_PUNCT).decode("utf-8", "surrogatepass")
    text = _WIDE_PUNCT_RE.sub(" ", text)
    if norm.norm_unicode_diacritics:  # whitespace never decomposes into anything else, nor anything into it
        text = _NON_ASCII_RE.sub(_without_marks, unicodedata.normalize("NFD", text))
    return text.split()


def word_ngrams(words: list[str], n: int) -> list[str]:
    """Every window of ``n`` consecutive words, joined by single spaces (datatrove's n-gram strings)."""
    return list(map(" ".join, zip(*[words[k:] for k in range(n)])))
