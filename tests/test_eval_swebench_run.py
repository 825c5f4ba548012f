"""The generated SWE-bench run executed with stand-ins for the GPU and Docker parts (vLLM, the agent, the
grader): one benchmark's failure loses nothing, each failure is recorded with its cause, the collection
always runs, and the denominator is the instances asked for."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from midtrain.eval.config import SweBenchConfig
from midtrain.eval.swebench_plan import write_run

FAKE_VLLM = """#!{py}
# OpenAI-compatible enough for the readiness probe: GET /v1/models
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{{"data": []}}')
    def log_message(self, *a): pass
http.server.HTTPServer(("localhost", port), H).serve_forever()
"""
DEAD_VLLM = "#!/bin/bash\necho 'CUDA error: no kernel image is available' >&2\nexit 1\n"
HUNG_VLLM = "#!/bin/bash\nexec sleep 600\n"
# mini-swe-agent stand-in: crashes on Verified before writing preds.json, finishes Multilingual
FAKE_AGENT = """#!{py}
import json, sys
from pathlib import Path
a = sys.argv
subset, out = a[a.index("--subset") + 1], Path(a[a.index("--output") + 1])
if "Verified" in subset:
    sys.exit("RuntimeError: agent crashed (litellm.APIConnectionError)")
out.mkdir(parents=True, exist_ok=True)
(out / "preds.json").write_text(json.dumps({{"m__m-1": {{"instance_id": "m__m-1",
    "model_name_or_path": "hosted_vllm/midtrain", "model_patch": "diff --git a/f b/f\\n"}}}}))
"""
# MIDTRAIN_PYTHON: the real interpreter, except the swebench harness (Docker), which a stand-in replaces:
# Verified is graded (a report over the ids passed), Multilingual's grader fails
FAKE_PY = """#!/bin/bash
if [ "$1" = "-m" ] && [ "$2" = "swebench.harness.run_evaluation" ]; then
  shift 2
  exec {py} -c '
import json, sys
a = sys.argv[1:]
run_id, report_dir = a[a.index("--run_id") + 1], a[a.index("--report_dir") + 1]
ids = a[a.index("--instance_ids") + 1:]
preds = [json.loads(l) for l in open(a[a.index("--predictions_path") + 1])]
assert {{p["instance_id"] for p in preds}} >= set(ids), "a prediction line per instance asked for"
if "multilingual" in run_id:
    sys.exit("docker.errors.DockerException: permission denied on /var/run/docker.sock")
json.dump({{"total_instances": len(ids), "resolved_instances": 0, "submitted_instances": len(preds),
           "completed_instances": 0, "empty_patch_instances": len(preds)}},
          open(f"{{report_dir}}/hosted_vllm__midtrain.{{run_id}}.json", "w"))
' "$@"
fi
exec {py} "$@"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _datasets(root: Path) -> None:
    """Local datasets under the hub ids (load_dataset, and our instance listing, read a local dir first)."""
    for name, ids in (
        ("SWE-bench_Verified", ["v__v-1", "v__v-2", "v__v-3", "v__v-4"]),
        ("SWE-bench_Multilingual", ["m__m-1", "m__m-2"]),
    ):
        d = root / "SWE-bench" / name
        d.mkdir(parents=True)
        (d / "test.jsonl").write_text("".join(json.dumps({"instance_id": i}) + "\n" for i in ids))


