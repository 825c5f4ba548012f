"""lm-evaluation-harness wiring: the demo model's step-0 checkpoint is exported to HF and scored by lm-eval on
the shipped local code task (no network); lm-eval's accuracy equals the argmax of our own choice likelihoods."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_lm_eval_on_demo_checkpoint_matches_own_likelihoods(tmp_path):
    import torch
    from recipe_helpers import train_recipe
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from midtrain.cli import main
    from midtrain.eval.lm_eval_job import LOCAL_DATA
    from midtrain.train.initial_checkpoint import save_initial_checkpoint

    cfg = train_recipe("demo_tiny")
    save_initial_checkpoint(cfg, tmp_path / "base")
    out = tmp_path / "lm_eval"
    assert main(["eval", "lm-eval", "--checkpoint", str(tmp_path / "base"), "--output", str(out), "limit=5"]) == 0
    res = json.loads((out / "lm_eval_results.json").read_text())
    assert (out / "hf" / "config.json").exists() and res["hf"] == str(out / "hf")
    acc = res["tasks"]["midtrain_code_mc"]["acc"]

    # the same 5 documents scored here: sum of log-probs of each choice's tokens after the context
    tok = AutoTokenizer.from_pretrained(out / "hf")
    model = AutoModelForCausalLM.from_pretrained(out / "hf", dtype="auto").eval()  # as lm-eval loads it
    docs = [json.loads(line) for line in (LOCAL_DATA / "code_mc.jsonl").read_text().splitlines()][:5]
    hits = 0
    for d in docs:
        ctx = tok(d["context"])["input_ids"]
        scores = []
        for choice in d["choices"]:
            whole = tok(d["context"] + choice)["input_ids"]
            cont = whole[len(ctx) :]
            with torch.no_grad():
                logp = model(torch.tensor([whole])).logits[0].log_softmax(-1)
            scores.append(sum(logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont)))
        hits += max(range(len(scores)), key=scores.__getitem__) == d["gold"]
    assert acc == pytest.approx(hits / len(docs))
    # rerun with the same config is skipped (result kept)
    stamp = (out / "lm_eval_results.json").stat().st_mtime
    assert main(["eval", "lm-eval", "--checkpoint", str(tmp_path / "base"), "--output", str(out), "limit=5"]) == 0
    assert (out / "lm_eval_results.json").stat().st_mtime == stamp
