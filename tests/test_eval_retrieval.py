"""Retrieval probe construction on real code with the real tokenizer: lengths, depths, needle and answer."""

from __future__ import annotations

import pytest
from sft_helpers import code_docs, write_documents

from midtrain.eval.config import RetrievalConfig
from midtrain.eval.retrieval import Haystack, build_samples, read_documents


@pytest.fixture(scope="module")
def tok():
    from midtrain.formats.tokenizer import load_tokenizer

    return load_tokenizer()


def test_samples_have_exact_length_depth_and_a_findable_answer(tmp_path, tok):
    repos = write_documents(tmp_path / "repos", code_docs(3))
    hay = Haystack(read_documents(repos, 100_000), tok)
    cfg = RetrievalConfig(lengths=[256, 1024], depths=[0.0, 0.5, 1.0], samples=2, seed=3)
    samples, skipped = build_samples(cfg, tok, hay, max_positions=4096)
    assert not skipped and len(samples) == 2 * 2 * 3 * 2
    for s in samples:
        assert len(s.ids) == s.length
        assert abs(s.actual_depth - s.depth) < 0.1  # line boundaries: close to the requested depth
        text = tok.decode(s.ids)
        answer = tok.decode(s.ids[-s.answer_len :])
        assert answer.isdigit() and len(answer) == 6
        context = tok.decode(s.ids[: -s.answer_len])
        assert context.endswith("== ") and context.count(answer) == 1  # planted once, asked at the end
        if s.task == "function":
            name = context.rsplit("assert ", 1)[1].split("()")[0]
            assert f"def {name}():\n    return {answer}" in text
        else:
            assert "<|file_sep|>config/" in context and f"_TOKEN = {answer}\n" in context
    # the same seed builds the same probe; another seed another one
    again, _ = build_samples(cfg, tok, hay, max_positions=4096)
    assert [s.ids for s in again] == [s.ids for s in samples]
    other, _ = build_samples(cfg.apply_overrides(["seed=4"]), tok, hay, max_positions=4096)
    assert [s.ids for s in other] != [s.ids for s in samples]


def test_lengths_beyond_the_model_are_skipped_with_a_reason(tmp_path, tok):
    repos = write_documents(tmp_path / "repos", code_docs(1))
    hay = Haystack(read_documents(repos, 50_000), tok)
    samples, skipped = build_samples(
        RetrievalConfig(lengths=[256, 8192], depths=[0.5], samples=1), tok, hay, max_positions=2048
    )
    assert {s.length for s in samples} == {256}
    assert skipped == ["length 8192 > the model's 2048 positions"]


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="retrieval.repos"):
        read_documents(tmp_path, 10)
    from midtrain.config import ConfigError

    with pytest.raises(ConfigError, match="depths"):
        RetrievalConfig(depths=[1.5]).validate()
    with pytest.raises(ConfigError, match="tasks"):
        RetrievalConfig(tasks=["haystack"]).validate()
