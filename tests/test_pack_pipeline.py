"""`midtrain pack` end to end on real tokenizer, real datatrove and megatron-core indexed files: nothing lost,
splits only when over-long and at natural boundaries, deterministic, masks honoured, mixture reported."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pack_helpers import commit_doc, pack_manifest, repo_doc, trace_doc, write_prep

from midtrain.formats.outputs import OutputRefused
from midtrain.formats.shard_reader import PackedDataset
from midtrain.formats.tokenizer import load_tokenizer
from midtrain.pack.pack_step import PackConfig
from midtrain.pack.pipeline import pack

S = 1024
pytestmark = pytest.mark.slow  # each pack run tokenizes and packs for real (seconds)


@pytest.fixture(scope="module")
def prep(tmp_path_factory):
    root = tmp_path_factory.mktemp("prep")
    rng = random.Random(0)
    repos = [repo_doc(i, rng) for i in range(24)]
    traces = [trace_doc(i) for i in range(12)]
    commits = [commit_doc(i, rng) for i in range(40)]
    dirs = {
        "repos": write_prep(root / "repos", repos, files=2),
        "traces": write_prep(root / "traces", [d for d, _ in traces]),
        "commits": write_prep(root / "commits", commits, files=3),
    }
    texts = {d.id: d.text for d in repos + commits + [t for t, _ in traces]}
    answers = {d.id: a for d, a in traces}
    return dirs, texts, answers


@pytest.fixture(scope="module")
def packed(prep, tmp_path_factory):
    dirs, _, _ = prep
    out = tmp_path_factory.mktemp("shards")
    cfg = PackConfig(seq_length=S, valid_fraction=0.15, tasks=2, seed=7)
    manifest = pack_manifest(cfg, list(dirs.values()), out)
    return out, manifest


def _sequences(ds):
    for i in range(len(ds)):
        yield ds[i], ds.pieces(i)


def test_nothing_lost_and_exact_lengths(prep, packed):
    dirs, texts, _ = prep
    out, m = packed
    tok = load_tokenizer()
    expected = sum(len(tok.encode(t, add_special_tokens=False)) + 1 for t in texts.values())  # + EOS each
    total = m["splits"]["train"]["tokens"] + m["splits"]["valid"]["tokens"]
    repeated = m["splits"]["train"]["repeated_header_tokens"] + m["splits"]["valid"]["repeated_header_tokens"]
    assert repeated > 0  # split repositories' later pieces start with the repository header again
    assert total - repeated == expected == m["input_tokens"]
    for split in ("train", "valid"):
        sp = m["splits"][split]
        assert sp["selected_tokens"] == sp["tokens"]
        assert sp["tokens"] + sp["padding_tokens"] == sp["sequences"] * S
        ds = PackedDataset(out, split)
        assert len(ds) == sp["sequences"]
        real = 0
        for x, rows in _sequences(ds):
            assert x["tokens"].shape == (S,) and int(x["cu_seqlens"][-1]) == S
            real += int(rows["tokens"][rows["source"] >= 0].sum())
        assert real == sp["tokens"]
    assert set(m["sources"]) == {"commit", "repo", "trace"}
    assert m["sources"]["repo"]["tokens"] + m["sources"]["repo"]["valid_tokens"] - repeated == sum(
        len(tok.encode(t, add_special_tokens=False)) + 1 for k, t in texts.items() if k.startswith("repo")
    )
    assert m["masks"] is True and m["tokenizer"]["hash"] and m["config"]["seq_length"] == S


def test_split_only_overlong_at_boundaries_and_docs_roundtrip(prep, packed):
    _, texts, _ = prep
    out, m = packed
    tok = load_tokenizer()
    lengths = {k: len(tok.encode(t, add_special_tokens=False)) + 1 for k, t in texts.items()}
    assert m["split_documents"] + m["splits"]["valid"]["split_documents"] == sum(n > S for n in lengths.values()) > 0
    seen: dict[str, list] = {}
    for split in ("train", "valid"):
        ds = PackedDataset(out, split)
        docs = {}
        for shard in ds._shards:
            docs[str(shard.prefix)] = (shard.prefix.parent / f"{shard.prefix.name}.docs.txt").read_text().split()
        for i in range(len(ds)):
            shard, _ = ds.locate(i)
            x, rows = ds[i], ds.pieces(i)
            starts = np.concatenate([[0], np.cumsum(np.diff(x["cu_seqlens"].numpy()))])[:-1]
            for row, start in zip(rows, starts):
                if row["source"] < 0:
                    continue
                doc_id = docs[str(shard.prefix)][row["doc"]]
                piece = x["tokens"][start : start + row["tokens"]].tolist()
                seen.setdefault(doc_id, []).append((split, int(row["part"]), int(row["parts"]), piece))
    assert set(seen) == set(texts)
    for doc_id, parts in seen.items():
        assert len({p[0] for p in parts}) == 1, f"{doc_id} is in both splits"
        parts.sort(key=lambda p: p[1])
        n_parts = parts[0][2]
        assert [p[1] for p in parts] == list(range(n_parts))
        assert (n_parts > 1) == (lengths[doc_id] > S)
        if doc_id.startswith("repo") and n_parts > 1:  # later pieces repeat the repository header
            header = tok.encode(texts[doc_id][: texts[doc_id].index("<|file_sep|>")], add_special_tokens=False)
            for p in parts[1:]:
                assert p[3][: len(header)] == header
                p[3][: len(header)] = []
        ids = [t for p in parts for t in p[3]]
        assert tok.decode(ids[:-1]) == texts[doc_id] and ids[-1] == tok.eos_token_id
        for p in parts[1:]:  # each later piece starts a file or a commit (or a file's diff), else a line
            first = tok.decode(p[3][:3])
            prev = tok.decode(parts[p[1] - 1][3][-1:])
            assert first.startswith(("<|file_sep|>", "commit ", "diff --git")) or prev.endswith("\n"), (
                doc_id,
                p[1],
                prev,
                first,
            )


def test_trace_loss_mask_covers_assistant_answer_only(prep, packed):
    _, texts, answers = prep
    out, _ = packed
    tok = load_tokenizer()
    checked = 0
    for split in ("train", "valid"):
        ds = PackedDataset(out, split)
        trace_source = list(ds.manifest["sources"]).index("trace")
        for i in range(len(ds)):
            x = ds[i]
            on = x["loss_mask"] > 0
            src = x["source_ids"]
            for k in range(len(x["cu_seqlens"]) - 1):
                a, b = int(x["cu_seqlens"][k]), int(x["cu_seqlens"][k + 1])
                if int(src[a]) != trace_source:
                    if int(src[a]) >= 0:
                        assert on[a : b - 1].all() and not on[b - 1]
                    continue
                trained = x["labels"][a:b][on[a:b]].tolist()
                text = tok.decode(trained)
                # the labels trained on are exactly the assistant answer (+ EOS)
                assert text.endswith("<|endoftext|>") and text[: -len("<|endoftext|>")] in answers.values()
                checked += 1
    assert checked == 12


def test_deterministic_and_seeded(prep, packed, tmp_path):
    dirs, _, _ = prep
    out, m = packed
    cfg = PackConfig(seq_length=S, valid_fraction=0.15, tasks=2, seed=7)
    pack(cfg, list(dirs.values()), tmp_path / "again")
    for name in ("train/00000.bin", "train/00001.bin", "valid/00000.bin", "train/00000.mask.bin"):
        assert (out / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    other = pack_manifest(
        PackConfig(seq_length=S, valid_fraction=0.15, tasks=2, seed=8), list(dirs.values()), tmp_path / "other"
    )
    assert (out / "train/00000.bin").read_bytes() != (tmp_path / "other" / "train/00000.bin").read_bytes()
    assert other["input_tokens"] == m["input_tokens"]
    # A rerun with the same configuration and inputs does nothing.
    assert pack_manifest(cfg, list(dirs.values()), out)["created"] == m["created"]


def test_mixture_targets_repeats_and_cap(prep, tmp_path):
    from midtrain.pack.mixture import MixtureConfig

    dirs, _, _ = prep
    mix = MixtureConfig(name="t", tokens={"trace": 0}, weights={"repo": 1.0, "commit": 1.0}, max_repeat=2.0)
    cfg = PackConfig(seq_length=S, valid_fraction=0.0, tasks=1, seed=1, mixture=mix)
    m = pack_manifest(cfg, list(dirs.values()), tmp_path / "mix")
    src = m["sources"]
    assert src["trace"]["tokens"] == 0 and src["trace"]["target_tokens"] == 0
    # equal weights: both get the same target; the smaller source (commit) is repeated up to the cap
    assert src["repo"]["target_tokens"] == src["commit"]["target_tokens"]
    assert (
        src["commit"]["rate"] == pytest.approx(2.0) and src["commit"]["tokens"] == 2 * src["commit"]["available_tokens"]
    )
    assert 0.7 < src["repo"]["tokens"] / src["repo"]["target_tokens"] < 1.3
    assert m["splits"]["train"]["selected_tokens"] == m["tokens"]


def test_bad_inputs_are_clear(prep, tmp_path):
    dirs, _, _ = prep
    with pytest.raises(FileNotFoundError, match="midtrain prep"):
        pack(PackConfig(seq_length=S), [tmp_path / "nothing"], tmp_path / "o")
    (tmp_path / "theirs" / "train").mkdir(parents=True)  # someone else's data: never deleted
    with pytest.raises(OutputRefused, match="not a `midtrain pack` output"):
        pack(PackConfig(seq_length=S), [dirs["traces"]], tmp_path / "theirs")
    assert (tmp_path / "theirs" / "train").is_dir()
    from midtrain.config import ConfigError

    with pytest.raises(ConfigError, match="pad_multiple"):
        PackConfig(seq_length=1000, pad_multiple=16).validate()


def test_small_vocab_tokenizer_file_packs_uint16(prep, tmp_path):
    """A local tokenizer.json (a real byte-level BPE trained here) with a small vocabulary gives uint16 shards."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    dirs, texts, _ = prep
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        list(texts.values()),
        trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=["<|endoftext|>", "<|file_sep|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    m = pack_manifest(
        PackConfig(seq_length=S, tasks=1, tokenizer=str(path), valid_fraction=0.0),
        [dirs["commits"]],
        tmp_path / "small",
    )
    assert m["dtype"] == "uint16" and m["eos_id"] == tok.token_to_id("<|endoftext|>")
    assert m["tokenizer"]["file"] == str(path)
    ds = PackedDataset(tmp_path / "small")
    x, rows = ds[0], ds.pieces(0)
    first = x["tokens"][: rows["tokens"][0]].tolist()
    assert first[-1] == m["eos_id"] and tok.decode(first[:-1]) in texts.values()
    assert (tmp_path / "small" / "train" / "00000.bin").stat().st_size == 2 * len(ds) * S


