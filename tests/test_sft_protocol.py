"""Acceptance on CPU: the protocol runs the identical SFT probe + proxy evals on two tiny checkpoints (the
step-0 initialisation and the same model after a short midtraining) and the report's numbers are theirs."""

from __future__ import annotations

import json

import pytest
from sft_helpers import code_docs, sample_trace_docs, write_documents

from midtrain.cli import main
from midtrain.formats.outputs import OutputRefused

pytestmark = pytest.mark.slow

NOT_FOR_THE_PROBE = [  # trace documents the probe must leave out, counted by reason
    {
        "text": "### User\nhi\n",
        "id": "trace:plain",
        "metadata": {"source": "trace", "render_format": "plain", "loss_spans": [[0, 3]]},
    },
    {"text": "def f(): pass\n", "id": "repo:x", "metadata": {"source": "repo"}},
]


def _tiny(run_dir, shards):
    from midtrain.train.config import TrainConfig

    cfg = TrainConfig(name="tiny_mid", run_dir=str(run_dir), seed=11)
    cfg.precision.dtype = "fp32"
    cfg.precision.transformer_impl = "local"
    m = cfg.model
    m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups = 2, 32, 64, 4, 2
    m.max_position_embeddings = 1024  # vocab stays Qwen's: the probe and the haystacks use the real tokenizer
    cfg.data.path, cfg.data.seq_length = str(shards), 512
    cfg.optim.train_steps, cfg.optim.warmup_steps, cfg.optim.global_batch_size = 6, 1, 2
    cfg.optim.lr, cfg.optim.min_lr = 3e-3, 3e-4
    cfg.checkpoint.save_interval = 6
    cfg.log.tensorboard = False
    return cfg.validate()


@pytest.fixture(scope="module")
def protocol_run(tmp_path_factory):
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack
    from midtrain.protocol import ProtocolConfig, protocol_steps, run_protocol
    from midtrain.train import distributed
    from midtrain.train.initial_checkpoint import save_initial_checkpoint
    from midtrain.train.trainer import train
    from recipes import resolve_config

    tmp = tmp_path_factory.mktemp("protocol")
    repos = write_documents(tmp / "prep" / "repos", code_docs())
    traces = write_documents(tmp / "prep" / "traces", sample_trace_docs() + NOT_FOR_THE_PROBE)
    # midtraining packs the trace set too: its held-out traces (the probe's eval set) must stay out
    manifest = pack(
        PackConfig(seq_length=512, valid_fraction=0.3, seed=3, tokenize_tasks=1), [repos, traces], tmp / "shards"
    ).manifest
    assert manifest is not None
    assert manifest["heldout_excluded"]["documents"] >= 1
    assert manifest["splits"]["valid"]["sequences"] > 0
    cfg = _tiny(tmp / "runs" / "mid", tmp / "shards")
    save_initial_checkpoint(cfg, tmp / "runs" / "base")
    result = train(cfg)
    distributed.destroy()
    assert result["exit_code"] == 0

    proto = resolve_config("protocol_demo", ProtocolConfig, "protocol", validate=False)
    proto.output = str(tmp / "protocol")
    proto.report_dir = str(tmp / "report")
    proto.checkpoints = {"base": str(tmp / "runs" / "base"), "midtrained": str(tmp / "runs" / "mid")}
    proto.sft_overrides = [
        f"traces=[{traces}]",
        "train.optim.train_steps=3",
        "train.checkpoint.save_interval=3",
        "train.data.seq_length=512",
    ]
    proto.proxy.shards = str(tmp / "shards")
    proto.proxy.retrieval.repos = str(repos)
    proto.proxy.retrieval.lengths = [128, 256]
    proto.proxy.retrieval.depths = [0.0, 0.5, 1.0]
    proto.validate()
    assert run_protocol(proto, main) == 0
    return tmp, proto, protocol_steps(proto)


