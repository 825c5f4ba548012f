"""A pull request's text: its issues, description, commits, changed files, reviews and comments in order, and its
test and CI results; people pseudonymised, bots' text dropped."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

from midtrain.sources.bots import is_bot_user
from midtrain.sources.commits import file_skip_reason, split_files
from midtrain.sources.common import (
    Pseudonyms,
    SourceReader,
    walk_files,
)
from midtrain.sources.filters import path_skip_reason
from midtrain.sources.privacy import noreply_login, scrub_message
from midtrain.sources.pull_config import PullsConfig
from midtrain.sources.pull_context import (
    diff_sections,
)
from midtrain.sources.pull_records import _CLOSING_REF, PR_SUFFIXES, _login, _repo, _state, _time, _title, iter_records


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


class PullRendering(SourceReader):
    """The pull request's text: its description, issues, commits, files, conversation and results."""

    cfg: PullsConfig

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
