"""Sweeps: variants resolve to the real commands (dry run), bad recipes name the field, and sweep_demo runs end
to end on CPU at a tiny size with a ranked report whose numbers are the runs' own."""

from __future__ import annotations

import json

import pytest
from sft_helpers import code_docs, sample_trace_docs, write_documents

from midtrain.cli import build_parser, main
from midtrain.config import ConfigError
from midtrain.sweep_config import SweepConfig
from recipes import resolve_config


def test_sweep_demo_chains_parse_and_apply_the_deltas(tmp_path):
    from midtrain.sweep.plan import setup_steps, sweep_chains, variant_plan

    shares = "variants.traces_5={about: 5% traces, pack: [mixture.weights.trace=0.05]}"
    cfg = resolve_config(
        "sweep_demo",
        SweepConfig,
        "sweep",
        [f"output={tmp_path}", "pack.mixture.weights={repo: 0.5, commit: 0.3, trace: 0.2}", shares],
    )
    plans, chains = sweep_chains(cfg)
    assert list(chains)[0] == "no_midtraining" and chains["no_midtraining"][0].name == "sft"
    parser = build_parser()
    for chain in chains.values():
        for step in chain:
            parser.parse_args(step.argv)  # the real CLI accepts every step
    setup = setup_steps(cfg, ["sweep_demo"])
    assert [s.name for s in setup] == ["split", "init_base", "pack_reference"]  # the run's split before any pack
    split = f"split={tmp_path / 'split.json'}"
    assert setup[0].argv[:2] == ["split", "--input"] and split in setup[2].argv
    packs = [s for c in chains.values() for s in c if s.name == "pack"]
    assert len(packs) == len(plans) and all(split in s.argv for s in packs)
    assert all(split in s.argv for c in chains.values() for s in c if s.name.startswith("sft"))
    mix, no_commits = plans["all"], plans["no_commits"]
    assert len(no_commits.inputs) == len(mix.inputs) - 1 and not any(i.endswith("commits") for i in no_commits.inputs)
    assert "commit" not in no_commits.pack.mixture.weights and "commit" in mix.pack.mixture.weights
    assert plans["traces_5"].pack.mixture.weights == {"repo": 0.5, "commit": 0.3, "trace": 0.05}
    assert [s.name for s in plans["pr_context_none"].prep] == ["prep_pulls"] and not mix.prep  # pulls prepped again
    # same budget: half the context -> twice the steps; twice the tokens -> twice the steps
    assert plans["ctx_1k"].train_steps == 2 * mix.train_steps == plans["long"].train_steps
    assert "data.seq_length=1024" in plans["ctx_1k"].train_overrides
    # same start and seed for every variant
    starts = {next(o for o in p.train_overrides if o.startswith("init_from=")) for p in plans.values()}
    assert starts == {f"init_from={tmp_path / 'base'}"}
    # the probe runs on every seed with one shared data dir per seed
    sft = [s.argv for s in chains["all"] if s.name.startswith("sft")]
    assert [a[a.index("--output") + 1].rsplit("/", 1)[1] for a in sft] == ["sft", "sft-s4322"]
    assert variant_plan(cfg, "all").stamp() == mix.stamp()


@pytest.mark.parametrize(
    "override,field",
    [
        (["variants={}"], "variants"),
        (["variants={x: {leave_out: [nope]}}"], "variants.x"),
        (["variants={base: {}}"], "variants"),
        (["variants={x: {prep: {repos: [repos.a=1]}}}"], "variants.x.prep"),
        (["variants={x: {pack: [seq_length=7]}}"], "variants.x.pack"),
        (["inputs={bogus: d}"], "inputs"),
        (["tokens=0"], "tokens"),
    ],
)
def test_bad_sweeps_name_the_field(override, field):
    from midtrain.sweep.plan import sweep_chains

    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        sweep_chains(resolve_config("sweep_demo", SweepConfig, "sweep", override))


