"""Pull requests (GitHub-API-like records) -> one document each: description, diffs, then the conversation.

Input: JSONL (``.jsonl``/``.jsonl.gz``/``.json``), Parquet, or a Hugging Face dataset saved with
``save_to_disk``, one pull request per record, in this schema (GitHub's REST names; extra keys ignored)::

    repo            "owner/name" (or base.repo.full_name)
    number          int
    title, body     str
    state           "open" | "closed";  merged: bool
    user            {"login": str, "type": "User" | "Bot"}  (a bare login string is accepted too)
    base, head      {"ref": str, "sha": str, "repo": {"full_name": str}}
    files           [{"filename", "status", "additions", "deletions", "patch"}]
    comments        [{"user", "body", "created_at"}]                         issue comments
    reviews         [{"id", "user", "state", "body", "submitted_at"}]       APPROVED | CHANGES_REQUESTED | COMMENTED
    review_comments [{"user", "body", "path", "line", "diff_hunk", "pull_request_review_id", "created_at"}]
    license         optional SPDX id
    commit_id / original_commit_id   on reviews and review comments: the commit they were made on
    linked_issues   [{"number", "title", "body"}]  the issues the PR resolves (explicit); or
    issues          the same, matched by "fixes #N"-style references in the title, description and commits
    check_runs      test and CI results: GitHub check runs ({"name", "head_sha", "conclusion", "status",
                    "output": {"title"}}), or the check-runs listing {"total_count", "check_runs"}
    statuses        commit statuses ({"context", "state", "description"}), or the combined status
                    {"state", "statuses", "sha"}

SWE-bench-style task rows (``repo``, ``instance_id``, ``base_commit``, ``patch``, ``test_patch``,
``problem_statement``, ``hints_text``: SWE-bench, SWE-Gym, SWE-bench-extra ...) are read as pull requests
whose linked issue is the problem statement; SWE-smith task rows (no ``base_commit``, a ``swesmith/`` mirror
repository) with their patch reversed (it introduces the bug). A git repository given as an input gives its
merged pull requests from its history, local and remote-tracking branches
(:func:`midtrain.sources.pull_context.history_pulls`); its name is its forge origin's, ``pulls.repo``, or an
``owner+name`` / ``owner__name`` folder's, never a local path's.

People become ``user_<n>`` in order of appearance in every text field (:mod:`midtrain.sources.privacy`:
trailers, noreply e-mails, merge subjects, @mentions outside code; e-mails masked). Text written by bots
(:mod:`midtrain.sources.bots`, the list commits share) is dropped and counted; a pull request opened by a bot
(a git input's: its first commit's author) is dropped whole, so is a sync PR (``Merge stable into main``:
other PRs' commits) and, with ``pulls.require_code_change``, one that changes no source or test file. Changed
files the repository reader would leave out (lock files, generated, minified, binary, data, vendored, private
keys) keep their header line, their diff is left out and counted.

With the repository at hand (``pulls.repos=DIR`` of clones, or a git input) and the base commit in it, a
pull request is rendered as the work went: the linked issue(s), the description, the repository's file tree
at the base commit (at most ``pulls.tree_tokens``, folders folded past it) and the files read there
(``pulls.context``: none | files | files+imports; tree and files within ``pulls.context_tokens``, by default
half the pack's ``pulls.seq_length``), each commit of the PR in order (message and diff) with the reviews and
comments made on it after it, the test and CI results on its last commit (the record's own, else joined from
``pulls.checks`` by commit), then the final state. A PR whose repository or base commit is missing keeps the
rendering above (its results too, without a tree), counted as ``skip/no_clone`` or ``skip/no_base_commit``; a
run where most PRs find no clone under ``pulls.repos`` fails, naming the paths tried. Each commit is shown in
one document (a clone's earlier one), a commit sequence that does not apply to the base files is replaced by
the PR's diff (``skip/commits_not_applying``), and a file shown whole in ``pulls.whole_file_repeats``
documents of its repository (a changelog always) is shown as windows around its edit in later ones.
``pulls.render=agent`` renders the same work as an agent's trajectory (:mod:`midtrain.sources.pull_agent`).
Metadata ``context_bytes`` / ``edit_bytes``: the document's bytes of the tree and read files and of the
commits' messages and diffs (the data card reports them as tokens); ``tree_bytes``: of the tree alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from datatrove.data import Document
from datatrove.io import get_datafolder

from midtrain.config import require
from midtrain.formats.instance_id import canonical_instance, pull_instance
from midtrain.formats.patch_key import patch_key
from midtrain.locations import is_url
from midtrain.sources import pull_agent
from midtrain.sources.bots import is_bot_user
from midtrain.sources.commits import file_skip_reason, split_files
from midtrain.sources.common import (
    MAX_RECORD_BYTES,
    Pseudonyms,
    ReaderConfig,
    RecordTooLarge,
    SourceReader,
    expand_inputs,
    make_document,
    walk_files,
)
from midtrain.sources.filters import path_skip_reason
from midtrain.sources.git import (
    CommitRecord,
    GitError,
    diff,
    has_commit,
    is_git_repo,
    iter_commits,
    remote_name,
    root_commits,
)
from midtrain.sources.licenses import license_at
from midtrain.sources.privacy import noreply_login, scrub_message, scrub_text
from midtrain.sources.pull_context import (
    CONTEXT_MODES,
    ReadFile,
    base_context,
    base_tree,
    clone_candidates,
    clone_name,
    diff_sections,
    estimate_tokens,
    find_clone,
    history_pulls,
    hunk_ranges,
    relevance,
    reverse_patch,
    section_file,
    sequence_applies,
    tree_at,
)
from midtrain.sources.tables import NO_TABLE_FILES, iter_table_rows, table_units

_OWNER_NAME = re.compile(r"[\w.-]+/[\w.-]+")
# a sync / merge-forward PR's title: "Merge stable into main", "Merge branch '8.1.x' into main", "Sync with main"
_SYNC_TITLE = re.compile(
    r"^(?:merge(?:\s+(?:remote-tracking\s+)?branch)?|sync|forward[- ]?merge|merge[- ]forward)\s+"
    r"['\"]?[\w./-]+['\"]?\s+(?:into|to|with)\s+['\"]?[\w./-]+['\"]?$",
    re.IGNORECASE,
)
PR_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")
# GitHub's closing keywords: "fixes #12", "Closes: #3", "resolved #7"
_CLOSING_REF = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d+)\b", re.IGNORECASE)


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


def _login(user: Any) -> tuple[str, str]:
    if isinstance(user, dict):
        return str(user.get("login") or ""), str(user.get("type") or "User")
    return (str(user) if user else ""), "User"


def iter_records(path: Path, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[tuple[str, Any]]:
    """(where, record-or-exception) for every record of a JSONL/JSON/Parquet file or a saved HF dataset."""
    if path.is_dir():  # a Hugging Face dataset saved with save_to_disk
        import datasets

        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            for split in sorted(ds):
                for i, row in enumerate(ds[split]):
                    yield f"{path}[{split}][{i}]", row
        else:
            for i, row in enumerate(ds):
                yield f"{path}[{i}]", row
        return
    yield from iter_table_rows(get_datafolder(str(path.parent)), path.name, max_record_bytes)


def record_error_reason(exc: Exception) -> str:
    if isinstance(exc, RecordTooLarge):
        return "record_too_large"
    return "invalid_utf8" if isinstance(exc, UnicodeDecodeError) else "malformed_json"


def from_task_row(row: dict) -> dict:
    """A SWE-bench-style task row (problem statement, base commit, gold and test patches) as a PR record."""
    # the number of any spelling of the id (owner__name-N, owner/name#N, a pull request's URL), not only -N
    inst = canonical_instance(row.get("instance_id"), row.get("repo"))
    m = re.search(r"#(\d+)$", inst or "")
    problem = str(row.get("problem_statement") or "")
    patch = str(row.get("patch") or "") + ("\n" if row.get("test_patch") else "") + str(row.get("test_patch") or "")
    pr = {
        "repo": row.get("repo"),
        "number": int(m.group(1)) if m else None,
        "instance_id": row.get("instance_id"),
        "title": row.get("title") or (problem.strip().splitlines() or [""])[0][:200],
        "body": "",
        "state": "closed",
        "merged": True,
        "base": {"sha": row.get("base_commit")},
        "files": [section_file(o, n, sec) for o, n, sec in diff_sections(patch)],
        "linked_issues": [{"title": "", "body": problem}] if problem.strip() else [],
        "created_at": row.get("created_at"),
    }
    for key in ("issue_numbers", "issue_number"):  # SWE-bench's collection, Multi-SWE-bench: the issues it resolves
        if row.get(key) is not None:
            pr[key] = row[key]
    if str(row.get("hints_text") or "").strip():  # comments on the issue before the fix: read before the patch
        pr["hints"] = str(row["hints_text"])
    tests = _test_names(row.get("FAIL_TO_PASS"))
    if tests:  # what the fix must make pass: the task's acceptance test, rendered after the patch
        pr["tests_to_pass"] = tests
    return pr


def fix_commits(pr: dict, meta: dict) -> list[str]:
    """The shas of a pull request's own commits (its merge commit, ``commits``, the clone's) where it gives them."""
    shas = [pr.get("merge_commit_sha"), *meta.get("commits", [])]
    shas += [c.get("sha") if isinstance(c, dict) else c for c in pr.get("commits") or [] if isinstance(c, (dict, str))]
    return sorted({str(s).lower() for s in shas if isinstance(s, str) and re.fullmatch(r"[0-9a-fA-F]{7,40}", s)})


def linked_instances(pr: dict, repo: str | None, inst: str | None) -> list[str]:
    """The canonical ids of the issues a pull request resolves, where its record says so: ``linked_issues`` /
    ``issues`` numbers, SWE-bench's ``issue_numbers``, Multi-SWE-bench's ``issue_number``, "fixes #N" in its title
    or description."""
    numbers: list[Any] = [
        i.get("number") for k in ("linked_issues", "issues") for i in pr.get(k) or [] if isinstance(i, dict)
    ]
    if isinstance(listed := pr.get("issue_numbers"), list):
        numbers += listed
    numbers.append(pr.get("issue_number"))  # Multi-SWE-bench's one issue
    numbers += _CLOSING_REF.findall("\n".join([str(pr.get("title") or ""), str(pr.get("body") or "")]))
    out = {pull_instance(repo, n) for n in numbers}
    return sorted(i for i in out if i and i != inst)


# SWE-smith's repository mirrors: swesmith/<owner>__<name>.<commit>
_SWESMITH_REPO = re.compile(r"swesmith/([\w.-]+?)__([\w.-]+?)\.([0-9a-f]{7,40})")


def is_swesmith_row(row: dict) -> bool:
    """A SWE-smith task row (instance_id, repo, patch, FAIL_TO_PASS, PASS_TO_PASS, image_name,
    problem_statement): its patch introduces the bug into the repository's mirror."""
    return bool(_SWESMITH_REPO.fullmatch(str(row.get("repo") or ""))) or "swesmith" in str(row.get("image_name") or "")


