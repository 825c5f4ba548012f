"""A pull request read against its repository's clone: the tree and files at the base commit, then each commit
of the work with the conversation placed after it (or the same work as an agent's trajectory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from midtrain.sources import pull_agent
from midtrain.sources.common import (
    Pseudonyms,
)
from midtrain.sources.git import (
    CommitRecord,
    diff,
    has_commit,
    iter_commits,
    remote_name,
    root_commits,
)
from midtrain.sources.licenses import license_at
from midtrain.sources.privacy import scrub_message
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pull_context import (
    ReadFile,
    base_context,
    base_tree,
    clone_candidates,
    diff_sections,
    estimate_tokens,
    find_clone,
    hunk_ranges,
    relevance,
    sequence_applies,
    tree_at,
)
from midtrain.sources.pull_records import _repo, _state, _title
from midtrain.sources.pull_render import PullEvent, PullRendering, _hints, _tests_to_pass


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


class PullWorkflow(PullRendering):
    """A pull request read against its repository's clone: the work as it went, from the base commit."""

    cfg: PullsConfig

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
