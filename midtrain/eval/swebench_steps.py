"""The steps the generated SWE-bench scripts run inside the job: ``python -m midtrain.eval.swebench_steps STEP ...``.

run.sh, agent.sh and grade.sh (written by :func:`midtrain.eval.swebench_plan.write_run`) call these between the tools
they drive: list the instances asked for, convert each agent's predictions for its grader, prepare SWE-bench
Pro's rows, stamp the output (claim) and write Pier's agent config. This is not a user command: a user runs
``midtrain eval swebench``, which writes the scripts, runs them (``--run``) and collects the results
(``--collect``, which run.sh calls too).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import yaml

from midtrain.eval.deepswe import agent_config as pier_config
from midtrain.eval.deepswe import read_tasks
from midtrain.eval.harnesses import openhands_predictions
from midtrain.eval.predictions import read_instances
from midtrain.eval.swebench_instances import convert_predictions, write_instances, write_pro_rows
from midtrain.eval.swebench_stamp import claim_run


def load_rows(dataset: str, split: str) -> list[dict[str, Any]]:
    """A dataset's rows in the agent's order: DATASET/SPLIT.jsonl when it is a local dir (the prepared Pro set),
    else ``datasets.load_dataset`` as mini-swe-agent loads it (a hub id, or a local dataset directory)."""
    local = Path(dataset) / f"{split}.jsonl"
    if next(Path(dataset).glob("*/task.toml"), None) is not None:  # Harbor tasks (DeepSWE)
        return read_tasks(dataset)
    if local.is_file():
        return [json.loads(line) for line in local.read_text().splitlines() if line.strip()]
    from datasets import load_dataset

    return [dict(r) for r in load_dataset(dataset, split=split)]


def pro_patches(preds_jsonl: str | Path, out_json: str | Path) -> int:
    """Harness JSONL -> the list Scale's Pro grader reads ([{instance_id, patch, prefix}])."""
    rows = [json.loads(line) for line in Path(preds_jsonl).read_text().splitlines() if line.strip()]
    Path(out_json).write_text(
        json.dumps([{"instance_id": r["instance_id"], "patch": r["model_patch"], "prefix": ""} for r in rows])
    )
    return len(rows)


def prepare_pro(dataset: str, split: str, out_dir: str | Path) -> int:
    """Write SWE-bench Pro as a local dataset dir (SPLIT.jsonl) for the agent (cluster, needs the hub)."""
    from datasets import load_dataset

    return write_pro_rows([dict(r) for r in load_dataset(dataset, split=split)], out_dir, split)


# step: (what it does, its positional arguments); the predictions converters also take --instances
STEPS = {
    "instances": ("list the instance ids an agent is asked to run", ["dataset", "split", "slice", "out"]),
    "predictions": ("mini-swe-agent's or SWE-agent's preds.json -> the harness's JSONL", ["preds_json", "out_jsonl"]),
    "openhands-predictions": ("OpenHands' output.jsonl -> the harness's JSONL", ["output_dir", "out_jsonl"]),
    "pro-patches": ("the harness's JSONL -> the patches Scale's Pro grader reads", ["preds_jsonl", "out_json"]),
    "prepare-pro": ("SWE-bench Pro as a local dataset dir for the agent", ["dataset", "split", "out_dir"]),
    "claim": ("remove outputs of another checkpoint or settings; stamp OUTPUT", ["output", "checkpoint"]),
    "deepswe-config": (
        "Pier's mini-swe-agent layer from agent.yaml and the server URL",
        ["agent_yaml", "api_base", "out"],
    ),
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m midtrain.eval.swebench_steps", description=__doc__)
    sub = p.add_subparsers(dest="step", required=True)
    for name, (what, positional) in STEPS.items():
        a = sub.add_parser(name, help=what)
        for arg in positional:
            a.add_argument(arg)
        if name.endswith("predictions"):
            a.add_argument("--instances", help="instances.txt: give each id without a prediction an empty patch")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.step == "instances":
        print(write_instances(load_rows(args.dataset, args.split), args.slice, args.out))
    elif args.step == "predictions":
        print(json.dumps(convert_predictions(args.preds_json, args.out_jsonl, read_instances(args.instances))))
    elif args.step == "openhands-predictions":
        print(json.dumps(openhands_predictions(args.output_dir, args.out_jsonl, read_instances(args.instances))))
    elif args.step == "pro-patches":
        print(pro_patches(args.preds_jsonl, args.out_json))
    elif args.step == "prepare-pro":
        print(prepare_pro(args.dataset, args.split, args.out_dir))
    elif args.step == "claim":
        claim_run(args.output, args.checkpoint)
    else:
        conf = pier_config(yaml.safe_load(Path(args.agent_yaml).read_text()), args.api_base)
        Path(args.out).write_text(yaml.safe_dump(conf, sort_keys=False))
        print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
