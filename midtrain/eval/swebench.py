"""SWE-bench for one exported checkpoint, in files named for their concerns: benchmarks (the registry),
swebench_plan (the units and the run's scripts), swebench_agents, graders, swebench_slurm, swebench_stamp,
swebench_instances and swebench_results (the collection). This module only refuses the old step entry point."""

if __name__ == "__main__":  # a run.sh written before its steps moved: refused, never a silent no-op
    raise SystemExit(
        "python -m midtrain.eval.swebench: the generated scripts' steps are python -m midtrain.eval.swebench_steps "
        "now; write the run again with midtrain eval swebench"
    )
