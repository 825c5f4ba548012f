"""SWE-bench decontamination: repository names in every form, forks, renames, user lists, n-gram overlap."""

from __future__ import annotations

import json

import pytest
from curate_helpers import count, curate, doc_row, read_docs, repo_row, stdlib, write_raw
from sources_fixtures import git, make_repo

from midtrain.curate.decontam import (
    DecontamConfig,
    SweBenchRepoFilter,
    build_index,
    normalize_repo,
    swebench_package_repos,
)
from midtrain.curate.stages import CurationConfig


@pytest.mark.parametrize(
    "form",
    [
        "django/django",
        "Django/Django",
        "https://github.com/Django/django.git",
        "http://github.com/django/django/",
        "git@github.com:django/django.git",
        "ssh://git@github.com/django/django",
        "git://github.com/django/django.git",
        "github.com/django/django",
        "https://github.com/django/django/pull/17000",
        "django__django",
        "django__django-11099",
        "www.github.com/django/django#readme",
    ],
)
def test_every_name_form_normalises_to_owner_name(form):
    assert normalize_repo(form) == "django/django"


@pytest.mark.parametrize("value", [None, 42, "", "django", "not a repo/at all", "https://example.com"])
def test_non_repository_values_normalise_to_none(value):
    assert normalize_repo(value) is None


def test_repository_list_comes_from_the_swebench_package_plus_pro():
    pkg = swebench_package_repos()
    assert {"django/django", "sympy/sympy", "astropy/astropy"} <= pkg  # Verified / Lite
    assert {"tokio-rs/tokio", "apache/lucene", "gohugoio/hugo"} <= pkg  # Multilingual
    idx = build_index(DecontamConfig())
    assert {"ansible/ansible", "qutebrowser/qutebrowser", "nodebb/nodebb"} <= idx.repos  # Pro (bundled list)
    assert idx.aliases["pycqa/pylint"] == "pylint-dev/pylint"


@pytest.mark.parametrize(
    "meta,reason",
    [
        ({"repo": "DJANGO/django"}, "swebench_repo"),
        ({"repo": "kennethreitz/requests"}, "swebench_repo"),  # renamed: psf/requests
        ({"repo": "me/mything", "fork_of": "https://github.com/sympy/sympy"}, "swebench_repo"),
        ({"repo": "me/x", "remotes": {"upstream": "git@github.com:astropy/astropy.git"}}, "swebench_repo"),
        ({"repo": "someone/django"}, "swebench_fork_name"),
        ({"repo": "https://github.com/someone/flask.git"}, "swebench_fork_name"),
        ({"repo": None, "instance_id": "sympy__sympy-20590"}, "swebench_repo"),
        ({"repo": "me/core"}, None),  # vuejs/core's name is too generic to mean a fork
        ({"repo": "acme/widgets"}, None),
        ({"repo": 123}, None),
    ],
)
def test_repository_matching(meta, reason):
    assert _reason(SweBenchRepoFilter(DecontamConfig()), meta) == reason


def _reason(f: SweBenchRepoFilter, meta: dict) -> str | None:
    """The filter's reason for matching META, None when it does not."""
    hit = f.match(meta)
    return hit[0] if hit else None


def test_user_list_of_repositories_and_instance_ids(tmp_path):
    lst = tmp_path / "bench.txt"
    lst.write_text("# our private benchmark\nMyOrg/Private-Bench\nfoo__bar-123\n")
    f = SweBenchRepoFilter(DecontamConfig(repo_list=str(lst)))
    assert _reason(f, {"repo": "https://github.com/myorg/private-bench.git"}) == "swebench_repo"
    assert _reason(f, {"repo": None, "instance_id": "foo__bar-123"}) == "swebench_instance"
    assert _reason(f, {"repo": "foo/bar"}) == "swebench_repo"  # the instance's repository
    assert f.match({"repo": "acme/widgets"}) is None


