"""The code's layering, read from its own imports: formats (bottom) <- stages <- application (top).

- *formats*: the files stages exchange (``midtrain/formats/``), plus the shared config base and path helpers
  (``midtrain/config.py``, ``midtrain/locations.py``). They import no stage.
- *stages*: sources, curate, pack, train, sft, eval, the stage runner and the Slurm job rendering. A stage
  takes a typed config and paths; it never imports the CLI, recipes or the demo.
- *application*: the CLI and its override parser, every command module (``midtrain/commands/``), recipes, the
  demo, the protocol and sweeps.

Every import counts, also one inside a function (it is a dependency all the same), and so does a module
loaded by name (``importlib.import_module``, ``runpy.run_module``: the CLI's commands, the recipes, the
data_prep/ pipeline files); imports under ``if TYPE_CHECKING:`` are annotations only and do not count. An exception needs an entry in ALLOWED with
its reason; an entry that no longer matches an import fails the test, so the list only shrinks.
No two modules import each other in a loop, and no two stage packages either (shared low-level helpers such
as the tokenizer and repository-file classification live in ``midtrain/formats/``), nor two application
packages (recipes/ counted as one); an import that closes a loop needs an entry in CYCLE_EDGES with its reason. No function holds more
than MAX_FUNCTION_LINES statement lines (lines where a statement starts: the formatter spreads one call over many
physical lines, so this counts what a function does, not how its calls wrap) without an entry in LONG_FUNCTIONS
saying why.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORMATS, STAGES, APPLICATION = 0, 1, 2
LAYER_NAMES = {FORMATS: "formats", STAGES: "stages", APPLICATION: "application"}

FOUNDATION = {"midtrain", "midtrain.config", "midtrain.locations"}
APPLICATION_MODULES = {
    "midtrain.cli",
    "midtrain.cli_parser",
    "midtrain.protocol",
    "midtrain.chains",
    "midtrain.sweep_config",
}
APPLICATION_PACKAGES = ("recipes", "midtrain.commands", "midtrain.sweep", "midtrain.demo")

# (importer, imported): why it is still there. Keep this short; remove an entry when its import goes.
ALLOWED: dict[tuple[str, str], str] = {}
# (importer, imported): an import that closes an import loop, and why it is still there. Each must still close
# one (the list only shrinks); the cycle tests read the graph without these edges.
CYCLE_EDGES: dict[tuple[str, str], str] = {}


MAX_FUNCTION_LINES = 60
# "path::function": why it is longer than MAX_FUNCTION_LINES. An entry must name a function that is still long.
LONG_FUNCTIONS = {
    # measured on statement lines since the tree was formatted; #48 splits these four
    "midtrain/sources/pull_context.py::base_context": "one budgeted pass over the context in relevance order (changed source, tests, other changed files, "
    "imports, changelogs) with the windowed fallback; split up, the budget and counts would be threaded "
    "through every piece",
    "bench/bench_eval.py::main": "a linear benchmark script (build the tiny checkpoint, score each way, print the side-by-side table); "
    "split up it would only pass its dozen locals around",
    "bench/gpu_throughput.py::main": "argument parsing with per-device defaults, then one loop over sequence lengths printing each row; "
    "the measurement itself is in its own functions",
}


def layer(module: str) -> int:
    if module.startswith("midtrain.formats") or module in FOUNDATION:
        return FORMATS
    if module in APPLICATION_MODULES or any(module == p or module.startswith(p + ".") for p in APPLICATION_PACKAGES):
        return APPLICATION
    return STAGES


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    files = [f for d in ("midtrain", "recipes", "data_prep") for f in sorted((REPO / d).rglob("*.py"))]
    return {_module_name(f): f for f in files}


_LOADERS = {"import_module", "run_module"}  # importlib.import_module, runpy.run_module


def _loaded_names(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules this module loads by name (``importlib.import_module``, ``runpy.run_module``): a literal
    name; every module under ``f"pkg.{...}"`` (also ``f"{__name__}.{...}"``); for a name held in a variable,
    every project module the file spells out as a string (the CLI's command table)."""
    tree = ast.parse(path.read_text(), str(path))
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (getattr(n.func, "attr", None) in _LOADERS or getattr(n.func, "id", None) in _LOADERS)
        and n.args
    ]
    spelled = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in modules}
    found: set[str] = set()
    for call in calls:
        arg = call.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.add(arg.value)
        elif isinstance(arg, ast.JoinedStr) and len(arg.values) >= 2:
            first, second = arg.values[0], arg.values[1]
            if isinstance(first, ast.Constant) and str(first.value).endswith("."):
                prefix = str(first.value)
            elif isinstance(first, ast.FormattedValue) and getattr(first.value, "id", None) == "__name__":
                prefix = module + (str(second.value) if isinstance(second, ast.Constant) else ".")
            else:
                continue
            found.update(m for m in modules if m.startswith(prefix))
        else:
            found.update(spelled)
    return found


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imported_names(module: str, path: Path) -> set[str]:
    """Dotted names this module imports (``from a import b`` gives ``a`` and ``a.b``), TYPE_CHECKING aside."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
        for sub in ast.iter_child_nodes(node):  # not `child`: that is the stmt of the loop above
            visit(sub)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (names resolved to the module that defines them).

    The tree is parsed once per test process (eight tests read the graph); each caller gets its own copy."""
    return defaultdict(set, {name: set(targets) for name, targets in _parsed_graph().items()})


