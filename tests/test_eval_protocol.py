"""Interface 6: protocol recipes -> per-checkpoint (step, argv) chains that the real CLI parses."""

from __future__ import annotations

import pytest

from midtrain.config import ConfigError
from midtrain.eval.config import ProxyConfig, SweBenchConfig
from midtrain.eval.protocol import ProtocolConfig, _overrides, protocol_steps, report_argv
from recipes import get_recipe


def test_demo_protocol_chains_sft_then_evals_with_the_same_probe():
    cfg = get_recipe("protocol_demo").build(["checkpoints.variant=runs/v"])
    steps = protocol_steps(cfg)
    assert list(steps) == ["base", "midtrained", "variant"]
    for name, chain in steps.items():
        assert [s for s, _ in chain] == ["sft", "eval_proxy"]
        sft = chain[0][1]
        assert sft[:2] == ["sft", "sft_probe_demo"]
        assert sft[sft.index("--from") + 1] == cfg.checkpoints[name]
        assert sft[sft.index("--output") + 1].endswith(f"{name}/sft")
    # identical probe settings: the sft argv differs only in --from and --output
    strip = [[a for i, a in enumerate(c[0][1]) if i == 0 or c[0][1][i - 1] not in ("--from", "--output")]
             for c in steps.values()]
    assert strip[0] == strip[1] == strip[2]
    rep = report_argv(cfg)
    assert rep[0] == "report" and rep[rep.index("--baseline") + 1] == "base"
    assert "midtrained=.demo/runs/protocol/midtrained" in rep


def test_eval_overrides_rebuild_the_exact_config():
    cfg = get_recipe("protocol_swebench").build(["swebench.instance_slice=0:5", "swebench.vllm_args=[--enforce-eager]"])
    steps = protocol_steps(cfg)
    chain = dict(steps["midtrained"])
    assert list(dict(steps["base"])) == ["sft", "eval_proxy", "eval_swebench"]
    proxy_argv = chain["eval_proxy"]
    rebuilt = ProxyConfig().apply_overrides(proxy_argv[proxy_argv.index("--output") + 2:])
    assert rebuilt == cfg.proxy
    sw_argv = chain["eval_swebench"]
    rebuilt = SweBenchConfig().apply_overrides(sw_argv[sw_argv.index("--run") + 1:])
    assert rebuilt == cfg.swebench
    assert sw_argv[sw_argv.index("--checkpoint") + 1].endswith("midtrained/sft/hf")  # the probe's HF export
    assert _overrides(ProxyConfig()) == []


@pytest.mark.parametrize("override,field", [
    (["checkpoints={}"], "checkpoints"),
    (["baseline=nope"], "baseline"),
    (["checkpoints={'a b': x}", "baseline=null"], "checkpoints"),
    (["evals=[proxy, proxy]"], "evals"),
    (["sft_overrides=[train.init_from=x]"], "sft_overrides"),
    (["evals=[mmlu]"], "evals"),
    (["swebench.benchmarks=[lite]"], "swebench.benchmarks"),
])
def test_bad_protocols_name_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        get_recipe("protocol_demo").build(override).validate()


def test_protocol_yaml_round_trip():
    cfg = get_recipe("protocol_swebench").build()
    assert ProtocolConfig.from_yaml(cfg.to_yaml()) == cfg
