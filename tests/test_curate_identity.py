"""Decontamination by what a repository is: root commits, declared homes, the content index, accounting.

The fixtures are built like the ways a benchmark repository reaches training data under another name: a
renamed mirror with its history, a release tarball unpacked as a plain directory, a vendored copy inside
another project, and — the false-positive side — a project that only depends on and links to it.
The stand-in benchmark repository is tests/data/decontam/benchorg__benchlib.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from curate_helpers import read_docs, stdlib
from sources_fixtures import commit, git, make_repo, source_files, write_files

from midtrain.cli import main
from midtrain.curate.decontam import DecontamConfig, SweBenchRepoFilter, bundled_root_commits
from midtrain.curate.fingerprint import BadIndexError, fingerprint, load_index, normalize
from midtrain.curate.identity import HOME_SCORE, declared_homes

DATA = Path(__file__).parent / "data" / "decontam"
BENCH = DATA / "benchorg__benchlib"
NO_DEDUP = ["dedup.enabled=false", "redact.enabled=false", "quality.enabled=false"]


def bench_files() -> dict[str, str]:
    return {p.relative_to(BENCH).as_posix(): p.read_text() for p in source_files(BENCH)}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The benchmark clone, its index, and every case as repositories on disk."""
    tmp = tmp_path_factory.mktemp("identity")
    # the benchmark repository, with history, cloned from its home
    bench = make_repo(tmp / "clones" / "benchlib", {k: v for k, v in bench_files().items() if k != "benchlib/parse.py"})
    commit(bench, {"benchlib/parse.py": (BENCH / "benchlib" / "parse.py").read_text()}, "Add parsers")
    git(bench, "remote", "add", "origin", "https://github.com/benchorg/benchlib.git")
    index = tmp / "bench_index.json.gz"
    assert main(["decontam", "index", str(bench), "--output", str(index)]) == 0

    cases = tmp / "cases"
    # 1. renamed mirror with history: a company mirror under another name
    mirror = cases / "tablekit"
    git(tmp, "clone", "-q", str(bench), str(mirror))
    git(mirror, "remote", "set-url", "origin", "git@git.corp.example:mirrors/tablekit.git")
    # 2. release tarball unpacked as a plain directory (no .git, no remote)
    tarball = cases / "benchlib-1.4.0-src"
    write_files(tarball, bench_files())
    # 2b. the same tree with its packaging files and README stripped: only content can tell
    stripped = cases / "tables-src"
    write_files(stripped, {k: v for k, v in bench_files().items() if k.startswith(("benchlib/", "tests/"))})
    # 3. a vendored copy of two benchmark files inside another project
    own = {
        f"reportgen/{name}": stdlib(name)
        for name in ("textwrap.py", "colorsys.py", "fnmatch.py", "bisect.py", "shlex.py", "glob.py")
    }
    vendored = make_repo(
        cases / "reportgen",
        {
            "README.md": "# reportgen\n\nMonthly reports for acme.\n",
            **own,
            "reportgen/_tables/render.py": (BENCH / "benchlib" / "render.py").read_text(),
            "reportgen/_tables/util.py": (BENCH / "benchlib" / "util.py").read_text(),
        },
    )
    git(vendored, "remote", "add", "origin", "https://github.com/acme/reportgen.git")
    # 4. a dependency that only links to the benchmark repository: kept
    dep_files = {
        "README.md": "# dashboard\n\nBuilt on [benchlib](https://github.com/benchorg/benchlib) "
        "(see https://github.com/benchorg/benchlib/issues/12).\n",
        "pyproject.toml": '[project]\nname = "dashboard"\ndependencies = ["benchlib>=1.4"]\n\n'
        '[project.urls]\nHomepage = "https://github.com/acme/dashboard"\n',
        "dashboard/app.py": "from benchlib.core import Table\nfrom benchlib.render import markdown\n\n\n"
        "def page(rows):\n    return markdown(Table(rows).sort_by('score', reverse=True))\n",
        "dashboard/formats.py": stdlib("string.py"),
    }
    dep = make_repo(cases / "dashboard", dep_files)
    git(dep, "remote", "add", "origin", "https://github.com/acme/dashboard.git")
    dep_dir = cases / "dashboard-src"  # the same, as a plain directory: identified by its declared home
    write_files(dep_dir, dep_files)
    # 5. a directory nobody can identify
    anon = cases / "scratch"
    write_files(anon, {"notes.py": stdlib("keyword.py")})
    return {
        "tmp": tmp,
        "index": index,
        "bench": bench,
        "mirror": mirror,
        "tarball": tarball,
        "stripped": stripped,
        "vendored": vendored,
        "dep": dep,
        "dep_dir": dep_dir,
        "anon": anon,
    }