def test_identical_probe_from_both_checkpoints(protocol_run):
    import yaml

    from midtrain.sft.probe import final_loss_steps

    tmp, proto, _ = protocol_run
    res = {
        n: json.loads((tmp / "protocol" / n / "sft" / "sft_result.json").read_text()) for n in ("base", "midtrained")
    }
    assert res["base"]["probe_sha"] == res["midtrained"]["probe_sha"]
    assert res["base"]["data_sha"] == res["midtrained"]["data_sha"]
    assert res["base"]["from"] != res["midtrained"]["from"]
    cfgs = {}
    for n in res:
        c = yaml.safe_load((tmp / "protocol" / n / "sft" / "run" / "config.yaml").read_text())
        assert c["init_from"] == proto.checkpoints[n]
        c.pop("init_from"), c.pop("run_dir")
        cfgs[n] = c
    assert cfgs["base"] == cfgs["midtrained"]  # same data, steps, LR schedule, batch, seed, model shape
    for n, r in res.items():
        metrics = [
            json.loads(line)
            for line in (tmp / "protocol" / n / "sft" / "run" / "metrics.jsonl").read_text().splitlines()
        ]
        assert [m["step"] for m in metrics] == [1, 2, 3]
        tail = metrics[-final_loss_steps(len(metrics)) :]
        assert r["final_train_loss"] == sum(m["loss"] for m in tail) / len(tail) and r["final_train_loss_steps"] == 1
        assert r["heldout_tokens"] > 0 and 0 < r["heldout_loss"] < 20
    # different starting weights -> different probe results (the comparison measures something)
    assert res["base"]["heldout_loss"] != res["midtrained"]["heldout_loss"]


def test_proxy_metrics_and_report_come_from_the_runs(protocol_run):
    tmp, proto, _ = protocol_run
    proxy = {
        n: json.loads((tmp / "protocol" / n / "proxy" / "proxy_results.json").read_text())
        for n in ("base", "midtrained")
    }
    for p in proxy.values():
        assert p["heldout"]["per_source"]["repo"]["tokens"] > 0
        cells = p["retrieval"]["cells"]
        assert {(c["task"], c["length"], c["depth"]) for c in cells} == {
            (t, n, d) for t in ("function", "file_constant") for n in (128, 256) for d in (0.0, 0.5, 1.0)
        }
        assert all(0 <= c["accuracy"] <= 1 and c["answer_nll"] > 0 for c in cells)
    # midtraining on this code lowered its held-out loss (6 steps at lr 3e-3 from the same init)
    assert (
        proxy["midtrained"]["heldout"]["per_source"]["repo"]["loss"]
        < proxy["base"]["heldout"]["per_source"]["repo"]["loss"]
    )

    md = (tmp / "report" / "report.md").read_text()
    summary = json.loads((tmp / "report" / "results.json").read_text())
    rows = {r["metric"]: r["values"] for r in summary["rows"]}
    sft = {
        n: json.loads((tmp / "protocol" / n / "sft" / "sft_result.json").read_text()) for n in ("base", "midtrained")
    }
    assert rows["held-out loss, assistant tokens"] == {n: sft[n]["heldout_loss"] for n in sft}
    assert rows["repo"] == {n: proxy[n]["heldout"]["per_source"]["repo"]["loss"] for n in proxy}
    assert rows["answer NLL per token, mean"] == {n: proxy[n]["retrieval"]["answer_nll"] for n in proxy}
    b, m = sft["base"]["heldout_loss"], sft["midtrained"]["heldout_loss"]
    assert f"| held-out loss, assistant tokens | {b:.3f} | {m:.3f} ({m - b:+.3f}" in md
    assert "identical settings for every checkpoint" in md
    held = sft["base"]["heldout"]
    assert (
        held == {**sft["midtrained"]["heldout"], "tokens": held["tokens"]}
        and held["tokens"] == sft["base"]["heldout_tokens"]
    )
    assert held["in_training_shards"] == 0 and held["counted"] == "instances"
    # and by content: every training shard it checked scanned for the held-out traces' n-grams, none above 1%
    assert [s["shards"] for s in held["content_scan"]] == held["checked_training_shards"]
    assert not held["content_leak"] and all(s["heldout_ngrams"] > 0 for s in held["content_scan"])
    assert "Held-out traces by content: no training shard holds more than 1%" in md
    kept = held["excluded_from_pack"][str(tmp / "shards")]
    assert kept["instances"] == held["instances"] and kept["documents"] == held["documents"]
    assert (
        f"Held-out traces: {held['instances']} instances ({held['documents']} documents, {held['tokens']} "
        "assistant tokens scored), split by instance"
    ) in md
    assert (
        f"Kept out of training by the midtraining packs (validation split only): {held['instances']} instances "
        f"({held['documents']} documents)"
    ) in md
    assert "No held-out instance is in any training shard (counted by instances" in md
    for png in ("curves.png", "heldout_loss.png", "retrieval_heatmap.png"):
        assert (tmp / "report" / png).stat().st_size > 5000
    assert "Missing results" not in md


