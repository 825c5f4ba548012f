"""Evaluate a checkpoint.

  proxy     held-out loss per source on validation shards and the long-context code retrieval probe, on a
            midtrain run/checkpoint directory or an HF model directory; writes OUTPUT/proxy_results.json.
  lm-eval   an lm-evaluation-harness run (code and long-context tasks) on the checkpoint's HF export (made
            under OUTPUT/hf for a midtrain checkpoint); writes OUTPUT/lm_eval_results.json.
  swebench  for an exported HF checkpoint, write the cluster run under OUTPUT: a vLLM server, the agent
            harnesses (harnesses=[mini-swe-agent,swe-agent,openhands]: mini-swe-agent, SWE-agent, OpenHands;
            default mini-swe-agent) on benchmarks=[verified,multilingual,pro,deepswe] (SWE-bench Verified /
            Multilingual / Pro; DeepSWE through Pier), and the graders; --run executes it here (GPUs + Docker),
            --collect reads finished graders' reports into OUTPUT/swebench_results.json (run.sh does too).
            Exit status of --run, --collect and a local run: 1 when a benchmark that ran has a failed step, a
            missing or unreadable report, or graded nothing; a run still queued (no step ran) is pending, 0.
            benchmarks=[local,local_oracle] runs the embedded CPU task set here instead: the checkpoint
            served on CPU, and an oracle endpoint (gold patches) as the plumbing check.

key=value overrides (anywhere on the line) set the eval's config (ProxyConfig, LmEvalConfig or SweBenchConfig fields).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from midtrain.eval.benchmarks import BENCHMARKS
from midtrain.eval.config import LmEvalConfig, ProxyConfig, SweBenchConfig
from midtrain.eval.local_run import run_local
from midtrain.eval.swebench_plan import write_run
from midtrain.eval.swebench_results import collect_results, exit_status
from midtrain.launch.site import load_site

EPILOG = """examples:
  midtrain eval proxy --checkpoint .demo/runs/demo_tiny --output runs/proxy/mid shards=.demo/shards \\
      retrieval.repos=.demo/prep/repos retrieval.lengths=[512,1024,2048] max_sequences=4
  midtrain eval lm-eval --checkpoint .demo/runs/demo_tiny --output runs/lm_eval/mid limit=4
  midtrain eval lm-eval --checkpoint runs/p/midtrained/sft/hf --output out/lm_eval device=cuda \
      tasks=[humaneval,mbpp] allow_code_execution=true
  midtrain eval swebench --checkpoint runs/p/midtrained/sft/hf --output runs/p/midtrained/swebench \\
      benchmarks=[verified] instance_slice=0:50 max_steps=100 max_context=4096 max_output_tokens=1024
  midtrain eval swebench --collect --output runs/p/midtrained/swebench
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("eval", choices=["proxy", "lm-eval", "swebench"], help="which eval")
    p.add_argument("--checkpoint", help="midtrain run/checkpoint dir or HF model dir (swebench: HF dir)")
    p.add_argument("--output", required=True, help="where results (and for swebench, the run) go")
    p.add_argument("--run", action="store_true", help="swebench: execute the generated run.sh here")
    p.add_argument("--collect", action="store_true", help="swebench: only collect the graders' reports")
    p.add_argument("--site", help="swebench: site config for swebench.sbatch (default: $MIDTRAIN_SITE)")
    p.add_argument(
        "--site-set",
        action="append",
        default=[],
        metavar="key=value",
        help="swebench: override a site config field (repeatable)",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="eval config overrides")


def run(args: argparse.Namespace) -> int:

    if args.eval == "proxy":
        # lazy: loads torch only when this runs
        from midtrain.eval.proxy import run_proxy

        cfg = ProxyConfig().apply_overrides(args.overrides).validate()
        if not args.checkpoint:
            print("midtrain eval proxy: --checkpoint is required", file=sys.stderr)
            return 2
        if not cfg.shards and not cfg.retrieval.repos:
            print("midtrain eval proxy: nothing to do: set shards=DIR and/or retrieval.repos=DIR", file=sys.stderr)
            return 2
        run_proxy(args.checkpoint, cfg, args.output)
        print(f"{args.output}/proxy_results.json")
        return 0

    if args.eval == "lm-eval":
        # lazy: loads torch only when this runs
        from midtrain.eval.lm_eval_job import run_lm_eval

        lm_cfg = LmEvalConfig().apply_overrides(args.overrides).validate()
        if not args.checkpoint:
            print("midtrain eval lm-eval: --checkpoint is required", file=sys.stderr)
            return 2
        run_lm_eval(args.checkpoint, lm_cfg, args.output)
        print(f"{args.output}/lm_eval_results.json")
        return 0

    if args.collect:
        results = collect_results(args.output)
        print(json.dumps(results, indent=2))
        return exit_status(results)
    swe = SweBenchConfig().apply_overrides(args.overrides).validate()
    if all(BENCHMARKS[b].local for b in swe.benchmarks):  # the embedded CPU tasks: run here, nothing to submit
        results = run_local(swe, args.checkpoint, args.output)
        print(json.dumps(results, indent=2))
        return exit_status(results)
    # lazy: loads torch only when this runs
    from midtrain.eval.scoring import is_hf_dir

    if not args.checkpoint or not is_hf_dir(args.checkpoint):
        print(
            f"midtrain eval swebench: --checkpoint must be a Hugging Face model directory (config.json), got "
            f"{args.checkpoint!r}; the SFT probe writes one to OUTPUT/hf",
            file=sys.stderr,
        )
        return 2

    files = write_run(swe, args.checkpoint, args.output, load_site(args.site, args.site_set))
    print(
        f"wrote {len(files)} files under {args.output}; run it with: sbatch {files['sbatch']}  (or bash {files['run']})"
    )
    if args.run:
        return subprocess.call(["bash", str(files["run"])])
    return 0
