"""The agent side of a SWE-bench unit: mini-swe-agent's config (our model endpoint, limits and environment)
and the agent steps of each harness, with the converter of its predictions; DeepSWE's Pier unit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from midtrain.eval import deepswe
from midtrain.eval.harnesses import openhands_config, openhands_limit, swe_agent_config
from midtrain.eval.swebench_scripts import ENV, INSTANCES, STEP, BlockDumper, script, sh

if TYPE_CHECKING:
    from midtrain.eval.benchmarks import Benchmark
    from midtrain.eval.config import SweBenchConfig

# mini-swe-agent's SWE-bench config sets BASH_ENV=/root/.bashrc (activates the testbed env). On images whose
# .bashrc errors (SWE-bench issue 638: a missing conda.sh) that error precedes every output, so the submit
# line is never first and the agent cannot submit. The shell sources it with its messages discarded instead.
BASHRC = "/root/.bashrc"
DOCKER_SHELL = {
    "interpreter": ["bash", "-c", '[ -f "$MIDTRAIN_BASHRC" ] && . "$MIDTRAIN_BASHRC" >/dev/null 2>&1; eval "$0"']
}


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
        if bench.docker_run_args:
            ours["environment"]["run_args"] = list(bench.docker_run_args)
    merged = recursive_merge(base, ours)
    if bench.workdir != "/testbed":  # the builtin prompt names SWE-bench's checkout dir
        agent = merged.get("agent", {})
        for key in ("instance_template", "system_template"):
            if isinstance(agent.get(key), str):
                agent[key] = agent[key].replace("/testbed", bench.workdir)
    return merged


def mini_swe_agent(cfg: SweBenchConfig, bench: Benchmark, udir: Path, subset: str) -> tuple[list[str], str]:
    """mini-swe-agent's batch run over SUBSET with UDIR/agent.yaml (written here), and its predictions
    converter (run by grade.sh, so a crashed agent still leaves its finished instances graded)."""
    (udir / "agent.yaml").write_text(
        yaml.dump(agent_config(cfg, bench), Dumper=BlockDumper, sort_keys=False, width=120, allow_unicode=True)
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
    return [sh(*agent)], f"{STEP} predictions {sh(str(udir / 'agent' / 'preds.json'))}"


def deepswe_unit(cfg: SweBenchConfig, bench: Benchmark, udir: Path) -> dict[str, Path]:
    """DeepSWE's agent.sh (Pier's own Python >= 3.12 environment, the task checkout, `pier run` against our
    server: agent and verifier) and grade.sh (its trials -> results)."""
    (udir / "agent.yaml").write_text(yaml.safe_dump(agent_config(cfg, bench), sort_keys=False))
    tasks = '"$DEEPSWE_DIR/tasks"'
    lines = [
        ENV,
        "# Harbor and Pier need Python >= 3.12: their own environment, the project's stays as it is",
        f"PIER_ENV={sh(str(udir / 'pier-env'))}",
        'if [ ! -x "$PIER_ENV/bin/pier" ]; then',
        f'  if command -v uv >/dev/null; then uv venv --python 3.12 "$PIER_ENV" && '
        f'uv pip install --python "$PIER_ENV/bin/python" {sh(deepswe.PIER)}',
        f'  else "${{PIER_PYTHON:-python3.12}}" -m venv "$PIER_ENV" && '
        f'"$PIER_ENV/bin/pip" install {sh(deepswe.PIER)}; fi',
        "fi",
        f"DEEPSWE_DIR=${{DEEPSWE_DIR:-{udir / 'deep-swe'}}}  # a checkout of {deepswe.REPO}",
        f'if [ ! -d {tasks} ]; then git clone https://github.com/{deepswe.REPO} "$DEEPSWE_DIR" && '
        f'git -C "$DEEPSWE_DIR" checkout {deepswe.REF}; fi',
        f"{STEP} instances {tasks} {sh(cfg.split, cfg.instance_slice or ':', str(udir / INSTANCES))}",
        "# the agent runs inside each task's container: it reaches the server at this node's address",
        "HOST=${MIDTRAIN_SERVER_HOST:-$(hostname -I | awk '{print $1}')}",
        f"{STEP} deepswe-config {sh(str(udir / 'agent.yaml'))} "
        f'"http://$HOST:{cfg.port}/v1" {sh(str(udir / "pier_agent.yaml"))}',
        "INCLUDE=()",
        f'{"" if cfg.instance_slice else "# "}while read -r t; do INCLUDE+=(-i "*$t"); done < '
        f"{sh(str(udir / INSTANCES))}",
        '"$PIER_ENV/bin/pier" run -p '
        + tasks
        + " "
        + sh(
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
        f"{key}/agent": script(udir / "agent.sh", "\n".join(lines)),
        f"{key}/grade": script(
            udir / "grade.sh",
            "\n".join(
                [
                    ENV,
                    "# Pier graded every trial during the agent step; here its results are only checked",
                    f"ls {sh(str(udir / 'jobs' / deepswe.JOB))}/*/result.json >/dev/null",
                ]
            ),
        ),
    }


def harness_agent(
    cfg: SweBenchConfig, bench: Benchmark, hdir: Path, harness: str, pro_dataset: str | None
) -> tuple[list[str], str]:
    """SWE-agent's or OpenHands' agent step (its config checked against its schema) and its predictions
    converter (run by grade.sh, so a crashed agent still leaves its finished instances graded)."""
    api_base = f"http://localhost:{cfg.port}/v1"
    if harness == "swe-agent":
        pro_file = str(Path(pro_dataset) / f"{cfg.split}.jsonl") if pro_dataset else None
        conf = swe_agent_config(cfg, bench, api_base, model_id(cfg), str(hdir / "agent"), pro_file)
        (hdir / "swe_agent.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
        return (
            [
                'sweagent run-batch --config "${SWE_AGENT_DIR:?set SWE_AGENT_DIR to a SWE-agent checkout}'
                '/config/default.yaml" ' + sh("--config", str(hdir / "swe_agent.yaml"))
            ],
            f"{STEP} predictions {sh(str(hdir / 'agent' / 'preds.json'))}",
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
        ['cd "${OPENHANDS_DIR:?set OPENHANDS_DIR to an OpenHands checkout}"', sh(*run)],
        f"{STEP} openhands-predictions {sh(str(hdir / 'agent'))}",
    )
