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