def from_swesmith_row(row: dict) -> dict:
    """A SWE-smith task row as a PR record: the patch reversed (it breaks the code; the fix undoes it), the
    repository the mirror's (``swesmith/pallets__click.fde47b4b`` is ``pallets/click``), no base commit in
    it (the buggy tree is the mirror's commit with the patch applied)."""
    pr = from_task_row({**row, "patch": reverse_patch(str(row.get("patch") or "")), "base_commit": None})
    if m := _SWESMITH_REPO.fullmatch(str(row.get("repo") or "")):
        pr["repo"] = f"{m.group(1)}/{m.group(2)}"
    pr["task_source"] = "swe-smith"
    return pr


def _test_names(value: Any) -> list[str]:
    """FAIL_TO_PASS as a list of test ids (SWE-bench stores a JSON-encoded list; others a list)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            value = [value]
    if hasattr(value, "tolist"):  # a numpy array out of Parquet
        value = value.tolist()
    return [str(t) for t in value if str(t).strip()] if isinstance(value, (list, tuple)) else []


def _time(value: Any) -> float | None:
    """Epoch seconds of an ISO 8601 timestamp (GitHub's) or a number; None when there is none."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _title(pr: dict) -> str:
    return str(pr.get("title") or "").strip()


def _repo(pr: dict) -> str | None:
    """owner/name of a PR record: ``repo``, else its base repository's full name."""
    return pr.get("repo") or ((pr.get("base") or {}).get("repo") or {}).get("full_name")


def _state(pr: dict) -> str:
    return "merged" if pr.get("merged") else str(pr.get("state") or "unknown")


def _changed_at_base(files: list, commits: list[CommitRecord]) -> tuple[list[str], dict[str, list[tuple[int, int]]]]:
    """(the paths the PR changes, as named at the base; {path: the base line ranges of its edited hunks}) from
    the record's files, else from the commits' diffs (the first commit's hunks are at the base, later ones'
    nearly so)."""
    entries = [f for f in files if isinstance(f, dict)]
    changed = [str(f.get("previous_filename") or f.get("filename")) for f in entries]
    hunks = {
        str(f.get("previous_filename") or f.get("filename")): hunk_ranges(str(f.get("patch") or "")) for f in entries
    }
    if changed:
        return changed, hunks
    secs = [(old, sec) for c in commits for old, _, sec in diff_sections(c.diff.decode("utf-8", "replace"))]
    changed = [old for old, _ in secs]
    hunks = {old: [] for old in changed}
    for old, sec in secs:
        hunks[old] += hunk_ranges(sec)
    return changed, hunks


class PullEvent(NamedTuple):
    """A comment or review of a pull request, placed among its commits by where and when it was made."""

    time: str  # as the record writes it (ISO 8601 sorts as text)
    order: int  # the record's order (reviews after comments) among events of one time
    text: str  # as rendered
    commit: str | None  # the commit it was made on (a review's commit_id), when the record says
    at: float | None  # epoch seconds of ``time``, when it parses


class CheckResult(NamedTuple):
    """One test or CI result on a commit: a GitHub check run or commit status."""

    name: str  # the check run's name, the status's context
    result: str  # conclusion (success, failure, neutral ...; its status while it has none), a status's state
    detail: str  # the check run's output title, the status's description
    sha: str  # the commit it ran on ("" when the record does not say)
    time: str  # completed_at / updated_at as written: of two results of one check, the later counts
    order: int  # the record's order, for results of one time


_STATUS_URL_SHA = re.compile(r"/statuses/([0-9a-fA-F]{40})/?$")


def check_results(value: Any) -> list[CheckResult]:
    """The results in a GitHub-API value: a list of check runs and/or commit statuses, the check-runs listing
    (``{"total_count", "check_runs"}``) or a combined status (``{"state", "statuses", "sha"}``); entries that
    are neither (no name, no result) are not results."""
    sha = ""
    if isinstance(value, dict):
        sha = str(value.get("sha") or "")
        value = value.get("check_runs") if "check_runs" in value else value.get("statuses")
    if hasattr(value, "tolist"):  # a numpy array out of Parquet
        value = value.tolist()
    out = []
    for i, e in enumerate(value if isinstance(value, list) else []):
        if not isinstance(e, dict):
            continue
        if e.get("context") and e.get("state"):  # a commit status
            m = _STATUS_URL_SHA.search(str(e.get("url") or ""))
            on = sha or (m.group(1) if m else "")
            when = str(e.get("updated_at") or e.get("created_at") or "")
            out.append(CheckResult(str(e["context"]), str(e["state"]), str(e.get("description") or ""), on, when, i))
        elif e.get("name") and (e.get("conclusion") or e.get("status")):  # a check run
            title = str((e.get("output") or {}).get("title") or "") if isinstance(e.get("output"), dict) else ""
            result = str(e.get("conclusion") or e.get("status"))
            when = str(e.get("completed_at") or e.get("started_at") or "")
            out.append(CheckResult(str(e["name"]), result, title, str(e.get("head_sha") or sha), when, i))
    return out


def _same_commit(a: str, b: str) -> bool:
    return len(a) >= 7 and len(b) >= 7 and (a.startswith(b) or b.startswith(a))


class PullReader(SourceReader):
    """datatrove reader over pull-request record files (sharded by file) and git repositories (their merges)."""

    name = "🔀 pull requests"
    source = "pulls"

    config_class = PullsConfig
    cfg: PullsConfig

    def units(self) -> list[tuple[str, Any]]:
        if self.cfg.repos and not Path(self.cfg.repos).is_dir():  # else every PR would quietly count as no_clone
            raise FileNotFoundError(f"pulls.repos={self.cfg.repos}: no such directory of clones")
        if self.cfg.issues and not Path(self.cfg.issues).exists():  # else every issue would quietly be missing
            raise FileNotFoundError(f"pulls.issues={self.cfg.issues}: no such file or folder")
        if self.cfg.checks and not Path(self.cfg.checks).exists():
            raise FileNotFoundError(f"pulls.checks={self.cfg.checks}: no such file or folder")
        gits = [p for p in expand_inputs(i for i in self.inputs if not is_url(i)) if is_git_repo(p)]
        if self.cfg.repo and len(gits) != 1:  # one name for several repositories would mix them up
            raise ValueError(f"pulls.repo={self.cfg.repo}: names one git input, got {len(gits)}")
        urls = [i for i in self.inputs if is_url(i)]  # object storage: listed through datatrove's data folders
        units: list[tuple[str, Any]] = table_units(urls) if urls else []
        for p in sorted(expand_inputs(i for i in self.inputs if not is_url(i)), key=str):
            if is_git_repo(p):  # a repository: its merged pull requests, from its history
                units.append((str(p), ("git", str(p))))
            elif p.is_dir() and not (p / "dataset_info.json").exists() and not (p / "dataset_dict.json").exists():
                units.extend((str(p), str(f)) for f in walk_files(p, PR_SUFFIXES))
            else:
                units.append((str(p), str(p)))
        return units

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> Iterator[Document]:
        yield from super().run(data, rank, world_size)
        looked = self.__dict__.get("_clone_lookups")
        if looked and looked["missed"] * 2 > looked["prs"]:  # a layout the lookup does not know: no context at all
            raise FileNotFoundError(
                f"pulls.repos={self.cfg.repos}: {looked['missed']} of {looked['prs']} pull requests found no clone "
                f"(tried {', '.join(looked['tried']) or 'no path: the records name no owner/name'}, ...; layouts: "
                "DIR/owner/name, DIR/owner__name, DIR/owner+name, each also .git or holding a bare repo/)"
            )

    def unit_path(self, unit: Any) -> Path | None:
        if isinstance(unit, tuple) and unit[0] == "git":
            return Path(unit[1])
        return Path(unit) if isinstance(unit, str) else None

    def read_unit(self, unit: Any, origin: str) -> Iterator[Document]:
        if isinstance(unit, tuple) and unit[1] is None:
            self.stat_update("records")
            self.error("missing_input", origin, NO_TABLE_FILES, origin)
            return
        clone = None
        if isinstance(unit, tuple) and unit[0] == "git":
            clone = Path(unit[1])
            try:
                found: dict[str, int] = {}
                records = history_pulls(clone, self.cfg.repo or clone_name(clone), found)  # one PR's diff at a time
                for kind, n in sorted(found.items()):  # PRs found by kind (merge, squash ...), each once
                    self.stat_update(f"pulls_found/{kind}", value=n)
            except GitError as e:
                self.stat_update("records")
                self.error("bad_git_repository", unit[1], str(e), origin)
                return
        else:
            cap = self.cfg.max_record_bytes
            records = iter_records(Path(unit), cap) if isinstance(unit, str) else iter_table_rows(unit[0], unit[1], cap)
        for where, rec in records:
            self.stat_update("records")
            if isinstance(rec, Exception):
                self.error(record_error_reason(rec), where, str(rec), origin)
                continue
            if not isinstance(rec, dict):
                self.error("bad_record", where, f"expected an object, got {type(rec).__name__}", origin)
                continue
            try:
                doc = self.render(rec, where, clone)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                self.error("bad_record", where, f"{type(e).__name__}: {e}", origin)
                continue
            except GitError as e:
                self.error("bad_git_repository", where, str(e), origin)
                continue
            if doc is not None:
                yield doc

    def render(self, pr: dict, where: str, clone: Path | None = None) -> Document | None:
        if "files" not in pr and isinstance(pr.get("patch"), str):
            if "base_commit" in pr:
                pr = from_task_row(pr)
            elif is_swesmith_row(pr):
                pr = from_swesmith_row(pr)
        reason = self._drop_reason(pr)
        if reason:
            self.drop(
                reason,
                lambda: make_document(
                    json.dumps(pr, ensure_ascii=False, default=str), f"pr:{pr.get('repo')}#{pr.get('number')}", "pr"
                ),
            )
            return None
        listed = f if isinstance(f := pr.get("files"), list) else []
        # a file entry whose fields are all null names nothing: it would render as "--- None (+None -None)"
        if not _title(pr) and not any(isinstance(f, dict) and (f.get("filename") or f.get("patch")) for f in listed):
            self.error("bad_record", where, "no title and no files (the record's fields are empty or null)")
            return None
        files = pr.get("files") or []
        if not isinstance(files, list):
            raise TypeError("'files' is not a list")
        if self.cfg.require_code_change and not any(
            relevance(str(f.get("filename"))) < 2 for f in files if isinstance(f, dict) and f.get("filename")
        ):  # source or tests changed: a PR of docs, changelogs or config alone is not the work on code
            self.drop("no_code_change", lambda: make_document(json.dumps(pr, default=str), f"pr:{_repo(pr)}", "pr"))
            return None
        names = _pseudonyms(pr)

        def clean(text: Any) -> str:
            return scrub_text(str(text or "").replace("\r\n", "\n").strip(), names)

        clone = self._readable_clone(pr, clone)
        meta: dict[str, Any] = {}
        if clone is not None:
            out, meta = self._render_workflow(pr, clone, names, clean)
        else:
            if self.cfg.render == "agent":  # no base tree to run the commands against: today's form, counted
                self.skip("agent_without_clone")
            out = self._render_flat(pr, names, clean)
        return self._document(pr, out, meta, where, len(files))

    def _drop_reason(self, pr: dict) -> str | None:
        """Why a whole PR is not a document: opened by a bot; a sync PR (``Merge stable into main``: its commits
        are other PRs' work, never preferred to them); no change to code (pulls.require_code_change)."""
        if is_bot_user(pr.get("user")):
            return "bot_author"
        if pr.get("found_as") == "sync" or _SYNC_TITLE.match(_title(pr)):
            return "sync_pull"
        return None

    def _readable_clone(self, pr: dict, clone: Path | None) -> Path | None:
        """The clone the PR is read against (the git input, else found under pulls.repos), or None when there
        is none or it lacks the base commit (counted)."""
        if clone is None and self.cfg.repos:
            clone = find_clone(self.cfg.repos, _repo(pr))
            looked = self.__dict__.setdefault("_clone_lookups", {"prs": 0, "missed": 0, "tried": []})
            looked["prs"] += 1
            if clone is None:
                self.skip("no_clone")
                looked["missed"] += 1
                if len(looked["tried"]) < 3:
                    looked["tried"] += [str(p) for p in clone_candidates(Path(self.cfg.repos), _repo(pr) or "")][:3]
        if clone is not None and not has_commit(clone, str((pr.get("base") or {}).get("sha") or "")):
            self.skip("no_base_commit")
            clone = None
        return clone

    def _render_flat(self, pr: dict, names: Pseudonyms, clean: Any) -> list[str]:
        """A PR without its repository: title, state, issues, description, the changed files, the conversation."""
        base, head, repo = pr.get("base") or {}, pr.get("head") or {}, _repo(pr)
        out = [f"Title: {clean(_title(pr))}"]
        if repo:
            out.append(f"Repository: {repo}")
        out.append(
            f"State: {_state(pr)}" + (f" ({base.get('ref')} <- {clean(head.get('ref'))})" if base.get("ref") else "")
        )
        if pr.get("linked_issues"):  # a task row's problem statement: the point of the PR, kept flat too
            out += self._render_issues(pr, clean, [])
        out += _hints(pr, clean)
        if pr.get("body") or pr.get("user"):  # a task row has no author nor description: no sentence
            out.append(self._opened(pr, names, clean))
        out += self._render_files(pr.get("files") or [])
        out += [e.text for e in sorted(self._events(pr, names, clean), key=lambda e: (e.time, e.order))]
        out += self._render_checks(pr, clean)
        out += _tests_to_pass(pr)
        return out

    def _document(self, pr: dict, out: list[str], meta: dict[str, Any], where: str, n_files: int) -> Document:
        """The document of the rendered lines: the read files' char span (dedup compares the PR's own text
        without it), the size cap, the task's canonical id."""
        repo, number, state = _repo(pr), pr.get("number"), _state(pr)
        text = "\n".join(out) + "\n"
        if "_context_lines" in meta:  # char span of the read files: dedup compares the PR's own text without it
            i0, i1 = meta.pop("_context_lines")
            if i1 > i0:
                start = len("\n".join(out[:i0])) + 1 if i0 else 0  # each block's own lines, and one line ending
                meta["context_span"] = [start, min(len(text), start + len("\n".join(out[i0:i1])) + 1)]
        inst = canonical_instance(pr.get("instance_id"), repo) or pull_instance(repo, number)
        # never the input's path (moving the input would move the document across the split): the number,
        # else the task's own id (SWE-smith, SWE-bench Pro), else the record's place in its file; an unnamed
        # repository goes by its clone's folder name (a name, never a path)
        doc_id = (
            f"pr:{repo or pr.get('clone') or 'unknown'}#{number if number is not None else inst or Path(where).name}"
        )
        if len(text.encode("utf-8", "surrogatepass")) > self.cfg.max_doc_bytes:
            text = text.encode("utf-8", "surrogatepass")[: self.cfg.max_doc_bytes].decode("utf-8", "ignore")
            text += f"\n[pull request truncated at {self.cfg.max_doc_bytes} bytes]\n"
            self.skip("document_truncated")
            if "context_span" in meta:
                meta["context_span"] = [min(o, len(text)) for o in meta["context_span"]]
        # the task's canonical id (midtrain.formats.instance_id; the held-out split's key, decontamination's match):
        # a benchmark row's own id, a pull request's owner/name#N; the row's spelling kept beside it
        if inst:
            meta["instance_id"] = inst
        # the task's fix as it may reach the commits source: its commits' shas, and the key of its change
        files = [f for f in pr.get("files") or [] if isinstance(f, dict)]
        if key := patch_key((str(f.get("filename") or ""), str(f.get("patch") or "")) for f in files):
            meta["patch_key"] = key
        if fixes := fix_commits(pr, meta):
            meta["fix_commits"] = fixes
        if links := linked_instances(pr, repo, inst):  # the issues it fixes: one task with it (the run's split)
            meta["linked_instances"] = links
        if pr.get("instance_id"):
            meta["instance_id_original"] = pr["instance_id"]
        license_id = meta.pop("license", None) or pr.get("license")
        return make_document(
            text, doc_id, "pr", repo=repo, license=license_id, number=number, state=state, n_files=n_files, **meta
        )

    # -- the work as it went: issue, what was read, commits with their feedback, outcome ------------------
    def _render_workflow(self, pr: dict, clone: Path, names: Pseudonyms, clean: Any) -> tuple[list[str], dict]:
        base, head, repo = pr.get("base") or {}, pr.get("head") or {}, _repo(pr)
        base_sha = str(base["sha"])
        commits = self._pr_commits(clone, base_sha, str(head.get("sha") or ""))
        diffs = [c.diff.decode("utf-8", "replace") for c in commits]
        if diffs and not any(c.cut_bytes for c in commits) and not sequence_applies(tree_at(clone, base_sha), diffs):
            self.skip("commits_not_applying")  # the record's files (base..head) apply to the base shown
            commits = []
        self._shown(clone).update(c.sha for c in commits)
        if self.cfg.render == "agent":
            return self._render_agent(pr, clone, commits, names, clean)
        out = [f"Title: {clean(_title(pr))}"]
        if repo:
            out.append(f"Repository: {repo}")
        out.append(
            f"Base: {base['ref']} at commit {base_sha[:12]}" if base.get("ref") else f"Base: commit {base_sha[:12]}"
        )
        out += self._render_issues(pr, clean, [c.message for c in commits])
        out += _hints(pr, clean)
        if pr.get("body") or pr.get("user"):
            out.append(self._opened(pr, names, clean))
        tree, read = self._read_at_base(pr, clone, base_sha, commits)
        first_read = len(out)
        # each block ends with its line ending: joined by "" below, not by the newline
        for block in ([tree] if tree else []) + [r.block for r in read]:
            out.append(block.removesuffix("\n"))
        context_lines = (first_read, len(out))  # which lines of ``out`` are read at the base (render makes a span)
        edits, edit_bytes = self._render_edits(pr, commits, names, clean)
        out += edits
        out += self._render_checks(pr, clean)
        out += _tests_to_pass(pr)
        merge = pr.get("merge_commit_sha")
        out.append(
            f"\nFinal state: {_state(pr)}"
            + (f" ({base.get('ref')} <- {clean(head.get('ref'))})" if base.get("ref") else "")
            + (f", merge commit {str(merge)[:12]}" if merge else "")
        )
        meta = {
            **self._clone_meta(pr, clone, base_sha, commits),
            "context": self.cfg.context,
            "context_files": [r.path for r in read],
            "context_bytes": sum(
                len(b.encode("utf-8", "surrogatepass")) for b in [tree or ""] + [r.block for r in read]
            ),
            "tree_bytes": len((tree or "").encode("utf-8", "surrogatepass")),
            "edit_bytes": edit_bytes,
            "_context_lines": context_lines,
        }
        return out, meta

    def _clone_meta(self, pr: dict, clone: Path, base_sha: str, commits: list[CommitRecord]) -> dict[str, Any]:
        """What decontamination and the data card read of a PR rendered with its clone, in either form."""
        roots, origin = self._clone_identity(clone)
        meta: dict[str, Any] = {"base_commit": base_sha, "commits": [c.sha for c in commits], "root_commits": roots}
        if origin:  # the clone's own remote: decontamination knows a benchmark repository under any PR name
            meta["origin"] = origin
        if not pr.get("license"):
            meta["license"] = license_at(clone, base_sha, tree_at(clone, base_sha))
        return meta

    def _render_agent(
        self, pr: dict, clone: Path, commits: list[CommitRecord], names: Pseudonyms, clean: Any
    ) -> tuple[list[str], dict]:
        """The PR as an agent's trajectory (:mod:`midtrain.sources.pull_agent`), every command run for real."""
        base, head = pr.get("base") or {}, pr.get("head") or {}
        base_sha = str(base["sha"])
        task = [f"Title: {clean(_title(pr))}"] + self._render_issues(pr, clean, [c.message for c in commits])
        task += _hints(pr, clean)
        if pr.get("body"):
            task.append("\n" + clean(pr.get("body")))
        trace = pull_agent.AgentTrace()
        trace.say("system", pull_agent.SYSTEM)
        trace.say("user", "<pr_description>\n" + "\n".join(task).strip() + "\n</pr_description>")
        changed, hunks = _changed_at_base(pr.get("files") or [], commits)
        pull_agent.locate(trace, clone, base_sha, "\n".join(task), changed)
        read = pull_agent.read_files(trace, clone, base_sha, changed, hunks, self.cfg.context_budget())
        n_context = len(trace.messages)
        placed = _place_events(self._events(pr, names, clean), commits)
        for e in placed.get(-1, []):
            trace.say("user", e.text.strip())
        edits = [
            (
                scrub_message(c.message, names).strip() or f"Edit {i + 1}.",
                "".join(sec for sec in self._sections(c) if sec.startswith("diff --git")),
                [e.text.strip() for e in placed.get(i, [])],
            )
            for i, c in enumerate(commits)
        ]
        edits = [e for e in edits if e[1].strip()]
        if not edits:  # no commits to show (no head in the clone, or they do not apply): the PR's diff, in one
            head_sha = str(head.get("sha") or "")
            raw = diff(clone, base_sha, head_sha) if has_commit(clone, head_sha) else b""
            pr_diff = CommitRecord("", [], "", "", "", "", 0, "", raw)  # filtered as a commit's diff is
            whole = "".join(sec for sec in self._sections(pr_diff) if sec.startswith("diff --git"))
            if whole.strip():
                edits = [
                    (clean(_title(pr)), whole, [e.text.strip() for k in sorted(placed) if k >= 0 for e in placed[k]])
                ]
        if edits and not pull_agent.edit(trace, clone, base_sha, edits):
            self.skip("agent_edit_not_applying")  # shown with git's own error, the rest left out
        checks = self._render_checks(pr, clean) + _tests_to_pass(pr)
        if checks:
            trace.say("user", "\n".join(x.strip() for x in checks))
        pull_agent.submit(trace, list(dict.fromkeys(new for _, d, _ in edits for _, new, _ in diff_sections(d))))
        text, spans = pull_agent.render_chatml(trace.messages)
        # the locate and read turns: dedup compares the PR's own work without them, as for the document form
        start = len(pull_agent.render_chatml(trace.messages[:2])[0])
        end = len(pull_agent.render_chatml(trace.messages[:n_context])[0])
        meta = {
            **self._clone_meta(pr, clone, base_sha, commits),
            "render": "agent",
            "context": self.cfg.context,
            "context_files": read,
            "loss_spans": spans,
            "n_messages": len(trace.messages),
            "context_span": [start, end],
            "context_bytes": sum(
                len(m["content"].encode("utf-8", "surrogatepass")) for m in trace.messages[2:n_context]
            ),
        }
        return [text.rstrip("\n")], meta

    def _pr_commits(self, clone: Path, base_sha: str, head_sha: str) -> list[CommitRecord]:
        """The PR's own commits (base..head, merges of the base branch left out), their diffs held up to the
        document's size; none when the head commit is not in the clone (the record's files stand for them)."""
        if not (head_sha and has_commit(clone, head_sha)):
            self.skip("no_head_commit")
            return []
        commits = []
        held = 0  # diffs past the document's size are never shown (it is cut there): not held either
        shown = self._shown(clone)
        for c in iter_commits(clone, f"{base_sha}..{head_sha}", max_commit_bytes=self.cfg.max_doc_bytes):
            if len(c.parents) > 1:
                self.skip("merge_commit")  # the base branch merged into the PR's: no edit of its own
                continue
            if c.sha in shown:  # each commit in one document: the earlier PR's (a branch merged into this one)
                self.skip("commit_in_earlier_document")
                continue
            if c.cut_bytes or held + len(c.diff) > self.cfg.max_doc_bytes:
                c.cut_bytes, c.diff = c.cut_bytes or len(c.diff), b""
            held += len(c.diff)
            commits.append(c)
        return commits

    def _shown(self, clone: Path) -> set[str]:
        """The commits of ``clone`` already shown in a document of this reader (a clone's PRs are read in
        one task, oldest first for a git input)."""
        return self.__dict__.setdefault("_shown_commits", {}).setdefault(clone, set())

    def _read_at_base(
        self, pr: dict, clone: Path, base_sha: str, commits: list[CommitRecord]
    ) -> tuple[str | None, list[ReadFile]]:
        """(the file tree at the base commit, within pulls.tree_tokens; the files read there) within the context
        budget, the tree counted first; what was left out counted."""
        changed, hunks = _changed_at_base(pr.get("files") or [], commits)
        budget = self.cfg.context_budget()
        tree = None
        if self.cfg.context != "none" and self.cfg.tree_tokens > 0:
            tree = base_tree(clone, base_sha, changed, min(self.cfg.tree_tokens, budget))
            if tree is None:
                self.skip("tree_over_budget")  # not even the top level fits: no tree rather than a cut one
        shown = self.__dict__.setdefault("_shown_whole", {}).setdefault(clone, {})  # path -> documents
        windows = {p for p in changed if relevance(p) == 3 or shown.get(p, 0) >= self.cfg.whole_file_repeats}
        read, skipped = base_context(
            clone,
            base_sha,
            changed,
            self.cfg.context,
            budget - (estimate_tokens(tree) if tree else 0),
            self.cfg.read_header,
            self.cfg.context_max_file_bytes,
            hunks,
            windows,
        )
        for r in read:
            if r.whole:
                shown[r.path] = shown.get(r.path, 0) + 1
        for reason, n in sorted(skipped.items()):
            self.skip(f"context_{reason}" if not reason.startswith("context_") else reason, n)
        return tree, read

    def _render_edits(
        self, pr: dict, commits: list[CommitRecord], names: Pseudonyms, clean: Any
    ) -> tuple[list[str], int]:
        """(each commit with the feedback made on it after it, or the record's files with the conversation;
        the bytes of the commits' messages and diffs, or of the files' patches)."""
        placed = _place_events(self._events(pr, names, clean), commits)
        out: list[str] = []
        edit_bytes = 0
        if commits:
            for i, c in enumerate(commits):
                block = self._render_commit(c, i, len(commits), names)
                edit_bytes += len(block.encode("utf-8", "surrogatepass")) + 1
                out.append(block)
                out += [e.text for e in placed.get(i, [])]
            return out, edit_bytes
        out += [e.text for e in placed.get(-1, [])]
        edits = self._render_files(pr.get("files") or [])
        edit_bytes = sum(len(e.encode("utf-8", "surrogatepass")) + 1 for e in edits)
        out += edits
        out += [e.text for k in sorted(placed) if k >= 0 for e in placed[k]]
        return out, edit_bytes

    def _clone_identity(self, clone: Path) -> tuple[list[str], str | None]:
        """(root commits, origin remote) of a clone, read once per clone."""
        cache = self.__dict__.setdefault("_identities", {})
        if clone not in cache:
            cache[clone] = (root_commits(clone), remote_name(clone))
        return cache[clone]

    def _render_issues(self, pr: dict, clean: Any, messages: list[str]) -> list[str]:
        """The issues the PR resolves: explicit ``linked_issues``, else those its title, description or commit
        messages close ("fixes #N"), with their text from ``issues`` where the record has it."""
        explicit = [i for i in pr.get("linked_issues") or [] if isinstance(i, dict)]
        text = "\n".join([str(pr.get("title") or ""), str(pr.get("body") or ""), *messages])
        refs = list(dict.fromkeys(int(n) for n in _CLOSING_REF.findall(text)))
        known = {i.get("number"): i for i in pr.get("issues") or [] if isinstance(i, dict)}
        table = self._issue_table()
        repo = str(pr.get("repo") or "").lower()
        issues = explicit or [known.get(n) or table.get((repo, n)) or table.get(("", n)) or {"number": n} for n in refs]
        out = []
        for issue in issues:
            num = issue.get("number")
            head = f"\nIssue #{num}" if num is not None else "\nIssue"
            if issue.get("title") or issue.get("body"):
                head += f": {clean(issue.get('title'))}" if issue.get("title") else ":"
                out.append(head + (f"\n{clean(issue.get('body'))}" if issue.get("body") else ""))
            else:  # a line saying the text is missing would be trained on: the issue is left out, counted
                self.skip("issue_without_text")
        return out

    def _issue_table(self) -> dict[tuple[str, int], dict]:
        """{(owner/name lower-cased, or "" when the row names none; number): issue} of ``pulls.issues``, read
        once per reader; pull requests listed by the issues API (a ``pull_request`` key) are not issues."""
        cache = self.__dict__.get("_issues")
        if cache is not None:
            return cache
        cache = {}
        if self.cfg.issues:
            for f in walk_files(Path(self.cfg.issues), PR_SUFFIXES):
                for _where, row in iter_records(f, self.cfg.max_record_bytes):
                    if not isinstance(row, dict):  # unreadable (an exception) or not an object: counted
                        self.stat_update("issues_table/unreadable")
                        continue
                    if row.get("pull_request"):
                        self.stat_update("issues_table/pull_request")
                        continue
                    try:
                        number = int(row["number"])
                    except (KeyError, TypeError, ValueError):
                        self.stat_update("issues_table/no_number")
                        continue
                    url = str(row.get("repository_url") or "")
                    repo = str(row.get("repo") or ("/".join(url.rstrip("/").split("/")[-2:]) if url else ""))
                    cache[(repo.lower(), number)] = {
                        "number": number,
                        "title": row.get("title"),
                        "body": row.get("body"),
                    }
                    self.stat_update("issues_table/issues")
        self.__dict__["_issues"] = cache
        return cache

    def _render_checks(self, pr: dict, clean: Any) -> list[str]:
        """The test and CI results on the PR's last commit (its head; else its merge commit): the record's own
        ``check_runs`` / ``statuses``, else those ``pulls.checks`` has for that commit. Each check once (its
        latest run), by name; results the record gives for an earlier commit are left out, counted."""
        head = str((pr.get("head") or {}).get("sha") or "")
        merge = str(pr.get("merge_commit_sha") or "")
        own = check_results(pr.get("check_runs")) + check_results(pr.get("statuses"))
        sha = head or merge
        if own:
            on = [r for r in own if not (sha and r.sha and not _same_commit(r.sha, sha))]
            if len(on) < len(own):
                self.skip("check_of_another_commit", len(own) - len(on))
        else:
            table = self._check_table()
            sha = next((s for s in (head, merge) if s and s in table), sha)
            on = table.get(sha, [])
        latest: dict[str, CheckResult] = {}
        for r in on:  # a check run again (a re-run, a later push of the same sha) replaces the earlier result
            if r.name not in latest or (r.time, r.order) >= (latest[r.name].time, latest[r.name].order):
                latest[r.name] = r
        if not latest:
            return []
        where = f"on commit {sha[:12]}" if sha else "after the edits"
        lines = [f"\nChecks {where}:"]
        for name in sorted(latest):
            r = latest[name]
            detail = " ".join(clean(r.detail).split())[:200]
            lines.append(f"- {clean(name)}: {r.result}" + (f" ({detail})" if detail else ""))
        return ["\n".join(lines)]

    def _check_table(self) -> dict[str, list[CheckResult]]:
        """{commit sha: results} of ``pulls.checks``, read once per reader."""
        cache = self.__dict__.get("_checks")
        if cache is not None:
            return cache
        cache = {}
        if self.cfg.checks:
            for f in walk_files(Path(self.cfg.checks), PR_SUFFIXES):
                for _where, row in iter_records(f, self.cfg.max_record_bytes):
                    if not isinstance(row, dict):  # unreadable (an exception) or not an object: counted
                        self.stat_update("checks_table/unreadable")
                        continue
                    results = check_results(row) if "check_runs" in row or "statuses" in row else check_results([row])
                    if not results:
                        self.stat_update("checks_table/no_result")
                        continue
                    for r in results:
                        if not r.sha:
                            self.stat_update("checks_table/no_commit")
                            continue
                        cache.setdefault(r.sha, []).append(r)
                        self.stat_update("checks_table/results")
        self.__dict__["_checks"] = cache
        return cache

    def _opened(self, pr: dict, names: Pseudonyms, clean: Any) -> str:
        """Who opened the PR, with its description (none: said so in the sentence, not as a placeholder)."""
        who, body = _who(names, pr.get("user")), clean(pr.get("body"))
        if not body:
            self.skip("no_description")
            return f"\n{who} opened this pull request."
        return f"\n{who} opened this pull request:\n{body}"

    def _render_commit(self, c: Any, i: int, n: int, names: Pseudonyms) -> str:
        author = names(c.author_name, c.author_email)
        message = scrub_message(c.message, names)
        body = "".join(self._sections(c)).rstrip("\n")
        return f"\nCommit {i + 1}/{n} {c.sha[:12]} by {author}:\n{message}\n\n" + body

    def _sections(self, c: Any) -> list[str]:
        """A commit's diff, file by file, with the files the repository reader leaves out as one-line notes."""
        sections = []
        if c.cut_bytes:
            self.skip("commit_diff_over_cap")
            sections.append(f"[diff left out: past pulls.max_doc_bytes={self.cfg.max_doc_bytes}]\n")
        for raw in split_files(c.diff):
            sec = raw.decode("utf-8", "replace")
            reason = file_skip_reason(sec) if self.cfg.file_filters else None
            if reason is None and len(raw) > self.cfg.max_patch_bytes:
                reason = "too_large"
            if reason:
                self.skip(f"file_{reason}")
                old, new, _ = (diff_sections(sec) or [("", "?", "")])[0]
                sections.append(f"[diff of {new} left out: {reason}]\n")
                continue
            sections.append(sec if sec.endswith("\n") else sec + "\n")
        return sections

    def _render_files(self, files: list[dict]) -> list[str]:
        """The changed files with their patches (cut at max_patch_bytes; a file without one is noted)."""
        out = ["\nFiles changed:"] if files else []
        for f in files:
            patch = f.get("patch") or ""
            status = f.get("status") or "modified"
            out.append(
                f"\n--- {f.get('filename') or '(unnamed file)'} ({status}, +{f.get('additions') or 0} "
                f"-{f.get('deletions') or 0})"
            )
            if not patch:
                out.append("[no textual diff: binary or too large]")
                self.skip("file_without_patch")
                continue
            reason = path_skip_reason(str(f.get("filename") or "")) if self.cfg.file_filters else None
            if reason:
                out.append(f"[diff left out: {reason}]")
                self.skip(f"file_{reason}")
                continue
            raw = patch.encode("utf-8", "surrogatepass")  # surrogates are reported later, by the reader base
            if len(raw) > self.cfg.max_patch_bytes:
                cut = raw[: self.cfg.max_patch_bytes].decode("utf-8", "ignore").rsplit("\n", 1)[0]
                patch = cut + f"\n[patch truncated: {len(patch) - len(cut)} more characters]"
                self.skip("patch_truncated")
            out.append(patch.rstrip("\n"))
        return out

    def _events(self, pr: dict, names: Pseudonyms, clean: Any) -> list[PullEvent]:
        """Issue comments and reviews (with their inline comments) as events; bots' are skipped, counted."""
        events: list[PullEvent] = []
        for i, c in enumerate(pr.get("comments") or []):
            if is_bot_user(c.get("user")):
                self.skip("bot_comment")
                continue
            text = f"\n{_who(names, c.get('user'))} commented:\n{clean(c.get('body'))}"
            events.append(PullEvent(str(c.get("created_at") or ""), i, text, None, _time(c.get("created_at"))))
        inline: dict[Any, list[dict]] = {}
        for c in pr.get("review_comments") or []:
            if is_bot_user(c.get("user")):
                self.skip("bot_review_comment")
                continue
            inline.setdefault(c.get("pull_request_review_id"), []).append(c)
        if self.cfg.include_reviews:
            reviews = list(pr.get("reviews") or [])
            known = {r.get("id") for r in reviews}
            for rid in sorted((k for k in inline if k not in known), key=str):  # inline comments without review
                first = inline[rid][0]
                reviews.append(
                    {
                        "id": rid,
                        "user": first.get("user"),
                        "state": "COMMENTED",
                        "body": "",
                        "submitted_at": first.get("created_at"),
                        "commit_id": first.get("original_commit_id") or first.get("commit_id"),
                    }
                )
            for i, r in enumerate(reviews):
                if is_bot_user(r.get("user")):
                    self.skip("bot_review")
                    continue
                mine = inline.get(r.get("id"), [])
                made_on = r.get("commit_id") or next(
                    (
                        c.get("original_commit_id") or c.get("commit_id")
                        for c in mine
                        if c.get("original_commit_id") or c.get("commit_id")
                    ),
                    None,
                )
                events.append(
                    PullEvent(
                        str(r.get("submitted_at") or ""),
                        10_000 + i,
                        _render_review(r, mine, names, clean),
                        made_on,
                        _time(r.get("submitted_at")),
                    )
                )
        return events


def _place_events(events: list[PullEvent], commits: list[CommitRecord]) -> dict[int, list[PullEvent]]:
    """Events grouped by the commit (index) they follow: the commit they name, else the last commit made
    before them, else -1 (before the first commit); in time order within a commit."""
    placed: dict[int, list[PullEvent]] = {}
    for ev in sorted(events, key=lambda e: (e.time, e.order)):
        k = None
        sha = str(ev.commit or "")
        if len(sha) >= 7:
            k = next((i for i, c in enumerate(commits) if c.sha.startswith(sha) or sha.startswith(c.sha)), None)
        if k is None and ev.at is not None and commits:
            before = [i for i, c in enumerate(commits) if c.timestamp <= ev.at]
            k = before[-1] if before else -1
        if k is None:
            k = len(commits) - 1 if commits else 0  # no time, no commit: after the last commit
        placed.setdefault(k, []).append(ev)
    return placed


def _pseudonyms(pr: dict) -> Pseudonyms:
    """Pseudonyms for everyone in the pull request, numbered first so @mentions resolve in any text."""
    names = Pseudonyms("user")
    logins = (
        [pr.get("user")]
        + [c.get("user") for c in pr.get("comments") or []]
        + [r.get("user") for r in pr.get("reviews") or []]
        + [c.get("user") for c in pr.get("review_comments") or []]
    )
    head_user = (pr.get("head") or {}).get("user")  # the fork's owner: the login in a head branch name
    for u in logins + [head_user]:
        login, _ = _login(u)
        if login and not is_bot_user(u):
            # a git input's author: login, name and email are one person (commit lines name them too)
            more = (
                (u.get("name"), u.get("email"), noreply_login(str(u.get("email") or ""))) if isinstance(u, dict) else ()
            )
            names(login, *more)
    return names


def _hints(pr: dict, clean: Any) -> list[str]:
    return [f"\nHints (the issue's discussion before the fix):\n{clean(pr['hints'])}"] if pr.get("hints") else []


def _tests_to_pass(pr: dict) -> list[str]:
    tests = pr.get("tests_to_pass") or []
    return ["\nTests that must pass after the change:\n" + "\n".join(f"- {t}" for t in tests)] if tests else []


def _who(names: Pseudonyms, user: Any) -> str:
    login = _login(user)[0]
    return names(login) if login else "user_unknown"


def _render_review(review: dict, comments: list[dict], names: Pseudonyms, clean: Any) -> str:
    parts = [f"\n{_who(names, review.get('user'))} reviewed ({str(review.get('state') or 'COMMENTED').upper()}):"]
    if (review.get("body") or "").strip():
        parts.append(clean(review.get("body")))
    for c in sorted(comments, key=lambda c: (str(c.get("created_at") or ""), str(c.get("path")))):
        loc = f"{c.get('path')}" + (f" line {c.get('line')}" if c.get("line") is not None else "")
        hunk = (c.get("diff_hunk") or "").rstrip("\n")
        parts.append(f"  on {loc}:" + (f"\n{hunk}" if hunk else ""))
        parts.append(f"  {_who(names, c.get('user'))}: {clean(c.get('body'))}")
    return "\n".join(parts)
