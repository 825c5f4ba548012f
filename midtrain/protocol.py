"""The evaluation protocol: the same SFT probe, then the same evals, for every checkpoint.

A protocol recipe names the checkpoints to compare (baseline first), the SFT probe recipe and the evals.
:func:`protocol_steps` turns it into, per checkpoint, the ordered steps (midtrain/chains.py: a name and the
argv that follows ``midtrain`` on the command line). :func:`protocol_jobs` renders each checkpoint's steps as
an afterok chain of Slurm jobs; :func:`run_protocol` runs them here in order.
:func:`report_argv` is the final cross-checkpoint step (after every chain).

Layout under ``output``: ``<name>/sft/`` (probe run + HF export), ``<name>/proxy/``, ``<name>/lm_eval/``,
``<name>/swebench/``, ``sft_data/`` (rendered + packed traces, shared so every probe sees the identical data),
``report/``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from midtrain.chains import Chains, Runner, Step, finish, print_chains, run_chains
from midtrain.config import Config, ConfigError, require
from midtrain.eval.config import LmEvalConfig, ProxyConfig, SweBenchConfig
from midtrain.eval.results import seed_dir
from midtrain.launch.protocol_job import build_chains
from midtrain.launch.render import check_mounted
from midtrain.launch.train_job import check_layout

if TYPE_CHECKING:
    from midtrain.launch.protocol_job import ProtocolJobs
    from midtrain.launch.site import SiteConfig
    from midtrain.sft.config import SFTConfig

log = logging.getLogger(__name__)

EVALS = ("proxy", "lm_eval", "swebench")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class ProtocolConfig(Config):
    """Checkpoints to compare (name -> midtrain run/checkpoint dir or HF model dir), probe recipe, evals."""

    name: str = "protocol"
    output: str = "runs/protocol"
    checkpoints: dict[str, str] = field(default_factory=dict)
    baseline: str | None = None  # the name deltas are taken against; None = the first checkpoint
    sft_recipe: str = "sft_probe_demo"
    # Applied identically to every checkpoint's probe (e.g. a cluster path for the traces).
    sft_overrides: list[str] = field(default_factory=list)
    evals: list[Literal["proxy", "lm_eval", "swebench"]] = field(default_factory=lambda: ["proxy"])
    # Proxy metrics on the checkpoint itself (before the probe), as the paper reports them beside SWE-bench.
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    # lm-evaluation-harness tasks on the checkpoint's HF export (before the probe, like the proxy metrics)
    lm_eval: LmEvalConfig = field(default_factory=LmEvalConfig)
    swebench: SweBenchConfig = field(default_factory=SweBenchConfig)
    # Seed noise: the probe runs once per seed (train.seed and train.data.seed set to it; each seed has its own
    # shared data dir, so every checkpoint sees the same data per seed); [] = once, with the recipe's seeds.
    probe_seeds: list[int] = field(default_factory=list)
    # The retrieval probe draws its needles from proxy.retrieval.seed: one proxy run per seed ([] = once).
    proxy_seeds: list[int] = field(default_factory=list)
    report_dir: str | None = None  # None = OUTPUT/report
    notes: dict[str, str] = field(default_factory=dict)  # checkpoint name -> what it is (shown in the report)

    def check(self) -> None:
        require(len(self.checkpoints) > 0, "checkpoints", "name at least one checkpoint (name -> path)")
        for name in self.checkpoints:
            require(
                bool(_NAME.match(name)),
                "checkpoints",
                f"name '{name}' must be letters, digits, '_', '-', '.' (it becomes a directory)",
            )
        require(
            self.baseline is None or self.baseline in self.checkpoints,
            "baseline",
            f"'{self.baseline}' is not one of the checkpoints {sorted(self.checkpoints)}",
        )
        require(len(set(self.evals)) == len(self.evals), "evals", "lists an eval twice")
        require(len(set(self.probe_seeds)) == len(self.probe_seeds), "probe_seeds", "lists a seed twice")
        require(len(set(self.proxy_seeds)) == len(self.proxy_seeds), "proxy_seeds", "lists a seed twice")
        require(
            len(self.proxy_seeds) < 2 or self.proxy.retrieval.repos is not None,
            "proxy_seeds",
            "only the retrieval probe is stochastic: set proxy.retrieval.repos or give at most one seed",
        )
        for item in self.sft_overrides:
            require("=" in item, "sft_overrides", f"'{item}' is not of the form key=value")
            require(
                not item.split("=", 1)[0].strip().startswith(("train.init_from", "train.run_dir")),
                "sft_overrides",
                "the protocol sets the probe's start checkpoint and run dir itself",
            )

    def follow_overrides(self, overrides: list[str]) -> ProtocolConfig:
        return follow_output(self, overrides)

    @property
    def baseline_name(self) -> str:
        return self.baseline or next(iter(self.checkpoints))


# Paths a recipe may set beside its output; they follow an `output=` the user gives (unless set too).
FOLLOW_OUTPUT = ("report_dir",)


def follow_output(cfg: ProtocolConfig, overrides: list[str]) -> ProtocolConfig:
    """With ``output=DIR`` among the user's overrides, every output path the recipe defaulted (``report_dir``)
    is resolved under DIR (DIR/report) unless the user set it as well: two protocol runs with different
    outputs never write one report (protocol_demo's ``.demo/report`` is its default output's, not theirs)."""
    given = {item.split("=", 1)[0].strip() for item in overrides}
    if "output" in given:
        for key in FOLLOW_OUTPUT:
            if key not in given:
                setattr(cfg, key, None)
    return cfg


def _seeded(seeds: list[int]) -> list[int | None]:
    """Per seed, None for the first (it keeps the plain directory names) and the seed for each further one."""
    return [None, *seeds[1:]] if seeds else [None]


def checkpoint_dirs(cfg: ProtocolConfig, name: str) -> dict[str, Path]:
    """Where each step of checkpoint ``name`` writes."""
    root = Path(cfg.output) / name
    return {
        "root": root,
        "sft": root / "sft",
        "hf": root / "sft" / "hf",
        "proxy": root / "proxy",
        "swebench": root / "swebench",
    }


def protocol_steps(cfg: ProtocolConfig) -> Chains:
    """Per checkpoint name, the ordered steps: ``sft`` (per probe seed), then each eval in order."""
    cfg.validate()
    data_dir = str(Path(cfg.output) / "sft_data")
    steps: Chains = {}
    probe_seeds: list[int | None] = [*cfg.probe_seeds] or [None]  # None: the probe recipe's own seed
    proxy_seeds: list[int | None] = [*cfg.proxy_seeds] or [None]
    probe = [
        (suffix, [f"train.seed={seed}", f"train.data.seed={seed}"] if seed is not None else [])
        for suffix, seed in zip(_seeded(cfg.probe_seeds), probe_seeds)
    ]
    proxy = [
        (suffix, [f"retrieval.seed={seed}"] if seed is not None else [])
        for suffix, seed in zip(_seeded(cfg.proxy_seeds), proxy_seeds)
    ]
    for name, path in cfg.checkpoints.items():
        d = checkpoint_dirs(cfg, name)
        chain = []
        for suffix, seed_over in probe:
            chain.append(
                Step(
                    seed_dir("sft", suffix),
                    [
                        "sft",
                        cfg.sft_recipe,
                        f"data_dir={seed_dir(data_dir, suffix)}",
                        *cfg.sft_overrides,
                        *seed_over,
                        "--from",
                        path,
                        "--output",
                        str(d["root"] / seed_dir("sft", suffix)),
                        # a changed checkpoint (path or content) or probe setting reruns the probe,
                        # never reuses the old number
                        "--overwrite",
                    ],
                )
            )
        for ev in cfg.evals:
            if ev == "proxy":
                for suffix, seed_over in proxy:
                    # further seeds only redraw the retrieval needles; held-out loss is deterministic
                    base = cfg.proxy if suffix is None else cfg.proxy.replace(shards=None)
                    chain.append(
                        Step(
                            seed_dir("eval_proxy", suffix),
                            [
                                "eval",
                                "proxy",
                                *base.to_overrides(),
                                *seed_over,
                                "--checkpoint",
                                path,
                                "--output",
                                str(d["root"] / seed_dir("proxy", suffix)),
                            ],
                        )
                    )
            elif ev == "lm_eval":
                chain.append(
                    Step(
                        "eval_lm_eval",
                        [
                            "eval",
                            "lm-eval",
                            *cfg.lm_eval.to_overrides(),
                            "--checkpoint",
                            path,
                            "--output",
                            str(d["root"] / "lm_eval"),
                        ],
                    )
                )
            elif ev == "swebench":
                chain.append(
                    Step(
                        "eval_swebench",
                        [
                            "eval",
                            "swebench",
                            *cfg.swebench.to_overrides(),
                            "--checkpoint",
                            str(d["hf"]),
                            "--output",
                            str(d["swebench"]),
                            "--run",
                        ],
                    )
                )
        steps[name] = chain
    return steps


def report_steps(cfg: ProtocolConfig) -> list[str]:
    """The step directories each checkpoint's protocol directory holds under CFG: what the report reads (its
    seeds are the config's, never the directories that happen to lie there)."""
    steps = [seed_dir("sft", s) for s in _seeded(cfg.probe_seeds)]
    for ev in cfg.evals:
        steps += [seed_dir("proxy", s) for s in _seeded(cfg.proxy_seeds)] if ev == "proxy" else [ev]
    return steps