def test_tokenize_cache_reused_and_invalidated(tmp_path):
    rng = random.Random(5)
    docs = [commit_doc(i, rng) for i in range(6)]
    prep_dir = write_prep(tmp_path / "commits", docs)
    cfg = PackConfig(seq_length=S, valid_fraction=0.0)
    m1 = pack_manifest(cfg, [prep_dir], tmp_path / "a")
    (stamp,) = (prep_dir / "tokenized").glob("*/complete.json")
    before = stamp.stat().st_mtime_ns
    pack(PackConfig(seq_length=2 * S, valid_fraction=0.0), [prep_dir], tmp_path / "b")  # same tokenizer: cached
    assert stamp.stat().st_mtime_ns == before
    import shutil

    shutil.rmtree(prep_dir / "documents")
    write_prep(prep_dir, docs + [commit_doc(99, rng)])  # the documents changed: retokenized
    with pytest.raises(OutputRefused, match="--overwrite"):  # the finished output of the old inputs is kept
        pack(cfg, [prep_dir], tmp_path / "a")
    m3 = pack_manifest(cfg, [prep_dir], tmp_path / "a", overwrite=True)
    assert m3["input_documents"] == m1["input_documents"] + 1 and m3["run_key"] != m1["run_key"]


def test_a_weighted_source_missing_from_the_inputs_does_not_empty_the_mixture():
    from midtrain.pack.mixture import MixtureConfig, plan_mixture

    cfg = MixtureConfig(name="m", weights={"repo": 0.5, "pr": 0.3, "buildlog": 0.2}, max_repeat=2.0)
    plans = plan_mixture(cfg, {"repo": 1000, "pr": 300})  # no build logs in the inputs
    assert plans["repo"].target > 0 and plans["pr"].target > 0
    assert plans["repo"].target / plans["pr"].target == pytest.approx(0.5 / 0.3, rel=0.01)
    assert plans["buildlog"].available == 0  # reported as missing, not silently zeroing the others
    with pytest.raises(ValueError, match="none of its weighted sources"):
        plan_mixture(cfg, {"trace": 100})
