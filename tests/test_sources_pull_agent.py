"""``pulls.render=agent``: a pull request as an agent's trajectory, every command in it re-run here with the
real bash in a checkout of the base commit and its output compared with what the document says."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sources_fixtures import commit, git, make_repo, run_reader
from test_sources_pull_facts import build

from midtrain.sources.privacy import find_leaks
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pulls import PullReader

_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>\n", re.DOTALL)
_COMMAND = re.compile(r"```bash\n(.*)\n```\Z", re.DOTALL)
_OBS = re.compile(r"\A<returncode>(\d+)</returncode>\n<output>\n(.*)</output>\Z", re.DOTALL)


def turns(text: str) -> list[tuple[str, str]]:
    found = _TURN.findall(text)
    assert "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in found) == text  # nothing between turns
    return found


def replay(repo: Path, base: str, text: str, where: Path) -> int:
    """Run each assistant command in a fresh checkout of ``base``, in order; assert git's and bash's real
    return code and output are the observation after it. Returns the commands run."""
    subprocess.run(["git", "clone", "-q", str(repo), str(where)], check=True, capture_output=True)
    git(where, "checkout", "-q", "--detach", base)
    msgs = turns(text)
    ran = 0
    for (role, content), nxt in zip(msgs, msgs[1:] + [("", "")]):
        m = _COMMAND.search(content) if role == "assistant" else None
        if not m or m.group(1).startswith("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"):
            continue
        obs = _OBS.match(nxt[1])
        assert nxt[0] == "user" and obs, nxt
        proc = subprocess.run(["bash", "-c", m.group(1)], cwd=where, capture_output=True, text=True)
        assert (str(proc.returncode), proc.stdout + proc.stderr) == (obs.group(1), obs.group(2)), m.group(1)
        ran += 1
    return ran


def test_every_command_is_true_of_the_base_tree(tmp_path):
    repo = build(tmp_path / "calc")
    reader = PullReader([str(repo)], PullsConfig(render="agent"))
    docs = {d.id: d for d in run_reader(reader)}
    assert sorted(docs) == ["pr:calc#1", "pr:calc#3", "pr:calc#5", "pr:calc#6"]  # the same PRs as documents
    for doc_id, d in docs.items():
        msgs = turns(d.text)
        assert [r for r, _ in msgs[:2]] == ["system", "user"] and msgs[1][1].startswith("<pr_description>")
        assert msgs[-1][0] == "assistant" and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in msgs[-1][1]
        ran = replay(repo, d.metadata["base_commit"], d.text, tmp_path / doc_id.replace(":", "_").replace("#", "_"))
        assert ran >= 2 + (doc_id != "pr:calc#3"), doc_id  # locate, read (#3 adds its file), edits
        assert find_leaks(d.text, ["Alice", "Bob Stone", "example.org"]) == []
        a, b = d.metadata["context_span"]  # the locate and read turns, left out of dedup's comparison
        assert d.text[a:].startswith("<|im_start|>assistant\nTHOUGHT: Let me ") and "git apply" not in d.text[a:b]
        starts = [d.text[a:b] for a, b in d.metadata["loss_spans"]]
        assert all(s.startswith("THOUGHT: ") and s.endswith("<|im_end|>") for s in starts)
    five = turns(docs["pr:calc#5"].text)  # two commits, each its own edit, applied in turn
    assert sum("git apply <<'EOF'" in c for _, c in five) == 2
    six = turns(docs["pr:calc#6"].text)  # its commits do not apply to its base: its diff, as one edit
    assert sum("git apply <<'EOF'" in c for _, c in six) == 1


def test_the_locate_step_greps_for_what_the_issue_names(tmp_path):
    repo = make_repo(
        tmp_path / "lib",
        {"lib/parse.py": "def parse_header(line):\n    return line.split(':')\n", "lib/other.py": "X = 1\n"},
    )
    git(repo, "checkout", "-q", "-b", "fix")
    commit(repo, {"lib/parse.py": "def parse_header(line):\n    return line.split(':', 1)\n"}, "Split once")
    git(repo, "checkout", "-q", "main")
    git(
        repo,
        "merge",
        "-q",
        "--no-ff",
        "fix",
        "-m",
        "Merge pull request #4 from ann/fix\n\nSplit a header once\n\n`parse_header` cuts values that hold a colon.",
    )
    (doc,) = run_reader(PullReader([str(repo)], PullsConfig(render="agent")))
    msgs = turns(doc.text)
    assert "git grep -n -I -F -e parse_header | head -n 40" in msgs[2][1]
    assert msgs[3][1] == "<returncode>0</returncode>\n<output>\nlib/parse.py:1:def parse_header(line):\n</output>"
    assert replay(repo, doc.metadata["base_commit"], doc.text, tmp_path / "replay") == 3


def test_without_a_clone_the_document_form_is_kept_and_counted():
    sample = Path(__file__).resolve().parents[1] / "data_prep" / "samples" / "pulls" / "sample_prs.jsonl"
    reader = PullReader([str(sample)], PullsConfig(render="agent"))
    docs = run_reader(reader)
    assert len(docs) == 2 and all(d.text.startswith("Title: ") for d in docs)
    assert {k: v.total for k, v in reader.stats.stats.items()}["skip/agent_without_clone"] == 2
