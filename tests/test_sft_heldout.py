"""One held-out split per trace set, by task: a midtraining mixture and the probe packed from the same prep dir
hold none of its documents in any training shard, whichever of them decides the split first."""

from __future__ import annotations

import copy
import json

import pytest
from sft_helpers import code_docs, probe_cfg, sample_trace_docs, write_documents

pytestmark = pytest.mark.slow


def _two_attempts() -> list[dict]:
    """Each sample trajectory twice (two attempts at one instance, as agent trace sets hold them)."""
    docs = sample_trace_docs()
    for d in list(docs):
        again = copy.deepcopy(d)
        _, inst, where = d["id"].split(":", 2)
        again["id"] = again["metadata"]["id"] = f"trace:{inst}:retry-{where}"
        docs.append(again)
    return docs


def _pack_mixture(tmp, repos, traces):
    from midtrain.pack.mixture import MixtureConfig
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack

    mix = MixtureConfig(name="swe_like", weights={"repo": 0.9, "trace": 0.1}, max_repeat=4.0)
    cfg = PackConfig(seq_length=512, valid_fraction=0.3, seed=3, tokenize_tasks=1, mixture=mix)
    return pack(cfg, [repos, traces], tmp / "shards").manifest


@pytest.mark.parametrize("first", ["pack", "probe"])
def test_heldout_traces_are_in_no_training_shard(tmp_path, first):
    from midtrain.formats.trace_split import instance_of, read_split, shard_doc_ids
    from midtrain.sft.data import prepare_data

    docs = _two_attempts()
    assert len({instance_of(d["id"]) for d in docs}) == 5 and len(docs) == 10
    repos = write_documents(tmp_path / "prep" / "repos", code_docs(3))
    traces = write_documents(tmp_path / "prep" / "traces", docs)
    cfg = probe_cfg(traces)
    if first == "pack":
        manifest = _pack_mixture(tmp_path, repos, traces)
        probe = prepare_data(cfg, tmp_path / "sft_data")
    else:
        probe = prepare_data(cfg, tmp_path / "sft_data")
        manifest = _pack_mixture(tmp_path, repos, traces)
    split = read_split(traces)
    assert split is not None
    assert split["by"] == "instance" and split["decided_by"] == ("midtrain pack" if first == "pack" else "sft probe")
    held = set(split["heldout_ids"])
    assert held and set(probe["valid_ids"]) == held  # the probe scores exactly the recorded held-out set
    assert len({instance_of(i) for i in held}) == probe["heldout"]["instances"] >= 1
    assert len(held) == 2 * probe["heldout"]["instances"]  # both attempts of a held-out task
    # no held-out document in any training shard: the mixture's (they are in its validation split) and the probe's
    mid_train, mid_valid = shard_doc_ids(tmp_path / "shards", "train"), shard_doc_ids(tmp_path / "shards", "valid")
    assert mid_train and not mid_train & held and held <= mid_valid
    assert {i for i in mid_train | mid_valid if i.startswith("trace:")} == {d["id"] for d in docs}  # none lost
    probe_train = shard_doc_ids(probe["train_shards"], "train")
    assert probe_train and not probe_train & held
    assert not {instance_of(i) for i in probe_train} & {instance_of(i) for i in held}
    # the manifest says how many were left out
    assert manifest["heldout_excluded"]["documents"] == len(held)
    assert manifest["heldout_excluded"]["tokens"] == manifest["heldout_excluded"]["tokens_by_source"]["trace"] > 0
    assert probe["heldout"]["in_probe_training"] == 0


def test_a_probe_fraction_other_than_the_recorded_one_is_refused(tmp_path):
    from midtrain.sft.data import prepare_data, trace_splits

    traces = write_documents(tmp_path / "prep" / "traces", _two_attempts())
    trace_splits(probe_cfg(traces))  # the first probe records the set's split (0.1, the default)
    with pytest.raises(ValueError, match=r"decided with fraction 0\.1 .*asks for 0\.3"):
        prepare_data(probe_cfg(traces, "valid_fraction=0.3"), tmp_path / "b")
    assert json.loads((traces / "heldout.json").read_text())["fraction"] == 0.1
