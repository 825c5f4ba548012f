"""slurm/README.md's slurm.conf lines per Slurm version, checked against the test cluster's own slurmctld: the
row for its version starts a controller (a second one, on its own port and state directory, beside the
test cluster's), and on 22.05 the later releases' PreemptParameters line stops it (the README once gave that
line alone, a fatal config error there)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from slurm_helpers import REPO

pytestmark = [pytest.mark.slurm]

README = REPO / "slurm" / "README.md"


def _rows() -> dict[str, list[str]]:
    """Version cell -> the slurm.conf lines of the README's per-version table."""
    rows = {}
    for line in README.read_text().splitlines():
        m = re.match(r"^\s*\|\s*(\d[\d.x, ]*)\s*\|\s*((?:`[^`]+`\s*)+)\|\s*$", line)
        if m:
            rows[m.group(1).strip()] = re.findall(r"`([^`]+)`", m.group(2))
    return rows


def _version() -> str:
    out = subprocess.run(["/usr/sbin/slurmctld", "-V"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"(\d+)\.(\d+)\.\d+", out)
    assert m, out
    return f"{m.group(1)}.{m.group(2)}"


def _row_for(version: str, rows: dict[str, list[str]]) -> list[str]:
    major = version.split(".")[0]
    for cell, lines in rows.items():
        names = [c.strip() for c in cell.split(",")]
        if version in names or f"{major}.x" in names:
            return lines
    pytest.fail(f"slurm/README.md has no slurm.conf row for Slurm {version} (rows: {sorted(rows)})")


def _starts(slurm_cluster: Path, tmp_path: Path, lines: list[str]) -> tuple[bool, str]:
    """Whether slurmctld, on the test cluster's slurm.conf plus LINES (own port, state and log), comes up as a
    controller; and what it said."""
    conf = (slurm_cluster / "slurm.conf").read_text()
    for key, value in (
        ("StateSaveLocation", tmp_path / "state"),
        ("SlurmctldPidFile", tmp_path / "ctld.pid"),
        ("SlurmctldLogFile", tmp_path / "ctld.log"),
    ):
        conf = re.sub(rf"^{key}=.*$", f"{key}={value}", conf, flags=re.M)
    (tmp_path / "state").mkdir(parents=True)
    path = tmp_path / "slurm.conf"
    path.write_text(conf + "SlurmctldPort=6917\n" + "".join(f"{line}\n" for line in lines))
    proc = subprocess.Popen(
        ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SLURM_CONF": str(path)},
    )
    log = tmp_path / "ctld.log"
    deadline = time.time() + 300  # a loaded machine; it returns as soon as either happens
    try:
        while time.time() < deadline:
            if log.exists() and "Running as primary controller" in log.read_text():
                return True, log.read_text()
            if proc.poll() is not None:
                return False, (proc.stdout.read() if proc.stdout else "")
            time.sleep(0.2)
        pytest.fail(f"slurmctld neither started nor stopped within 300 s on {lines}")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_the_documented_preemption_lines_for_this_slurm_version_start_a_controller(slurm_cluster, tmp_path):
    version = _version()
    rows = _rows()
    lines = _row_for(version, rows)
    assert any("send_user_signal" in line for line in lines), lines
    ok, said = _starts(slurm_cluster, tmp_path / "row", lines)
    assert ok, f"Slurm {version} refuses slurm/README.md's lines {lines}:\n{said[-2000:]}"
    if version == "22.05":  # the other releases' spelling is a fatal config error here
        later = [line for cell, ls in rows.items() if cell != "22.05" for line in ls if line not in lines]
        assert later == ["PreemptParameters=send_user_signal"], rows
        ok, said = _starts(slurm_cluster, tmp_path / "later", [*lines[:-1], *later])
        assert not ok and "PreemptParameters" in said, said