def _run(tmp_path: Path, vllm: str, **cfg_kw) -> tuple[subprocess.CompletedProcess, dict]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("vllm", vllm), ("mini-extra", FAKE_AGENT), ("python-wrapper", FAKE_PY)):
        (bin_dir / name).write_text(text.format(py=sys.executable))
        (bin_dir / name).chmod(0o755)
    _datasets(tmp_path)
    (tmp_path / "hf").mkdir()  # the export vLLM serves (run.sh stamps its outputs with its content)
    (tmp_path / "hf" / "config.json").write_text("{}")
    cfg = SweBenchConfig(benchmarks=["verified", "multilingual"], instance_slice="0:3", port=_free_port(), **cfg_kw)
    files = write_run(cfg, tmp_path / "hf", tmp_path / "out")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MIDTRAIN_PYTHON": str(bin_dir / "python-wrapper")}
    proc = subprocess.run(
        ["bash", str(files["run"])], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    return proc, json.loads((tmp_path / "out" / "swebench_results.json").read_text())


def test_one_failure_loses_nothing(tmp_path):
    proc, results = _run(tmp_path, FAKE_VLLM)
    assert proc.returncode == 1, proc.stderr  # the job fails, after every unit and the collection ran
    # Verified: the agent crashed without preds.json; its 3 instances asked for are still graded (empty patches)
    v = results["verified"]
    assert (v["resolved"], v["total"], v["asked"], v["rate"]) == (0, 3, 3, 0.0)
    assert v["failures"][0]["step"] == "agent" and "agent crashed" in v["failures"][0]["cause"]
    assert [json.loads(line)["instance_id"] for line in (tmp_path / "out" / "verified" / "preds.jsonl").open()] == [
        "v__v-1",
        "v__v-2",
        "v__v-3",
    ]
    # Multilingual: the agent finished, its grader failed: no rate (unknown, not 0), the cause recorded
    m = results["multilingual"]
    assert m["rate"] is None and m["total"] == 2 and m["asked"] == 2
    assert m["failures"][0]["step"] == "grade" and "permission denied" in m["failures"][0]["cause"]
    assert (tmp_path / "out" / "multilingual" / "grade.log").is_file()
    assert "verified/agent.sh failed (exit 1)" in proc.stderr


@pytest.mark.parametrize(
    "vllm,why,kw", [(DEAD_VLLM, "exited", {}), (HUNG_VLLM, "did not answer within 1s", {"server_wait_s": 1})]
)
def test_server_that_never_came_up_fails_the_run_and_says_why(tmp_path, vllm, why, kw):
    proc, results = _run(tmp_path, vllm, **kw)
    assert proc.returncode == 1
    assert set(results) == {"verified", "multilingual"}
    for r in results.values():
        assert r["rate"] is None
        assert r["failures"] == [{"step": "agent", "cause": f"vLLM server {why} (see {tmp_path / 'out' / 'vllm.log'})"}]
    assert not (tmp_path / "out" / "verified" / "agent.log").exists()  # no agent ran against no server
    assert "CUDA error" in (tmp_path / "out" / "vllm.log").read_text() or why != "exited"


def test_a_rerun_after_a_new_checkpoint_removes_the_old_outputs_the_tools_would_skip(tmp_path):
    """run.sh starts with `claim`: outputs another checkpoint's run left (mini-swe-agent's preds.json, which it
    skips instances by; the harness's per-instance report.json; Pro's _output.json) are removed before anything
    runs; the same checkpoint content keeps them (a requeued job resumes)."""
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"iter_10 weights")
    cfg = SweBenchConfig(benchmarks=["verified", "pro"])
    files = write_run(cfg, hf, tmp_path / "out")
    out = tmp_path / "out"
    assert any("midtrain.eval.swebench_steps claim" in line for line in files["run"].read_text().splitlines()[:5])
    claim = [sys.executable, "-m", "midtrain.eval.swebench_steps", "claim", str(out), str(hf)]
    first = subprocess.run(claim, check=True, capture_output=True, text=True)
    # the scripts write_run made are this run's own, not another output: the first claim redoes nothing
    assert "another swebench output" not in first.stderr and "removed" not in first.stderr, first.stderr
    left = [
        out / "verified" / "agent" / "preds.json",
        out / "verified" / "grading" / "logs" / "report.json",
        out / "pro" / "grading" / "x" / "_output.json",
        out / "swebench_results.json",
    ]
    for f in left:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")
    subprocess.run(claim, check=True, capture_output=True)
    assert all(f.exists() for f in left)  # same content: kept
    (hf / "model.safetensors").write_bytes(b"iter_12 weights")  # more training, the same export path
    proc = subprocess.run(claim, check=True, capture_output=True, text=True)
    assert not any(f.exists() for f in left) and "model.safetensors" not in proc.stderr
    assert "checkpoint changed" in proc.stderr  # stale_fields names it: inputs.checkpoint
    assert all(f.exists() for f in files.values())  # the generated scripts stay
