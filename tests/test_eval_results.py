"""The one skeleton of a scoring step's result (the proxy's and lm-eval's, midtrain.eval.results.scored_result),
claimed through formats.outputs: scored once per stamp, reused while the stamp stands, scored again when it does
not, nothing written by a rank that writes nothing, and a second scorer of the same output refused."""

from __future__ import annotations

import json

import pytest

from midtrain.eval.results import scored_result
from midtrain.formats import outputs


def test_a_result_is_scored_once_per_stamp_and_timed(tmp_path):
    calls = []

    def score():
        calls.append(1)
        return {"loss": 2.5}

    path = tmp_path / "proxy" / "proxy_results.json"
    want = {"made": "scores", "inputs": {"checkpoint": "abc"}, "config": {"max_sequences": 4}}
    first = scored_result("proxy", path, want, score)
    assert first == {**want, "loss": 2.5, "seconds": first["seconds"]} and json.loads(path.read_text()) == first
    assert (outputs.read_record(path.parent) or {})["state"] == outputs.COMPLETE
    assert scored_result("proxy", path, want, score) == first and len(calls) == 1  # the same stamp: reused
    other = {**want, "inputs": {"checkpoint": "def"}}  # the checkpoint's content changed under the same path
    assert scored_result("proxy", path, other, score)["inputs"] == {"checkpoint": "def"} and len(calls) == 2
    path.write_text("{cut off")  # an unreadable result is scored again
    assert scored_result("proxy", path, other, score)["loss"] == 2.5 and len(calls) == 3


def test_a_process_that_writes_nothing_leaves_no_result(tmp_path):
    path = tmp_path / "lm_eval" / "lm_eval_results.json"
    assert scored_result("lm_eval", path, {"made": "scores"}, lambda: None) == {}
    assert not path.exists()


def test_another_rank_follows_the_decision_without_the_lease_or_a_write(tmp_path):
    path = tmp_path / "proxy" / "proxy_results.json"
    want = {"made": "scores", "inputs": {"checkpoint": "abc"}, "config": {}}
    with outputs.claim(path.parent, "proxy", want):  # the holder (rank 0) is scoring
        fields = scored_result("proxy", path, want, lambda: {"loss": 1.0}, hold=False)
        assert fields["loss"] == 1.0 and not path.exists()  # scored beside it, written by the holder only
        with pytest.raises(outputs.OutputRefused, match=r"is in use by `proxy` \(pid \d+ on "):
            scored_result("proxy", path, want, lambda: {"loss": 1.0})  # a second holder is refused, naming it
