"""Agent harnesses besides mini-swe-agent for the SWE-bench run: SWE-agent and OpenHands, same server, same preds.

All harnesses talk to the one vLLM server of the run (OpenAI-compatible, ``hosted_vllm/<served name>`` for
litellm) with the same step limit, temperature and output cap, and end in the harness-format predictions
(``preds.jsonl``) the graders read, so a result differs only by the harness.

Neither SWE-agent nor OpenHands installs here (SWE-agent is not on the package index; the OpenHands packages
need a newer Python), so their configs are checked against their documented schemas, written down below
from their pydantic models (SWE-agent's ``RunBatchConfig``/``GenericAPIModelConfig``/``SWEBenchInstances``,
which forbid unknown keys; OpenHands' ``config.toml`` sections ``[core]``, ``[llm.<name>]``, ``[sandbox]``).
mini-swe-agent's config is built and checked by mini-swe-agent's own loader (midtrain.eval.swebench_agents).

DeepSWE (long-horizon, Harbor tasks) is its own entry, run and graded by Pier (midtrain.eval.deepswe) with
mini-swe-agent only; R2E-Gym-style sets run in their own images and reward scripts, outside this generator.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from midtrain.eval.predictions import complete_predictions, write_predictions


class HarnessConfigError(ValueError):
    """A generated harness config does not fit that harness's documented schema."""


# -- SWE-agent -----------------------------------------------------------------------------------------
_SWE_AGENT_MODEL = {
    "name": str,
    "per_instance_cost_limit": float,
    "total_cost_limit": float,
    "per_instance_call_limit": int,
    "temperature": float,
    "top_p": (float, type(None)),
    "api_base": (str, type(None)),
    "api_version": (str, type(None)),
    "api_key": (str, type(None)),
    "stop": list,
    "completion_kwargs": dict,
    "convert_system_to_user": bool,
    "retry": dict,
    "delay": float,
    "fallbacks": list,
    "choose_api_key_by_thread": bool,
    "max_input_tokens": (int, type(None)),
    "max_output_tokens": (int, type(None)),
}
_SWE_AGENT_INSTANCES: dict[str, dict[str, Any]] = {
    "swe_bench": {
        "type": str,
        "subset": str,
        "path_override": (str, type(None)),
        "split": str,
        "deployment": dict,
        "filter": str,
        "slice": str,
        "shuffle": bool,
        "evaluate": bool,
    },
    "file": {
        "type": str,
        "path": str,
        "filter": str,
        "slice": str,
        "shuffle": bool,
        "deployment": dict,
        "simple": bool,
    },
}
_SWE_AGENT_TOP = {
    "instances": dict,
    "agent": dict,
    "output_dir": str,
    "suffix": str,
    "raise_exceptions": bool,
    "redo_existing": bool,
    "env_var_path": (str, type(None)),
    "num_workers": int,
    "random_delay_multiplier": float,
    "progress_bar": bool,
}