def test_probe_exports_hf_that_scores_like_the_megatron_run(protocol_run):
    """The HF export (what vLLM serves for SWE-bench) gives the same held-out loss as the trained run."""
    from midtrain.eval.heldout import heldout_loss
    from midtrain.eval.scoring import HFScorer

    tmp, _, _ = protocol_run
    res = json.loads((tmp / "protocol" / "midtrained" / "sft" / "sft_result.json").read_text())
    assert res["hf_dir"] and (tmp / "protocol" / "midtrained" / "sft" / "hf" / "config.json").is_file()
    data = json.loads((tmp / "protocol" / "sft_data" / "sft_data.json").read_text())
    held = heldout_loss(HFScorer(res["hf_dir"]), data["valid_shards"], "train")
    assert held["all"]["tokens"] == res["heldout_tokens"]
    assert abs(held["all"]["loss"] - res["heldout_loss"]) < 1e-3


def test_scoring_positions_packing_and_export_parity(protocol_run):
    """Logits of only some positions equal the full logits; packed documents score as if alone; the HF
    export of the probe run gives the megatron run's logits."""
    import torch

    from midtrain.eval.scoring import load_scorer

    tmp, _, _ = protocol_run
    probe = tmp / "protocol" / "midtrained" / "sft"
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 151_000, (96,), generator=g)
    cu = torch.tensor([0, 40, 96], dtype=torch.int32)
    pos = torch.cat([torch.arange(40), torch.arange(56)])
    want = torch.tensor([3, 39, 40, 77, 95])
    full = {}
    for kind, path in (("megatron", probe / "run"), ("hf", probe / "hf")):
        sc = load_scorer(path)
        full[kind] = sc.logits(tokens, pos, cu)
        assert full[kind].shape[0] == 96
        torch.testing.assert_close(sc.logits(tokens, pos, cu, positions=want), full[kind][want], rtol=1e-4, atol=1e-4)
        alone = sc.logits(tokens[40:], torch.arange(56), torch.tensor([0, 56], dtype=torch.int32))
        torch.testing.assert_close(alone, full[kind][40:], rtol=1e-4, atol=1e-4)
    V = min(full["megatron"].shape[1], full["hf"].shape[1])
    torch.testing.assert_close(full["megatron"][:, :V], full["hf"][:, :V], rtol=1e-3, atol=1e-3)


def test_rerun_skips_finished_steps(protocol_run, caplog):
    import logging

    from midtrain.protocol import run_protocol

    tmp, proto, _ = protocol_run
    before = (tmp / "protocol" / "base" / "sft" / "sft_result.json").stat().st_mtime_ns
    with caplog.at_level(logging.INFO):
        assert run_protocol(proto, main) == 0
    assert (tmp / "protocol" / "base" / "sft" / "sft_result.json").stat().st_mtime_ns == before
    assert "complete for these settings; skipped" in caplog.text


def _probe_cfg(tmp, proto):
    from recipes import get_recipe

    return get_recipe(proto.sft_recipe).build([*proto.sft_overrides]).validate()