def report_argv(cfg: ProtocolConfig) -> list[str]:
    """The last step, after every checkpoint's chain: the side-by-side report under OUTPUT/report, each column
    shown only from results of its own checkpoint's content."""
    cfg.validate()
    runs = [f"{name}={checkpoint_dirs(cfg, name)['root']}" for name in cfg.checkpoints]
    out = cfg.report_dir or str(Path(cfg.output) / "report")
    notes = [f"--note={name}={text}" for name, text in cfg.notes.items()]
    checkpoints = [f"--checkpoint={name}={path}" for name, path in cfg.checkpoints.items()]
    return [
        "report",
        *runs,
        *checkpoints,
        "--steps",
        ",".join(report_steps(cfg)),
        "--baseline",
        cfg.baseline_name,
        "--output",
        out,
        "--title",
        cfg.name,
        *notes,
    ]


def protocol_jobs(cfg: ProtocolConfig, site: SiteConfig, job_prefix: str | None = None) -> ProtocolJobs:
    """The protocol on Slurm: one job per step, chains per checkpoint, then the report (rendered, not written)."""

    slurm_dir = site.job_path(cfg.output) / "slurm"  # jobs run in the site's workdir: resolve there
    prefix = job_prefix or f"mt-{cfg.name}"
    steps = {name: [(s.name, s.argv) for s in chain] for name, chain in protocol_steps(cfg).items()}
    return build_chains(site, slurm_dir, steps, ("report", report_argv(cfg)), prefix)


