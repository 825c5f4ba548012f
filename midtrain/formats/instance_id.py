"""One name per repository and per task instance, whatever spelling a producer used.

A repository: ``owner/name`` lower-cased, from ``owner/name``, GitHub/GitLab/Bitbucket https/ssh/git URLs,
``.git`` suffixes, SWE-bench's ``owner__name`` (and instance ids ``owner__name-1234``, SWE-smith's
``owner__name.<commit>.<task>``).

A task instance (the key of the run's held-out split, midtrain.formats.run_split): a GitHub issue or
pull request is ``owner/name#N`` (repository as above; SWE-bench's ``Owner__Name-N``, SWE-agent's
``Owner__Name-iN`` for a run on an issue URL, ``owner/name#N``, ``owner/name/pull/N``, ``owner/name/issues/N``,
their github.com URLs and REST API URLs ``https://api.github.com/repos/owner/name/pulls/N`` all fold to it:
GitHub numbers issues and pulls in one sequence, so the number names one issue or pull request; an issue and
the pull request that fixed it are linked by the run's split, not here). Any other id (SWE-smith, SWE-bench
Pro, DeepSWE task names) is the dataset's own id, lower-cased and stripped, with ``:`` (the separator of
trace document ids) written ``_``.

Curation (decontamination) and every source that carries a task (traces, task rows, pull requests) use these
functions; no second spelling rule exists.
"""

from __future__ import annotations

import functools
import re
from typing import Any

# GitHub owners are letters, digits and hyphens; SWE-bench writes owner__name-N
# (SWE-agent writes owner__name-iN for an issue given by URL: the number)
_SWEBENCH_ID = re.compile(r"(?P<owner>[a-z0-9][a-z0-9-]*)__(?P<name>[a-z0-9_.-]+?)-i?(?P<number>\d+)")
_SWESMITH_TAIL = re.compile(r"\.[0-9a-f]{6,40}(?:\..*)?$")  # SWE-smith: owner__name.<commit>.<task>
# a trailing page of a pull request's URL (/files, /commits, /checks) still names the pull request
_NUMBERED = re.compile(r"(?P<repo>[^#]+?)(?:#|/(?:pull|pulls|issues)/)(?P<number>\d+)(?:/[a-z]*)?/?")


def normalize_repo(value: Any) -> str | None:
    """'https://github.com/Django/django.git' | 'git@github.com:django/django' | 'django__django-11099' ->
    'django/django'; None when the value does not look like a repository."""
    return _normalize_repo(value) if isinstance(value, str) else None


def _strip_host(s: str) -> str:
    s = re.sub(r"^(?:git\+)?(?:https?|ssh|git)://", "", s)
    s = re.sub(r"^[\w.-]+@", "", s)  # git@github.com:owner/name
    s = re.sub(r"^api\.github\.com/repos/", "", s)  # the REST API's URLs: api.github.com/repos/owner/name/...
    return re.sub(r"^(?:www\.)?(?:github\.com|gitlab\.com|bitbucket\.org)[:/]", "", s)


@functools.lru_cache(maxsize=1 << 16)  # every document of a repository names it again
def _normalize_repo(value: str) -> str | None:
    s = value.strip().lower()
    if not s:
        return None
    s = _strip_host(s)
    s = s.split("?")[0].split("#")[0].strip("/")
    if "/" not in s and "__" in s:  # SWE-bench ids: owner__name or owner__name-1234
        owner, _, rest = s.partition("__")
        rest = _SWESMITH_TAIL.sub("", rest)
        s = owner + "/" + re.sub(r"-i?\d+$", "", rest)
    parts = s.split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        return None
    owner, name = parts[0], parts[1].removesuffix(".git")
    if not re.fullmatch(r"[a-z0-9_.-]+", owner) or not re.fullmatch(r"[a-z0-9_.-]+", name):
        return None
    return f"{owner}/{name}"


def canonical_instance(value: Any, repo: Any = None) -> str | None:
    """The canonical id of a task instance (see the module doc); None for an empty or missing id.

    ``repo``: the record's repository, for an id that is a bare number (``1234``, ``#1234``)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        return None
    return _canonical(value, repo if isinstance(repo, str) else None)


@functools.lru_cache(maxsize=1 << 16)
def _canonical(value: str, repo: str | None) -> str | None:
    s = value.strip().lower()
    if not s or s in ("none", "null", "unknown"):
        return None
    if (m := _SWEBENCH_ID.fullmatch(s)) and not _SWESMITH_TAIL.search(m["name"]):
        return f"{m['owner']}/{m['name']}#{int(m['number'])}"
    if (m := _NUMBERED.fullmatch(_strip_host(s))) and (r := normalize_repo(m["repo"])):
        return f"{r}#{int(m['number'])}"
    if re.fullmatch(r"#?\d+", s) and (r := normalize_repo(repo)):
        return f"{r}#{int(s.lstrip('#'))}"
    return re.sub(r"\s+", "_", s).replace(":", "_")


def pull_instance(repo: Any, number: Any) -> str | None:
    """A pull request's (or issue's) canonical instance id from its repository and number."""
    r = normalize_repo(repo)
    if r is None or isinstance(number, bool):
        return None
    if isinstance(number, str) and number.strip().isdigit():
        number = int(number)
    return f"{r}#{number}" if isinstance(number, int) else None
