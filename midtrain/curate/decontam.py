"""Decontamination against SWE-bench (Verified, Lite, Multilingual, Pro): repository level, then n-grams.

Layer 1 drops every document whose repository is a benchmark repository, whatever form its name takes:
``owner/name``, GitHub https/ssh/git URLs, ``.git`` suffixes, any case, SWE-bench's ``owner__name`` (and
instance ids ``owner__name-1234``), former names (GitHub renames, data/repo_aliases.txt), and forks (a
fork/parent/upstream/remote field pointing at a benchmark repository, or — switchable — a repository whose
name part is a distinctive benchmark repository name, ``someone/django``).
The list: the installed ``swebench`` package's per-repository maps, data/swebench_repos.txt (adds SWE-bench
Pro), and a user list file (repositories and/or instance ids, one a line).

Layer 2 (when benchmark instances are supplied as JSONL rows with ``problem_statement`` and ``patch``) drops
documents sharing a long word n-gram with an issue text or with the lines a gold patch adds.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from datatrove.data import Document
from datatrove.utils.hashing import HashConfig, create_hash_func
from datatrove.utils.text import TextNormConfig, ngrams, simplify_text

from midtrain.config import Config, require
from midtrain.curate.base import CodeWordTokenizer, CurationStep, Drop

log = logging.getLogger("midtrain.curate")
DATA = Path(__file__).parent / "data"

# metadata fields that may name the document's repository, its fork parent or its remotes
REPO_FIELDS = ("repo", "repo_name", "repository", "repo_url", "url", "html_url", "clone_url", "origin",
               "origin_url", "remote_url", "remotes", "upstream", "upstream_url", "parent", "fork_of",
               "forked_from", "source_repo", "base_repo", "head_repo", "instance_id")
# benchmark repository names too generic to mean "a fork" on their own (someone/core is not vuejs/core)
# (SWE-bench Verified's names are never generic here: requests, flask, pytest ... forks are dropped by name)
GENERIC_NAMES = {"core", "framework", "json", "next", "carbon", "fmt", "marked", "prism", "faker", "gin", "bat",
                 "fpm", "jq", "tokio", "axum", "lombok", "gson", "hugo", "fluentd", "redis",
                 "webclients", "vuls", "teleport", "flipt", "ansible", "ruff", "emotion",
                 "babel", "eslint", "prettier", "axios", "cypress", "preact", "terraform", "prometheus", "caddy",
                 "druid", "lucene", "jekyll", "rubocop", "fastlane", "nushell", "coreutils", "valkey"}


@dataclass
class DecontamConfig(Config):
    """SWE-bench decontamination: repository list (layer 1) and n-gram overlap (layer 2)."""

    enabled: bool = True
    use_swebench_package: bool = True  # take the repository list from the installed `swebench` package
    use_bundled_list: bool = True  # data/swebench_repos.txt (adds SWE-bench Pro) and data/repo_aliases.txt
    repo_list: str | None = None  # user file: repositories (any form) and/or instance ids, one a line
    match_forks_by_name: bool = True  # someone/django counts as a fork of django/django (distinctive names)
    instances: list[str] = field(default_factory=list)  # JSONL files of benchmark rows (problem_statement, patch)
    ngrams: bool = True  # layer 2, active when `instances` are given
    ngram_size: int = 13  # words (after lower-casing and dropping punctuation)

    def check(self) -> None:
        require(self.ngram_size >= 5, "ngram_size", "must be >= 5 (short n-grams match ordinary code)")


def normalize_repo(value: Any) -> str | None:
    """'https://github.com/Django/django.git' | 'git@github.com:django/django' | 'django__django-11099' ->
    'django/django'; None when the value does not look like a repository."""
    if not isinstance(value, str):
        return None
    s = value.strip().lower()
    if not s:
        return None
    s = re.sub(r"^(?:git\+)?(?:https?|ssh|git)://", "", s)
    s = re.sub(r"^[\w.-]+@", "", s)  # git@github.com:owner/name
    s = re.sub(r"^(?:www\.)?(?:github\.com|gitlab\.com|bitbucket\.org)[:/]", "", s)
    s = s.split("?")[0].split("#")[0].strip("/")
    if "/" not in s and "__" in s:  # SWE-bench ids: owner__name or owner__name-1234
        owner, _, rest = s.partition("__")
        s = owner + "/" + re.sub(r"-\d+$", "", rest)
    parts = s.split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        return None
    owner, name = parts[0], parts[1].removesuffix(".git")
    if not re.fullmatch(r"[a-z0-9_.-]+", owner) or not re.fullmatch(r"[a-z0-9_.-]+", name):
        return None
    return f"{owner}/{name}"


@functools.lru_cache(maxsize=1)
def swebench_package_repos() -> frozenset[str]:
    """Repositories the installed swebench package knows (its per-repository maps); empty if not installed.

    The package's modules are parsed, not imported: importing its harness pulls in docker and friends
    (seconds per worker) for what is a list of string keys.
    """
    spec = importlib.util.find_spec("swebench")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    root = Path(list(spec.submodule_search_locations)[0])
    names: set[str] = set()
    for path in sorted((root / "harness").rglob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, OSError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id.startswith(("MAP_REPO_TO_", "MAP_REPO_VERSION_TO_"))
                       for t in targets):
                    names.update(k.value for k in node.value.keys
                                 if isinstance(k, ast.Constant) and isinstance(k.value, str) and "/" in k.value)
    return frozenset(names)


def _read_lines(path: Path) -> list[str]:
    return [ln.split("#")[0].strip() for ln in path.read_text().splitlines() if ln.split("#")[0].strip()]


@dataclass
class BenchmarkIndex:
    repos: set[str]  # normalised owner/name
    aliases: dict[str, str]  # normalised old -> current
    instance_ids: set[str]
    names: set[str]  # distinctive name parts, for fork-by-name matching


def build_index(cfg: DecontamConfig) -> BenchmarkIndex:
    raw: set[str] = set()
    aliases: dict[str, str] = {}
    ids: set[str] = set()
    if cfg.use_swebench_package:
        pkg = swebench_package_repos()
        if not pkg:
            log.warning("curate: the swebench package is not installed; using the bundled repository list")
        raw |= pkg
    if cfg.use_bundled_list:
        raw |= set(_read_lines(DATA / "swebench_repos.txt"))
        for line in _read_lines(DATA / "repo_aliases.txt"):
            old, new = line.split()[:2]
            aliases[normalize_repo(old)] = normalize_repo(new)
    if cfg.repo_list:
        for item in _read_lines(Path(cfg.repo_list)):
            if re.search(r"__.+-\d+$", item):
                ids.add(item.lower())
            raw.add(item)
    for path in cfg.instances:
        for row in _read_jsonl(path):
            if isinstance(row.get("repo"), str):
                raw.add(row["repo"])
            if isinstance(row.get("instance_id"), str):
                ids.add(row["instance_id"].lower())
    repos = {r for r in (normalize_repo(x) for x in raw) if r}
    repos |= {normalize_repo(i) for i in ids if normalize_repo(i)}
    aliases = {k: v for k, v in aliases.items() if k and v in repos}
    names = {r.split("/")[1] for r in repos} - GENERIC_NAMES
    names = {n for n in names if len(n) >= 4}
    return BenchmarkIndex(repos, aliases, ids, names)


def _read_jsonl(path: str) -> Iterable[dict]:
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                log.warning("curate: %s line %d is not JSON, skipped", path, i + 1)
                continue
            if isinstance(row, dict):
                yield row


def _candidates(meta: dict) -> Iterable[tuple[str, str]]:
    for key in REPO_FIELDS:
        value = meta.get(key)
        values = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        for v in values:
            if isinstance(v, dict):  # {"name": ..., "url": ...}
                for vv in v.values():
                    yield key, vv
            else:
                yield key, v


class SweBenchRepoFilter(CurationStep):
    """Layer 1. Drops ``dropped_swebench_repo``, ``dropped_swebench_instance``, ``dropped_swebench_fork_name``
    and counts each benchmark repository hit as ``swebench_repo_<owner/name>``."""

    name = "🧪 SWE-bench repos"
    step_name = "decontam_repo"

    def __init__(self, cfg: DecontamConfig, exclusion_dir: str | None = None):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self._index: BenchmarkIndex | None = None

    def match(self, meta: dict) -> tuple[str, str] | None:
        """(reason, benchmark repo) when the metadata points at a benchmark repository or instance."""
        if self._index is None:
            self._index = build_index(self.cfg)
        idx = self._index
        for key, value in _candidates(meta):
            if key == "instance_id" and isinstance(value, str) and value.lower() in idx.instance_ids:
                return "swebench_instance", value
            repo = normalize_repo(value)
            if repo is None:
                continue
            repo = idx.aliases.get(repo, repo)
            if repo in idx.repos:
                return "swebench_repo", repo
        if self.cfg.match_forks_by_name:
            for key, value in _candidates(meta):
                repo = normalize_repo(value)
                if repo and repo.split("/")[1] in idx.names:
                    return "swebench_fork_name", repo
        return None

    def process(self, doc: Document) -> None:
        hit = self.match(doc.metadata)
        if hit:
            reason, repo = hit
            self.stat_update(f"swebench_repo_{repo}")
            raise Drop(reason, repo)


def _added_lines(patch: str) -> str:
    return "\n".join(ln[1:] for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++"))


class SweBenchNgramFilter(CurationStep):
    """Layer 2. Drops ``dropped_swebench_ngram`` (issue text or gold-patch overlap), recording the n-gram and
    the instance in the excluded document's metadata."""

    name = "🧪 SWE-bench n-grams"
    step_name = "decontam_ngram"

    def __init__(self, cfg: DecontamConfig, exclusion_dir: str | None = None):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self.norm = TextNormConfig()
        self.tokenizer = CodeWordTokenizer()
        self._hash = create_hash_func(HashConfig(precision=64, hash_fc="xxhash"))
        self._index: dict[int, str] | None = None

    def _grams(self, text: str) -> Iterable[str]:
        words = self.tokenizer.word_tokenize(simplify_text(text, self.norm))
        return (" ".join(g) for g in ngrams(words, self.cfg.ngram_size))

    def _load(self) -> dict[int, str]:
        index: dict[int, str] = {}
        for path in self.cfg.instances:
            for row in _read_jsonl(path):
                iid = str(row.get("instance_id", "?"))
                for fld, text in (("issue", row.get("problem_statement")), ("patch", row.get("patch"))):
                    if not isinstance(text, str):
                        continue
                    if fld == "patch":
                        text = _added_lines(text)
                    for g in self._grams(text):
                        index.setdefault(self._hash(g), f"{iid}:{fld}")
        log.info("curate: %d benchmark n-grams from %d instance files", len(index), len(self.cfg.instances))
        return index

    def process(self, doc: Document) -> None:
        if self._index is None:
            self._index = self._load()
        if not self._index:
            return
        for g in self._grams(doc.text):
            hit = self._index.get(self._hash(g))
            if hit:
                doc.metadata["contaminated_ngram"] = g
                doc.metadata["contaminated_instance"] = hit
                self.stat_update(f"swebench_ngram_{hit.rsplit(':', 1)[1]}")
                raise Drop("swebench_ngram", hit)

