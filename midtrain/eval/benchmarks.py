"""The benchmarks a SWE-bench run can ask for (``midtrain eval swebench benchmarks=[NAME]``), one spec each.

A :class:`Benchmark` holds everything decided per benchmark: its dataset, where its repository lives in the
instance image, the agent harnesses that can run it, its grader (a :class:`midtrain.eval.graders.Grader`: the
grade step and the reading of its report), its name in the report and whether the default run includes it.
The config, the run's scripts, the collection, the report and the recipes read :data:`BENCHMARKS`; a new
benchmark is a new entry here (and a grader class when none of the existing ones grades it).
"""

from __future__ import annotations

from dataclasses import dataclass

from midtrain.eval.graders import Grader, PierGrader, ProGrader, SwebenchHarness

HARNESSES = ("mini-swe-agent", "swe-agent", "openhands")  # agent harnesses a SWE-bench run can use
# Scale's per-instance images set ENTRYPOINT ["/bin/bash"]: mini-swe-agent's `docker run IMAGE sleep 2h` would
# run `bash sleep 2h` and exit; an empty --entrypoint restores the plain command.
PRO_DOCKER_RUN_ARGS = ("--rm", "--entrypoint", "")
PIER_PROXY_PORTS = (80, 443)  # Safe_ports of Pier's squid egress proxy (pier/environments/agent_setup.py)


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str  # its name in the report
    dataset: str  # Hugging Face dataset id ('' = the embedded tasks); the split is the config's
    grader: Grader
    workdir: str = "/testbed"  # where the repository lives inside the instance image
    default: bool = False  # in the default SweBenchConfig.benchmarks
    harnesses: tuple[str, ...] = HARNESSES  # the agent harnesses that can run it
    harness_note: str = ""  # the warning when a harness asked for cannot run it ('' = skipped silently)
    # the swebench_steps step that writes its rows as a local dataset the agent reads (fields renamed or built)
    prepare: str | None = None
    swe_agent_subset: str | None = None  # SWE-agent's subset name; None = its prepared rows, given as a file
    docker_run_args: tuple[str, ...] = ()  # mini-swe-agent's `docker run` arguments for its images
    server_host: str | None = None  # vLLM --host: its agents call the server from outside this node's loopback
    ports: tuple[int, ...] = ()  # the only server ports its agents can reach (() = any)
    ports_why: str = ""  # why, in the config error
    local: bool = False  # the embedded CPU task set, run here (midtrain.eval.local_run), not a cluster job
    oracle: bool = False  # local: answered by the oracle endpoint (gold patches), not the checkpoint


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "verified",
            "SWE-bench Verified",
            "SWE-bench/SWE-bench_Verified",
            SwebenchHarness(),
            default=True,
            swe_agent_subset="verified",
        ),
        Benchmark(
            "multilingual",
            "SWE-bench Multilingual",
            "SWE-bench/SWE-bench_Multilingual",
            SwebenchHarness(),
            default=True,
            swe_agent_subset="multilingual",
        ),
        Benchmark(
            # the swebench package has no specs for Pro's repositories: Scale's own grader
            "pro",
            "SWE-bench Pro",
            "ScaleAI/SWE-bench_Pro",
            ProGrader(),
            "/app",
            default=True,
            harnesses=("mini-swe-agent", "swe-agent"),  # OpenHands has no Pro
            prepare="prepare-pro",
            docker_run_args=PRO_DOCKER_RUN_ARGS,
        ),
        Benchmark(
            # long-horizon, opt-in: Harbor tasks run and graded by Pier (midtrain.eval.deepswe), mini-swe-agent
            # inside each task's sandbox, calling the server from its container
            "deepswe",
            "DeepSWE",
            "datacurve-ai/deep-swe",
            PierGrader(),
            "/app",
            harnesses=("mini-swe-agent",),
            harness_note="Pier drives mini-swe-agent only",
            server_host="0.0.0.0",
            # its tasks declare network_mode = "no-network": Pier (0.3.1) then sends the agent's calls through a
            # squid proxy that allows ports 80 and 443 only, so a server on 8000 refuses every call and each
            # trial reads as a clean failure (reward 0, no error)
            ports=PIER_PROXY_PORTS,
            ports_why="Pier's egress proxy for no-network tasks",
        ),
        # the embedded CPU task set (midtrain.eval.local_run), graded into the harness's report format
        Benchmark("local", "Embedded CPU tasks (midtrain.eval.local_run)", "", SwebenchHarness(), local=True),
        Benchmark(
            "local_oracle",
            "Embedded CPU tasks, oracle endpoint (gold patches: the plumbing check)",
            "",
            SwebenchHarness(),
            local=True,
            oracle=True,
        ),
    )
}
