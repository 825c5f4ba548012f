"""SWE-bench for one exported checkpoint: generate the cluster run, then collect the graders' reports.

Per benchmark (Verified, Multilingual, Pro) the run is: a vLLM OpenAI-compatible server for the HF checkpoint,
mini-swe-agent's batch runner against it (``agent.yaml`` derived from its builtin SWE-bench config), the
predictions converted to the harness's JSONL, and the grading job: the ``swebench`` harness for Verified and
Multilingual; SWE-bench Pro ships its own grader (Scale's ``swe_bench_pro_eval.py``, a checkout named by
``$SWEBENCH_PRO_DIR``), because the ``swebench`` package has no specs for Pro's repositories.
:func:`midtrain.eval.swebench_results.collect_results` reads the graders' reports into resolved rates per benchmark.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from midtrain.config import ConfigError
from midtrain.eval.benchmarks import BENCHMARKS
from midtrain.eval.config import SweBenchConfig
from midtrain.eval.swebench_agents import harness_agent, mini_swe_agent
from midtrain.eval.swebench_scripts import ENV, INSTANCES, PY, SERVER_FAILED, STEP, script, sh
from midtrain.eval.swebench_slurm import write_sbatch
from midtrain.eval.swebench_stamp import RUN_WANT
from midtrain.formats.stamp import stamp

log = logging.getLogger(__name__)


def context_limit(hf_config: dict[str, Any]) -> tuple[int | None, str]:
    """The longest --max-model-len vLLM accepts for a config.json, and why: YaRN's original length x factor
    (vLLM derives the limit from the scaling, not max_position_embeddings), else max_position_embeddings."""
    rope = hf_config.get("rope_scaling") or hf_config.get("rope_parameters") or {}
    kind = rope.get("rope_type") or rope.get("type")
    if kind == "yarn" and rope.get("factor") and rope.get("original_max_position_embeddings"):
        orig, factor = int(rope["original_max_position_embeddings"]), float(rope["factor"])
        return int(orig * factor), f"YaRN original_max_position_embeddings {orig} x factor {factor:g}"
    mpe = hf_config.get("max_position_embeddings")
    return (int(mpe), "max_position_embeddings") if mpe else (None, "")


def check_context(cfg: SweBenchConfig, checkpoint: str | Path) -> None:
    """vLLM refuses to start with a max_context beyond the checkpoint's: say so now, not after the queue."""
    cfg_file = Path(checkpoint) / "config.json"
    if not cfg_file.is_file():
        return
    try:
        hf = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{cfg_file}: not JSON ({e})") from None
    limit, why = context_limit(hf)
    if limit is not None and cfg.max_context > limit:
        raise ConfigError(
            f"max_context={cfg.max_context}: above the checkpoint's context, {limit} ({why} in "
            f"{cfg_file}); vLLM would refuse to start. Set max_context<={limit}"
        )


def units(cfg: SweBenchConfig) -> list[tuple[str, str, str]]:
    """(results key, benchmark, harness) of every benchmark x harness the config runs (OpenHands has no Pro)."""
    out: list[tuple[str, str, str]] = []
    for name in cfg.benchmarks:
        for harness in cfg.harnesses:
            bench = BENCHMARKS[name]
            if harness not in bench.harnesses:
                if bench.harness_note:
                    log.warning("swebench %s: %s; %s skipped", name, bench.harness_note, harness)
                continue
            out.append((name if harness == "mini-swe-agent" else f"{name}/{harness}", name, harness))
    return out


