"""Readers on hostile inputs stay within a memory limit: a gzip bomb that expands to 1 GB, a 1 GB one-line
JSONL record, JSON nested 100,000 deep. Each reader runs in a subprocess under RLIMIT_AS (its address space
after imports + 512 MB) and must stream, stop at its caps and count what it cut."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from sources_fixtures import REPO_ROOT, commit, make_repo, run_reader

from midtrain.sources.commits import CommitReader, CommitsConfig
from midtrain.sources.repos import RepoReader, ReposConfig

GB_MEMBERS = 64  # x 16 MiB per gzip member = 1 GiB decompressed


def _bomb(path: Path, piece: bytes, prefix: bytes = b"") -> Path:
    """A multi-member gzip file: ``prefix`` then ``piece`` repeated to 1 GiB, a few MB on disk."""
    member = gzip.compress(piece * ((16 << 20) // len(piece)), compresslevel=9)
    with open(path, "wb") as f:
        if prefix:
            f.write(gzip.compress(prefix))
        for _ in range(GB_MEMBERS):
            f.write(member)
    return path


_RUNNER = textwrap.dedent("""
    import json, resource, sys
    from midtrain.sources.buildlogs import BuildLogReader, BuildLogsConfig
    from midtrain.sources.pull_config import PullsConfig
    from midtrain.sources.pulls import PullReader
    from midtrain.sources.traces import TraceReader, TracesConfig
    vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (512 << 20), vm + (512 << 20)))
    kind, path = sys.argv[1], sys.argv[2]
    caps = dict(max_input_bytes=16_000_000, max_record_bytes=4_000_000)
    reader = (BuildLogReader([path], BuildLogsConfig(**caps)) if kind == "logs"
              else PullReader([path], PullsConfig(**caps)) if kind == "pulls"
              else TraceReader([path], TracesConfig(format="plain", **caps)))
    docs = list(reader.run())
    print(json.dumps({"docs": [len(d.text) for d in docs], "texts": [d.text[-300:] for d in docs],
                      "stats": {k: v.total for k, v in reader.stats.stats.items()}}))
""")


def _run_limited(kind: str, path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, kind, str(path)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_log_gzip_bomb_keeps_head_and_tail_within_the_limit(tmp_path):
    bomb = tmp_path / "ci.log.gz"
    with open(bomb, "wb") as f:
        piece, last = b"compiling module 42 ok\n", b"FAILED tests/test_x.py::test_y - AssertionError\n"
        f.write(_bomb(tmp_path / "part.gz", piece).read_bytes())
        f.write(gzip.compress(last))  # the failure at the end
    total = GB_MEMBERS * ((16 << 20) // len(piece) * len(piece)) + len(last)
    out = _run_limited("logs", bomb)
    assert len(out["docs"]) == 1 and "FAILED tests/test_x.py::test_y" in out["texts"][0]
    assert out["stats"]["skip/input_bytes_cut"] == total - 16_000_000  # everything but the head and the tail


def test_jsonl_bombs_are_counted_not_held(tmp_path):
    line = _bomb(tmp_path / "one_line.jsonl.gz", b"a" * 4096, prefix=b'{"text": "')
    out = _run_limited("logs", line)
    assert out["docs"] == [] and out["stats"]["error/record_too_large"] == 1
    assert out["stats"]["error/input_too_large"] == 1
    trace = tmp_path / "traces.jsonl.gz"
    trace.write_bytes(_bomb(tmp_path / "t.gz", b"a" * 4096, prefix=b'{"messages": "').read_bytes())
    out = _run_limited("traces", trace)
    assert out["docs"] == [] and out["stats"]["error/input_too_large"] >= 1
    nested = tmp_path / "nested.jsonl"
    ok = {"messages": [{"role": "user", "content": "fix"}, {"role": "assistant", "content": "```\nls\n```"}]}
    nested.write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps(ok) + "\n")
    out = _run_limited("traces", nested)
    assert len(out["docs"]) == 1 and out["stats"]["error/malformed_json"] == 1


def test_one_huge_pull_request_record_is_cut_and_the_rest_of_its_file_read(tmp_path):
    good = [
        {
            "repo": "acme/x",
            "number": i,
            "title": f"Fix bug {i}",
            "body": "details",
            "user": {"login": "ann"},
            "files": [{"filename": "x.py", "patch": "@@ -1 +1 @@\n-a\n+b"}],  # a code change: not dropped
        }
        for i in range(3)
    ]
    lines = lambda recs: "".join(json.dumps(r) + "\n" for r in recs).encode()  # noqa: E731
    path = tmp_path / "prs.jsonl.gz"
    with open(path, "wb") as f:
        f.write(gzip.compress(lines(good[:1])))
        # a 1 GiB record (a PR whose body is a whole log), then the file goes on
        f.write(
            _bomb(tmp_path / "body.gz", b"a" * 4096, prefix=b'{"repo": "acme/x", "number": 99, "body": "').read_bytes()
        )
        f.write(gzip.compress(b'"}\n' + lines(good[1:])))
    out = _run_limited("pulls", path)
    assert len(out["docs"]) == 3, out["stats"]  # today: MemoryError, and the records after it are lost
    assert out["stats"]["error/record_too_large"] == 1 and out["stats"]["records"] == 4


def test_repository_and_commit_caps_are_counted(tmp_path):
    repo = make_repo(tmp_path / "many", {f"src/m{i:02d}.py": f"x = {i}\n" for i in range(10)})
    reader = RepoReader([str(repo)], ReposConfig(max_files=4))
    [doc] = run_reader(reader)
    assert doc.metadata["files"] == [f"src/m{i:02d}.py" for i in range(4)]
    assert {k: v.total for k, v in reader.stats.stats.items()}["skip/too_many_files"] == 6
    commit(repo, {"src/big.py": "".join(f"v{i} = {i}\n" for i in range(50_000))}, "a big commit")
    reader = CommitReader([str(repo)], CommitsConfig(max_input_bytes=100_000))
    [doc] = run_reader(reader)
    assert "a big commit" not in doc.text and len(doc.metadata["commits"]) == 1
    assert {k: v.total for k, v in reader.stats.stats.items()}["skip/commit_over_input_cap"] == 1
