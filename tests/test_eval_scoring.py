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


def test_token_nll_with_a_mask_scores_only_those_positions_and_skips_an_empty_one():
    """The held-out loss asks for the loss positions only: the same values there, 0 elsewhere, and no forward
    pass for a sequence without one."""
    import torch

    from midtrain.eval.scoring import Scorer

    class Table(Scorer):  # logits of a position: a fixed row per token (positions select rows, as the models do)
        def __init__(self) -> None:
            self.table = torch.randn(50, 50, generator=torch.Generator().manual_seed(0))
            self.calls: list[int] = []

        def logits(self, tokens, position_ids, cu_seqlens, positions=None):
            rows = tokens if positions is None else tokens[positions]
            self.calls.append(len(rows))
            return self.table[rows]

    sc = Table()
    tokens = torch.randint(0, 50, (16,), generator=torch.Generator().manual_seed(1))
    labels = torch.roll(tokens, -1)
    pos, cu = torch.arange(16), torch.tensor([0, 16])
    mask = torch.zeros(16)
    mask[[2, 3, 9]] = 1
    full = sc.token_nll(tokens, labels, pos, cu)
    some = sc.token_nll(tokens, labels, pos, cu, mask)
    assert sc.calls == [16, 3]
    torch.testing.assert_close(some[mask > 0], full[mask > 0])
    assert not some[mask == 0].any()
    assert not sc.token_nll(tokens, labels, pos, cu, torch.zeros(16)).any() and sc.calls == [16, 3]