@pytest.mark.slow
def test_prep_drops_real_git_repositories_of_swebench_whatever_their_name(tmp_path):
    """End to end through `midtrain prep repos`: real git repositories, the repo name from the origin URL."""
    from midtrain.sources.prep import prep

    code = {
        "LICENSE": "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy",
        "pkg/__init__.py": stdlib("colorsys.py"),
        "pkg/util.py": stdlib("bisect.py"),
    }
    repos = {}
    for name, url in [
        ("django", "https://github.com/Django/django.git"),
        ("fork", "git@github.com:someone/django.git"),
        ("old", "https://github.com/kennethreitz/requests"),
        ("clean", "https://github.com/acme/widgets.git"),
    ]:
        r = make_repo(tmp_path / "src" / name, {**code, "pkg/extra.py": stdlib("this.py") + f"\n# {name}\n"})
        git(r, "remote", "add", "origin", url)
        repos[name] = r
    out = tmp_path / "out"
    stats = prep("repos", [str(p) for p in repos.values()], out, overrides=["dedup.enabled=false"])
    docs = read_docs(out / "documents")
    assert [d["metadata"]["repo"].lower() for d in docs] == ["acme/widgets"]
    excluded = read_docs(out / "excluded" / "decontam")
    reasons = sorted(d["metadata"]["curation_reason"] for d in excluded)
    assert reasons == ["swebench_fork_name", "swebench_repo", "swebench_repo"]
    text = json.dumps(stats)
    assert "dropped_swebench_repo" in text and "dropped_swebench_fork_name" in text


def test_ngram_layer_drops_documents_quoting_issue_or_gold_patch(tmp_path):
    issue = (
        "QuerySet.bulk_update silently ignores the batch size argument when the objects list contains "
        "unsaved model instances and returns without raising any error for the caller to notice"
    )
    patch = (
        "diff --git a/app/models.py b/app/models.py\n--- a/app/models.py\n+++ b/app/models.py\n"
        "@@ -10,3 +10,6 @@\n def bulk_update(objs, fields, batch_size=None):\n"
        "-    return _old_path(objs)\n"
        "+    max_batch_size = connection.ops.bulk_batch_size(['pk', 'pk'] + fields, objs)\n"
        "+    batch_size = min(batch_size, max_batch_size) if batch_size else max_batch_size\n"
        "+    requires_casting = connection.features.requires_casted_case_in_updates\n"
    )
    inst = tmp_path / "verified.jsonl"
    inst.write_text(
        json.dumps({"instance_id": "acme__orm-1", "repo": "acme/orm", "problem_statement": issue, "patch": patch})
        + "\n"
    )
    ordinary = stdlib("colorsys.py")
    write_raw(
        tmp_path / "raw",
        [
            doc_row(f"Fix for the reported bug.\n\n> {issue}\n\nthanks!" + ordinary, "pr-issue", repo="other/x"),
            doc_row(
                "commit: speed up\n" + patch.replace("acme", "other") + ordinary,
                "commit-patch",
                source="commit",
                repo="other/y",
            ),
            doc_row(
                "def bulk_update(objs, fields, batch_size=None):\n    return _old_path(objs)\n" + ordinary,
                "ctx",
                repo="other/z",
            ),
            doc_row(ordinary, "clean", repo="other/w"),
        ],
    )
    cfg = CurationConfig().apply_overrides([f"decontam.instances=[{inst}]", "dedup.enabled=false"])
    docs, counts, prep = curate(tmp_path, cfg)
    assert sorted(d["id"] for d in docs) == ["clean", "ctx"]
    assert count(counts, "n-grams", "dropped_swebench_ngram") == 2
    assert count(counts, "n-grams", "swebench_ngram_issue") == 1
    assert count(counts, "n-grams", "swebench_ngram_patch") == 1
    excluded = {d["id"]: d["metadata"] for d in read_docs(prep / "excluded" / "decontam")}
    assert excluded["pr-issue"]["contaminated_instance"] == "acme__orm-1:issue"


def test_repo_filter_in_pipeline_counts_each_repository(tmp_path):
    write_raw(
        tmp_path / "raw",
        [
            repo_row("Django/django", {"a.py": stdlib("colorsys.py")}),
            repo_row("acme/widgets", {"a.py": stdlib("bisect.py")}),
            doc_row("fixed " + stdlib("this.py"), "pr-1", repo="https://github.com/sympy/sympy/pull/1"),
            doc_row(
                "trace " + stdlib("this.py"), "tr-1", source="trace", repo=None, instance_id="django__django-11099"
            ),
        ],
    )
    docs, counts, _ = curate(tmp_path, CurationConfig().apply_overrides(["dedup.enabled=false"]))
    assert [d["id"] for d in docs] == ["repo:acme/widgets"]
    assert count(counts, "SWE-bench repos", "dropped_swebench_repo") == 3
    assert count(counts, "SWE-bench repos", "swebench_repo_django/django") == 2
