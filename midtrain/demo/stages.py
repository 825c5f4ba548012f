"""The demo's four stages, each through the stage's public entry point, writing under WORKDIR.

- prep: all five sources on real local inputs (:mod:`midtrain.demo.inputs`) into WORKDIR/prep/<source>/.
- pack: WORKDIR/prep/* into WORKDIR/shards at seq_length 2048 (the tiny CPU model's context).
- train: demo_tiny on CPU on WORKDIR/shards into WORKDIR/runs/demo_tiny (a few minutes).
- protocol: the evaluation protocol on the tiny model, before and after its short midtraining.
  ``runs/demo_tiny_base`` is the tiny model's step-0 initialisation (built by the trainer's own model
  provider with the demo_tiny recipe's seed, i.e. exactly the weights midtraining started from);
  ``runs/demo_tiny`` is the midtrained run. Both get the identical SFT probe (sft_probe_demo) on the demo
  traces, the proxy evals (held-out loss per source on WORKDIR/shards, code retrieval on WORKDIR/prep/repos),
  then the report in WORKDIR/report/.

Each stage returns its output path and skips what is already complete on a rerun.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

from midtrain.chains import Runner
from midtrain.config import ConfigError
from midtrain.demo.inputs import SAMPLES, project_repo, run_build_tools, sample_git_repo, sample_pulls
from midtrain.eval.config import SweBenchConfig
from midtrain.formats.checkpoints import latest_step
from midtrain.formats.outputs import OutputRefused
from midtrain.protocol import ProtocolConfig, run_protocol
from midtrain.train.initial_checkpoint import save_initial_checkpoint
from midtrain.train.run_stamp import reuse_or_clear
from recipes import load_train_config, resolve_config

SOURCES = ["repos", "commits", "pulls", "buildlogs", "traces"]
# This project is one repository: split it (at file boundaries) into a few documents so that packing's
# by-document validation split holds repository text too, and the report shows a held-out repo loss.
DEMO_OVERRIDES = {"repos": ["repos.max_doc_bytes=150000"]}
DEMO_SEQ_LENGTH = 2048


def _prep_done(out: Path) -> bool:
    # lazy: loads datatrove only when this runs
    from midtrain.sources.prep import STATS_FILE

    try:
        return json.loads((out / STATS_FILE).read_text()).get("complete") is True
    except (OSError, ValueError):
        return False


def prep_stage(workdir: Path) -> str:
    # lazy: loads datatrove only when this runs
    from midtrain.sources.prep import prep

    log = logging.getLogger("midtrain.demo.prep")
    prep_dir = Path(workdir) / "prep"
    inputs_dir = prep_dir / "_inputs"
    repo = project_repo() or sample_git_repo(inputs_dir / "sample_repo")
    pull_records, pull_repos = sample_pulls(inputs_dir / "pulls")  # joined with their clone: the files read
    overrides = {**DEMO_OVERRIDES, "pulls": [f"pulls.repos={pull_repos}"]}
    sources = {
        "repos": [str(repo)],
        "commits": [str(repo)],
        "pulls": [str(pull_records)],
        "buildlogs": None,  # produced below only when needed
        "traces": [str(SAMPLES / "traces")],
    }
    for source in SOURCES:
        out = prep_dir / source
        # buildlogs' inputs are logs the demo's own build tools write, new each time: a finished prep of them is
        # kept. Every other source is prepared again when its inputs changed (an edited sample trace, a new
        # commit of this checkout): skipped, the demo would report numbers of the data as it was.
        if source == "buildlogs" and _prep_done(out):
            log.info("prep %s: complete in %s, skipped", source, out)
            continue
        inputs = sources[source]
        if source == "buildlogs":
            inputs = [str(run_build_tools(inputs_dir / "buildlogs")), str(SAMPLES / "buildlogs" / "logs")]
        assert inputs is not None  # only buildlogs starts without (set just above)
        try:  # nothing to do when it is complete from these inputs
            stats = prep(source, inputs, out, overrides.get(source))
        except ConfigError as e:  # prepared from other inputs or settings
            log.warning("prep %s: %s: preparing it again", source, str(e).split("; use ")[0])
            stats = prep(source, inputs, out, overrides.get(source), overwrite=True)
        assert stats is not None
        log.info(
            "prep %s: %d records -> %d documents (%.1f KB), %d dropped",
            source,
            stats["documents_in"],
            stats["documents_out"],
            stats["bytes_out"] / 1e3,
            stats["drops_total"],
        )
    return str(prep_dir)


def split_file(workdir: Path) -> Path:
    """The demo's one held-out split (midtrain.formats.run_split), decided by the pack stage."""
    # lazy: loads datatrove only when this runs
    from midtrain.formats.run_split import SPLIT_FILE

    return Path(workdir).absolute() / SPLIT_FILE


