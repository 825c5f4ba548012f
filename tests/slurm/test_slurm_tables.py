"""`midtrain prep repos` from a file-row table on the real test Slurm cluster with 3 tasks: the same documents
as one local task (rows partitioned by repository and assembled across the job array)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _prep_locally_and_on_slurm(table, settings: list[str], tmp_path, tasks: int, wait_s: int = 1800):
    """`midtrain prep repos` of TABLE into tmp_path/local (one task) and tmp_path/slurm (TASKS Slurm tasks,
    waited for up to WAIT_S seconds: a loaded machine may queue the array); returns the Slurm output dir."""
    from slurm_helpers import REPO, cluster_site
    from test_sources_tables import prep

    assert prep("repos", *settings, "--input", table, "--output", tmp_path / "local") == 0
    out = tmp_path / "slurm"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "midtrain.cli",
            "prep",
            "repos",
            *settings,
            "--input",
            str(table),
            "--output",
            str(out),
            "--executor",
            "slurm",
            "--tasks",
            str(tasks),
            "--partition",
            "debug",
            "--time",
            "00:20:00",
            "--mem-per-cpu-gb",
            "1",
            "--site",
            str(cluster_site(tmp_path)),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for _ in range(wait_s):
        if (out / "stats.json").exists() and json.loads((out / "stats.json").read_text()).get("complete"):
            return out
        time.sleep(1)
    pytest.fail(f"prep on Slurm did not finish: {sorted(p.name for p in out.rglob('*.out'))}")


def test_prep_repos_from_a_table_with_3_slurm_tasks_matches_one_local_task(slurm_cluster, tmp_path):
    """3 tasks, not 8: every stage is a job array of that many Python processes, and 3 tasks over 4 files
    already puts a repository's rows, spread over every file, in one task that is not a file's (asserted)."""
    from sources_fixtures import read_documents
    from test_sources_tables import FILES, NO_CURATION, docs_by_id, stack_rows, write_parquet

    from midtrain.sources.buckets import bucket_of

    repos = ["acme/proj", *(f"org/r{r}" for r in range(5))]
    rows = stack_rows("acme/proj", FILES, "a" * 40, ["MIT"])
    for r in range(5):
        rows += stack_rows(f"org/r{r}", {f"m{i}.py": f"def f{i}():\n    return {r}\n" for i in range(4)}, "b" * 40, [])
    random.Random(2).shuffle(rows)
    table = tmp_path / "table"
    for i in range(4):
        write_parquet(table / f"train-{i:05d}.parquet", rows[i::4])
    assert len({bucket_of(repo, 3) for repo in repos}) == 3  # the repositories land in every task

    out = _prep_locally_and_on_slurm(table, NO_CURATION, tmp_path, tasks=3)
    assert "#SBATCH --array=0-2" in (out / "logs" / "source_rows" / "launch_script.slurm").read_text()
    local = docs_by_id(read_documents(tmp_path / "local"))
    assert docs_by_id(read_documents(out)) == local and len(local) == 6


def test_prep_with_exact_dedup_on_3_slurm_tasks_keeps_the_copies_one_local_task_keeps(slurm_cluster, tmp_path):
    """Forks and vendored files across a table: the sharded exact dedup (3 signature tasks, 3 finder tasks on
    Slurm) keeps the same copies as one local task. 3 tasks, not 8: each of the six stages is a job array, and
    3 already puts the fork and its original, and the vendored copies, in different tasks (asserted below)."""
    from curate_helpers import stdlib
    from sources_fixtures import read_documents
    from test_sources_tables import FILES, docs_by_id, stack_rows, write_parquet

    from midtrain.sources.buckets import bucket_of

    own = ("bisect.py", "colorsys.py", "heapq.py", "textwrap.py", "json/decoder.py", "json/encoder.py")
    rows = stack_rows("acme/proj", FILES, "a" * 40, ["MIT"]) + stack_rows("fork/proj", FILES, "c" * 40, ["MIT"])
    for r, path in enumerate(own):
        rows += stack_rows(f"org/r{r}", {"src/lex.py": stdlib("shlex.py"), path: stdlib(path)}, "b" * 40, ["MIT"])
    random.Random(3).shuffle(rows)
    table = tmp_path / "table"
    for i in range(4):
        write_parquet(table / f"train-{i:05d}.parquet", rows[i::4])
    settings = ["dedup.near=false", "redact.enabled=false"]
    # the copies the dedup must find across tasks: the fork apart from its original, the vendored file in 3 tasks
    assert bucket_of("acme/proj", 3) != bucket_of("fork/proj", 3)
    assert len({bucket_of(f"org/r{r}", 3) for r in range(len(own))}) == 3

    out = _prep_locally_and_on_slurm(table, settings, tmp_path, tasks=3)
    [finder] = (out / "logs").glob("*_dedup_exact")
    assert "#SBATCH --array=0-2" in (finder / "launch_script.slurm").read_text()
    local = docs_by_id(read_documents(tmp_path / "local"))
    assert docs_by_id(read_documents(out)) == local
    repos = sorted(i.split("@")[0] for i in local)
    assert len(repos) == 7 and ("repo:acme/proj" in repos) != ("repo:fork/proj" in repos)

    def duplicates(prep_dir):  # every dedup drop and cut, by reason
        stats = json.loads((prep_dir / "stats.json").read_text())
        return {k.split("/", 1)[1]: v for k, v in {**stats["drops"], **stats["skips"]}.items() if "duplicate" in k}

    assert (
        duplicates(out)
        == duplicates(tmp_path / "local")
        == {"dedup filter/dropped_duplicate_repo": 1, "dedup filter/removed_exact_duplicate_file": 5}
    )
