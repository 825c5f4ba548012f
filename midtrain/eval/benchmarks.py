"""The benchmarks a SWE-bench run can ask for: each one's dataset, grader and working directory."""

from __future__ import annotations

from dataclasses import dataclass


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