def pack_stage(workdir: Path) -> str:
    # lazy: loads datatrove, torch only when this runs
    from midtrain.formats.run_split import decide_once
    from midtrain.pack.inspect import format_summary, summarize
    from midtrain.pack.pack_step import PackConfig
    from midtrain.pack.pipeline import pack

    prep = Path(workdir) / "prep"
    inputs = (
        sorted(str(d) for d in prep.iterdir() if (d / "documents").is_dir() and any((d / "documents").glob("*.jsonl*")))
        if prep.is_dir()
        else []
    )
    if not inputs:
        raise FileNotFoundError(f"{prep}: no prep outputs with documents; run the prep stage first")
    out = Path(workdir) / "shards"
    # Small data: a larger validation share so every source has held-out documents for the proxy eval.
    cfg = PackConfig(seq_length=DEMO_SEQ_LENGTH, valid_fraction=0.1, tasks=2)
    # the run's one held-out split, decided from every input before the pack reads them; the probe applies it too
    split = decide_once(split_file(workdir), inputs, cfg.heldout_fraction, cfg.valid_fraction, "midtrain demo")
    cfg = cfg.replace(split=str(split.path))
    try:
        pack(cfg, inputs, out)  # a no-op when the manifest already matches these inputs and settings
    except OutputRefused as e:  # packed from inputs the prep stage has since prepared again
        logging.getLogger("midtrain.demo.pack").warning("%s: packing again", e)
        pack(cfg, inputs, out, overwrite=True)
    logging.getLogger("midtrain.demo.pack").info("\n%s", format_summary(summarize(out)))
    return str(out)


def train_stage(workdir: Path, recipe: str = "demo_tiny") -> str:
    """Train demo_tiny (or RECIPE: a train recipe or a config.yaml) on WORKDIR/shards into WORKDIR/runs/demo_tiny;
    skipped when that run finished with these settings. A run of other settings (a changed recipe) is trained
    again from scratch, its differing fields logged: the later stages score whatever this stage leaves."""
    # lazy: loads megatron, torch only when this runs
    from midtrain.train import distributed
    from midtrain.train.trainer import train

    run_dir = Path(workdir) / "runs" / "demo_tiny"
    cfg = load_train_config(recipe).replace(run_dir=run_dir, data={"path": Path(workdir) / "shards"}).validate()
    if reuse_or_clear(run_dir, cfg, "demo train"):
        logging.getLogger("midtrain.demo.train").info("demo_tiny already trained (%s); skipped", run_dir)
        return str(run_dir)
    result = train(cfg)
    distributed.destroy()
    if result["exit_code"] != 0:
        raise RuntimeError(
            f"demo_tiny stopped early at step {result['step']} (exit {result['exit_code']}); rerun the demo to resume"
        )
    return str(run_dir)


def demo_swebench():  # -> SweBenchConfig
    """The agent leg executed here, per checkpoint: its probe export served on CPU on the embedded tasks, and
    the oracle endpoint on the same tasks (the plumbing check). 2 steps of at most 32 tokens bound each run."""

    return SweBenchConfig(benchmarks=["local", "local_oracle"], max_steps=2, max_context=4096, max_output_tokens=32)


def demo_protocol(workdir: Path):  # -> ProtocolConfig
    """protocol_demo pointed at WORKDIR's checkpoints, data and report directory."""

    w = Path(workdir)
    cfg = resolve_config("protocol_demo", ProtocolConfig, "protocol", validate=False)
    cfg.output = str(w / "runs" / "protocol")
    cfg.checkpoints = {"base": str(w / "runs" / "demo_tiny_base"), "midtrained": str(w / "runs" / "demo_tiny")}
    cfg.report_dir = str(w / "report")
    cfg.proxy.shards = str(w / "shards")
    cfg.proxy.retrieval.repos = str(w / "prep" / "repos")
    cfg.sft_overrides = [f"traces=[{w / 'prep' / 'traces'}]", f"split={split_file(w)}"]
    if all(importlib.util.find_spec(m) for m in ("minisweagent", "swebench")):  # the `eval` extra (make demo's dev)
        cfg.evals = [*cfg.evals, "swebench"]
        cfg.swebench = demo_swebench()
    else:
        logging.getLogger("midtrain.demo.protocol").warning(
            "mini-swe-agent or swebench is not installed (pip install -e '.[eval]'): the agent leg is left out"
        )
    done = latest_step(w / "runs" / "demo_tiny")
    steps = done if done is not None else "its"
    cfg.notes["midtrained"] = f"demo_tiny after {steps} midtraining steps on the demo shards"
    return cfg.validate()


def protocol_stage(workdir: Path, runner: Runner) -> str:
    """SFT probe + proxy evals of the base and midtrained tiny checkpoints, then WORKDIR/report/report.md."""
    # lazy: loads torch only when this runs
    from midtrain.train.checkpoint import latest_checkpoint

    w = Path(workdir)
    midtrained = w / "runs" / "demo_tiny"
    if latest_checkpoint(midtrained) is None:
        raise FileNotFoundError(
            f"{midtrained}: no midtrained checkpoint; run the train stage first (`midtrain demo --only train`)"
        )
    # The recipe as the train stage ran it (same seed), so step 0 here is that run's starting point.
    base_cfg = load_train_config("demo_tiny").replace(data={"path": w / "shards"}).validate()
    logging.getLogger("midtrain.demo.protocol").info(
        "base checkpoint: step-0 initialisation of demo_tiny -> %s",
        save_initial_checkpoint(base_cfg, w / "runs" / "demo_tiny_base"),
    )
    cfg = demo_protocol(w)
    rc = run_protocol(cfg, runner)
    report = Path(cfg.report_dir) / "report.md"
    if rc != 0 or not report.exists():
        raise RuntimeError(f"protocol stage failed (exit {rc}); see the log above and {cfg.output}")
    return str(report)
