"""Protocol recipes -> per-checkpoint (step, argv) chains that the real CLI parses."""

from __future__ import annotations

import pytest

from midtrain.cli import build_parser
from midtrain.config import ConfigError
from midtrain.eval.config import LmEvalConfig, ProxyConfig, SweBenchConfig
from midtrain.protocol import ProtocolConfig, protocol_steps, report_argv
from recipes import resolve_config


def _protocol(name: str, overrides: list[str] | None = None) -> ProtocolConfig:
    """Protocol recipe NAME with OVERRIDES, not validated (as its Recipe.build does)."""
    return resolve_config(name, ProtocolConfig, "protocol", overrides, validate=False)


def test_demo_protocol_chains_sft_then_evals_with_the_same_probe():
    cfg = _protocol("protocol_demo", ["checkpoints.variant=runs/v"])
    steps = protocol_steps(cfg)
    assert list(steps) == ["base", "midtrained", "variant"]
    for name, chain in steps.items():
        assert [s.name for s in chain] == ["sft", "eval_proxy"]
        sft = chain[0].argv
        assert sft[:2] == ["sft", "sft_probe_demo"]
        assert sft[sft.index("--from") + 1] == cfg.checkpoints[name]
        assert sft[sft.index("--output") + 1].endswith(f"{name}/sft")
    # identical probe settings: the sft argv differs only in --from and --output
    strip = [
        [a for i, a in enumerate(c[0].argv) if i == 0 or c[0].argv[i - 1] not in ("--from", "--output")]
        for c in steps.values()
    ]
    assert strip[0] == strip[1] == strip[2]
    parsed = build_parser().parse_args(steps["base"][0].argv)
    assert (parsed.recipe, parsed.start) == ("sft_probe_demo", cfg.checkpoints["base"])
    assert any(o.startswith("data_dir=") for o in parsed.overrides)
    rep = report_argv(cfg)
    assert build_parser().parse_args(rep).baseline == "base"
    assert rep[0] == "report" and rep[rep.index("--baseline") + 1] == "base"
    assert "midtrained=.demo/runs/protocol/midtrained" in rep


def test_eval_overrides_rebuild_the_exact_config():
    cfg = _protocol("protocol_swebench", ["swebench.instance_slice=0:5", "swebench.vllm_args=[--enforce-eager]"])
    steps = protocol_steps(cfg)
    chain = {s.name: s.argv for s in steps["midtrained"]}
    assert [s.name for s in steps["base"]] == ["sft", "eval_proxy", "eval_lm_eval", "eval_swebench"]
    # parse each argv with the real CLI parser, then rebuild the eval config from the parsed overrides
    parser = build_parser()
    proxy_args = parser.parse_args(chain["eval_proxy"])
    assert proxy_args.checkpoint == cfg.checkpoints["midtrained"] and proxy_args.output.endswith("midtrained/proxy")
    assert ProxyConfig().apply_overrides(proxy_args.overrides) == cfg.proxy
    lm_args = parser.parse_args(chain["eval_lm_eval"])
    assert lm_args.eval == "lm-eval" and lm_args.checkpoint == cfg.checkpoints["midtrained"]
    assert LmEvalConfig().apply_overrides(lm_args.overrides) == cfg.lm_eval
    sw_args = parser.parse_args(chain["eval_swebench"])
    assert sw_args.run and SweBenchConfig().apply_overrides(sw_args.overrides) == cfg.swebench
    sw_argv = chain["eval_swebench"]
    assert sw_argv[sw_argv.index("--checkpoint") + 1].endswith("midtrained/sft/hf")  # the probe's HF export
    assert ProxyConfig().to_overrides() == []


@pytest.mark.parametrize(
    "override,field",
    [
        (["checkpoints={}"], "checkpoints"),
        (["baseline=nope"], "baseline"),
        (["checkpoints={'a b': x}", "baseline=null"], "checkpoints"),
        (["evals=[proxy, proxy]"], "evals"),
        (["sft_overrides=[train.init_from=x]"], "sft_overrides"),
        (["evals=[mmlu]"], "evals"),
        (["swebench.benchmarks=[lite]"], "swebench.benchmarks"),
    ],
)
def test_bad_protocols_name_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        _protocol("protocol_demo", override).validate()


def test_protocol_yaml_round_trip():
    cfg = _protocol("protocol_swebench")
    assert ProtocolConfig.from_yaml(cfg.to_yaml()) == cfg


def test_overrides_after_the_options_are_accepted():
    args = build_parser().parse_args(
        ["eval", "proxy", "--checkpoint", "c", "--output", "o", "shards=s", "retrieval.samples=3"]
    )
    assert args.overrides == ["shards=s", "retrieval.samples=3"]
    args = build_parser().parse_args(["sft", "sft_probe_demo", "a=1", "--from", "x", "--output", "y", "b=2"])
    assert args.overrides == ["a=1", "b=2"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "proxy", "--checkpoint", "c", "--output", "o", "--bogus"])


def test_seeds_repeat_the_probe_and_the_retrieval_draws():
    cfg = _protocol("protocol_demo", ["probe_seeds=[7, 8]", "proxy_seeds=[0, 1]"])
    chain = {s.name: s.argv for s in protocol_steps(cfg)["base"]}
    assert list(chain) == ["sft", "sft-s8", "eval_proxy", "eval_proxy-s1"]
    parser = build_parser()
    first, second = parser.parse_args(chain["sft"]), parser.parse_args(chain["sft-s8"])
    assert {"train.seed=7", "train.data.seed=7"} <= set(first.overrides) and first.output.endswith("base/sft")
    assert {"train.seed=8", "train.data.seed=8"} <= set(second.overrides) and second.output.endswith("base/sft-s8")
    # each seed has its own shared data dir, the same for every checkpoint
    data = {o for o in second.overrides if o.startswith("data_dir=")}
    assert data == {
        o
        for o in parser.parse_args(
            next(s.argv for s in protocol_steps(cfg)["midtrained"] if s.name == "sft-s8")
        ).overrides
        if o.startswith("data_dir=")
    } and data != {o for o in first.overrides if o.startswith("data_dir=")}
    redraw = ProxyConfig().apply_overrides(parser.parse_args(chain["eval_proxy-s1"]).overrides)
    assert redraw.retrieval.seed == 1 and redraw.shards is None  # held-out loss is deterministic: scored once
    with pytest.raises(ConfigError, match="proxy_seeds"):
        _protocol("protocol_demo", ["proxy_seeds=[0, 1]", "proxy.retrieval.repos=null"]).validate()