def write_run(cfg: SweBenchConfig, checkpoint: str | Path, output: str | Path, site: Any = None) -> dict[str, Path]:
    """Write everything a cluster run needs under OUTPUT; returns the script paths by name.

    OUTPUT/serve.sh (vLLM), per benchmark x harness ("unit", OUTPUT/<bench>/ for mini-swe-agent,
    OUTPUT/<bench>/<harness>/ for another) agent.sh (the instances asked for -> instances.txt, the agent) and
    grade.sh (predictions completed to every instance asked for -> the grader), OUTPUT/run.sh (all of it in one
    GPU allocation: each unit runs and is graded on its own, a failure is recorded, the collection always runs)
    and OUTPUT/swebench.sbatch (run.sh as a Slurm job; SITE, a launch.site.SiteConfig, or $MIDTRAIN_SITE's
    gives its allocation).
    """
    cfg.validate()
    check_context(cfg, checkpoint)
    out = Path(output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ckpt = str(Path(checkpoint).resolve())
    files = {"serve": script(out / "serve.sh", f"exec {sh(*_serve_command(cfg, ckpt))}")}
    for key, name, harness in units(cfg):
        files.update(_unit_scripts(cfg, out, key, name, harness))
    files["run"] = script(out / "run.sh", "\n".join(_run_lines(cfg, out, files, ckpt)))
    # what the run about to be submitted is of: --collect and the report read nothing else (run_pending)
    try:
        (out / RUN_WANT).write_text(json.dumps(stamp(ckpt, cfg.to_dict()), indent=1))
    except FileNotFoundError:  # not there yet (it is on the cluster): run.sh's claim_run stamps it
        (out / RUN_WANT).unlink(missing_ok=True)
    return write_sbatch(cfg, out, files, site)


def _serve_command(cfg: SweBenchConfig, checkpoint: str) -> list[str]:
    """vLLM's OpenAI-compatible server for the checkpoint, with tool calls parsed for the agents."""
    serve = [
        "vllm",
        "serve",
        checkpoint,
        "--served-model-name",
        cfg.served_model_name,
        "--port",
        str(cfg.port),
        "--tensor-parallel-size",
        str(cfg.tensor_parallel),
        "--max-model-len",
        str(cfg.max_context),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        cfg.tool_call_parser,
        *cfg.vllm_args,
    ]
    hosts = [h for n in cfg.benchmarks if (h := BENCHMARKS[n].server_host)]
    if hosts and "--host" not in cfg.vllm_args:
        serve[2:2] = ["--host", hosts[0]]  # DeepSWE's agents call it from inside their task containers
    return serve


def _unit_scripts(cfg: SweBenchConfig, out: Path, key: str, name: str, harness: str) -> dict[str, Path]:
    """One unit's agent.sh (the instances asked for -> instances.txt, then the agent) and grade.sh (its
    predictions, completed to every instance asked for, -> the grader), by files key."""
    bench = BENCHMARKS[name]
    udir = out / name if harness == "mini-swe-agent" else out / name / harness
    udir.mkdir(parents=True, exist_ok=True)
    own = bench.grader.unit_scripts(cfg, bench, udir)  # Pier runs the agent itself
    if own is not None:
        return own
    files: dict[str, Path] = {}
    lines, subset = [ENV], bench.dataset
    if bench.prepare:  # Pro: mini-swe-agent reads the image from `image_name`; Pro names it dockerhub_tag
        subset = str(out / name / "dataset")
        lines.append(f"{STEP} {bench.prepare} {sh(bench.dataset, cfg.split, subset)}")
    ids_dataset = subset if harness != "openhands" else bench.dataset
    lines.append(f"{STEP} instances {sh(ids_dataset, cfg.split, cfg.instance_slice or ':', str(udir / INSTANCES))}")
    if harness == "mini-swe-agent":
        agent, convert = mini_swe_agent(cfg, bench, udir, subset)
        files[f"{key}/agent.yaml"] = udir / "agent.yaml"
    else:
        agent, convert = harness_agent(cfg, bench, udir, harness, subset if bench.prepare else None)
    convert += f" {sh(str(udir / 'preds.jsonl'), '--instances', str(udir / INSTANCES))}"
    files[f"{key}/agent"] = script(udir / "agent.sh", "\n".join(lines + agent))
    run_name = name if harness == "mini-swe-agent" else f"{name}-{harness}"
    files[f"{key}/grade"] = script(
        udir / "grade.sh", "\n".join([ENV, convert, *bench.grader.grade_lines(cfg, bench, udir, run_name)])
    )
    return files


def _run_lines(cfg: SweBenchConfig, out: Path, files: dict[str, Path], checkpoint: str) -> list[str]:
    """run.sh: the server, every unit's agent then (server stopped) its grader, each as its own step, then the
    collection (`midtrain eval swebench --collect`); exits non-zero when anything failed, after all of it ran."""
    agents = [k for k in files if k.endswith("/agent")]
    grades = [k for k in files if k.endswith("/grade")]
    q = lambda p: sh(str(p))  # noqa: E731
    run = [
        "set +e  # one unit's failure must not stop the others, nor the collection",
        ENV,
        f"{STEP} claim {q(out)} {q(checkpoint)} || exit 1  # stale outputs go",
        "FAILED=0",
        "step() {  # step NAME SCRIPT: run it; its log and exit status go beside it, for the collection",
        '  local dir; dir=$(dirname "$2")',
        '  bash "$2" > "$dir/$1.log" 2>&1',
        "  local rc=$?",
        '  echo "$rc" > "$dir/$1.rc"',
        '  if [ "$rc" -ne 0 ]; then echo "$2 failed (exit $rc), see $dir/$1.log" >&2; FAILED=1; fi',
        "}",
        "rm -f "
        + " ".join(q(files[k].parent / f"{k.rsplit('/', 1)[1]}.rc") for k in agents + grades)
        + " "
        + q(out / SERVER_FAILED),
        f"bash {q(out / 'serve.sh')} > {q(out / 'vllm.log')} 2>&1 &",
        "SERVER=$!",
        "trap 'kill $SERVER 2>/dev/null' EXIT",
        f"READY=0; DEADLINE=$((SECONDS + {cfg.server_wait_s}))",
        "while [ $SECONDS -lt $DEADLINE ]; do",
        f"  if curl -sf http://localhost:{cfg.port}/v1/models >/dev/null; then READY=1; break; fi",
        "  kill -0 $SERVER 2>/dev/null || break  # the server exited",
        "  sleep 2",
        "done",
        "if [ $READY -eq 1 ]; then",
        *[f"  step agent {q(files[k])}" for k in agents],
        "else",
        "  if kill -0 $SERVER 2>/dev/null; then WHY='did not answer within "
        f"{cfg.server_wait_s}s'; else WHY='exited'; fi",
        f'  echo "vLLM server $WHY (see {out / "vllm.log"})" | tee {q(out / SERVER_FAILED)} >&2',
        "  FAILED=1",
        "fi",
        "kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null",
        "if [ $READY -eq 1 ]; then",
        *[f"  step grade {q(files[k])}" for k in grades],
        "fi",
        f"{PY} -m midtrain.cli eval swebench --collect --output {q(out)} || FAILED=1",
        "exit $FAILED",
    ]
    return run
