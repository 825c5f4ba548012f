"""Configs of the evals a protocol runs: proxy metrics (held-out loss, retrieval probe) and SWE-bench."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from midtrain.config import Config, require
from midtrain.eval.benchmarks import BENCHMARKS, HARNESSES

RETRIEVAL_TASKS = ("function", "file_constant")
if TYPE_CHECKING:
    BenchmarkName = str
else:  # the registry's names: the config loader checks them and docs/reference.md lists them
    BenchmarkName = Literal[tuple(BENCHMARKS)]


@dataclass
class RetrievalConfig(Config):
    """Long-context retrieval in code: a needle planted at each depth of a packed repository of each length."""

    repos: str | None = None  # `midtrain prep repos` output dir (haystack material); None = skip the probe
    lengths: list[int] = field(default_factory=lambda: [512, 1024, 2048])  # context lengths in tokens
    depths: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])  # needle position 0..1
    tasks: list[str] = field(default_factory=lambda: list(RETRIEVAL_TASKS))
    samples: int = 4  # needles per (task, length, depth) cell
    seed: int = 0

    def check(self) -> None:
        require(
            len(self.lengths) > 0 and all(n >= 128 for n in self.lengths),
            "lengths",
            "needs at least one context length, each >= 128 tokens",
        )
        require(
            len(self.depths) > 0 and all(0.0 <= d <= 1.0 for d in self.depths),
            "depths",
            "needs at least one depth, each in [0, 1]",
        )
        bad = [t for t in self.tasks if t not in RETRIEVAL_TASKS]
        require(not bad and len(self.tasks) > 0, "tasks", f"unknown {bad}; choose from {list(RETRIEVAL_TASKS)}")
        require(self.samples >= 1, "samples", "must be >= 1")


@dataclass
class ProxyConfig(Config):
    """Base-model proxy metrics: held-out loss per source on validation shards + the retrieval probe."""

    shards: str | None = None  # a `midtrain pack` output dir; its 'valid' split is scored per source
    max_sequences: int | None = 64  # cap on validation sequences scored (None = all)
    tokenizer: str | None = None  # for the retrieval probe; None = the checkpoint's (HF dir) or the default
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)

    def check(self) -> None:
        require(self.max_sequences is None or self.max_sequences > 0, "max_sequences", "must be positive or null")


@dataclass
class LmEvalConfig(Config):
    """An lm-evaluation-harness run on the checkpoint's HF export (code and long-context tasks)."""

    # lm-eval task names; midtrain_code_mc is the small local code task shipped with midtrain (no network)
    tasks: list[str] = field(default_factory=lambda: ["midtrain_code_mc"])
    include_path: str | None = None  # a directory of further task YAMLs
    limit: int | None = None  # documents per task (None = all)
    num_fewshot: int | None = None
    batch_size: int = 1
    device: str = "cpu"  # cpu | cuda | cuda:N
    dtype: str = "auto"
    max_length: int | None = None  # the model's context for lm-eval (long-context tasks); None = the config's
    tokenizer: str | None = None  # for the HF export of a midtrain checkpoint; None = its own
    # RULER tasks (niah_*, ruler) build haystacks of these lengths (lm-eval's task metadata max_seq_lengths)
    max_seq_lengths: list[int] = field(default_factory=list)
    # humaneval / mbpp execute model-written code: lm-eval refuses them unless this is true
    allow_code_execution: bool = False
    seed: int = 1234

    def check(self) -> None:
        require(len(self.tasks) > 0, "tasks", "name at least one lm-eval task")
        require(self.limit is None or self.limit > 0, "limit", "must be positive or null")
        require(self.batch_size >= 1, "batch_size", "must be >= 1")
        require(self.max_length is None or self.max_length > 0, "max_length", "must be positive or null")


