"""The report shows a cell only from a complete result of the column's own checkpoint (#53 cases 1, 2, 4, 5).

Each case is a rerun a user makes: the protocol's earlier results are left in place and the report must not
show them under the new checkpoint or config. The results are written with the stamp builders the stages
use (probe_stamp, formats.stamp.stamp, the local run's stamp) over checkpoints in midtrain's layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from midtrain.cli import main
from midtrain.eval.config import ProxyConfig, SweBenchConfig
from midtrain.eval.graders import parse_harness_report, parse_pro_results
from midtrain.eval.swebench_stamp import RUN_STAMP, RUN_WANT
from midtrain.formats.checkpoints import file_sha256
from midtrain.formats.rundir import MARKER, checkpoint_name
from midtrain.formats.stamp import content_id, output_stamp, stamp
from midtrain.protocol import ProtocolConfig, report_argv
from midtrain.sft.run_stamp import probe_stamp, start_identity


def checkpoint(run_dir: Path, step: int, weights: str) -> Path:
    """A complete midtrain checkpoint (complete.json with every file's size and SHA-256) of WEIGHTS."""
    ckpt = run_dir / "checkpoints" / checkpoint_name(step)
    ckpt.mkdir(parents=True)
    (ckpt / "model.bin").write_text(weights)
    marker = {"files": {"model.bin": len(weights)}, "sha256": {"model.bin": file_sha256(ckpt / "model.bin")}}
    (ckpt / MARKER).write_text(json.dumps(marker))
    return ckpt


def hf_export(d: Path, weights: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_text(weights)
    return d


def probe(root: Path, start: Path, loss: float, step: str = "sft") -> None:
    """What the SFT probe writes into ROOT/STEP after training from START: its stamp and its numbers."""
    fields: dict[str, Any] = {**start_identity(start), "probe_sha": "p", "data_sha": "d"}
    fields |= {"data_content": [], "tokenizer_content": None}
    hf = hf_export(root / step / "hf", f"sft of {content_id(start)} {loss}")
    result = {**fields, **probe_stamp(fields), "exit_code": 0, "heldout_loss": loss, "final_train_loss": loss}
    result |= {"hf_dir": str(hf), "hf_id": content_id(hf), "probe_sha": "p", "recipe": "r"}
    (root / step / "sft_result.json").write_text(json.dumps(result))


def proxy(root: Path, start: Path, loss: float, step: str = "proxy") -> None:
    (root / step).mkdir(parents=True, exist_ok=True)
    want = stamp(start, ProxyConfig().to_dict())
    result = {**want, "heldout": {"per_source": {"repo": {"loss": loss}}, "all": {"loss": loss}}}
    (root / step / "proxy_results.json").write_text(json.dumps(result))


def swebench_local(root: Path, rates: dict[str, dict]) -> None:
    """The local run's results of the probe's HF export (its stamp: the export's content id)."""
    out = root / "swebench"
    out.mkdir(parents=True, exist_ok=True)
    want = output_stamp("swebench local", {"checkpoint": content_id(root / "sft" / "hf")}, {})
    (out / "local_stamp.json").write_text(json.dumps(want))
    (out / "swebench_results.json").write_text(json.dumps(rates))


def protocol(tmp_path: Path, checkpoints: dict[str, Path], **kw) -> ProtocolConfig:
    return ProtocolConfig(
        output=str(tmp_path / "p"), checkpoints={n: str(p) for n, p in checkpoints.items()}, **kw
    ).validate()


def report(cfg: ProtocolConfig) -> tuple[int, str, dict]:
    rc = main(report_argv(cfg))
    out = Path(cfg.output) / "report"
    return rc, (out / "report.md").read_text(), json.loads((out / "results.json").read_text())


def row(md: str, metric: str) -> str:
    return next(line for line in md.splitlines() if line.startswith(f"| {metric} |"))


def first_run(tmp_path: Path) -> tuple[ProtocolConfig, Path, Path]:
    base, mid = tmp_path / "base", tmp_path / "mid"
    checkpoint(base, 10, "base weights")
    checkpoint(mid, 10, "midtrained weights, first run")
    cfg = protocol(tmp_path, {"base": base, "mid": mid}, evals=["proxy", "swebench"])
    for name, run, loss in (("base", base, 2.0), ("mid", mid, 1.5)):
        root = Path(cfg.output) / name
        probe(root, run, loss)
        proxy(root, run, loss + 1)
        swebench_local(root, {"local": {"resolved": 1, "total": 3, "rate": 1 / 3}})
    return cfg, base, mid


def test_first_run_is_shown_whole_and_exits_0(tmp_path):
    cfg, _, _ = first_run(tmp_path)
    rc, md, res = report(cfg)
    assert rc == 0 and res["missing"] == {}
    assert (
        row(md, "held-out loss, assistant tokens")
        == "| held-out loss, assistant tokens | 2.000 | 1.500 (-0.500, one sample, no band) |"
    )


def test_case1_failed_probe_after_retraining_shows_missing_not_the_old_column(tmp_path, capsys):
    cfg, _, mid = first_run(tmp_path)
    checkpoint(mid, 20, "midtrained weights, second run")  # retrained; the probe then failed before it started
    rc, md, res = report(cfg)
    assert rc == 1 and "result(s) missing" in capsys.readouterr().err
    held = row(md, "held-out loss, assistant tokens")
    assert "1.500" not in held and "missing: sft: made from checkpoint content" in held
    assert "missing:" in row(md, "all sources") and "missing:" in row(
        md, "Embedded CPU tasks (midtrain.eval.local_run)"
    )
    assert set(res["missing"]["mid"]) >= {"sft", "proxy", "swebench"} and "base" not in res["missing"]
    assert "## Missing results" in md
    # the probe reran on the new checkpoint but the proxy failed: one column never mixes two checkpoints
    root = Path(cfg.output) / "mid"
    probe(root, mid, 1.2)
    swebench_local(root, {"local": {"resolved": 2, "total": 3, "rate": 2 / 3}})
    rc, md, res = report(cfg)
    assert rc == 1 and list(res["missing"]["mid"]) == ["proxy"]
    assert "1.200" in row(md, "held-out loss, assistant tokens") and "66.7" in md
    assert "missing: proxy: made from checkpoint content" in row(md, "all sources")


def test_case2_seeds_are_the_configs_not_leftover_directories(tmp_path):
    cfg, base, mid = first_run(tmp_path)
    for name, run, loss in (("base", base, 2.2), ("mid", mid, 1.7)):
        probe(Path(cfg.output) / name, run, loss, step="sft-s2")
    cfg = protocol(tmp_path, {"base": base, "mid": mid}, evals=["proxy", "swebench"], probe_seeds=[1, 2])
    rc, md, _ = report(cfg)
    assert rc == 0 and "2.100 ± 0.141 (k=2)" in row(md, "held-out loss, assistant tokens")
    # probe_seeds changed to [1, 3] and mid's checkpoint swapped: sft-s2 (old seed, old checkpoint) is never read
    checkpoint(mid, 20, "midtrained weights, swapped")
    probe(Path(cfg.output) / "mid", mid, 1.1)
    probe(Path(cfg.output) / "base", base, 2.4, step="sft-s3")
    cfg = protocol(tmp_path, {"base": base, "mid": mid}, evals=["proxy", "swebench"], probe_seeds=[1, 3])
    rc, md, res = report(cfg)
    held = row(md, "held-out loss, assistant tokens")
    assert "2.200 ± 0.283 (k=2)" in held  # base: sft and sft-s3
    assert "(k=2)" not in held.split("|")[3] and "missing: sft-s3/sft_result.json not written" in held
    assert rc == 1 and res["missing"]["mid"]["sft"] == "sft-s3/sft_result.json not written"


def test_case4_ungraded_is_null_with_the_graders_reason_never_0(tmp_path):
    grading = tmp_path / "g"
    grading.mkdir()
    # swebench's harness: every instance an error (no container): nothing graded
    rep = grading / "r.json"
    rep.write_text(
        json.dumps(
            {
                "total_instances": 3,
                "submitted_instances": 3,
                "completed_instances": 0,
                "resolved_instances": 0,
                "error_instances": 3,
                "error_ids": ["a", "b", "c"],
            }
        )
    )
    verified = parse_harness_report(rep)
    assert verified["rate"] is None and verified["error_ids"] == ["a", "b", "c"]
    # Scale's Pro grader: 2 of 3 not graded (no _output.json), the graded one failed
    (grading / "eval_results.json").write_text(json.dumps({"a": False, "b": False, "c": False}))
    (grading / "a").mkdir()
    (grading / "a" / "_output.json").write_text("{}")
    pro = parse_pro_results(grading / "eval_results.json")
    cfg, _, _ = first_run(tmp_path)
    swebench_local(Path(cfg.output) / "mid", {"local": verified, "local_oracle": pro})
    rc, md, res = report(cfg)
    cell = row(md, "Embedded CPU tasks (midtrain.eval.local_run)").split("|")[3]
    assert "missing: 3 of 3 instances not graded (a, b, c)" in cell and "0.0" not in cell
    oracle = row(md, "Embedded CPU tasks, oracle endpoint (gold patches: the plumbing check)")
    assert "missing: 2 of 3 instances not graded (b, c)" in oracle and "0.0" not in oracle.split("|")[3]
    assert rc == 1 and set(res["missing"]["mid"]) == {"swebench/local", "swebench/local_oracle"}
    values = next(r for r in res["rows"] if r["metric"].startswith("Embedded CPU tasks ("))["values"]
    assert values["mid"] is None


def test_case5_collect_over_an_old_run_is_refused_and_not_reported(tmp_path, capsys):
    """A new cluster run written into an old output: until its run.sh claims it, --collect refuses and the
    report shows the cell missing, never the old run's 33.3%."""
    cfg, _, mid = first_run(tmp_path)
    root = Path(cfg.output) / "mid"
    out = root / "swebench"
    (out / "local_stamp.json").unlink()
    old_hf = root / "sft" / "hf"
    swe = SweBenchConfig(benchmarks=["verified"])
    swe.save_yaml(out / "swebench_config.yaml")
    (out / RUN_STAMP).write_text(json.dumps(stamp(old_hf, swe.to_dict())))
    (out / "swebench_results.json").write_text(json.dumps({"verified": {"resolved": 1, "total": 3, "rate": 1 / 3}}))
    cfg = protocol(tmp_path, {"base": tmp_path / "base", "mid": mid}, evals=["proxy", "swebench"])
    assert report(cfg)[0] == 0  # the old run, still the one its stamps name
    # retrained, probed again, and a new run written into the same output (not started yet)
    checkpoint(mid, 20, "midtrained weights, second run")
    probe(root, mid, 1.1)
    proxy(root, mid, 2.1)
    new = swe.replace(max_steps=7)
    new.save_yaml(out / "swebench_config.yaml")
    (out / RUN_WANT).write_text(json.dumps(stamp(old_hf, new.to_dict())))
    assert main(["eval", "swebench", "--collect", "--output", str(out)]) == 3
    err = capsys.readouterr().err
    assert "refused: the run written into" in err and "config.max_steps" in err and "Traceback" not in err
    assert json.loads((out / "swebench_results.json").read_text())["verified"]["rate"] == 1 / 3  # untouched
    rc, md, res = report(cfg)
    assert rc == 1 and "33.3" not in row(md, "SWE-bench Verified").split("|")[3]
    assert "has not started" in res["missing"]["mid"]["swebench"]
