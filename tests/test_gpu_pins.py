"""The GPU install resolves to a megatron-core / Transformer Engine the code runs on: pyproject's ranges and
constraints-gpu.txt's pins agree with midtrain.train.gpu_choices' supported ranges, every megatron-core name
midtrain imports (read from its source with ast, submodule attributes included) exists in the pinned release's
source, and a version outside the range is refused when training starts, naming the range."""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from train_helpers import tiny_config

from midtrain.config import ConfigError
from midtrain.train import gpu_choices
from midtrain.train.gpu_choices import MEGATRON_CORE_RANGE, TE_RANGE, installed_version, stack_version_problem

REPO = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints-gpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip()] = version.strip()
    return pins


def _pyproject_specs() -> dict[str, SpecifierSet]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["gpu"]]]
    return {r.name: r.specifier for r in reqs if r.name in ("megatron-core", "transformer-engine")}


def test_pyproject_and_constraints_gpu_name_the_supported_ranges():
    specs = _pyproject_specs()
    assert specs == {"megatron-core": SpecifierSet(MEGATRON_CORE_RANGE), "transformer-engine": SpecifierSet(TE_RANGE)}
    pins = _pins()
    assert pins["megatron-core"] in SpecifierSet(MEGATRON_CORE_RANGE), pins
    assert pins["transformer-engine"] in SpecifierSet(TE_RANGE), pins
    # the pinned megatron-core is the one this suite runs (CI's constraints-cpu.txt), so the checks below read
    # its source; and TE's range is the one it declares itself
    assert installed_version("megatron-core") == pins["megatron-core"]
    from importlib.metadata import requires

    te = [Requirement(r) for r in requires("megatron-core") or [] if r.startswith("transformer-engine")]
    assert te and all(pins["transformer-engine"] in r.specifier for r in te), te


def _imported_names(root: Path) -> set[tuple[str, str | None, str]]:
    """(module, name or None, where) for each megatron.core import in ROOT's sources, and each attribute read off
    a module imported under a name (``import megatron.core.x as m``; ``m.f``) unless the file asks
    ``hasattr(m, "f")`` first."""
    found: set[tuple[str, str | None, str]] = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        where = str(path.relative_to(REPO))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("megatron"):
                for a in node.names:
                    found.add((node.module or "", a.name, where))
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"  # a submodule, if it is one
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("megatron"):
                        found.add((a.name, None, where))
                        if a.asname:
                            aliases[a.asname] = a.name
        guarded = {  # hasattr(m, "f"): the code reads f only where this release has it
            (node.args[0].id, node.args[1].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "hasattr"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Name)
            and isinstance(node.args[1], ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                if (node.value.id, node.attr) not in guarded:
                    found.add((aliases[node.value.id], node.attr, where))
    return found


def _module_file(src: Path, module: str) -> Path | None:
    base = src.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _defines(path: Path, name: str) -> bool:
    """Whether the module source at PATH defines or imports NAME anywhere (a guarded import counts)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name.split(".")[0]) == name for a in node.names
        ):
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def missing_names(src: Path, names: set[tuple[str, str | None, str]]) -> list[str]:
    """The imported names that megatron-core's source tree SRC (the directory holding megatron/) lacks."""
    out = []
    for module, name, where in sorted(names, key=str):
        if name is None or _module_file(src, f"{module}.{name}") is not None:
            if _module_file(src, f"{module}.{name}" if name else module) is None:
                out.append(f"{module} (imported in {where}): no such module")
            continue
        path = _module_file(src, module)
        if path is None:
            if _module_file(src, module.rsplit(".", 1)[0]) is None:  # an attribute of a non-module name
                out.append(f"{module} (imported in {where}): no such module")
        elif not _defines(path, name):
            out.append(f"{module}.{name} (imported in {where})")
    return out


def test_every_megatron_core_name_midtrain_imports_exists_in_the_pinned_release():
    spec = importlib.util.find_spec("megatron.core")
    assert spec is not None and spec.origin
    src = Path(spec.origin).parents[2]  # site-packages: holds megatron/core/
    names = _imported_names(REPO / "midtrain")
    assert ("megatron.core.utils", "get_thd_batch_on_this_cp_rank", "midtrain/train/batch.py") in names
    assert len(names) > 30, sorted(names)
    assert missing_names(src, names) == []


def test_the_name_check_finds_a_name_a_release_lacks(tmp_path):
    # core_v0.18's megatron/core/utils.py no longer defines get_thd_batch_on_this_cp_rank: a tree without it fails
    spec = importlib.util.find_spec("megatron.core")
    assert spec is not None and spec.origin
    utils = (Path(spec.origin).parent / "utils.py").read_text()
    pkg = tmp_path / "megatron" / "core"
    pkg.mkdir(parents=True)
    (tmp_path / "megatron" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(re.sub(r"def get_thd_batch_on_this_cp_rank\b", "def _gone", utils))
    names: set[tuple[str, str | None, str]] = {
        ("megatron.core.utils", "get_thd_batch_on_this_cp_rank", "midtrain/train/batch.py")
    }
    assert missing_names(tmp_path, names) == [
        "megatron.core.utils.get_thd_batch_on_this_cp_rank (imported in midtrain/train/batch.py)"
    ]
    assert missing_names(tmp_path, {("megatron.core.gone", None, "x.py")}) == [
        "megatron.core.gone (imported in x.py): no such module"
    ]


@pytest.mark.parametrize(
    ("mcore", "te", "refused"),
    [
        ("0.16.1", None, None),
        ("0.17.0", "2.11.0", None),
        ("0.19.2", None, "megatron-core 0.19.2 is installed; midtrain supports megatron-core>=0.16.1,<0.18"),
        ("0.15.3", None, "megatron-core 0.15.3 is installed; midtrain supports megatron-core>=0.16.1,<0.18"),
        ("0.16.1", "2.20.2", "transformer-engine 2.20.2 is installed; midtrain supports transformer-engine>=2.9,<2.12"),
    ],
)
def test_a_version_outside_the_range_is_named_with_the_range(mcore, te, refused):
    problem = stack_version_problem(mcore, te)
    assert problem == refused if refused is None else problem is not None and problem.startswith(refused)


def test_training_refuses_to_start_on_an_unsupported_megatron_core(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_choices, "MEGATRON_CORE_RANGE", "<0.16")  # the installed 0.16.1 is now outside
    from midtrain.train.trainer import train

    cfg = tiny_config(**{"data.path": str(tmp_path / "shards")}).apply_overrides([f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(
        ConfigError, match=r"megatron-core 0\.16\.1 is installed; midtrain supports megatron-core<0\.16"
    ):
        train(cfg)
    assert not (tmp_path / "run").exists()