@functools.cache
def _parsed_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for imported in _imported_names(name, path) | _loaded_names(name, path, modules):
            target = imported
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a package's own __init__
                graph[name].add(target)
    return graph


def _acyclic_graph() -> dict[str, set[str]]:
    """The graph without the CYCLE_EDGES."""
    graph = _graph()
    for a, b in CYCLE_EDGES:
        graph[a].discard(b)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (the repos reader's Tarjan, reused)."""
    from midtrain.sources.ordering import strongly_connected_components

    nodes = sorted(set(graph) | {w for ws in graph.values() for w in ws})
    comps = strongly_connected_components(nodes, {v: set(graph.get(v, ())) for v in nodes})
    return sorted(sorted(c) for c in comps if len(c) > 1)


def test_every_cycle_edge_still_closes_a_loop():
    """Put back alone, each CYCLE_EDGES import makes a loop of modules or of application packages again."""
    for a, b in CYCLE_EDGES:
        assert b in _graph()[a], f"CYCLE_EDGES entry whose import is gone (remove it): {(a, b)}"
        graph = _acyclic_graph()
        graph[a].add(b)
        loops = _cycles(graph) + _cycles(_app_package_graph(graph))
        ends = ({a, b}, {_app_package(a), _app_package(b)})
        assert any(pair <= set(c) for c in loops for pair in ends), f"{(a, b)} closes no loop now: remove it"
    assert all(reason.strip() for reason in CYCLE_EDGES.values())


def test_loads_by_name_are_followed(tmp_path):
    """importlib loads count as imports: a literal name, an f-string prefix, and a name held in a variable
    (every project module the file spells out)."""
    modules = {m: Path() for m in ("pkg", "pkg.a", "pkg.b", "other.c", "other.d")}
    source = tmp_path / "loader.py"
    source.write_text(
        "import importlib, runpy\nTABLE = ['other.c']\n"
        "def f(n, name):\n    importlib.import_module('other.d')\n    importlib.import_module(f'pkg.{n}')\n"
        "    runpy.run_module(name)\n"
    )
    assert _loaded_names("loader", source, modules) == {"other.d", "pkg.a", "pkg.b", "other.c"}
    source.write_text("import importlib\ndef f(n):\n    return importlib.import_module(f'{__name__}.{n}')\n")
    assert _loaded_names("pkg", source, modules) == {"pkg.a", "pkg.b"}
    graph = _graph()  # and in the project's own graph
    assert "midtrain.commands.train" in graph["midtrain.cli"] and "recipes.demo" in graph["recipes"]
    assert "data_prep.repos" in graph["midtrain.sources.prep"]


def test_imports_only_go_down_the_layers():
    graph = _graph()
    up = [(a, b) for a in sorted(graph) for b in sorted(graph[a]) if layer(b) > layer(a) and (a, b) not in ALLOWED]
    assert not up, (
        "imports from a lower layer up to a higher one (fix, or add to ALLOWED with the reason):\n"
        + "\n".join(f"  {a} ({LAYER_NAMES[layer(a)]}) -> {b} ({LAYER_NAMES[layer(b)]})" for a, b in up)
    )


def test_every_allowed_exception_is_still_needed():
    graph = _graph()
    stale = [pair for pair in ALLOWED if pair[1] not in graph.get(pair[0], set())]
    assert not stale, f"ALLOWED entries whose import is gone (remove them): {stale}"


def test_no_import_cycles_among_modules():
    cycles = _cycles(_acyclic_graph())
    assert not cycles, "import cycles:\n" + "\n".join("  " + " <-> ".join(c) for c in cycles)


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Stage package -> the stage packages it imports (``midtrain.pack.datacard`` counts for ``midtrain.pack``).

    Only stage-layer modules count (application code such as midtrain/commands/ sits on top of all stages).
    """

    def package(module: str) -> str:  # data_prep/'s files are the sources' pipelines (prep loads them by name)
        return "midtrain.sources" if module.startswith("data_prep.") else ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = defaultdict(set)
    for a, targets in graph.items():
        for b in targets:
            if layer(a) == layer(b) == STAGES and package(a) != package(b):
                out[package(a)].add(package(b))
    return out


def test_no_import_cycles_among_stage_packages():
    """Stage packages import each other one way only (shared low-level helpers live in midtrain/formats/)."""
    cycles = _cycles(_package_graph(_acyclic_graph()))
    assert not cycles, "stage packages importing each other in a loop:\n" + "\n".join(
        "  " + " <-> ".join(c) for c in cycles
    )


def test_the_checker_sees_what_it_must():
    """The graph is built from real imports: known edges are found, and the layers are assigned as documented."""
    graph = _graph()
    assert "midtrain.formats.documents" in graph["midtrain.curate.base"]
    assert "midtrain.formats.rundir" in graph["midtrain.sft.probe"]
    assert layer("midtrain.formats.rundir") == FORMATS and layer("midtrain.train.trainer") == STAGES
    assert layer("midtrain.commands.train") == APPLICATION and layer("recipes.demo") == APPLICATION
    assert layer("midtrain.protocol") == APPLICATION and layer("midtrain.demo.stages") == APPLICATION
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    packages = _package_graph(graph)
    assert "midtrain.sources" in packages["midtrain.pack"] and "midtrain.formats" not in packages
    assert "midtrain.recipes" not in packages and "recipes" not in packages
    # TYPE_CHECKING imports are annotations only: train.layout names TrainConfig there
    assert "midtrain.train.config" not in graph.get("midtrain.train.layout", set())


def test_the_train_config_imports_no_stage_module_back():
    """Its checks (layout, MoE, RoPE) and its arithmetic (head size, parameter counts) live with it: no module it
    imports names it back, and validating a recipe loads no torch (MoE recipes loaded it through moe.py)."""
    graph = _graph()
    # model.family is checked against the registered family specs: data, which import only the chat markup
    specs = {m for m in graph if m == "midtrain.train.families" or m.startswith("midtrain.train.families.")}
    assert graph["midtrain.train.model_config"] <= FOUNDATION | specs
    assert all(graph[m] <= FOUNDATION | specs | {"midtrain.formats.chat_format"} for m in specs)
    assert graph["midtrain.train.config"] <= FOUNDATION | {"midtrain.train.model_config"}
    code = (
        "import sys\nfrom recipes import all_recipes\nfor r in all_recipes().values(): r.build().validate()\n"
        "print(sorted(m for m in ('torch', 'megatron') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_commands_only_parse():
    """Nothing imports a command module but the CLI: what commands share (resolving a train recipe, the pack
    config, the step chains and their runner) lives below them, so the sweep and the demo never reach up."""
    graph = _graph()
    users = sorted(
        a
        for a, targets in graph.items()
        for b in targets
        if b.startswith("midtrain.commands") and not a.startswith("midtrain.commands") and a != "midtrain.cli"
    )
    assert not users, f"modules importing command modules: {users}"
    inner = sorted(
        (a, b)
        for a, targets in graph.items()
        if a.startswith("midtrain.commands.")
        for b in targets
        if b.startswith("midtrain.commands.")
    )
    assert not inner, f"command modules importing each other: {inner}"


def _app_package(module: str) -> str:
    """midtrain.sweep.plan -> midtrain.sweep; recipes.protocol -> recipes (one registry and its recipes)."""
    parts = module.split(".")
    if parts[0] != "midtrain":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 2 else module


def _app_package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = defaultdict(set)
    for a, targets in graph.items():
        for b in targets:
            if layer(a) == layer(b) == APPLICATION and _app_package(a) != _app_package(b):
                packages[_app_package(a)].add(_app_package(b))
    return packages


def test_no_import_cycles_among_application_packages():
    """The sweep, the demo, the commands, recipes, the protocol and the chain runner import each other one way."""
    cycles = _cycles(_app_package_graph(_acyclic_graph()))
    assert not cycles, "application packages importing each other in a loop:\n" + "\n".join(
        "  " + " <-> ".join(c) for c in cycles
    )


def _private_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("midtrain", "recipes")):
            out += [
                f"{path.relative_to(REPO)}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
    return out


def test_bench_and_recipes_use_public_names_only():
    files = sorted((REPO / "bench").glob("*.py")) + sorted((REPO / "recipes").rglob("*.py"))
    bad = [line for f in files for line in _private_imports(f)]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def _function_lengths() -> dict[str, int]:
    """``path::qualified.name`` -> the function's statement lines (nested ones included), for midtrain/, recipes/,
    bench/."""
    files = [f for d in ("midtrain", "recipes", "bench") for f in sorted((REPO / d).rglob("*.py"))]
    out: dict[str, int] = {}
    for f in files:
        out.update(_statement_lines(f.read_text(), str(f.relative_to(REPO))))
    return out


def _statement_lines(source: str, rel: str) -> dict[str, int]:
    """``rel::qualified.name`` -> statement lines of each function in ``source``."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, rel: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out[f"{rel}::{name}"] = len({s.lineno for s in ast.walk(child) if isinstance(s, ast.stmt)})
                visit(child, rel, name + ".")
            else:
                visit(child, rel, prefix)

    visit(ast.parse(source, rel), rel, "")
    return out


def test_no_function_is_long_without_a_reason():
    lengths = _function_lengths()
    long = {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS}
    assert not long, (
        f"functions over {MAX_FUNCTION_LINES} statement lines (split them, or add to LONG_FUNCTIONS with the "
        "reason):\n" + "\n".join(f"  {name}: {n} lines" for name, n in sorted(long.items()))
    )
    stale = [name for name in LONG_FUNCTIONS if lengths.get(name, 0) <= MAX_FUNCTION_LINES]
    assert not stale, f"LONG_FUNCTIONS entries that are no longer long (remove them): {stale}"
    assert all(reason.strip() for reason in LONG_FUNCTIONS.values())
    assert lengths and all(name.split("::")[0].endswith(".py") for name in lengths)


def test_function_length_counts_statement_lines():
    """A statement spread over several physical lines is one line; nested functions and methods count in their
    enclosing function and are found under their qualified names."""
    source = (
        "class A:\n"
        "    def write(self, x):\n"
        '        """Doc."""\n'
        "        y = f(\n            x,\n            1,\n        )\n"
        "        def inner():\n            return y\n"
        "        if y:\n            return inner()\n"
        "        return None\n"
    )
    lengths = _statement_lines(source, "m.py")
    # def, docstring, y = ..., def inner, its return, if, its return, return None
    assert lengths == {"m.py::A.write": 8, "m.py::A.write.inner": 2}


def _function_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports of project modules inside a function, but those of an optional dependency (in a try whose
    handler catches ImportError) and those for annotations only (under ``if TYPE_CHECKING:``)."""

    def walk(node: ast.AST, in_function: bool) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Try) and any(
                "ImportError" in ast.unparse(h.type or ast.Tuple([])) for h in child.handlers
            ):
                continue
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                if any(n.split(".")[0] in ("midtrain", "recipes") for n in names):
                    yield child
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from walk(tree, False)


def test_an_import_inside_a_function_says_why():
    """Imports sit at the top of a file, where its dependencies can be read; one left inside a function (a
    module that would load torch or datatrove into every `midtrain` command) has a comment saying why, on its
    line or above its run of imports."""
    missing = []
    for f in [f for d in ("midtrain", "recipes") for f in sorted((REPO / d).rglob("*.py"))]:
        lines = f.read_text().splitlines()
        for node in _function_imports(ast.parse("\n".join(lines))):
            k = node.lineno - 2
            while k >= 0 and lines[k].strip().startswith(("from ", "import ")):
                k -= 1
            if "#" not in lines[node.lineno - 1] and not (k >= 0 and lines[k].strip().startswith("#")):
                missing.append(f"{f.relative_to(REPO)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not missing, "move these imports to the top of their file, or say why they stay:\n" + "\n".join(missing)
