"""SWE-bench for one exported checkpoint: generate the cluster run, then collect the graders' reports.

Per benchmark (Verified, Multilingual, Pro) the run is: a vLLM OpenAI-compatible server for the HF checkpoint,
mini-swe-agent's batch runner against it (``agent.yaml`` derived from its builtin SWE-bench config), the
predictions converted to the harness's JSONL, and the grading job: the ``swebench`` harness for Verified and
Multilingual; SWE-bench Pro ships its own grader (Scale's ``swe_bench_pro_eval.py``, a checkout named by
``$SWEBENCH_PRO_DIR``), because the ``swebench`` package has no specs for Pro's repositories.
:func:`collect_results` reads the graders' reports into resolved rates per benchmark.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from midtrain.eval.config import SweBenchConfig
from midtrain.eval.predictions import complete_predictions, read_instances, write_predictions
from midtrain.formats.outputs import OutputRefused
from midtrain.formats.stamp import read_stamp, stale_fields, stamp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Benchmark:
    name: str
    dataset: str  # Hugging Face dataset id
    grader: str  # "swebench" (the harness) or "pro" (Scale's grader)
    workdir: str  # where the repository lives inside the instance image


BENCHMARKS = {
    "verified": Benchmark("verified", "SWE-bench/SWE-bench_Verified", "swebench", "/testbed"),
    "multilingual": Benchmark("multilingual", "SWE-bench/SWE-bench_Multilingual", "swebench", "/testbed"),
    "pro": Benchmark("pro", "ScaleAI/SWE-bench_Pro", "pro", "/app"),
    # Harbor tasks run and graded by Pier (midtrain.eval.deepswe), mini-swe-agent inside each task's sandbox
    "deepswe": Benchmark("deepswe", "datacurve-ai/deep-swe", "pier", "/app"),
    # the embedded CPU task set (midtrain.eval.local_run), graded into the harness's report format
    "local": Benchmark("local", "", "swebench", "/testbed"),
    "local_oracle": Benchmark("local_oracle", "", "swebench", "/testbed"),  # the same tasks, gold patches
}
PRO_IMAGE_REPO = "jefzda/sweap-images"  # Scale's public per-instance images (dockerhub_tag column)
PRO_RAW_SAMPLES = "helper_code/sweap_eval_full_v2.jsonl"  # the grader's instance table, in Scale's checkout
PRO_OUTPUT = "_output.json"  # the grader's per-instance test report, GRADING/<id>/<prefix>_output.json (prefix "")
# Scale's per-instance images set ENTRYPOINT ["/bin/bash"]: mini-swe-agent's `docker run IMAGE sleep 2h` would
# run `bash sleep 2h` and exit; an empty --entrypoint restores the plain command.
PRO_DOCKER_RUN_ARGS = ["--rm", "--entrypoint", ""]
# mini-swe-agent's SWE-bench config sets BASH_ENV=/root/.bashrc (activates the testbed env). On images whose
# .bashrc errors (SWE-bench issue 638: a missing conda.sh) that error precedes every output, so the submit
# line is never first and the agent cannot submit. The shell sources it with its messages discarded instead.
BASHRC = "/root/.bashrc"
DOCKER_SHELL = {
    "interpreter": ["bash", "-c", '[ -f "$MIDTRAIN_BASHRC" ] && . "$MIDTRAIN_BASHRC" >/dev/null 2>&1; eval "$0"']
}
RESULTS_FILE = "swebench_results.json"


def model_id(cfg: SweBenchConfig) -> str:
    """The litellm model name mini-swe-agent uses for the vLLM server (provider prefix + served name)."""
    return f"hosted_vllm/{cfg.served_model_name}"


# action_format=text: mini-swe-agent's backticks config, its fence the text trajectories' ```bash
TEXT_AGENT_BASE = "swebench_backticks.yaml"
TEXT_FENCE = "mswea_bash_command"
TEXT_ACTION_REGEX = r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```"


def _text_format(conf: dict[str, Any]) -> dict[str, Any]:
    """The backticks config with its fence spelled ```bash in every template, parsed by the textbased model."""

    def swap(x: Any) -> Any:
        if isinstance(x, str):
            return x.replace(f"```{TEXT_FENCE}", "```bash")
        if isinstance(x, dict):
            return {k: swap(v) for k, v in x.items()}
        return x

    conf = swap(conf)
    conf.setdefault("model", {}).update(model_class="litellm_textbased", action_regex=TEXT_ACTION_REGEX)
    return conf


def agent_config(cfg: SweBenchConfig, bench: Benchmark) -> dict[str, Any]:
    """mini-swe-agent config: its builtin SWE-bench config + our model endpoint, limits and environment."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # writing a config needs no network
    from minisweagent.config import get_config_from_spec
    from minisweagent.utils.serialize import recursive_merge

    if cfg.action_format == "text":
        base = _text_format(get_config_from_spec(TEXT_AGENT_BASE))
    else:
        base = get_config_from_spec(cfg.agent_base)
    ours: dict[str, Any] = {
        "agent": {"step_limit": cfg.max_steps, "cost_limit": 0.0},  # a local model has no cost: steps bound it
        "environment": {"environment_class": cfg.environment, "cwd": bench.workdir},
        "model": {
            "model_name": model_id(cfg),
            "cost_tracking": "ignore_errors",
            "model_kwargs": {
                "api_base": f"http://localhost:{cfg.port}/v1",
                "api_key": "EMPTY",
                "temperature": cfg.temperature,
                "max_tokens": cfg.max_output_tokens,
            },
        },
    }
    if cfg.environment == "docker":
        ours["environment"].update(DOCKER_SHELL, pull_timeout=cfg.image_pull_timeout_s)
        ours["environment"]["env"] = {"BASH_ENV": "", "MIDTRAIN_BASHRC": BASHRC}
        if bench.grader == "pro":
            ours["environment"]["run_args"] = list(PRO_DOCKER_RUN_ARGS)
    merged = recursive_merge(base, ours)
    if bench.workdir != "/testbed":  # the builtin prompt names SWE-bench's checkout dir
        agent = merged.get("agent", {})
        for key in ("instance_template", "system_template"):
            if isinstance(agent.get(key), str):
                agent[key] = agent[key].replace("/testbed", bench.workdir)
    return merged


def _sh(*parts: str) -> str:
    return " ".join(shlex.quote(p) for p in parts)


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
    from midtrain.config import ConfigError

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


STEPS = ("agent", "grade")  # each unit's scripts; run.sh keeps <unit>/<step>.log and <step>.rc beside them
INSTANCES = "instances.txt"  # the instance ids a unit's agent was asked to run: the denominator
SERVER_FAILED = "server.failed"  # run.sh writes it (with the cause) when vLLM never answered


def units(cfg: SweBenchConfig) -> list[tuple[str, str, str]]:
    """(results key, benchmark, harness) of every benchmark x harness the config runs (OpenHands has no Pro)."""
    out: list[tuple[str, str, str]] = []
    for name in cfg.benchmarks:
        for harness in cfg.harnesses:
            if harness == "openhands" and BENCHMARKS[name].grader == "pro":
                continue
            if harness != "mini-swe-agent" and BENCHMARKS[name].grader == "pier":
                log.warning("swebench %s: Pier drives mini-swe-agent only; %s skipped", name, harness)
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
    files = {"serve": _script(out / "serve.sh", f"exec {_sh(*_serve_command(cfg, ckpt))}")}
    for key, name, harness in units(cfg):
        files.update(_unit_scripts(cfg, out, key, name, harness))
    files["run"] = _script(out / "run.sh", "\n".join(_run_lines(cfg, out, files, ckpt)))
    # what the run about to be submitted is of: --collect and the report read nothing else (run_pending)
    try:
        (out / RUN_WANT).write_text(json.dumps(stamp(ckpt, cfg.to_dict()), indent=1))
    except FileNotFoundError:  # not there yet (it is on the cluster): run.sh's claim_run stamps it
        (out / RUN_WANT).unlink(missing_ok=True)
    return _finish(cfg, out, files, site)


# The generated scripts run the job's Python ($MIDTRAIN_PYTHON: the site's venv or container) and call the
# steps of midtrain.eval.swebench_steps with it; litellm must not fetch its cost map in every process.
PY = "${MIDTRAIN_PYTHON:-python}"
STEP = f"{PY} -m midtrain.eval.swebench_steps"
ENV = "export LITELLM_LOCAL_MODEL_COST_MAP=True  # litellm: no network fetch of its cost map per process"


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
    if "deepswe" in cfg.benchmarks and "--host" not in cfg.vllm_args:
        serve[2:2] = ["--host", "0.0.0.0"]  # DeepSWE's agents call it from inside their task containers
    return serve


def _unit_scripts(cfg: SweBenchConfig, out: Path, key: str, name: str, harness: str) -> dict[str, Path]:
    """One unit's agent.sh (the instances asked for -> instances.txt, then the agent) and grade.sh (its
    predictions, completed to every instance asked for, -> the grader), by files key."""
    bench = BENCHMARKS[name]
    udir = out / name if harness == "mini-swe-agent" else out / name / harness
    udir.mkdir(parents=True, exist_ok=True)
    if bench.grader == "pier":
        return _deepswe_unit(cfg, bench, udir)
    files: dict[str, Path] = {}
    lines, subset = [ENV], bench.dataset
    if bench.grader == "pro":  # mini-swe-agent reads the image from `image_name`; Pro names it dockerhub_tag
        subset = str(out / name / "dataset")
        lines.append(f"{STEP} prepare-pro {_sh(bench.dataset, cfg.split, subset)}")
    ids_dataset = subset if harness != "openhands" else bench.dataset
    lines.append(f"{STEP} instances {_sh(ids_dataset, cfg.split, cfg.instance_slice or ':', str(udir / INSTANCES))}")
    if harness == "mini-swe-agent":
        agent, convert = _mini_swe_agent(cfg, bench, udir, subset)
        files[f"{key}/agent.yaml"] = udir / "agent.yaml"
    else:
        agent, convert = _harness_agent(cfg, bench, udir, harness, subset if bench.grader == "pro" else None)
    convert += f" {_sh(str(udir / 'preds.jsonl'), '--instances', str(udir / INSTANCES))}"
    files[f"{key}/agent"] = _script(udir / "agent.sh", "\n".join(lines + agent))
    run_name = name if harness == "mini-swe-agent" else f"{name}-{harness}"
    files[f"{key}/grade"] = _script(
        udir / "grade.sh", "\n".join([ENV, convert, *_grade_lines(cfg, bench, udir, run_name)])
    )
    return files


def _mini_swe_agent(cfg: SweBenchConfig, bench: Benchmark, udir: Path, subset: str) -> tuple[list[str], str]:
    """mini-swe-agent's batch run over SUBSET with UDIR/agent.yaml (written here), and its predictions
    converter (run by grade.sh, so a crashed agent still leaves its finished instances graded)."""
    (udir / "agent.yaml").write_text(
        yaml.dump(agent_config(cfg, bench), Dumper=_BlockDumper, sort_keys=False, width=120, allow_unicode=True)
    )
    agent = [
        "mini-extra",
        "swebench",
        "--subset",
        subset,
        "--split",
        cfg.split,
        "--config",
        str(udir / "agent.yaml"),
        "--output",
        str(udir / "agent"),
        "--workers",
        str(cfg.agent_workers),
        "--environment-class",
        cfg.environment,
    ]
    if cfg.instance_slice:
        agent += ["--slice", cfg.instance_slice]
    return [_sh(*agent)], f"{STEP} predictions {_sh(str(udir / 'agent' / 'preds.json'))}"


def _run_lines(cfg: SweBenchConfig, out: Path, files: dict[str, Path], checkpoint: str) -> list[str]:
    """run.sh: the server, every unit's agent then (server stopped) its grader, each as its own step, then the
    collection (`midtrain eval swebench --collect`); exits non-zero when anything failed, after all of it ran."""
    agents = [k for k in files if k.endswith("/agent")]
    grades = [k for k in files if k.endswith("/grade")]
    q = lambda p: _sh(str(p))  # noqa: E731
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


def _deepswe_unit(cfg: SweBenchConfig, bench: Benchmark, udir: Path) -> dict[str, Path]:
    """DeepSWE's agent.sh (Pier's own Python >= 3.12 environment, the task checkout, `pier run` against our
    server: agent and verifier) and grade.sh (its trials -> results)."""
    from midtrain.eval import deepswe

    (udir / "agent.yaml").write_text(yaml.safe_dump(agent_config(cfg, bench), sort_keys=False))
    tasks = '"$DEEPSWE_DIR/tasks"'
    lines = [
        ENV,
        "# Harbor and Pier need Python >= 3.12: their own environment, the project's stays as it is",
        f"PIER_ENV={_sh(str(udir / 'pier-env'))}",
        'if [ ! -x "$PIER_ENV/bin/pier" ]; then',
        f'  if command -v uv >/dev/null; then uv venv --python 3.12 "$PIER_ENV" && '
        f'uv pip install --python "$PIER_ENV/bin/python" {_sh(deepswe.PIER)}',
        f'  else "${{PIER_PYTHON:-python3.12}}" -m venv "$PIER_ENV" && '
        f'"$PIER_ENV/bin/pip" install {_sh(deepswe.PIER)}; fi',
        "fi",
        f"DEEPSWE_DIR=${{DEEPSWE_DIR:-{udir / 'deep-swe'}}}  # a checkout of {deepswe.REPO}",
        f'if [ ! -d {tasks} ]; then git clone https://github.com/{deepswe.REPO} "$DEEPSWE_DIR" && '
        f'git -C "$DEEPSWE_DIR" checkout {deepswe.REF}; fi',
        f"{STEP} instances {tasks} {_sh(cfg.split, cfg.instance_slice or ':', str(udir / INSTANCES))}",
        "# the agent runs inside each task's container: it reaches the server at this node's address",
        "HOST=${MIDTRAIN_SERVER_HOST:-$(hostname -I | awk '{print $1}')}",
        f"{STEP} deepswe-config {_sh(str(udir / 'agent.yaml'))} "
        f'"http://$HOST:{cfg.port}/v1" {_sh(str(udir / "pier_agent.yaml"))}',
        "INCLUDE=()",
        f'{"" if cfg.instance_slice else "# "}while read -r t; do INCLUDE+=(-i "*$t"); done < '
        f"{_sh(str(udir / INSTANCES))}",
        '"$PIER_ENV/bin/pier" run -p '
        + tasks
        + " "
        + _sh(
            "--agent",
            "mini-swe-agent",
            "--model",
            model_id(cfg),
            "--ak",
            f"config_file={udir / 'pier_agent.yaml'}",
            "--ae",
            "MSWEA_API_KEY=EMPTY",
            "--jobs-dir",
            str(udir / "jobs"),
            "--job-name",
            deepswe.JOB,
            "--n-concurrent",
            str(cfg.agent_workers),
            "--yes",
        )
        + ' "${INCLUDE[@]}"',
    ]
    key = bench.name
    return {
        f"{key}/agent.yaml": udir / "agent.yaml",
        f"{key}/agent": _script(udir / "agent.sh", "\n".join(lines)),
        f"{key}/grade": _script(
            udir / "grade.sh",
            "\n".join(
                [
                    ENV,
                    "# Pier graded every trial during the agent step; here its results are only checked",
                    f"ls {_sh(str(udir / 'jobs' / deepswe.JOB))}/*/result.json >/dev/null",
                ]
            ),
        ),
    }


def _harness_agent(
    cfg: SweBenchConfig, bench: Benchmark, hdir: Path, harness: str, pro_dataset: str | None
) -> tuple[list[str], str]:
    """SWE-agent's or OpenHands' agent step (its config checked against its schema) and its predictions
    converter (run by grade.sh, so a crashed agent still leaves its finished instances graded)."""
    from midtrain.eval.harnesses import openhands_config, openhands_limit, swe_agent_config

    api_base = f"http://localhost:{cfg.port}/v1"
    if harness == "swe-agent":
        pro_file = str(Path(pro_dataset) / f"{cfg.split}.jsonl") if pro_dataset else None
        conf = swe_agent_config(cfg, bench, api_base, model_id(cfg), str(hdir / "agent"), pro_file)
        (hdir / "swe_agent.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
        return (
            [
                'sweagent run-batch --config "${SWE_AGENT_DIR:?set SWE_AGENT_DIR to a SWE-agent checkout}'
                '/config/default.yaml" ' + _sh("--config", str(hdir / "swe_agent.yaml"))
            ],
            f"{STEP} predictions {_sh(str(hdir / 'agent' / 'preds.json'))}",
        )
    (hdir / "config.toml").write_text(openhands_config(cfg, api_base, model_id(cfg)))
    limit = openhands_limit(cfg.instance_slice)
    run = [
        "poetry",
        "run",
        "python",
        "evaluation/benchmarks/swe_bench/run_infer.py",
        "--config-file",
        str(hdir / "config.toml"),
        "--agent-cls",
        "CodeActAgent",
        "--llm-config",
        "llm.midtrain",
        "--max-iterations",
        str(cfg.max_steps),
        "--eval-num-workers",
        str(cfg.agent_workers),
        "--dataset",
        bench.dataset,
        "--split",
        cfg.split,
        "--eval-output-dir",
        str(hdir / "agent"),
    ]
    if limit is not None:
        run += ["--eval-n-limit", str(limit)]
    return (
        ['cd "${OPENHANDS_DIR:?set OPENHANDS_DIR to an OpenHands checkout}"', _sh(*run)],
        f"{STEP} openhands-predictions {_sh(str(hdir / 'agent'))}",
    )


def _grade_lines(cfg: SweBenchConfig, bench: Benchmark, bdir: Path, run_name: str) -> list[str]:
    """Grade BDIR/preds.jsonl (one line per instance asked for) into BDIR/grading; the harness report is
    named after ``run_name``."""
    grading = bdir / "grading"
    if bench.grader == "swebench":
        harness = _sh(
            "-m",
            "swebench.harness.run_evaluation",
            "--dataset_name",
            bench.dataset,
            "--split",
            cfg.split,
            "--predictions_path",
            str(bdir / "preds.jsonl"),
            "--max_workers",
            str(cfg.grading_workers),
            "--run_id",
            f"midtrain-{run_name}",
            "--report_dir",
            str(grading),
        )
        # over the instances asked for (the harness's denominator), never an empty --instance_ids
        return [
            f"IDS=$(cat {_sh(str(bdir / INSTANCES))})",
            f'[ -n "$IDS" ] || {{ echo "no instances listed in {bdir / INSTANCES}" >&2; exit 3; }}',
            f"mkdir -p {_sh(str(grading))} && cd {_sh(str(grading))}",  # the harness logs under cwd
            f"{PY} {harness} --instance_ids $IDS",
        ]
    # Scale's grader reads dockerfiles/ and imports helper_code/ relative to its checkout: it runs from there.
    # Without --use_local_docker it grades on Modal, and an instance it cannot run is written as `false`.
    return [
        ': "${SWEBENCH_PRO_DIR:?set SWEBENCH_PRO_DIR to a checkout of scaleapi/SWE-bench_Pro-os}"',
        f"{STEP} pro-patches {_sh(str(bdir / 'preds.jsonl'), str(bdir / 'patches.json'))}",
        f"mkdir -p {_sh(str(grading))}",
        'cd "$SWEBENCH_PRO_DIR"',
        f"{PY} swe_bench_pro_eval.py --raw_sample_path={PRO_RAW_SAMPLES} "
        f"--patch_path={_sh(str(bdir / 'patches.json'))} --output_dir={_sh(str(grading))} "
        f"--scripts_dir=run_scripts --num_workers={cfg.grading_workers} "
        f"--dockerhub_username={PRO_IMAGE_REPO.split('/')[0]} --use_local_docker",
    ]


def _finish(cfg: SweBenchConfig, out: Path, files: dict[str, Path], site: Any = None) -> dict[str, Path]:
    """swebench.sbatch: run.sh as one Slurm job, its allocation from the site config's protocol step
    ``eval_swebench`` (partition, account, qos, time, CPUs, memory), its Python from the site's venv."""
    from midtrain.config import ConfigError
    from midtrain.launch.render import python_setup, sbatch_lines, site_exports
    from midtrain.launch.site import load_site

    site = site or load_site()
    res = site.step_resources("eval_swebench")
    if res.gpus_per_node < cfg.tensor_parallel:
        raise ConfigError(
            f"tensor_parallel={cfg.tensor_parallel}: the site's eval_swebench job has "
            f"{res.gpus_per_node} GPUs per node (site protocol.eval_swebench.gpus_per_node)"
        )
    sbatch = (
        "\n".join(
            [
                "#!/bin/bash",
                sbatch_lines(
                    site,
                    res,
                    job_name=f"swebench-{cfg.served_model_name}",
                    log_file=f"{out}/slurm-%j.out",
                    gpu=True,
                    requeue=False,
                ),
                python_setup(site),
                site_exports(site),
                f"bash {_sh(str(out / 'run.sh'))}",
            ]
        )
        + "\n"
    )
    (out / "swebench.sbatch").write_text(sbatch)
    files["sbatch"] = out / "swebench.sbatch"
    (out / "swebench_config.yaml").write_text(cfg.to_yaml())
    made = [out / "swebench_config.yaml", out / GENERATED, *files.values()]
    made += [out / RUN_WANT] if (out / RUN_WANT).exists() else []
    (out / GENERATED).write_text(json.dumps(sorted({str(f.relative_to(out)) for f in made}), indent=1))
    return files


GENERATED = "generated.json"  # what write_run wrote: the scripts and configs claim_run keeps
RUN_STAMP = "swebench_stamp.json"  # the checkpoint content and settings OUTPUT's agent and grader outputs are for
RUN_WANT = "swebench_want.json"  # the stamp of the run write_run wrote last (run.sh's claim_run makes it RUN_STAMP)


def run_pending(output: str | Path) -> str | None:
    """Why OUTPUT's outputs are not those of the run written there last (a new run submitted, not started yet:
    what lies there is an earlier run's), or None."""
    out = Path(output)
    want, ran = read_stamp(out / RUN_WANT), read_stamp(out / RUN_STAMP)
    if want is None or ran is None:  # a local run (RUN_STAMP is all), or nothing has run there yet (pending)
        return None
    # the code is not compared: run.sh may run another install of midtrain (the site's) than the one that wrote it
    changed = [f for f in stale_fields(ran, want) if f != "code"]
    if changed:
        return f"the run written into {out} has not started: what lies there is of another run ({', '.join(changed)})"
    return None


def claim_run(output: str | Path, checkpoint: str | Path) -> list[str]:
    """At the start of run.sh: OUTPUT's outputs stand for the checkpoint content and settings its stamp records,
    else they are removed (returned) before anything runs. mini-swe-agent skips the instances already in
    preds.json, the swebench harness those with a report.json under the run id, Scale's Pro grader those with an
    _output.json: a rerun after a new midtraining run would report the old checkpoint's rates. A rerun on the
    same content keeps them, so a requeued job resumes."""
    out = Path(output)
    want = stamp(checkpoint, SweBenchConfig.from_yaml(out / "swebench_config.yaml").to_dict())
    try:
        old: dict[str, Any] | None = json.loads((out / RUN_STAMP).read_text())
    except (OSError, ValueError):
        old = None
    removed: list[str] = []
    if old is None or stale_fields(old, want):
        keep = set(json.loads((out / GENERATED).read_text())) | {RUN_STAMP}
        keep |= {str(d) for k in list(keep) for d in Path(k).parents}  # the directories that hold them
        for f in sorted(out.rglob("*"), key=lambda q: -len(q.parts)):
            rel = str(f.relative_to(out))
            if rel in keep or not f.exists():
                continue
            shutil.rmtree(f) if f.is_dir() else f.unlink()
            removed.append(rel)
        if removed:
            why = "no stamp" if old is None else ", ".join(stale_fields(old, want)) + " changed"
            log.warning(
                "swebench: %s held results of another checkpoint or settings (%s); removed %d outputs "
                "(e.g. %s) before this run",
                out,
                why,
                len(removed),
                ", ".join(removed[:3]),
            )
    (out / RUN_STAMP).write_text(json.dumps(want, indent=1))
    return removed


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the agent's prompt templates) as readable `|` blocks."""


_BlockDumper.add_representer(
    str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)
)


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body + "\n")
    path.chmod(0o755)
    return path


# -- predictions ------------------------------------------------------------------------------------
def slice_rows(rows: list[Any], spec: str) -> list[Any]:
    """``start:stop`` as mini-swe-agent's --slice (and SWE-agent's slice) takes it; '' or ':' = all."""
    if not spec or spec == ":":
        return rows
    try:
        return rows[slice(*[int(x) if x else None for x in spec.split(":")])]
    except (ValueError, TypeError):
        raise ValueError(f"instance_slice={spec!r}: expected START:STOP (e.g. 0:20)") from None


def write_instances(rows: list[dict[str, Any]], spec: str, out: str | Path) -> int:
    """The ids of the instances an agent is asked to run (ROWS sliced as the agent slices them) -> OUT."""
    ids = [r["instance_id"] for r in slice_rows(rows, spec)]
    Path(out).write_text("".join(f"{i}\n" for i in ids))
    return len(ids)


def convert_predictions(
    preds_json: str | Path, out_jsonl: str | Path, instances: list[str] | None = None
) -> dict[str, int]:
    """mini-swe-agent's preds.json ({id: prediction}) -> the harness's JSONL (one prediction per line).

    Instances the agent failed on keep an empty patch (the harness counts them as empty, not as missing); with
    ``instances`` (the ids asked for), each one without a prediction gets an empty patch too, and an agent that
    crashed before writing preds.json leaves every instance empty.
    """
    counts = {"predictions": 0, "empty_patch": 0, "dropped_no_instance_id": 0}
    if not Path(preds_json).exists() and instances is not None:
        log.warning("predictions: %s does not exist (the agent wrote none)", preds_json)
        data: Any = {}
    else:
        data = json.loads(Path(preds_json).read_text())
    rows = []
    for row in list(data.values()) if isinstance(data, dict) else data:
        if not isinstance(row, dict) or not row.get("instance_id"):
            counts["dropped_no_instance_id"] += 1
            log.warning("predictions %s: dropped an entry without instance_id: %.80r", preds_json, row)
            continue
        rows.append(
            {
                "instance_id": row["instance_id"],
                "model_name_or_path": row.get("model_name_or_path") or "midtrain",
                "model_patch": row.get("model_patch") or "",
            }
        )
    return write_predictions(complete_predictions(rows, instances, counts), out_jsonl, counts)


def pro_problem_statement(row: dict[str, Any]) -> str:
    """The task text Scale's harness gives the agent (helper_code/create_problem_statement.py): the issue, then
    the requirements and the new interfaces the hidden tests call; published Pro scores are with both."""
    missing = [k for k in ("problem_statement", "requirements", "interface") if k not in row]
    if missing:
        raise ValueError(f"SWE-bench Pro instance {row.get('instance_id', '?')}: no {missing} field")
    return (
        f"{row['problem_statement']}\n\nRequirements:\n{row['requirements']}\n\n"
        f"New interfaces introduced:\n{row['interface']}"
    )


def write_pro_rows(rows: list[dict[str, Any]], out_dir: str | Path, split: str) -> int:
    """SWE-bench Pro rows -> OUT_DIR/SPLIT.jsonl as mini-swe-agent reads them: `image_name` from dockerhub_tag
    and `problem_statement` as Scale's harness builds it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{split}.jsonl", "w") as f:
        for row in rows:
            row = dict(row)
            row.setdefault("image_name", f"{PRO_IMAGE_REPO}:{row['dockerhub_tag']}")
            row["problem_statement"] = pro_problem_statement(row)
            f.write(json.dumps(row) + "\n")
    return len(rows)


# -- results ----------------------------------------------------------------------------------------
EMPTY_PATCH_FLAG = 0.5  # a unit with more empty patches than this share is flagged in its results and the report


def parse_harness_report(path: str | Path) -> dict[str, Any]:
    """The `swebench` harness's final run report -> counts and the resolved rate over all instances run."""
    rep = json.loads(Path(path).read_text())
    missing = [k for k in ("total_instances", "resolved_instances") if k not in rep]
    if missing:
        raise ValueError(f"{path}: not a swebench run report (missing {missing})")
    total = int(rep["total_instances"])
    resolved = int(rep["resolved_instances"])
    errors = int(rep.get("error_instances", 0))
    graded = total - errors  # an error instance (no container, a harness crash) was never graded
    return {
        "resolved": resolved,
        "total": total,
        "rate": resolved / total if graded > 0 else None,  # none run, or none graded: unknown, never 0
        "submitted": int(rep.get("submitted_instances", 0)),
        "completed": int(rep.get("completed_instances", 0)),
        "empty_patch": int(rep.get("empty_patch_instances", 0)),
        "errors": errors,
        "error_ids": sorted(rep.get("error_ids") or []),
        "report": str(path),
    }


def parse_pro_results(
    path: str | Path, predictions: str | Path | None = None, instances: list[str] | None = None
) -> dict[str, Any]:
    """Scale's Pro grader output ({instance_id: passed}) -> counts.

    The grader writes `false` both for an instance whose tests failed and for one it could not run (no image,
    no Docker, a Modal auth error): only an instance with its test report (GRADING/<id>/_output.json) was
    graded. One without it, or without any entry, is an error (``error_ids``), never a failed instance.
    """
    path = Path(path)
    res = json.loads(path.read_text())
    if not isinstance(res, dict) or not all(isinstance(v, bool) for v in res.values()):
        raise ValueError(f"{path}: not a SWE-bench Pro eval_results.json ({{instance_id: bool}})")
    ids = set(res)
    if predictions is not None and Path(predictions).exists():
        ids |= {json.loads(line)["instance_id"] for line in Path(predictions).read_text().splitlines() if line.strip()}
    ids |= set(instances or ())  # the denominator: every instance asked for
    graded = {i for i in ids if i in res and (path.parent / i / PRO_OUTPUT).is_file()}
    resolved = sum(bool(res[i]) for i in graded)
    errors = sorted(ids - graded)
    if errors:
        log.error(
            "swebench pro: the grader could not grade %d of %d instances (no %s), e.g. %s; see "
            "GRADING/<id>/_stdout.log and the grader's log",
            len(errors),
            len(ids),
            PRO_OUTPUT,
            errors[:3],
        )
    # nothing graded (no Docker, no images): unknown, never a measured 0
    return {
        "resolved": resolved,
        "total": len(ids),
        "rate": resolved / len(ids) if graded else None,
        "submitted": len(ids),
        "completed": len(graded),
        "failed": len(graded) - resolved,
        "errors": len(errors),
        "error_ids": errors,
        "report": str(path),
    }


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        tail = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()][-lines:]
    except OSError:
        return ""
    return " | ".join(t[:240] for t in tail)


def step_failures(udir: Path, server_failed: str | None) -> list[dict[str, Any]]:
    """The failed steps of one unit, each with its cause: exit status and the end of its log (run.sh keeps
    <step>.rc and <step>.log beside the scripts), or the server's failure when the agents never ran."""
    failures = []
    for step in STEPS:
        rc_file, log_file = udir / f"{step}.rc", udir / f"{step}.log"
        if rc_file.is_file():
            rc = rc_file.read_text().strip()
            if rc != "0":
                failures.append(
                    {
                        "step": step,
                        "exit": int(rc) if rc.lstrip("-").isdigit() else rc,
                        "cause": _log_tail(log_file) or f"{step}.sh exited {rc}",
                        "log": str(log_file),
                    }
                )
        elif server_failed and step == "agent":
            failures.append({"step": step, "cause": server_failed})
    return failures


SERVER_LOG = "server.jsonl"  # the CPU server's log of each call (midtrain.eval.serve)


def collect_results(output: str | Path) -> dict[str, dict[str, Any]]:
    """Read each benchmark x harness's grading report under OUTPUT and write OUTPUT/swebench_results.json.

    Keys: the benchmark name for mini-swe-agent (OUTPUT/<bench>/), ``<bench>/<harness>`` for another harness
    (OUTPUT/<bench>/<harness>/). Every unit the run's swebench_config.yaml asked for gets an entry: ``total``
    is the instances asked for (instances.txt), ``failures`` lists failed steps with their cause, and a unit
    without a readable report has ``rate: null`` (unknown, never 0); one none of whose steps has run yet is
    also ``pending``.
    """
    from midtrain.eval.config import HARNESSES

    out = Path(output)
    pending = run_pending(out)
    if pending:
        raise OutputRefused(f"{pending}; run it (sbatch {out / 'swebench.sbatch'}) before --collect")
    cfg_file = out / "swebench_config.yaml"
    run_cfg = SweBenchConfig.from_yaml(cfg_file) if cfg_file.is_file() else None
    if run_cfg is not None:
        planned, scanned = units(run_cfg), False
    else:  # results of a run written elsewhere: every unit that has a grading directory
        planned = [(n if h == "mini-swe-agent" else f"{n}/{h}", n, h) for n in BENCHMARKS for h in HARNESSES]
        scanned = True
    server = (out / SERVER_FAILED).read_text().strip() if (out / SERVER_FAILED).is_file() else None
    results: dict[str, dict[str, Any]] = {}
    for key, name, harness in planned:
        udir = out / name if harness == "mini-swe-agent" else out / name / harness
        if scanned and not (udir / "grading").is_dir():
            continue
        results[key] = _unit_result(key, BENCHMARKS[name], harness, udir, server)
        if (udir / SERVER_LOG).is_file():  # a unit served on CPU: what share of replies an agent could act on
            fmt = run_cfg.action_format if run_cfg is not None else "tool_calls"
            results[key]["actions"] = action_rate(udir / SERVER_LOG, fmt)
    (out / RESULTS_FILE).write_text(json.dumps(results, indent=2))
    return results


def action_rate(server_log: Path, action_format: str) -> dict[str, Any]:
    """How many of the model's replies (SERVER_LOG, one JSON line a call) an agent could act on: exactly one
    ```bash block (action_format=text) or at least one tool call; a rate a small model registers below 1."""
    rows = [json.loads(x) for x in server_log.read_text().splitlines() if x.strip()] if server_log.is_file() else []
    rows = [r for r in rows if "completion_tokens" in r]
    ok = sum((r.get("bash_blocks") == 1) if action_format == "text" else bool(r.get("tool_calls")) for r in rows)
    return {"replies": len(rows), "parseable": ok, "rate": ok / len(rows) if rows else None, "format": action_format}


def exit_status(results: dict[str, dict[str, Any]]) -> int:
    """The exit status of a SWE-bench run or collection: 1 when a unit that ran has a failed step, a missing or
    unreadable report, or graded nothing (rate null), else 0. A pending unit (none of its steps has run yet)
    fails nothing: collecting a run still in the queue says so in its results, not as an error."""
    return (
        1 if any((r.get("failures") or r.get("rate") is None) and not r.get("pending") for r in results.values()) else 0
    )


def _unit_result(key: str, bench: Benchmark, harness: str, udir: Path, server: str | None) -> dict[str, Any]:
    """One unit's counts from its grader's report, its failed steps with their cause, and flags."""
    asked = read_instances(udir / INSTANCES)
    failures = step_failures(udir, server)
    result: dict[str, Any] | None = None
    try:
        result = _grader_report(
            bench, udir, bench.name if harness == "mini-swe-agent" else f"{bench.name}-{harness}", asked
        )
    except (ValueError, json.JSONDecodeError) as e:
        failures.append({"step": "collect", "cause": f"unreadable report: {e}"})
    if result is None:
        pending = not failures and not any((udir / f"{s}.rc").is_file() for s in STEPS)  # nor a server
        if not failures:
            why = " (not run yet)" if pending else ""
            failures.append({"step": "grade", "cause": f"no grading report in {udir / 'grading'}{why}"})
        result = {"resolved": 0, "total": len(asked) if asked is not None else 0, "rate": None}
        if pending:
            result["pending"] = True
    if asked is not None:
        result["asked"] = len(asked)
        if result["total"] != len(asked):
            log.warning(
                "swebench %s: the report covers %d instances, %d were asked for", key, result["total"], len(asked)
            )
    empty = result.get("empty_patch", 0)
    if result.get("total") and empty / result["total"] > EMPTY_PATCH_FLAG:  # e.g. the server died mid-run
        result["flag"] = f"mostly empty patches: {empty} of {result['total']}"
        log.warning("swebench %s: %s (did the model server stop?)", key, result["flag"])
    if failures:
        result["failures"] = failures
        log.error("swebench %s: %s", key, "; ".join(f"{f['step']}: {f['cause']}" for f in failures))
    return result


def _grader_report(bench: Benchmark, udir: Path, run_name: str, asked: list[str] | None) -> dict[str, Any] | None:
    """The counts in the unit's grading report (each grader writes its own format); None when there is none."""
    grading = udir / "grading"
    if bench.grader == "swebench":
        reports = sorted(grading.glob(f"*.midtrain-{run_name}.json")) if grading.is_dir() else []
        return parse_harness_report(reports[-1]) if reports else None
    if bench.grader == "pier":
        from midtrain.eval.deepswe import JOB, parse_trials

        return parse_trials(udir / "jobs" / JOB, asked) if (udir / "jobs" / JOB).is_dir() else None
    if (grading / "eval_results.json").exists():
        return parse_pro_results(grading / "eval_results.json", udir / "preds.jsonl", asked)
    return None


if __name__ == "__main__":  # a run.sh written before its steps moved: refused, never a silent no-op
    raise SystemExit(
        "python -m midtrain.eval.swebench: the generated scripts' steps are python -m midtrain.eval.swebench_steps "
        "now; write the run again with midtrain eval swebench"
    )
