"""`midtrain prep pulls` settings (``pulls.FIELD=...``): what a pull request document holds and how it is read."""

from __future__ import annotations

import re
from dataclasses import dataclass

from midtrain.config import require
from midtrain.sources.common import (
    ReaderConfig,
)
from midtrain.sources.pull_context import (
    CONTEXT_MODES,
)

_OWNER_NAME = re.compile(r"[\w.-]+/[\w.-]+")


@dataclass
class PullsConfig(ReaderConfig):
    """Pull-request documents."""

    max_patch_bytes: int = 100_000  # per file; longer patches are cut with a marker
    include_reviews: bool = True
    file_filters: bool = True  # diffs of files the repository reader skips (lock, generated, binary ...) left out
    repos: str | None = None  # folder of clones / bare mirrors (owner/name, owner__name, owner+name)
    # what was read before the edits, at the base commit: nothing, the changed files, or also their imports.
    # "files" measured best per token (bench/bench_pull_context.py on 120 PRs of a real repository: 58% of the
    # names an edit uses shown before it at a median 5.5K tokens; imports add 7 points for 2.4x the tokens)
    context: str = "files"
    # budget of the read files per pull request (estimated from bytes); None: context_share of seq_length, so a
    # document with its edits still fits the packed sequence it is trained in
    context_tokens: int | None = None
    seq_length: int = 32_768  # the pack's sequence length (pack.seq_length) these documents are packed into
    context_share: float = 0.5  # of seq_length, for the read files when context_tokens is None
    context_max_file_bytes: int = 500_000  # a larger file is not read (repos.max_file_bytes)
    read_header: str = "[read at base commit {sha}: {path} ({why})]"
    # the repository's file tree at the base commit, before the read files and within their budget: at most this
    # many tokens (folders folded to "name/ (N files)" past it; 0: no tree; context=none: neither)
    tree_tokens: int = 1024
    # test and CI results after the edits, joined by commit (the PR's head, else its merge commit) to the PRs
    # of any input, git included: a JSONL/Parquet file or folder of GitHub-API check runs (head_sha), commit
    # statuses (their url names the sha) or the responses listing them (check_runs; a combined status's sha)
    checks: str | None = None
    # issues to join by number to the PRs that close them ("fixes #N"), git inputs included: a JSONL/Parquet
    # file or folder of GitHub-API issue records (number, title, body, and repository_url or repo)
    issues: str | None = None
    # owner/name of a git input whose origin is not a forge URL (a local mirror): its folders never name it
    repo: str | None = None
    # a pull request that changes no code (only docs, changelogs, config ...) is dropped, counted
    require_code_change: bool = True
    # a changed file shown whole in this many documents of its repository is shown, in later ones, as windows
    # around its edits (changelogs always): the same big module or CHANGES file trained once, not in every PR
    whole_file_repeats: int = 2
    # "document": the PR as it went (issue, files read, commits, reviews, checks); "agent": the same work as an
    # agent's trajectory (ChatML, mini-swe-agent's bash style, each command run against the base tree)
    render: str = "document"

    def context_budget(self) -> int:
        """Tokens of read files per pull request: context_tokens, else context_share x seq_length."""
        if self.context_tokens is not None:
            return self.context_tokens
        return int(self.context_share * self.seq_length)

    def check(self) -> None:
        super().check()
        require(self.context in CONTEXT_MODES, "context", f"must be one of {', '.join(CONTEXT_MODES)}")
        require(self.context_tokens is None or self.context_tokens >= 0, "context_tokens", "must be >= 0")
        require(self.tree_tokens >= 0, "tree_tokens", "must be >= 0")
        require(self.whole_file_repeats >= 0, "whole_file_repeats", "must be >= 0")
        require(self.render in ("document", "agent"), "render", "must be document or agent")
        require(self.seq_length > 0, "seq_length", "must be > 0")
        require(0.0 <= self.context_share <= 1.0, "context_share", "must be in [0, 1]")
        require("{path}" in self.read_header, "read_header", "must contain {path}")
        require(self.repo is None or bool(_OWNER_NAME.fullmatch(self.repo)), "repo", "must be owner/name")
