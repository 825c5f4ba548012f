"""Named mixtures for `midtrain pack --mixture NAME`: per-source token targets with a repetition cap."""

from midtrain.pack.mixture import MixtureConfig
from recipes import recipe


@recipe("mixture")
def natural() -> MixtureConfig:
    """Every source once, as much as the inputs hold (no weighting, no repeats)."""
    return MixtureConfig(name="natural")


@recipe("mixture")
def swe_midtrain() -> MixtureConfig:
    """SWE midtraining: mostly packed repositories, PRs and commits, a little build logs and agent traces."""
    return MixtureConfig(
        name="swe_midtrain",
        weights={"repo": 0.45, "pr": 0.25, "commit": 0.15, "buildlog": 0.05, "trace": 0.10},
        max_repeat=4.0,
    )


@recipe("mixture")
def swe_midtrain_500b() -> MixtureConfig:
    """swe_midtrain at the reported scale: 500B training tokens, no source repeated more than 4 times."""
    cfg = swe_midtrain()
    cfg.name = "swe_midtrain_500b"
    cfg.total_tokens = 500_000_000_000
    return cfg
