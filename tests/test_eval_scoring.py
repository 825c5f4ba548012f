"""Scoring: clear errors for what is not a checkpoint (the logits themselves: tests/test_sft_protocol.py)."""

from __future__ import annotations

import pytest


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    from midtrain.eval.scoring import load_scorer

    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_scorer(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.yaml"):
        load_scorer(tmp_path / "empty")


def test_output_rows_gives_the_same_logits_at_the_chosen_rows():
    import torch
    from train_helpers import packed_sample, tiny_config

    from midtrain.train import distributed
    from midtrain.train.batch import to_batch
    from midtrain.train.model import build_gpt_model, output_rows

    cfg = tiny_config()
    distributed.initialize(seed=cfg.seed)
    try:
        model = build_gpt_model(cfg).eval()
        b = to_batch(packed_sample([20, 12], cfg.model.vocab_size), torch.device("cpu"))
        rows = torch.tensor([3, 17, 31])
        with torch.no_grad():
            full = model(b.tokens, b.position_ids, attention_mask=None, packed_seq_params=b.packed_seq_params)
            with output_rows(model, rows):
                some = model(b.tokens, b.position_ids, attention_mask=None, packed_seq_params=b.packed_seq_params)
            after = model(b.tokens, b.position_ids, attention_mask=None, packed_seq_params=b.packed_seq_params)
    finally:
        distributed.destroy()
    assert some.shape[1] == 3 and full.shape[1] == 32
    torch.testing.assert_close(some[0], full[0, rows])
    torch.testing.assert_close(after, full)  # the hook is gone after the block