def check_probe_layout(cfg: ProtocolConfig, site: SiteConfig, probe: SFTConfig) -> None:
    """The probe's batch must divide over the sft step's ranks (one rank per GPU): a job would refuse it only
    after the queue. For `submit protocol` and `sweep --submit` alike. ``probe`` is the resolved
    ``cfg.sft_recipe`` (``recipes.resolve_probe``): the protocol names recipes, the commands resolve them."""

    try:
        check_layout(probe.train, site.step_resources("sft"))
    except ConfigError as e:
        raise ConfigError(
            f"sft_recipe {cfg.sft_recipe}: train.{e}; set a batch that divides with "
            "sft_overrides=[train.optim.global_batch_size=N], or change the sft step's ranks (site protocol.sft)"
        ) from None


def check_submission(cfg: ProtocolConfig, site: SiteConfig, probe: SFTConfig) -> None:
    """What the protocol's jobs would refuse only after the queue: the probe's layout (``probe``, the resolved
    ``cfg.sft_recipe``), and in a container the checkpoints mounted."""

    check_probe_layout(cfg, site, probe)
    output = str(site.job_path(cfg.output))
    check_mounted(site, {f"checkpoints.{name}": path for name, path in cfg.checkpoints.items()}, [output])


def print_protocol(cfg: ProtocolConfig) -> int:
    """The local dry run: every step's command line in order, nothing run."""
    print_chains(protocol_steps(cfg), Step("report", report_argv(cfg)))
    return 0


def run_protocol(cfg: ProtocolConfig, runner: Runner, only: list[str] | None = None) -> int:
    """Run every checkpoint's chain here with RUNNER (the CLI's main), in order, then the report. Stops a chain
    at its first failure."""
    failed = run_chains("protocol", protocol_steps(cfg), runner, only)
    return finish("protocol", failed, Step("report", report_argv(cfg)), runner)
