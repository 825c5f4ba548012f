"""Decontamination against SWE-bench (Verified, Lite, Multilingual, Pro): repository level, then n-grams.

Layer 1 drops every document whose repository is a benchmark repository, whatever form its name takes:
``owner/name``, GitHub https/ssh/git URLs, ``.git`` suffixes, any case, SWE-bench's ``owner__name`` (and
instance ids ``owner__name-1234``), former names (GitHub renames, data/repo_aliases.txt), and forks (a
fork/parent/upstream/remote field pointing at a benchmark repository, or — switchable — a repository whose
name part is a distinctive benchmark repository name, ``someone/django``).
The list: the installed ``swebench`` package's per-repository maps, data/swebench_repos.txt (adds SWE-bench
Pro), and a user list file (repositories and/or instance ids, one a line).

Names can lie (a company mirror under another name, a release tarball unpacked as ``<name>-src/``), so the
same step also knows a repository by what it is:

- *root commits*: every clone, fork and renamed mirror keeps the parentless commits of the original history;
  data/root_commits.tsv holds those of the benchmark repositories (with where each came from), a content
  index adds those of the clones it was built from, and instance files add their ``base_commit`` shas;
- *declared home*: what the project's own root files say (packaging URLs, go.mod, README badges; see
  :mod:`midtrain.curate.identity`) — a mere link does not count;
- *content* (``decontam.index``, built by ``midtrain decontam index``): a repository whose files overlap one
  benchmark repository beyond ``index_repo_fraction`` is dropped whole, fewer matching files (a vendored
  copy) are cut out one by one, and a commit/PR whose diff touches only that repository's files is dropped.

Every repository-derived document (repo, commit, pr) records ``metadata["identity"]`` =
``{"method": remote|declared|root_commit|content|none, "repo": owner/name|None}``; the step counts
``identity_<method>`` and ``unidentified_repo``, and drops unidentified ones when ``require_identity`` is on.

Layer 2 (when benchmark instances are supplied as JSONL rows with ``problem_statement`` and ``patch``, or
held-out evaluation texts as ``{"id", "text"}`` rows in ``decontam.heldout``) drops documents sharing a long word
n-gram with an issue text, with the lines a gold patch adds, or with a held-out text (:class:`NgramIndex`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datatrove.data import Document
from datatrove.utils.hashing import HashConfig, create_hash_func
from datatrove.utils.text import TextNormConfig

from midtrain.config import Config, require
from midtrain.curate.base import CurationStep, Drop, remove_files, repo_files
from midtrain.curate.fingerprint import ContentIndex, fingerprint, load_index
from midtrain.curate.identity import HOME_SCORE, declared_homes
from midtrain.curate.text import simplified_words, word_ngrams
from midtrain.formats.documents import read_jsonl
from midtrain.formats.instance_id import canonical_instance, normalize_repo  # one spelling rule: formats'
from midtrain.formats.source_specs import doc_traits

log = logging.getLogger("midtrain.curate")
DATA = Path(__file__).parent / "data"

# metadata fields that may name the document's repository, its fork parent or its remotes
REPO_FIELDS = (
    "repo",
    "repo_name",
    "repository",
    "repo_url",
    "url",
    "html_url",
    "clone_url",
    "origin",
    "origin_url",
    "remote_url",
    "remotes",
    "upstream",
    "upstream_url",
    "parent",
    "fork_of",
    "forked_from",
    "source_repo",
    "base_repo",
    "head_repo",
    "instance_id",
)
# benchmark repository names too generic to mean "a fork" on their own (someone/core is not vuejs/core)
# (SWE-bench Verified's names are never generic here: requests, flask, pytest ... forks are dropped by name)
GENERIC_NAMES = {
    "core",
    "framework",
    "json",
    "next",
    "carbon",
    "fmt",
    "marked",
    "prism",
    "faker",
    "gin",
    "bat",
    "fpm",
    "jq",
    "tokio",
    "axum",
    "lombok",
    "gson",
    "hugo",
    "fluentd",
    "redis",
    "webclients",
    "vuls",
    "teleport",
    "flipt",
    "ansible",
    "ruff",
    "emotion",
    "babel",
    "eslint",
    "prettier",
    "axios",
    "cypress",
    "preact",
    "terraform",
    "prometheus",
    "caddy",
    "druid",
    "lucene",
    "jekyll",
    "rubocop",
    "fastlane",
    "nushell",
    "coreutils",
    "valkey",
    # DeepSWE's
    "task",
    "query",
    "expr",
    "effect",
    "returns",
    "helm",
    "quill",
    "pebble",
    "arcane",
    "bandit",
    "textual",
    "etree",
    "pest",
    "igel",
    "updo",
    "koota",
}


@dataclass
class DecontamConfig(Config):
    """SWE-bench decontamination: repository list (layer 1) and n-gram overlap (layer 2)."""

    enabled: bool = True
    use_swebench_package: bool = True  # take the repository list from the installed `swebench` package
    use_bundled_list: bool = True  # data/swebench_repos.txt (adds SWE-bench Pro) and data/repo_aliases.txt
    repo_list: str | None = None  # user file: repositories (any form) and/or instance ids, one a line
    match_forks_by_name: bool = True  # someone/django counts as a fork of django/django (distinctive names)
    instances: list[str] = field(default_factory=list)  # JSONL files of benchmark rows (problem_statement, patch)
    # JSONL files of held-out evaluation texts ({"id", "text"}): a document sharing an n-gram with one is dropped
    # (dropped_heldout_ngram), whatever its id says (an eval trajectory quoted in a commit diff, say)
    heldout: list[str] = field(default_factory=list)
    ngrams: bool = True  # layer 2, active when `instances` are given
    ngram_size: int = 13  # words (after lower-casing and dropping punctuation)
    root_commits: bool = True  # know histories by their root commits (data/root_commits.tsv, index, instances)
    declared_homes: bool = True  # read what a repository's own root files declare as its home
    index: str | None = None  # content index from `midtrain decontam index` (JSON or .json.gz)
    index_repo_fraction: float = 0.3  # share of a repository's files found in one benchmark repo: drop it whole
    index_min_files: int = 3  # ... and at least this many files; fewer matches are cut out file by file
    index_near: bool = True  # near-duplicate files (MinHash of their lines) count as matches too
    index_common_repos: int = 3  # a file found in this many benchmark repos is shared boilerplate: ignored
    require_identity: bool = False  # fail closed: drop repo/commit/pr documents whose repository is unknown

    def check(self) -> None:
        require(self.ngram_size >= 5, "ngram_size", "must be >= 5 (short n-grams match ordinary code)")
        require(0 < self.index_repo_fraction <= 1, "index_repo_fraction", "must be in (0, 1]")
        require(self.index_min_files >= 1, "index_min_files", "must be >= 1")
        require(self.index_common_repos >= 2, "index_common_repos", "must be >= 2 (forks share their files)")


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
                if any(
                    isinstance(t, ast.Name) and t.id.startswith(("MAP_REPO_TO_", "MAP_REPO_VERSION_TO_"))
                    for t in targets
                ):
                    names.update(
                        k.value
                        for k in node.value.keys
                        if isinstance(k, ast.Constant) and isinstance(k.value, str) and "/" in k.value
                    )
    return frozenset(names)


def _read_lines(path: Path) -> list[str]:
    return [ln.split("#")[0].strip() for ln in path.read_text().splitlines() if ln.split("#")[0].strip()]


@dataclass
class BenchmarkIndex:
    repos: set[str]  # normalised owner/name
    aliases: dict[str, str]  # normalised old -> current
    instance_ids: set[str]  # canonical (midtrain.formats.instance_id)
    names: set[str]  # distinctive name parts, for fork-by-name matching
    roots: dict[str, str] = field(default_factory=dict)  # root commit sha -> benchmark repo
    base_commits: dict[str, str] = field(default_factory=dict)  # instance base commit sha -> instance id


def bundled_root_commits() -> dict[str, str]:
    """{root commit sha: owner/name} from data/root_commits.tsv."""
    out: dict[str, str] = {}
    for line in (DATA / "root_commits.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        sha, repo = line.split("\t")[:2]
        out.setdefault(sha.strip().lower(), repo.strip().lower())
    return out


def build_index(cfg: DecontamConfig) -> BenchmarkIndex:
    raw: set[str] = set()
    raw_aliases: dict[str | None, str | None] = {}
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
            raw_aliases[normalize_repo(old)] = normalize_repo(new)
    if cfg.repo_list:
        for item in _read_lines(Path(cfg.repo_list)):
            if re.search(r"__.+-\d+$", item):
                ids.add(canonical_instance(item) or item.lower())
            raw.add(item)
    bases: dict[str, str] = {}
    for path in cfg.instances:
        for _, row in read_jsonl(path):
            if isinstance(row.get("repo"), str):
                raw.add(row["repo"])
            if isinstance(row.get("instance_id"), str):
                ids.add(canonical_instance(row["instance_id"]) or row["instance_id"].lower())
            if isinstance(row.get("base_commit"), str) and re.fullmatch(r"[0-9a-fA-F]{40}", row["base_commit"]):
                bases[row["base_commit"].lower()] = str(row.get("instance_id") or row.get("repo") or "?")
    if cfg.use_bundled_list:  # DeepSWE: its repositories and base commits, from its task files
        for line in _read_lines(DATA / "deepswe_tasks.tsv"):
            task, repo, base = line.split("\t")[:3]
            raw.add(repo)
            if re.fullmatch(r"[0-9a-fA-F]{40}", base):
                bases.setdefault(base.lower(), f"deepswe:{task}")
    repos = {r for r in (normalize_repo(x) for x in raw) if r}
    repos |= {r for r in (normalize_repo(i) for i in ids) if r}
    aliases = {k: v for k, v in raw_aliases.items() if k and v and v in repos}
    names = {r.split("/")[1] for r in repos} - GENERIC_NAMES
    names = {n for n in names if len(n) >= 4}
    roots = bundled_root_commits() if cfg.root_commits and cfg.use_bundled_list else {}
    return BenchmarkIndex(repos, aliases, ids, names, roots, bases if cfg.root_commits else {})


def _candidates(meta: dict) -> Iterable[tuple[str, Any]]:
    for key in REPO_FIELDS:
        value = meta.get(key)
        values = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        for v in values:
            if isinstance(v, dict):  # {"name": ..., "url": ...}
                for vv in v.values():
                    yield key, vv
            else:
                yield key, v


# a commit's `diff --git a/X b/X` line; a PR document's `--- PATH (status, +a -b)` file line
_DIFF_PATH = re.compile(
    r"^diff --git a/(\S+) b/\S+$|^--- (\S+) \((?:added|modified|removed|renamed|changed|copied|"
    r"unchanged)[,)]",
    re.MULTILINE,
)
# first folders so common across projects that a path under them says nothing about which project it is
_GENERIC_DIRS = {
    "docs",
    "doc",
    "test",
    "tests",
    "testing",
    ".github",
    ".circleci",
    "examples",
    "example",
    "scripts",
    "ci",
    "src",
    "lib",
    "bin",
    "tools",
    "benchmarks",
    "bench",
    "build",
    "config",
    "conf",
    "static",
}


def _file_bodies(doc: Document) -> list[tuple[Any, str, str]]:
    """(span, path, content) of each file of a repository document (content without its header line)."""
    out = []
    for span in repo_files(doc):
        block = doc.text[span.start : span.end]
        out.append((span, span.path, block.split("\n", 1)[1] if "\n" in block else ""))
    return out


class SweBenchRepoFilter(CurationStep):
    """Layer 1. Drops ``dropped_swebench_repo``, ``dropped_swebench_instance``, ``dropped_swebench_fork_name``,
    ``dropped_swebench_root_commit``, ``dropped_swebench_base_commit``, ``dropped_swebench_declared``,
    ``dropped_swebench_content``, ``dropped_swebench_diff`` and (fail closed) ``dropped_unidentified_repo``;
    cuts single benchmark files out of repositories (``removed_swebench_file``); counts each benchmark
    repository hit as ``swebench_repo_<owner/name>``, and ``identity_<method>`` / ``unidentified_repo``."""

    name = "🧪 SWE-bench repos"
    step_name = "decontam_repo"

    def __init__(self, cfg: DecontamConfig, exclusion_dir: str | None = None):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self._index: BenchmarkIndex | None = None
        self._content: ContentIndex | None = None

    def _idx(self) -> BenchmarkIndex:
        if self._index is None:
            self._index = build_index(self.cfg)
            if self.cfg.index:
                self._content = load_index(self.cfg.index)
                self._index.repos |= set(self._content.repos)
                if self.cfg.root_commits:
                    for sha, repo in self._content.roots.items():
                        self._index.roots.setdefault(sha, repo)
        return self._index

    def run(self, data, rank: int = 0, world_size: int = 1):
        self._idx()  # a missing or unreadable index ends the task here, naming the file, not each document
        yield from super().run(data, rank, world_size)

    def _benchmark(self, repo: str | None) -> str | None:
        """The benchmark repository ``repo`` (any name form) is, or None."""
        idx = self._idx()
        norm = normalize_repo(repo) if repo else None
        if norm is None:
            return None
        norm = idx.aliases.get(norm, norm)
        return norm if norm in idx.repos else None

    def match(self, meta: dict) -> tuple[str, str] | None:
        """(reason, benchmark repo) when the metadata points at a benchmark repository or instance."""
        idx = self._idx()
        for key, value in _candidates(meta):
            if key == "instance_id" and isinstance(value, str) and canonical_instance(value) in idx.instance_ids:
                return "swebench_instance", value
            repo = self._benchmark(value)
            if repo:
                return "swebench_repo", repo
        if self.cfg.match_forks_by_name:
            for _key, value in _candidates(meta):
                repo = normalize_repo(value)
                if repo and repo.split("/")[1] in idx.names:
                    return "swebench_fork_name", repo
        return None

    def match_history(self, meta: dict) -> tuple[str, str] | None:
        """(reason, benchmark repo or instance) when the document's git history is a benchmark's."""
        if not self.cfg.root_commits:
            return None
        idx = self._idx()
        for sha in _strings(meta.get("root_commits")) + _strings(meta.get("commits")):
            repo = idx.roots.get(sha.lower())
            if repo:
                return "swebench_root_commit", repo
        for sha in _strings(meta.get("commits")) + _strings(meta.get("base_commit")):
            inst = idx.base_commits.get(sha.lower())
            if inst:
                return "swebench_base_commit", inst
        return None

    def _declared(self, doc: Document, files: list[tuple[Any, str, str]]) -> tuple[str | None, str | None]:
        """(benchmark repo declared as home, any repo declared as home) from the root files (a part of a
        split repository carries them in ``metadata["root_manifests"]``)."""
        root = {path: body for _, path, body in files if "/" not in path}
        manifests = doc.metadata.get("root_manifests")
        if isinstance(manifests, dict):
            root.update({k: v for k, v in manifests.items() if isinstance(k, str) and isinstance(v, str)})
        homes = declared_homes(root)
        own = sorted((r for r, score in homes.items() if score >= HOME_SCORE), key=lambda r: (-homes[r], r))
        for repo in own:
            bench = self._benchmark(repo)
            if bench:
                return bench, bench
        return None, (own[0] if own else None)

    def _content_match(self, doc: Document, files: list[tuple[Any, str, str]]) -> str | None:
        """Drop the repository (returns the benchmark repo) or cut out its benchmark files (returns None)."""
        ci = self._content
        assert ci is not None
        hits: dict[str, list] = {}
        eligible = 0
        for span, path, body in files:
            h = fingerprint(path, body, ci.min_chars)
            if h is None:
                continue
            eligible += 1
            repos = ci.by_hash.get(h) or (ci.near(body) if self.cfg.index_near else set())
            if len(repos) >= self.cfg.index_common_repos:
                continue  # a generated template many projects share (sphinx's doc/Makefile): says nothing
            for repo in repos:
                hits.setdefault(repo, []).append((span, path))
        if not hits:
            return None
        best = max(sorted(hits), key=lambda r: len(hits[r]))
        n = len(hits[best])
        if n >= self.cfg.index_min_files and n / max(eligible, 1) >= self.cfg.index_repo_fraction:
            doc.metadata["content_overlap"] = {"repo": best, "files": n, "of": eligible}
            return best
        cut = {span.start: (span, path, repo) for repo in sorted(hits) for span, path in hits[repo]}
        for span, path, repo in cut.values():
            self.exclude_part(doc, doc.text[span.start : span.end], "swebench_file", path=path, benchmark_repo=repo)
        remove_files(doc, [span for span, _, _ in cut.values()])
        return None

    def _diff_match(self, doc: Document) -> str | None:
        """The benchmark repo whose indexed files are the only files a commit/PR diff touches, or None."""
        ci = self._content
        assert ci is not None
        paths = {m.group(1) or m.group(2) for m in _DIFF_PATH.finditer(doc.text)}
        if not paths:
            return None
        common: set[str] | None = None
        for p in paths:
            owners = ci.by_path.get(p, set())
            common = set(owners) if common is None else common & owners
            if not common:
                return None
        distinctive = [
            p for p in paths if "/" in p and p.split("/", 1)[0] not in _GENERIC_DIRS and len(ci.by_path.get(p, ())) == 1
        ]
        return sorted(common)[0] if common and distinctive else None

    def _identify(self, doc: Document, method: str, repo: str | None) -> None:
        traits = doc_traits(doc.metadata.get("source"))
        if traits is not None and traits.repository_derived:
            doc.metadata["identity"] = {"method": method, "repo": repo}
            self.stat_update(f"identity_{method}")

    def _hit(self, doc: Document, method: str, reason: str, repo: str) -> None:
        self._identify(doc, method, repo)
        self.stat_update(f"swebench_repo_{repo}")
        raise Drop(reason, repo)

    def process(self, doc: Document) -> None:
        meta = doc.metadata
        hit = self.match(meta)
        if hit:
            self._hit(doc, "remote", *hit)
        hit = self.match_history(meta)
        if hit:
            self._hit(doc, "root_commit", *hit)
        traits = doc_traits(meta.get("source"))  # what the source's registration says applies to it
        kinds = traits.decontam if traits is not None else frozenset()
        files = _file_bodies(doc) if "files" in kinds else []
        declared_any = None
        if files and self.cfg.declared_homes:
            bench, declared_any = self._declared(doc, files)
            if bench:
                self._hit(doc, "declared", "swebench_declared", bench)
        self._idx()
        if self._content is not None:
            if files:
                repo = self._content_match(doc, files)
                if repo:
                    self._hit(doc, "content", "swebench_content", repo)
            elif "diff" in kinds:
                repo = self._diff_match(doc)
                if repo:
                    self._hit(doc, "content", "swebench_diff", repo)
        if traits is None or not traits.repository_derived:
            return
        named = next((normalize_repo(v) for _, v in _candidates(meta) if normalize_repo(v)), None)
        if named:
            self._identify(doc, "remote", named)
        elif declared_any:
            self._identify(doc, "declared", declared_any)
        else:
            self._identify(doc, "none", None)
            self.stat_update("unidentified_repo")
            if self.cfg.require_identity:
                raise Drop("unidentified_repo", "no remote, no declared home (decontam.require_identity=true)")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _added_lines(patch: str) -> str:
    return "\n".join(ln[1:] for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++"))


def scored_text(doc: dict) -> str:
    """What of a document is scored: its ``loss_spans`` (a trace's assistant turns) joined, else all its text."""
    text = doc.get("text") or ""
    spans = (doc.get("metadata") or {}).get("loss_spans")
    if isinstance(spans, list) and spans:
        return "\n".join(text[a:b] for a, b in spans)
    return text


class NgramIndex:
    """Hashed word n-grams of reference texts, each with the key of the first text it came from: SWE-bench's
    decontamination rule (a long shared word n-gram, after lower-casing and dropping punctuation), the one
    implementation the n-gram filter and the packed-shard scan (:mod:`midtrain.curate.leak_scan`) share."""

    def __init__(self, n: int = 13) -> None:
        self.n = n
        self.norm = TextNormConfig()
        self._hash = create_hash_func(HashConfig(precision=64, hash_fc="xxhash"))
        self.grams: dict[int, str] = {}
        self.vocab: set[str] = set()  # every word of every reference n-gram

    def __len__(self) -> int:
        return len(self.grams)

    def words(self, text: str) -> list[str]:
        return simplified_words(text, self.norm)

    def add(self, key: str, text: str) -> int:
        """Index TEXT's n-grams under KEY (an n-gram already indexed keeps its first key); returns how many."""
        words = self.words(text)
        grams = word_ngrams(words, self.n)
        if grams:
            self.vocab.update(words)
        for g in grams:
            self.grams.setdefault(self._hash(g), key)
        return len(grams)

    def discard(self, text: str) -> int:
        """Forget TEXT's n-grams (a template every text shares, e.g. the training traces' system prompt)."""
        before = len(self.grams)
        for g in word_ngrams(self.words(text), self.n):
            self.grams.pop(self._hash(g), None)
        return before - len(self.grams)

    def candidates(self, words: list[str]) -> Iterable[str]:
        """The text's n-grams, in order, that consist only of reference words (no other can match)."""
        n, vocab = self.n, self.vocab
        run = 0  # reference words in a row ending at word i
        for i, w in enumerate(words):
            run = run + 1 if w in vocab else 0
            if run >= n:
                yield " ".join(words[i + 1 - n : i + 1])

    def first_hit(self, text: str) -> tuple[str, str] | None:
        """(n-gram, key) of TEXT's first n-gram found in the index, or None."""
        for g in self.candidates(self.words(text)):
            key = self.grams.get(self._hash(g))
            if key:
                return g, key
        return None

    def found(self, text: str) -> set[int]:
        """The hashes of the indexed n-grams TEXT contains."""
        return {h for g in self.candidates(self.words(text)) if (h := self._hash(g)) in self.grams}


class SweBenchNgramFilter(CurationStep):
    """Layer 2. Drops ``dropped_swebench_ngram`` (issue text or gold-patch overlap) and ``dropped_heldout_ngram``
    (overlap with a held-out evaluation text of ``decontam.heldout``: the probe's held-out trajectories, the
    proxy's held-out documents), recording the n-gram and the instance in the excluded document's metadata."""

    name = "🧪 SWE-bench n-grams"
    step_name = "decontam_ngram"

    def __init__(self, cfg: DecontamConfig, exclusion_dir: str | None = None):
        super().__init__(exclusion_dir)
        self.cfg = cfg
        self._index: NgramIndex | None = None

    def _load(self) -> NgramIndex:
        index = NgramIndex(self.cfg.ngram_size)
        for path in self.cfg.instances:
            for _, row in read_jsonl(path):
                iid = str(row.get("instance_id", "?"))
                for fld, text in (("issue", row.get("problem_statement")), ("patch", row.get("patch"))):
                    if isinstance(text, str):
                        index.add(f"{iid}:{fld}", _added_lines(text) if fld == "patch" else text)
        for path in self.cfg.heldout:
            for i, row in read_jsonl(path):
                if not isinstance(row.get("text"), str):
                    raise ValueError(f"{path}: line {i}: a held-out row needs a 'text' string")
                index.add(f"{row.get('id', '?')}:heldout", row["text"])
        log.info(
            "curate: %d reference n-grams from %d instance and %d held-out files",
            len(index),
            len(self.cfg.instances),
            len(self.cfg.heldout),
        )
        return index

    def process(self, doc: Document) -> None:
        if self._index is None:
            self._index = self._load()
        if not self._index:
            return
        hit = self._index.first_hit(doc.text)
        if hit:
            g, key = hit
            doc.metadata["contaminated_ngram"] = g
            doc.metadata["contaminated_instance"] = key
            kind = key.rsplit(":", 1)[1]
            if kind == "heldout":
                raise Drop("heldout_ngram", key)
            self.stat_update(f"swebench_ngram_{kind}")
            raise Drop("swebench_ngram", key)