def test_changed_variant_is_refused_on_rerun(tmp_path):
    from midtrain.sweep.plan import check_stamp, variant_plan

    cfg = resolve_config("sweep_demo", SweepConfig, "sweep", [f"output={tmp_path}"])
    check_stamp(variant_plan(cfg, "all"), write=True)
    check_stamp(variant_plan(cfg, "all"), write=True)  # unchanged: fine
    changed = resolve_config("sweep_demo", SweepConfig, "sweep", [f"output={tmp_path}", "tokens=99999"])
    with pytest.raises(ConfigError, match="tokens"):
        check_stamp(variant_plan(changed, "all"), write=True)


def test_submit_dry_run_prints_every_script(tmp_path, capsys):
    assert (
        main(
            [
                "sweep",
                "sweep_demo",
                f"output={tmp_path}",
                "--submit",
                "--dry-run",
                "--site-set",
                "train.gpus_per_node=0",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    # setup 3 (split, base, reference pack); probe x2 + proxy; 5 x (pack, train, probe x2, proxy); pr_context_none's
    # prep; report
    assert out.count("#!/bin/bash") == 3 + 3 + 5 * 5 + 1 + 1
    assert "(afterany: every chain)" in out and "--report" in out.rsplit("#!/bin/bash", 1)[1]
    assert not (tmp_path / "slurm").exists()  # a dry run writes nothing


def tiny_sweep(tmp_path) -> list[str]:
    """sweep_demo at a tiny size on generated prep dirs: two variants, two probe seeds."""
    repos = write_documents(tmp_path / "prep" / "repos", code_docs())
    traces = write_documents(tmp_path / "prep" / "traces", sample_trace_docs())
    return [
        f"output={tmp_path / 'sweep'}",
        f"inputs={{repos: {repos}, traces: {traces}}}",
        "pack.seq_length=512",
        "pack.valid_fraction=0.3",
        "pack.tokenize_tasks=1",
        "tokens=1024",
        "pack.mixture={name: natural}",  # tiny inputs: every source once (weights would be capped by traces)
        "variants={mix: {about: repos and traces}, no_traces: {about: leave traces out, leave_out: [traces]}}",
        "protocol.sft_overrides=[export_hf=false, train.optim.train_steps=2, train.optim.warmup_steps=1, "
        "train.checkpoint.save_interval=2, train.data.seq_length=512]",
        "protocol.proxy.max_sequences=4",
        "protocol.proxy.retrieval.lengths=[128]",
        "protocol.proxy.retrieval.depths=[0.0, 1.0]",
    ]


@pytest.mark.slow
def test_sweep_demo_end_to_end_ranks_variants_from_their_runs(tmp_path, caplog):
    import logging

    over = tiny_sweep(tmp_path)
    assert main(["sweep", "sweep_demo", *over]) == 0
    out = tmp_path / "sweep"
    res = json.loads((out / "report" / "sweep.json").read_text())
    assert [r["variant"] for r in res["ranking"]] and {r["variant"] for r in res["ranking"]} == {"mix", "no_traces"}
    for r in res["ranking"]:
        losses = [
            json.loads((out / r["variant"] / d / "sft_result.json").read_text())["heldout_loss"]
            for d in ("sft", "sft-s4322")
        ]
        assert r["samples"] == losses and r["value"] == pytest.approx(sum(losses) / 2)
        base = [
            json.loads((out / "no_midtraining" / d / "sft_result.json").read_text())["heldout_loss"]
            for d in ("sft", "sft-s4322")
        ]
        assert r["delta_vs_baseline"] == pytest.approx(r["value"] - sum(base) / 2)
        assert (r["steps"], r["tokens_trained"]) == (2, 1024)  # the budget: 2 steps x 1 sequence x 512
    values = [r["value"] for r in res["ranking"]]
    assert values == sorted(values)  # lower held-out loss ranks first
    md = (out / "report" / "sweep.md").read_text()
    assert "| 1 | " + res["ranking"][0]["variant"] in md and "Seed noise:" in md
    # every delta has a test: paired over the two shared probe seeds (t with 1 degree of freedom)
    assert all(r["vs_baseline"]["method"] == "paired t" and r["vs_baseline"]["df"] == 1 for r in res["ranking"])
    # the proxy's held-out documents looked up in each variant's training shards by content, and printed
    scans = {s["variant"]: s for s in res["proxy_content_scan"]}
    assert set(scans) == {"mix", "no_traces"} and all(s["heldout_ngrams"] > 0 for s in scans.values())
    assert "The proxy's held-out documents in training, by content" in md
    # both variants really trained (loss on their tokens), and only mix packed trace tokens
    for name in ("mix", "no_traces"):
        rows = [json.loads(line) for line in (out / name / "run" / "metrics.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(r["trained_tokens"] > 0 for r in rows)
    packed = {
        n: json.dumps(json.loads((out / n / "shards" / "manifest.json").read_text())) for n in ("mix", "no_traces")
    }
    assert '"trace"' in packed["mix"] and '"trace"' not in packed["no_traces"]
    # a rerun reuses every finished chain
    stamp = (out / "mix" / "sft" / "sft_result.json").stat().st_mtime
    with caplog.at_level(logging.INFO):
        assert main(["sweep", "sweep_demo", *over]) == 0
    assert (out / "mix" / "sft" / "sft_result.json").stat().st_mtime == stamp
    assert sum("probe and evals complete; reused" in r.getMessage() for r in caplog.records) == 3


def test_a_variant_that_preps_again_stamps_its_run_dir(tmp_path):
    """The stamp of a variant with re-prep steps (sweep_demo's pr_context_none) is written, read back as equal,
    and refuses other settings: the local sweep writes every stamp before its first step."""
    from midtrain.sweep.plan import check_stamp, sweep_chains

    plans, _ = sweep_chains(resolve_config("sweep_demo", SweepConfig, "sweep", [f"output={tmp_path}"]))
    plan = plans["pr_context_none"]
    assert plan.prep
    check_stamp(plan, write=True)
    check_stamp(plan, write=True)  # a rerun with the same settings
    changed = sweep_chains(resolve_config("sweep_demo", SweepConfig, "sweep", [f"output={tmp_path}", "tokens=6144"]))[0]
    with pytest.raises(ConfigError, match="pr_context_none"):
        check_stamp(changed["pr_context_none"], write=True)


def test_a_variant_run_dir_trained_with_other_settings_is_refused_not_reused(tmp_path, capsys):
    """variant.json names the train recipe, not its content: a run/ trained with other settings (the recipe changed
    since) is neither reused as finished nor resumed; the sweep refuses before any step, naming the field."""
    from midtrain.sweep.plan import check_stamp, variant_plan

    over = [f"output={tmp_path}"]
    plan = variant_plan(resolve_config("sweep_demo", SweepConfig, "sweep", over), "all")
    check_stamp(plan, write=True)
    tcfg = plan.train_config()
    last = plan.run_dir / "checkpoints" / f"iter_{plan.train_steps:07d}"  # the trainer's layout, finished
    last.mkdir(parents=True)
    (last / "complete.json").write_text(json.dumps({"files": {}}))
    tcfg.save_yaml(plan.run_dir / "config.yaml")
    # the inputs' content ids the trainer records beside its config (unknown ones are never reused)
    from midtrain.train.run_stamp import input_ids

    (plan.run_dir / "run_info.json").write_text(json.dumps({"inputs": input_ids(tcfg)}))
    assert plan.trained()
    check_stamp(plan, write=True)  # the same training: fine
    tcfg.apply_overrides(["optim.lr=0.5"]).save_yaml(plan.run_dir / "config.yaml")  # as if the recipe changed
    assert not plan.trained()
    assert main(["sweep", "sweep_demo", *over]) == 2
    err = capsys.readouterr().err
    assert f"variants.all: {plan.run_dir} holds a training with other settings" in err
    assert "config.optim.lr: recorded 0.5, now" in err and "remove that directory" in err
    assert not (tmp_path / "base").exists() and not (tmp_path / "reference_shards").exists()  # nothing ran