@dataclass
class SweBenchConfig(Config):
    """One checkpoint on SWE-bench: vLLM server + mini-swe-agent + the `swebench` harness, per benchmark."""

    benchmarks: list[BenchmarkName] = field(default_factory=lambda: [n for n, b in BENCHMARKS.items() if b.default])
    split: str = "test"
    max_steps: int = 100  # agent step limit per instance
    max_context: int = 131072  # vLLM --max-model-len
    max_output_tokens: int = 8192  # per model call
    temperature: float = 0.0
    served_model_name: str = "midtrain"
    port: int = 8000
    server_wait_s: int = 1800  # run.sh fails the run when vLLM has not answered by then (weights load, compile)
    tensor_parallel: int = 8  # vLLM --tensor-parallel-size
    agent_workers: int = 16  # instances run concurrently by the agent
    grading_workers: int = 8  # swebench harness --max_workers
    instance_slice: str = ""  # e.g. '0:20' for a smoke run; '' = every instance
    environment: Literal["docker", "singularity"] = "docker"
    image_pull_timeout_s: int = 1800  # mini-swe-agent's docker pull limit (its default 120 s is short for Pro)
    agent_base: str = "swebench.yaml"  # mini-swe-agent builtin config we derive from (tool calls)
    # How the agent reads an action: "tool_calls" (agent_base; the server's <tool_call> blocks) or "text", the
    # format of mini-swe-agent's text trajectories (THOUGHT, then one ```bash block; swebench_backticks.yaml
    # with its fence renamed and the textbased model): what a probe trained on such trajectories writes.
    action_format: Literal["tool_calls", "text"] = "tool_calls"
    tool_call_parser: str = "hermes"  # vLLM parser for the chat template's <tool_call> blocks (Qwen)
    vllm_args: list[str] = field(default_factory=list)  # extra `vllm serve` flags
    # Agent harnesses run against the same server (robustness across harnesses); the first is the headline.
    harnesses: list[Literal["mini-swe-agent", "swe-agent", "openhands"]] = field(
        default_factory=lambda: ["mini-swe-agent"]
    )

    def check(self) -> None:
        require(len(self.benchmarks) > 0, "benchmarks", f"choose from {list(BENCHMARKS)}")
        local = [BENCHMARKS[b].local for b in self.benchmarks]
        require(
            all(local) or not any(local),
            "benchmarks",
            f"{[n for n, b in BENCHMARKS.items() if b.local]} run here on CPU, the others as a cluster job: "
            "ask for one kind",
        )
        require(len(set(self.benchmarks)) == len(self.benchmarks), "benchmarks", "lists a benchmark twice")
        require(self.max_steps > 0, "max_steps", "must be positive")
        require(self.max_context >= 4096, "max_context", "must be >= 4096 tokens for an agent run")
        require(0 < self.max_output_tokens < self.max_context, "max_output_tokens", "must be in (0, max_context)")
        require(self.temperature >= 0, "temperature", "must be >= 0")
        require(0 < self.port < 65536, "port", "must be a TCP port")
        for b in (BENCHMARKS[n] for n in self.benchmarks if BENCHMARKS[n].ports):  # DeepSWE: Pier's proxy
            require(
                self.port in b.ports,
                "port",
                f"{b.name}: {b.ports_why} allows ports {list(b.ports)} only; serve on one of them "
                f"(port={b.ports[0]}, where the node lets the server bind it), got {self.port}",
            )
        require(self.server_wait_s > 0, "server_wait_s", "must be positive")
        require(self.image_pull_timeout_s > 0, "image_pull_timeout_s", "must be positive")
        require(self.tensor_parallel >= 1, "tensor_parallel", "must be >= 1")
        require(self.agent_workers >= 1 and self.grading_workers >= 1, "agent_workers", "workers must be >= 1")
        require(
            len(self.harnesses) > 0 and len(set(self.harnesses)) == len(self.harnesses),
            "harnesses",
            f"name each harness once, from {list(HARNESSES)}",
        )
        require(
            self.environment == "docker" or self.harnesses == ["mini-swe-agent"],
            "harnesses",
            "SWE-agent and OpenHands run their sandboxes in Docker only (environment=docker)",
        )
