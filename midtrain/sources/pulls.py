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

User names become ``user_<n>`` in order of appearance (also @mentions of them in text). Text written by bot
accounts (``type == "Bot"``, ``[bot]`` logins, well-known CI bots) is dropped and counted; a pull request
opened by a bot is dropped whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from datatrove.data import Document
from datatrove.io import get_datafolder

from midtrain.locations import is_url
from midtrain.sources.common import Pseudonyms, ReaderConfig, SourceReader, expand_inputs, make_document, walk_files
from midtrain.sources.tables import NO_TABLE_FILES, iter_table_rows, table_units

KNOWN_BOTS = {"dependabot", "renovate", "codecov", "github-actions", "coveralls", "mergify", "netlify", "vercel",
              "stale", "allcontributors", "pre-commit-ci", "sonarcloud", "codecov-commenter", "gitpod-io",
              "welcome", "greenkeeper", "snyk-bot", "imgbot", "bors", "k8s-ci-robot", "openshift-ci"}
PR_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")


@dataclass
class PullsConfig(ReaderConfig):
    """Pull-request documents."""

    max_patch_bytes: int = 100_000  # per file; longer patches are cut with a marker
    include_reviews: bool = True


def _login(user: Any) -> tuple[str, str]:
    if isinstance(user, dict):
        return str(user.get("login") or ""), str(user.get("type") or "User")
    return (str(user) if user else ""), "User"


def is_bot(user: Any) -> bool:
    login, kind = _login(user)
    low = login.lower()
    return kind.lower() == "bot" or low.endswith("[bot]") or low.endswith("-bot") or low in KNOWN_BOTS


def iter_records(path: Path) -> Iterator[tuple[str, Any]]:
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
    yield from iter_table_rows(get_datafolder(str(path.parent)), path.name)


def record_error_reason(exc: Exception) -> str:
    return "invalid_utf8" if isinstance(exc, UnicodeDecodeError) else "malformed_json"


