"""A tree's license, read one way for every source (midtrain/sources/licenses.py): the first license file at the
root, by name, whose text matches a rule; the same answer for a tree in memory and for a git commit."""

from __future__ import annotations

import subprocess

from midtrain.sources.git import list_tree
from midtrain.sources.licenses import license_at, root_license_files, tree_license

MIT = "Permission is hereby granted, free of charge, to any person obtaining a copy"
APACHE = "Apache License\nVersion 2.0, January 2004"


def test_the_first_root_license_file_that_matches_names_the_tree():
    assert root_license_files(["src/LICENSE", "README", "LICENSE.md", "COPYING", "license-docs/x"]) == [
        "COPYING",
        "LICENSE.md",
    ]
    # COPYING is read first, but says nothing a rule knows: LICENSE.md decides; one in a subdirectory never does
    assert (
        tree_license({"COPYING": "see the LICENSE file", "LICENSE.md": APACHE, "vendor/LICENSE": MIT}) == "Apache-2.0"
    )
    assert tree_license({"vendor/LICENSE": MIT, "main.py": MIT}) is None


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_commit_of_a_git_repository_is_read_as_its_tree(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "LICENSE").write_text(MIT)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "mit")
    (repo / "LICENSE").unlink()
    (repo / "apache.txt").write_text(APACHE)
    (repo / "LICENSE").symlink_to("apache.txt")  # a link is not read: it may point anywhere
    (repo / "COPYING").write_text(APACHE)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "apache")
    assert license_at(repo, "HEAD~1") == "MIT" == tree_license({"LICENSE": MIT})
    assert license_at(repo) == "Apache-2.0"
    assert license_at(repo, "HEAD~1", tree=list_tree(repo, "HEAD~1")) == "MIT"  # a tree listed already
    (repo / "COPYING").unlink()
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "only the link")
    assert license_at(repo) is None