def _check_keys(section: dict[str, Any], schema: dict[str, Any], where: str) -> None:
    for key, value in section.items():
        if key not in schema:
            raise HarnessConfigError(f"{where}.{key}: not a field of the documented schema ({sorted(schema)})")
        tp = schema[key]
        ok = isinstance(value, tp) or (tp is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            raise HarnessConfigError(f"{where}.{key}: expected {tp}, got {value!r}")


def check_swe_agent(cfg: dict[str, Any]) -> None:
    """SWE-agent's run-batch config schema (pydantic, extra='forbid'): keys and types of what we set."""
    _check_keys(cfg, _SWE_AGENT_TOP, "swe-agent")
    model = (cfg.get("agent") or {}).get("model")
    if not isinstance(model, dict) or "name" not in model:
        raise HarnessConfigError("swe-agent.agent.model.name: required")
    _check_keys(model, _SWE_AGENT_MODEL, "swe-agent.agent.model")
    inst = cfg.get("instances") or {}
    kind = inst.get("type")
    if kind not in _SWE_AGENT_INSTANCES:
        raise HarnessConfigError(f"swe-agent.instances.type: {kind!r} is not one of {sorted(_SWE_AGENT_INSTANCES)}")
    _check_keys(inst, _SWE_AGENT_INSTANCES[kind], "swe-agent.instances")
    if kind == "swe_bench":
        if inst.get("subset") not in ("lite", "verified", "full", "multimodal", "multilingual"):
            raise HarnessConfigError(f"swe-agent.instances.subset: {inst.get('subset')!r} is not a SWE-agent subset")
        if inst.get("split") not in ("dev", "test"):
            raise HarnessConfigError(f"swe-agent.instances.split: {inst.get('split')!r} must be dev or test")
    if (inst.get("deployment") or {}).get("type") not in ("docker", "modal", "remote", "local", "dummy"):
        raise HarnessConfigError("swe-agent.instances.deployment.type: unknown deployment")


def swe_agent_config(cfg, bench, api_base: str, model: str, output_dir: str, pro_file: str | None) -> dict[str, Any]:
    """SWE-agent run-batch config over its default agent config (tools, templates): our model and limits."""
    if bench.swe_agent_subset:  # its SWEBenchInstances.subset name; Pro goes through a file
        inst: dict[str, Any] = {"type": "swe_bench", "subset": bench.swe_agent_subset, "split": cfg.split}
    else:  # Pro: the prepared local dataset (image_name set per instance), repo at /app
        inst = {"type": "file", "path": pro_file or ""}
    inst["deployment"] = {"type": "docker"}
    if cfg.instance_slice:
        inst["slice"] = cfg.instance_slice
    out = {
        "instances": inst,
        "num_workers": cfg.agent_workers,
        "output_dir": output_dir,
        "agent": {
            "model": {
                "name": model,
                "api_base": api_base,
                "api_key": "EMPTY",
                "per_instance_cost_limit": 0.0,
                "total_cost_limit": 0.0,  # local model: steps bound it
                "per_instance_call_limit": cfg.max_steps,
                "temperature": cfg.temperature,
                "max_input_tokens": cfg.max_context,
                "max_output_tokens": cfg.max_output_tokens,
            }
        },
    }
    check_swe_agent(out)
    return out


# -- OpenHands -----------------------------------------------------------------------------------------
_OH_CORE = {
    "max_iterations": int,
    "max_budget_per_task": (int, float),
    "runtime": str,
    "default_agent": str,
    "workspace_base": str,
    "save_trajectory_path": str,
    "enable_browser": bool,
}
_OH_LLM = {
    "model": str,
    "base_url": str,
    "api_key": str,
    "temperature": (int, float),
    "top_p": (int, float),
    "max_output_tokens": int,
    "max_input_tokens": int,
    "native_tool_calling": bool,
    "num_retries": int,
    "custom_llm_provider": str,
    "input_cost_per_token": (int, float),
    "output_cost_per_token": (int, float),
    "timeout": int,
    "drop_params": bool,
}
_OH_SANDBOX = {
    "timeout": int,
    "use_host_network": bool,
    "enable_auto_lint": bool,
    "base_container_image": str,
    "runtime_container_image": str,
    "keep_runtime_alive": bool,
}


def check_openhands(text: str, llm_name: str) -> dict[str, Any]:
    """OpenHands config.toml: parses as TOML; [core], [llm.<name>], [sandbox] keys and types as documented."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise HarnessConfigError(f"openhands config.toml: not TOML: {e}") from None
    for section in data:
        if section not in ("core", "llm", "sandbox"):
            raise HarnessConfigError(f"openhands.{section}: section not generated by midtrain")
    _check_keys(data.get("core", {}), _OH_CORE, "openhands.core")
    _check_keys(data.get("sandbox", {}), _OH_SANDBOX, "openhands.sandbox")
    llm = data.get("llm", {}).get(llm_name)
    if not isinstance(llm, dict) or "model" not in llm:
        raise HarnessConfigError(
            f"openhands.llm.{llm_name}.model: required (the run passes --llm-config llm.{llm_name})"
        )
    _check_keys(llm, _OH_LLM, f"openhands.llm.{llm_name}")
    return data


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def openhands_config(cfg, api_base: str, model: str, llm_name: str = "midtrain") -> str:
    """config.toml for OpenHands' SWE-bench runner (evaluation/benchmarks/swe_bench/run_infer.py)."""
    sections = {
        "core": {
            "max_iterations": cfg.max_steps,
            "max_budget_per_task": 0.0,
            "runtime": "docker",
            "enable_browser": False,
        },
        f"llm.{llm_name}": {
            "model": model,
            "base_url": api_base,
            "api_key": "EMPTY",
            "temperature": cfg.temperature,
            "max_output_tokens": cfg.max_output_tokens,
            "max_input_tokens": cfg.max_context,
            "native_tool_calling": True,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
        },
        "sandbox": {"timeout": 300, "use_host_network": True},  # reaches the vLLM server on localhost
    }
    text = "\n".join(
        f"[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items()) for name, keys in sections.items()
    )
    check_openhands(text, llm_name)
    return text


def openhands_limit(instance_slice: str) -> int | None:
    """OpenHands' runner takes the first N instances (--eval-n-limit): a slice must be ':N' or '0:N'."""
    if not instance_slice:
        return None
    start, _, stop = instance_slice.partition(":")
    if start not in ("", "0") or not stop.isdigit():
        raise HarnessConfigError(
            f"instance_slice={instance_slice!r}: OpenHands runs the first N instances only (use ':N' or '0:N')"
        )
    return int(stop)


def openhands_predictions(
    output_dir: str | Path, out_jsonl: str | Path, instances: list[str] | None = None
) -> dict[str, int]:
    """OpenHands' output.jsonl (instance_id, test_result.git_patch) under OUTPUT_DIR -> the harness's JSONL;
    with ``instances`` (the ids asked for) each one without a prediction gets an empty patch."""
    found = sorted(Path(output_dir).rglob("output.jsonl"))
    counts = {"predictions": 0, "empty_patch": 0, "dropped_unreadable": 0}
    rows = []
    for path in found:
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
                iid = row["instance_id"]
            except (json.JSONDecodeError, KeyError, TypeError):
                counts["dropped_unreadable"] += 1
                continue
            patch = ((row.get("test_result") or {}).get("git_patch")) or ""
            rows.append({"instance_id": iid, "model_name_or_path": "midtrain-openhands", "model_patch": patch})
    return write_predictions(complete_predictions(rows, instances, counts), out_jsonl, counts)
