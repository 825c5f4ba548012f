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
from pathlib import Path
from typing import Any

from datatrove.data import Document

from midtrain.formats.instance_id import canonical_instance, pull_instance
from midtrain.formats.patch_key import patch_key
from midtrain.locations import is_url
from midtrain.sources.bots import is_bot_user
from midtrain.sources.common import (
    expand_inputs,
    make_document,
    walk_files,
)
from midtrain.sources.git import (
    GitError,
    is_git_repo,
)
from midtrain.sources.privacy import scrub_text
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pull_context import (
    clone_name,
    history_pulls,
    relevance,
)
from midtrain.sources.pull_records import (
    PR_SUFFIXES,
    _repo,
    _state,
    _title,
    fix_commits,
    from_swesmith_row,
    from_task_row,
    is_swesmith_row,
    iter_records,
    linked_instances,
    record_error_reason,
)
from midtrain.sources.pull_render import _pseudonyms
from midtrain.sources.pull_workflow import PullWorkflow
from midtrain.sources.tables import NO_TABLE_FILES, iter_table_rows, table_units

# a sync / merge-forward PR's title: "Merge stable into main", "Merge branch '8.1.x' into main", "Sync with main"
_SYNC_TITLE = re.compile(
    r"^(?:merge(?:\s+(?:remote-tracking\s+)?branch)?|sync|forward[- ]?merge|merge[- ]forward)\s+"
    r"['\"]?[\w./-]+['\"]?\s+(?:into|to|with)\s+['\"]?[\w./-]+['\"]?$",
    re.IGNORECASE,
)


class PullReader(PullWorkflow):
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