class PullReader(SourceReader):
    """datatrove reader over pull-request record files (sharded by file)."""

    name = "🔀 pull requests"
    source = "pulls"

    config_class = PullsConfig
    cfg: PullsConfig

    def units(self) -> list[tuple[str, Any]]:
        urls = [i for i in self.inputs if is_url(i)]  # object storage: listed through datatrove's data folders
        units: list[tuple[str, Any]] = table_units(urls) if urls else []
        for p in sorted(expand_inputs(i for i in self.inputs if not is_url(i)), key=str):
            if p.is_dir() and not (p / "dataset_info.json").exists() and not (p / "dataset_dict.json").exists():
                units.extend((str(p), str(f)) for f in walk_files(p, PR_SUFFIXES))
            else:
                units.append((str(p), str(p)))
        return units

    def unit_path(self, unit: Any) -> Path | None:
        return Path(unit) if isinstance(unit, str) else None

    def read_unit(self, unit: Any, origin: str) -> Iterator[Document]:
        if isinstance(unit, tuple) and unit[1] is None:
            self.stat_update("records")
            self.error("missing_input", origin, NO_TABLE_FILES, origin)
            return
        records = iter_records(Path(unit)) if isinstance(unit, str) else iter_table_rows(*unit)
        for where, rec in records:
            self.stat_update("records")
            if isinstance(rec, Exception):
                self.error(record_error_reason(rec), where, str(rec), origin)
                continue
            if not isinstance(rec, dict):
                self.error("bad_record", where, f"expected an object, got {type(rec).__name__}", origin)
                continue
            try:
                doc = self.render(rec, where)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                self.error("bad_record", where, f"{type(e).__name__}: {e}", origin)
                continue
            if doc is not None:
                yield doc

    def render(self, pr: dict, where: str) -> Document | None:
        if is_bot(pr.get("user")):
            self.drop("bot_author", lambda: make_document(json.dumps(pr, ensure_ascii=False, default=str),
                                                          f"pr:{pr.get('repo')}#{pr.get('number')}", "pr"))
            return None
        title = (pr.get("title") or "").strip()
        if not title and not pr.get("files"):
            self.error("bad_record", where, "no title and no files")
            return None
        repo = pr.get("repo") or ((pr.get("base") or {}).get("repo") or {}).get("full_name")
        number = pr.get("number")
        names = _pseudonyms(pr)

        def clean(text: Any) -> str:
            return names.scrub(str(text or "").replace("\r\n", "\n").strip())

        state = "merged" if pr.get("merged") else str(pr.get("state") or "unknown")
        base, head = pr.get("base") or {}, pr.get("head") or {}
        out = [f"Title: {clean(title)}"]
        if repo:
            out.append(f"Repository: {repo}")
        out.append(f"State: {state}" + (f" ({base.get('ref')} <- {head.get('ref')})" if base.get("ref") else ""))
        out.append(f"\n{_who(names, pr.get('user'))} opened this pull request:\n"
                   f"{clean(pr.get('body')) or '(no description)'}")
        files = pr.get("files") or []
        out += self._render_files(files)
        out += self._render_conversation(pr, names, clean)
        text = "\n".join(out) + "\n"
        doc_id = f"pr:{repo or 'unknown'}#{number if number is not None else where}"
        if len(text.encode("utf-8", "surrogatepass")) > self.cfg.max_doc_bytes:
            text = text.encode("utf-8", "surrogatepass")[: self.cfg.max_doc_bytes].decode("utf-8", "ignore")
            text += f"\n[pull request truncated at {self.cfg.max_doc_bytes} bytes]\n"
            self.skip("document_truncated")
        return make_document(text, doc_id, "pr", repo=repo, license=pr.get("license"), number=number,
                             state=state, n_files=len(files))

    def _render_files(self, files: list[dict]) -> list[str]:
        """The changed files with their patches (cut at max_patch_bytes; a file without one is noted)."""
        out = ["\nFiles changed:"] if files else []
        for f in files:
            patch = f.get("patch") or ""
            status = f.get("status") or "modified"
            out.append(f"\n--- {f.get('filename')} ({status}, +{f.get('additions', 0)} -{f.get('deletions', 0)})")
            if not patch:
                out.append("[no textual diff: binary or too large]")
                self.skip("file_without_patch")
                continue
            raw = patch.encode("utf-8", "surrogatepass")  # surrogates are reported later, by the reader base
            if len(raw) > self.cfg.max_patch_bytes:
                cut = raw[: self.cfg.max_patch_bytes].decode("utf-8", "ignore").rsplit("\n", 1)[0]
                patch = cut + f"\n[patch truncated: {len(patch) - len(cut)} more characters]"
                self.skip("patch_truncated")
            out.append(patch.rstrip("\n"))
        return out

    def _render_conversation(self, pr: dict, names: Pseudonyms, clean: Any) -> list[str]:
        """Issue comments and reviews (with their inline comments) in time order; bots' are skipped, counted."""
        events: list[tuple[str, int, str]] = []
        for i, c in enumerate(pr.get("comments") or []):
            if is_bot(c.get("user")):
                self.skip("bot_comment")
                continue
            events.append((str(c.get("created_at") or ""), i,
                           f"\n{_who(names, c.get('user'))} commented:\n{clean(c.get('body'))}"))
        inline: dict[Any, list[dict]] = {}
        for c in pr.get("review_comments") or []:
            if is_bot(c.get("user")):
                self.skip("bot_review_comment")
                continue
            inline.setdefault(c.get("pull_request_review_id"), []).append(c)
        if self.cfg.include_reviews:
            reviews = list(pr.get("reviews") or [])
            known = {r.get("id") for r in reviews}
            for rid in sorted((k for k in inline if k not in known), key=str):  # inline comments without review
                first = inline[rid][0]
                reviews.append({"id": rid, "user": first.get("user"), "state": "COMMENTED", "body": "",
                                "submitted_at": first.get("created_at")})
            for i, r in enumerate(reviews):
                if is_bot(r.get("user")):
                    self.skip("bot_review")
                    continue
                events.append((str(r.get("submitted_at") or ""), 10_000 + i,
                               _render_review(r, inline.get(r.get("id"), []), names, clean)))
        return [text for _, _, text in sorted(events, key=lambda e: (e[0], e[1]))]


def _pseudonyms(pr: dict) -> Pseudonyms:
    """Pseudonyms for everyone in the pull request, numbered first so @mentions resolve in any text."""
    names = Pseudonyms("user")
    logins = [pr.get("user")] + [c.get("user") for c in pr.get("comments") or []] + \
             [r.get("user") for r in pr.get("reviews") or []] + [c.get("user") for c in pr.get("review_comments") or []]
    for u in logins:
        login, _ = _login(u)
        if login and not is_bot(u):
            names(login)
    return names


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