def prep(world, source: str, inputs: list[Path], name: str, *overrides: str) -> tuple[list, list, dict]:
    out = world["tmp"] / "prep" / name
    assert main(["prep", source, *NO_DEDUP, *overrides, "--input", *map(str, inputs), "--output", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text())
    return read_docs(out / "documents"), read_docs(out / "excluded"), stats


def by_case(docs: list[dict], world) -> dict[str, dict]:
    names = {
        "tablekit": "mirror",
        "benchlib-1.4.0-src": "tarball",
        "tables-src": "stripped",
        "reportgen": "vendored",
        "dashboard": "dep",
        "dashboard-src": "dep_dir",
        "scratch": "anon",
    }
    out = {}
    for d in docs:
        for key, case in names.items():
            if f":{key}" in d["id"] or d["metadata"].get("repo", "") and d["metadata"]["repo"].endswith("/" + key):
                out[case] = d
    return out


def test_every_case_is_caught_by_the_right_layer_and_the_dependency_is_kept(world):
    inputs = [world[k] for k in ("mirror", "tarball", "stripped", "vendored", "dep", "dep_dir", "anon")]
    kept, excluded, stats = prep(world, "repos", inputs, "repos", f"decontam.index={world['index']}")
    dropped = {d["metadata"]["curation_reason"]: d for d in excluded if "parent_id" not in d["metadata"]}
    reasons = {by: d["metadata"]["identity"]["method"] for by, d in dropped.items()}
    assert reasons == {
        "swebench_root_commit": "root_commit",
        "swebench_declared": "declared",
        "swebench_content": "content",
    }
    assert dropped["swebench_root_commit"]["metadata"]["repo"] == "mirrors/tablekit"
    assert "benchlib-1.4.0-src" in dropped["swebench_declared"]["id"]
    assert "tables-src" in dropped["swebench_content"]["id"]
    assert dropped["swebench_content"]["metadata"]["content_overlap"]["repo"] == "benchorg/benchlib"

    ids = {d["id"].split("@")[0] for d in kept}
    assert ids == {"repo:acme/reportgen", "repo:acme/dashboard", "repo:dashboard-src", "repo:scratch"}
    docs = {d["id"].split("@")[0]: d for d in kept}
    # the vendored copy: exactly its two benchmark files cut out, the project's own files kept
    rg = docs["repo:acme/reportgen"]["metadata"]
    assert not any(p.startswith("reportgen/_tables/") for p in rg["files"])
    assert sum(p.startswith("reportgen/") for p in rg["files"]) == 6
    cut = sorted(d["metadata"]["path"] for d in excluded if d["metadata"].get("curation_reason") == "swebench_file")
    assert cut == ["reportgen/_tables/render.py", "reportgen/_tables/util.py"]
    # the dependency: kept whole, identified by its remote (clone) or its declared home (plain directory)
    assert docs["repo:acme/dashboard"]["metadata"]["identity"] == {"method": "remote", "repo": "acme/dashboard"}
    assert docs["repo:dashboard-src"]["metadata"]["identity"] == {"method": "declared", "repo": "acme/dashboard"}
    assert "dashboard/app.py" in docs["repo:dashboard-src"]["metadata"]["files"]
    # accounting: the anonymous directory is counted, not silently passed
    assert docs["repo:scratch"]["metadata"]["identity"] == {"method": "none", "repo": None}
    assert stats["unidentified_repo"] == 1
    assert sum(v for k, v in stats["identity"].items() if k.endswith("/identity_root_commit")) == 1
    assert any(k.endswith("dropped_swebench_content") for k in stats["drops"])
    assert any(k.endswith("removed_swebench_file") and v == 2 for k, v in stats["skips"].items())


def test_require_identity_drops_unidentified_repositories(world):
    kept, excluded, stats = prep(
        world, "repos", [world["anon"], world["dep_dir"]], "fail_closed", "decontam.require_identity=true"
    )
    assert [d["id"] for d in kept] == ["repo:dashboard-src"]
    assert [d["metadata"]["curation_reason"] for d in excluded] == ["unidentified_repo"]
    assert any(k.endswith("dropped_unidentified_repo") for k in stats["drops"])


def test_mirror_history_is_dropped_by_root_commit_and_own_history_kept(world):
    kept, excluded, stats = prep(
        world, "commits", [world["mirror"], world["dep"]], "commits", f"decontam.index={world['index']}"
    )
    assert {d["metadata"]["repo"] for d in kept} == {"acme/dashboard"}
    assert excluded and {d["metadata"]["curation_reason"] for d in excluded} == {"swebench_root_commit"}
    assert all(d["metadata"]["root_commits"] for d in excluded)


def test_commits_of_an_instance_base_commit_are_dropped(world, tmp_path):
    base = git(world["bench"], "rev-parse", "HEAD").strip()
    inst = tmp_path / "instances.jsonl"
    inst.write_text(
        json.dumps(
            {
                "instance_id": "benchorg__benchlib-7",
                "repo": "benchorg/benchlib",
                "base_commit": base,
                "problem_statement": "",
                "patch": "",
            }
        )
        + "\n"
    )
    f = SweBenchRepoFilter(DecontamConfig(instances=[str(inst)], use_bundled_list=False, use_swebench_package=False))
    assert f.match_history({"source": "commit", "commits": ["0" * 40, base.upper()]}) == (
        "swebench_base_commit",
        "benchorg__benchlib-7",
    )
    assert f.match_history({"source": "commit", "commits": ["0" * 40]}) is None


def test_pr_touching_only_indexed_files_is_dropped(world, tmp_path):
    def pr(number, repo, files):
        return {
            "number": number,
            "title": "Fix",
            "body": "",
            "state": "closed",
            "repo": repo,
            "user": {"login": "dev"},
            "files": [
                {"filename": f, "status": "modified", "additions": 1, "deletions": 1, "patch": "@@ -1 +1 @@\n-a\n+b"}
                for f in files
            ],
        }

    rows = [
        pr(1, "someone/tables-fork", ["benchlib/render.py", "benchlib/util.py"]),
        pr(2, "acme/dashboard", ["dashboard/app.py", "README.md"]),
        pr(3, "acme/other", ["README.md"]),  # a path every project has says nothing
        pr(4, "acme/docs", ["docs/conf.py"]),
    ]
    src = tmp_path / "prs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # PRs of docs alone are kept here (pulls.require_code_change drops them by default): decontamination's case
    overrides = (f"decontam.index={world['index']}", "pulls.require_code_change=false")
    kept, excluded, _ = prep(world, "pulls", [src], "pulls", *overrides)
    assert sorted(d["metadata"]["number"] for d in kept) == [2, 3, 4]
    assert [(d["metadata"]["number"], d["metadata"]["curation_reason"]) for d in excluded] == [(1, "swebench_diff")]


def test_shipped_test_index_is_the_fixture_repository_rebuilt(tmp_path):
    out = tmp_path / "rebuilt.json"
    assert main(["decontam", "index", f"benchorg/benchlib={BENCH}", "--output", str(out)]) == 0
    shipped, rebuilt = load_index(DATA / "bench_index.json"), load_index(out)
    assert shipped.repos["benchorg/benchlib"].hashes == rebuilt.repos["benchorg/benchlib"].hashes
    assert shipped.repos["benchorg/benchlib"].paths == rebuilt.repos["benchorg/benchlib"].paths


def test_index_command_needs_a_name_and_a_directory(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["decontam", "index", str(plain), "--output", str(tmp_path / "i.json")]) == 1
    assert "owner/name=" in capsys.readouterr().err
    assert main(["decontam", "index", str(tmp_path / "missing"), "--output", str(tmp_path / "i.json")]) == 1
    assert "missing" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(BadIndexError, match="bad.json"):
        load_index(bad)


def test_fingerprints_ignore_layout_noise_and_boilerplate():
    code = (BENCH / "benchlib" / "render.py").read_text()
    noisy = code.replace("\n", "   \r\n").replace("\r\n\r\n", "\r\n\r\n\r\n")
    assert normalize(noisy) == normalize(code)
    assert fingerprint("a/render.py", noisy) == fingerprint("b/render.py", code)
    assert fingerprint("LICENSE", stdlib("textwrap.py")) is None  # license texts are shared boilerplate
    assert fingerprint("tiny.py", "x = 1\n") is None


@pytest.mark.parametrize(
    "files,home",
    [
        ({"pyproject.toml": '[project.urls]\nSource = "https://github.com/Psf/Requests"\n'}, "psf/requests"),
        ({"setup.py": "setup(name='x', url='https://github.com/pallets/flask/')"}, "pallets/flask"),
        ({"setup.cfg": "[metadata]\nurl = https://github.com/pydata/xarray\n"}, "pydata/xarray"),
        (
            {"package.json": '{"repository": {"type": "git", "url": "git+https://github.com/axios/axios.git"}}'},
            "axios/axios",
        ),
        ({"Cargo.toml": '[package]\nname = "bat"\nrepository = "https://github.com/sharkdp/bat"\n'}, "sharkdp/bat"),
        ({"go.mod": "module github.com/gin-gonic/gin\n\ngo 1.21\n"}, "gin-gonic/gin"),
        ({"pom.xml": "<project><scm><url>https://github.com/google/gson</url></scm></project>"}, "google/gson"),
        ({"composer.json": '{"support": {"source": "https://github.com/laravel/framework"}}'}, "laravel/framework"),
        ({"jekyll.gemspec": 's.homepage = "https://github.com/jekyll/jekyll"'}, "jekyll/jekyll"),
        (
            {"README.md": "# x\n[![ci](https://github.com/sympy/sympy/actions/workflows/ci.yml/badge.svg)]()\n"},
            "sympy/sympy",
        ),
    ],
)
def test_declared_homes_in_every_manifest(files, home):
    assert declared_homes(files).get(home, 0) >= HOME_SCORE


@pytest.mark.parametrize(
    "files",
    [
        {
            "README.md": "# app\nUses [requests](https://github.com/psf/requests) and "
            "[flask](https://github.com/pallets/flask).\n"
        },
        {"package.json": '{"dependencies": {"axios": "github:axios/axios"}}'},
        {"Cargo.toml": '[dependencies]\nbat = { git = "https://github.com/sharkdp/bat" }\n'},
        {"vendor/requests/setup.py": "setup(url='https://github.com/psf/requests')"},  # not the project's root
        {"pyproject.toml": "this is [not toml"},
    ],
)
def test_links_dependencies_and_nested_manifests_are_not_homes(files):
    assert all(score < HOME_SCORE for score in declared_homes(files).values())


def test_bundled_root_commits_name_the_verified_repositories():
    roots = bundled_root_commits()
    verified = {
        "astropy/astropy",
        "django/django",
        "mwaskom/seaborn",
        "pallets/flask",
        "psf/requests",
        "pydata/xarray",
        "pylint-dev/pylint",
        "pytest-dev/pytest",
        "sphinx-doc/sphinx",
        "sympy/sympy",
    }
    assert verified <= set(roots.values())
    # every line says where its sha came from
    for line in (Path(__file__).parents[1] / "midtrain/curate/data/root_commits.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            sha, repo, kind, where = line.split("\t")
            assert len(sha) == 40 and kind in ("first", "merged") and where.startswith(("fetched@", "reference:"))
    sha = next(s for s, r in roots.items() if r == "psf/requests")
    f = SweBenchRepoFilter(DecontamConfig())
    assert f.match_history({"source": "repo", "root_commits": [sha]}) == ("swebench_root_commit", "psf/requests")


@pytest.mark.parametrize(
    "meta",
    [
        {"source": "trace", "repo": None, "instance_id": "django__django-11099"},
        {"source": "trace", "repo": None, "instance_id": "psf__requests.a0df2cbb.lm_rewrite__ab12"},  # SWE-smith
        {"source": "trace", "repo": "https://github.com/sympy/sympy", "instance_id": "x-1"},
    ],
)
def test_traces_on_benchmark_instances_or_repositories_are_dropped(meta):
    assert SweBenchRepoFilter(DecontamConfig()).match(meta) is not None


def test_every_part_of_a_split_tarball_is_dropped_by_its_declared_home(world, tmp_path):
    bench_list = tmp_path / "bench.txt"
    bench_list.write_text("benchorg/benchlib\n")
    kept, excluded, _ = prep(
        world,
        "repos",
        [world["tarball"], world["dep_dir"]],
        "split",
        "repos.max_doc_bytes=1024",
        f"decontam.repo_list={bench_list}",
    )
    assert kept and {d["metadata"]["identity"]["repo"] for d in kept} == {"acme/dashboard"}
    assert len(excluded) >= 3 and {d["metadata"]["curation_reason"] for d in excluded} == {"swebench_declared"}
    assert all(d["metadata"]["root_manifests"]["pyproject.toml"] for d in excluded)


def test_near_duplicate_files_are_found_and_unrelated_ones_are_not():
    from midtrain.curate.fingerprint import ContentIndex, RepoPrint, repo_prints

    bench = {f"lib/{n}": stdlib(n) for n in ("textwrap.py", "shlex.py", "fnmatch.py", "bisect.py")}
    paths, hashes, bands = repo_prints(bench.items())
    idx = ContentIndex()
    idx.add("benchorg/lib", RepoPrint("x", None, [], paths, hashes, bands))
    original = stdlib("textwrap.py")
    lines = original.splitlines()
    # a vendored copy: imports rewritten, every 5th line changed, a header added
    edited = "# vendored from benchorg/lib 1.0\n" + "\n".join(
        ln.replace("import re", "from vendor import re") if i % 5 else ln + "  # patched" for i, ln in enumerate(lines)
    )
    assert fingerprint("v.py", edited) not in hashes  # exact fingerprints miss it ...
    assert idx.near(edited) == {"benchorg/lib"}  # ... the near-duplicate keys do not
    for other in ("colorsys.py", "glob.py", "keyword.py", "string.py", "heapq.py", "getopt.py", "calendar.py"):
        assert idx.near(stdlib(other)) == set(), other


def test_a_missing_index_fails_the_task_naming_the_file(tmp_path):
    from datatrove.data import Document

    step = SweBenchRepoFilter(DecontamConfig(index=str(tmp_path / "nope.json.gz")))
    doc = Document(text="x", id="a", metadata={"source": "repo", "repo": None, "license": None, "id": "a"})
    with pytest.raises(BadIndexError, match="nope.json.gz"):
        list(step.run(iter([doc])))


def test_split_repositories_carry_every_manifest_identity_reads():
    from midtrain.curate.identity import _MANIFESTS, README_LINES
    from midtrain.sources.repos import MANIFEST_NAMES, root_manifests

    for name in (*MANIFEST_NAMES, "x.gemspec"):
        assert any(matches(name) for matches, _ in _MANIFESTS), name
    kept = root_manifests({"README.md": "\n".join(map(str, range(100))), "setup.py": "s", "pkg/setup.py": "v"})
    assert set(kept) == {"README.md", "setup.py"} and len(kept["README.md"].splitlines()) == README_LINES


def test_a_template_many_benchmark_repositories_share_is_not_a_benchmark_file(tmp_path):
    from midtrain.curate.fingerprint import ContentIndex, RepoPrint, repo_prints

    template = stdlib("textwrap.py")  # stands for a generated file (sphinx's doc/Makefile) in many projects
    idx = ContentIndex()
    for i in range(3):
        paths, hashes, bands = repo_prints(
            {"doc/Makefile": template, f"pkg{i}/core.py": stdlib("shlex.py") + f"#{i}"}.items()
        )
        idx.add(f"org/bench{i}", RepoPrint("x", None, [], paths, hashes, bands))
    out = tmp_path / "i.json"
    idx.save(out)
    from curate_helpers import repo_row
    from datatrove.data import Document

    row = repo_row("acme/app", {"doc/Makefile": template, "app/main.py": stdlib("colorsys.py")})
    doc = Document(text=row["text"], id=row["id"], metadata=row["metadata"])
    step = SweBenchRepoFilter(DecontamConfig(index=str(out)))
    step.process(doc)
    assert doc.metadata["files"] == ["doc/Makefile", "app/main.py"]
    step2 = SweBenchRepoFilter(DecontamConfig(index=str(out), index_common_repos=4))
    step2.process(doc)
    assert doc.metadata["files"] == ["app/main.py"]