def test_loss_only_on_assistant_tokens(protocol_run):
    """Through rendering, packing and the reader: every trained token sequence is exactly one assistant turn
    (content + <|im_end|>), every assistant turn is trained, and no system/user/tool token carries loss."""
    from midtrain.formats.shard_reader import PackedDataset
    from midtrain.formats.tokenizer import load_tokenizer
    from midtrain.sft.data import render

    tmp, proto, _ = protocol_run
    stamp = json.loads((tmp / "protocol" / "sft_data" / "sft_data.json").read_text())
    tok = load_tokenizer()
    assert stamp["masks"] is True
    expected, others = [], []
    for d in sample_trace_docs():
        rendered = render(d, tok)
        assert not isinstance(rendered, str), rendered  # every sample trace renders
        text, spans = rendered
        expected += [text[a:b] for a, b in spans]
        last = 0
        for a, b in spans:
            others.append(text[last:a])
            last = b
        others.append(text[last:])
    assert all(e.endswith("<|im_end|>") for e in expected)
    runs = []
    for shards in (stamp["train_shards"], stamp["valid_shards"]):
        ds = PackedDataset(shards, "train")
        for i in range(len(ds)):
            s = ds[i]
            labels = s["labels"].tolist()
            run: list[int] = []
            for p, flag in enumerate(s["loss_mask"].bool().tolist()):
                if flag:
                    run.append(labels[p])
                elif run:
                    runs.append(tok.decode(run))
                    run = []
            if run:
                runs.append(tok.decode(run))
    assert sorted(runs) == sorted(expected)
    joined = "".join(runs)
    for marker in ("<|im_start|>system", "<|im_start|>user", "<|im_start|>assistant", "<tool_response>"):
        assert marker not in joined
    assert any("<|im_start|>system" in o for o in others) and any("<tool_response>" in o for o in others)


def test_probe_data_counts_drops_and_is_pinned(protocol_run):
    from midtrain.sft.data import prepare_data

    tmp, proto, _ = protocol_run
    data_dir = tmp / "protocol" / "sft_data"
    stamp = json.loads((data_dir / "sft_data.json").read_text())
    assert stamp["dropped"] == {"plain_render_without_messages": 1, "not_a_trace": 1}
    assert stamp["train_docs"] + stamp["valid_docs"] == len(sample_trace_docs())
    assert stamp["valid_docs"] >= 1 and not set(stamp["train_ids"]) & set(stamp["valid_ids"])
    cfg = _probe_cfg(tmp, proto)
    assert prepare_data(cfg, data_dir) == stamp  # the same settings reuse the data
    with pytest.raises(OutputRefused, match="other settings"):
        prepare_data(cfg.apply_overrides(["pad_multiple=2"]), data_dir)
    with pytest.raises(ValueError, match="held-out split was decided with fraction"):
        prepare_data(cfg.apply_overrides(["valid_fraction=0.5"]), data_dir)  # one split per trace set


def test_protocol_rerun_with_another_checkpoint_recomputes(protocol_run):
    """A checkpoint path changed in the protocol: its probe is rerun (not the old number reported)."""
    from midtrain.protocol import run_protocol

    tmp, proto, _ = protocol_run
    res = lambda n: json.loads((tmp / "protocol" / n / "sft" / "sft_result.json").read_text())  # noqa: E731
    mid = res("midtrained")
    old_base = res("base")
    moved = proto.apply_overrides([f"checkpoints.base={proto.checkpoints['midtrained']}"]).validate()
    assert run_protocol(moved, main, only=["base"]) == 0
    new_base = res("base")
    assert new_base["from"] == mid["from"] and new_base["start_id"] == mid["start_id"]
    assert new_base["heldout_loss"] == mid["heldout_loss"] != old_base["heldout_loss"]  # same start, same number
    rows = {r["metric"]: r["values"] for r in json.loads((tmp / "report" / "results.json").read_text())["rows"]}
    assert rows["held-out loss, assistant tokens"]["base"] == new_base["heldout_loss"]
