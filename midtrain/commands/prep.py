"""Turn raw SWE data into curated documents with datatrove: read a SOURCE, curate, write DIR/documents/.

SOURCE is one of repos, commits, pulls, buildlogs, traces (or its pipeline file, data_prep/<source>.py):

  repos      git repositories (working trees or bare mirrors) or plain directories: one document per
             repository, README/docs first, files in import-dependency order, license + languages in metadata
  commits    the history of git repositories: runs of consecutive commits (message + diff), anonymised
  pulls      pull-request records (JSONL, Parquet, HF dataset dir; GitHub-API-like schema, see
             midtrain/sources/pulls.py), SWE-bench-style task rows, or git repositories (their merged PRs):
             description, diffs, reviews; bots dropped, users anonymised; with pulls.repos=DIR (clones) the
             issue, the files read at the base commit (pulls.context), each commit with its reviews
  buildlogs  CI/build/test logs (text files or JSONL): ANSI/timestamps stripped, repeats collapsed,
             failure context kept whole, size capped with markers
  traces     agent trajectories (SWE-agent .traj, mini-swe-agent .traj.json, OpenAI-style messages):
             chat-template (or plain) rendering with loss_spans of the assistant turns

Output: DIR/documents/*.jsonl.gz (datatrove Documents), DIR/stats.json (documents and bytes in/out, every
drop by reason, errors with where they happened), DIR/logs/ (datatrove logs; relaunching the same command
resumes from the completed tasks). key=value overrides (anywhere on the line) set `<source>.field` (the reader's config)
or any curation field (e.g. redact.enabled=false).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys

from midtrain.config import ConfigError
from midtrain.formats.outputs import OutputRefused
from midtrain.launch.site import load_site
from midtrain.locations import location

log = logging.getLogger("midtrain.prep")

EPILOG = """examples:
  midtrain prep repos --input ~/src/myrepo ~/mirrors/other.git --output out/prep/repos
  midtrain prep commits --input ~/src/myrepo --output out/prep/commits commits.max_doc_bytes=500000
  midtrain prep traces --input runs/*.traj.json --output out/prep/traces traces.only_resolved=true \\
      traces.resolved_report=runs/report.json    # the harness's verdicts
  midtrain prep pulls --input prs.parquet --output out/prep/pulls --executor slurm --tasks 64 \\
      --site site.yaml --partition cpu --time 02:00:00 --dry-run   # print the sbatch scripts
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="repos | commits | pulls | buildlogs | traces (or data_prep/<source>.py)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="<source>.field=value for the reader, anything else for curation",
    )
    p.add_argument(
        "--input",
        "-i",
        nargs="+",
        required=True,
        metavar="PATH",
        help="input paths (a .lst file lists more paths, one a line)",
    )
    p.add_argument("--output", "-o", required=True, metavar="DIR", help="output directory")
    p.add_argument("--executor", choices=["local", "slurm"], default="local")
    p.add_argument("--tasks", type=int, help="datatrove tasks (input shards); default 1 (slurm: prep.tasks)")
    p.add_argument("--workers", type=int, help="tasks run at once; default 1 (slurm: prep.workers)")
    p.add_argument("--overwrite", action="store_true", help="delete DIR first instead of resuming")
    s = p.add_argument_group("slurm (--executor slurm; resources from the site config's `prep:` section)")
    s.add_argument(
        "--site",
        metavar="YAML",
        help="site config (see slurm/site.example.yaml); default $MIDTRAIN_SITE, else defaults",
    )
    s.add_argument("--site-config", dest="site", help=argparse.SUPPRESS)  # deprecated spelling of --site
    s.add_argument("--partition", help="overrides prep.partition")
    s.add_argument("--time", help="overrides prep.time (per task), e.g. 04:00:00")
    s.add_argument("--cpus-per-task", type=int, help="overrides prep.cpus_per_task")
    s.add_argument("--mem-per-cpu-gb", type=int, help="overrides prep.mem_per_cpu_gb")
    s.add_argument("--dry-run", action="store_true", help="print the sbatch scripts instead of submitting")
    p.add_argument(
        "--print-config", action="store_true", help="print the resolved reader and curation config (YAML) and exit"
    )


def _abs(path: str) -> str:
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


def rerun_command(args: argparse.Namespace) -> str:
    """This command line again, every flag that shapes the run kept and paths made absolute (prep.json records
    it: `midtrain pack`'s hint for an unfinished prep names it whole); --overwrite and --dry-run left out."""
    argv = ["midtrain", "prep", args.source, *args.overrides, "--input", *map(_abs, args.input)]
    argv += ["--output", _abs(args.output)]
    flags = {
        "--executor": args.executor if args.executor != "local" else None,
        "--tasks": args.tasks,
        "--workers": args.workers,
        "--site": _abs(args.site) if args.site else None,
        "--partition": args.partition,
        "--time": args.time,
        "--cpus-per-task": args.cpus_per_task,
        "--mem-per-cpu-gb": args.mem_per_cpu_gb,
    }
    argv += [str(v) for flag, value in flags.items() if value is not None for v in (flag, value)]
    return shlex.join(argv)


def run(args: argparse.Namespace) -> int:
    # lazy: loads datatrove only when this runs
    from midtrain.sources.prep import build_run, check_inputs, config_yaml, prep, resolve_source, sbatch_scripts

    if args.print_config:
        print(config_yaml(args.source, args.overrides), end="")
        return 0
    site = None
    if args.executor == "slurm":
        flags = {
            "partition": args.partition,
            "time": args.time,
            "cpus_per_task": args.cpus_per_task,
            "mem_per_cpu_gb": args.mem_per_cpu_gb,
        }
        site = load_site(args.site, [f"prep.{k}={v}" for k, v in flags.items() if v is not None])
    tasks = args.tasks or (site.prep.tasks if site else 1)
    workers = args.workers or (site.prep.workers if site else 1)
    kw = {"tasks": tasks, "workers": workers, "executor": args.executor, "site": site, "command": rerun_command(args)}
    if args.dry_run and args.executor != "slurm":
        raise ConfigError("dry_run: only with --executor slurm")
    try:  # a missing or unreadable input, named, before anything is built
        check_inputs(args.input)
    except OSError as e:
        print(f"midtrain prep: {e}", file=sys.stderr)
        return 1
    if args.dry_run:
        for name, script in sbatch_scripts(
            build_run(args.source, args.input, args.output, args.overrides, **kw)
        ).items():
            print(f"# ---- stage {name} ----\n{script}")
        return 0
    try:
        stats = prep(args.source, args.input, args.output, args.overrides, overwrite=args.overwrite, **kw)
    except (ConfigError, OutputRefused):  # main() prints them in one line (another run holds the output: exit 3)
        raise
    except Exception as e:
        if args.executor != "slurm":
            raise
        print(f"midtrain prep: submitting to Slurm failed: {e}", file=sys.stderr)
        return 1
    output, stats_source = location(args.output), resolve_source(args.source)
    if stats is None:
        print(f"submitted; stats will be in {output / 'stats.json'}")
        return 0
    drops = ", ".join(f"{k}={v}" for k, v in stats["drops"].items()) or "none"
    print(
        f"{stats_source}: {stats['documents_in']} records in -> {stats['documents_out']} documents out "
        f"({stats['bytes_out'] / 1e6:.2f} MB) in {output / 'documents'}; drops: {drops}"
    )
    for err in stats["errors"][:10]:  # a schema mismatch is printed whole: it says which override maps the columns
        detail = err["detail"] if err["reason"] == "schema_mismatch" else err["detail"][:120]
        print(f"  {err['reason']}: {err['where']} {detail}", file=sys.stderr)
    if stats["unreadable_inputs"]:
        print(
            f"midtrain prep: nothing could be read from: {', '.join(stats['unreadable_inputs'])} "
            f"(see {output / 'stats.json'} errors)",
            file=sys.stderr,
        )
        return 1
    if stats["documents_out"] == 0:
        # Not a failure: the inputs were read and curation did its job (e.g. every repository was a SWE-bench
        # one). Exit 0 so a Slurm chain or script carries on; `midtrain pack` skips such a directory.
        reasons = ", ".join(f"{k.rsplit('/', 1)[-1]}={v}" for k, v in stats["drops"].items()) or "none counted"
        print(
            f"midtrain prep: warning: curation dropped every document of {stats_source} (drop reasons: "
            f"{reasons}); {output} holds no documents",
            file=sys.stderr,
        )
    log.debug(json.dumps(stats["settings"]))
    return 0
