"""Pull request records as the reader takes them: the files and tables they are read from, and the task rows
(SWE-bench, SWE-smith) turned into the GitHub-API-like schema of :mod:`midtrain.sources.pulls`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from datatrove.io import get_datafolder

from midtrain.formats.instance_id import canonical_instance, pull_instance
from midtrain.sources.common import (
    MAX_RECORD_BYTES,
    RecordTooLarge,
)
from midtrain.sources.pull_context import (
    diff_sections,
    reverse_patch,
    section_file,
)
from midtrain.sources.tables import iter_table_rows

PR_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")

# GitHub's closing keywords: "fixes #12", "Closes: #3", "resolved #7"
_CLOSING_REF = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d+)\b", re.IGNORECASE)


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
