"""The one skeleton of a scoring step's result (the proxy's and lm-eval's, midtrain.eval.results.scored_result):
scored once per stamp, reused while the stamp stands, scored again when it does not, nothing written by a rank
that writes nothing."""

from __future__ import annotations

import json

from midtrain.eval.results import scored_result


def test_a_result_is_scored_once_per_stamp_and_timed(tmp_path):
    calls = []

    def score():
        calls.append(1)
        return {"loss": 2.5}

    path = tmp_path / "proxy" / "proxy_results.json"
    want = {"checkpoint": "c", "content": "abc", "config": {"max_sequences": 4}}
    first = scored_result(path, want, score)
    assert first == {**want, "loss": 2.5, "seconds": first["seconds"]} and json.loads(path.read_text()) == first
    assert scored_result(path, want, score) == first and len(calls) == 1  # the same stamp: reused, not scored
    other = {**want, "content": "def"}  # the checkpoint's content changed under the same path
    assert scored_result(path, other, score)["content"] == "def" and len(calls) == 2
    path.write_text("{cut off")  # an unreadable result is scored again
    assert scored_result(path, other, score)["loss"] == 2.5 and len(calls) == 3


def test_a_process_that_writes_nothing_leaves_no_result(tmp_path):
    path = tmp_path / "lm_eval" / "lm_eval_results.json"
    assert scored_result(path, {"content": "abc"}, lambda: None) == {}
    assert not path.exists()
