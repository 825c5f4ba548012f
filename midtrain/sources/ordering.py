"""Order a repository's files by their import dependencies (DeepSeek-Coder style).

The graph holds the imports that run when a module is loaded: for Python the module-level ones (also inside
module-level ``if``/``try``/``with`` and class bodies), not those inside functions (lazy imports) or under
``if TYPE_CHECKING:`` (annotations only) or ``if __name__ == "__main__":`` (a module's demo), which would
otherwise invent cycles. Files are emitted in a
topological order of the graph's strongly connected components; a cycle is broken only inside its own
component (the member with the fewest unmet imports first). Among the files that are ready, library code
goes first, then tests, then examples, each by path, so tests and examples come after the code they
exercise. Imports are resolved to files of the same repository: Python with ``ast`` (relative imports,
``src/`` layouts), and best effort by regex for JavaScript/TypeScript (relative specifiers), C/C++
(``#include "..."``), Rust (``mod x;``), Java/Kotlin (``import a.b.C``) and Go (package directory by
import-path suffix).
"""

from __future__ import annotations

import ast
import heapq
import posixpath
import re
from collections import defaultdict

from midtrain.formats.repo_files import file_group

_JS_EXT = (".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs")
_C_EXT = (".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx")
_JS_IMPORT = re.compile(
    r"""(?:import\s[^'"]*?from\s*|import\s*\(?\s*|require\s*\(\s*|export\s[^'"]*?from\s*)"""
    r"""['"]([^'"]+)['"]"""
)
_C_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_RUST_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.MULTILINE)
_JAVA_IMPORT = re.compile(r"^\s*import\s+(?:static\s+)?([\w.]+)\s*;?", re.MULTILINE)
_GO_IMPORT_BLOCK = re.compile(r"^import\s*\((.*?)\)", re.MULTILINE | re.DOTALL)
_GO_IMPORT_ONE = re.compile(r'^import\s+(?:\w+\s+)?"([^"]+)"', re.MULTILINE)
# fallback for code ast cannot parse: unindented (module-level) imports only
_PY_FROM = re.compile(r"^from\s+(\.*[\w.]*)\s+import\s+([\w, ()*]+)", re.MULTILINE)
_PY_IMPORT = re.compile(r"^import\s+([\w., ]+)", re.MULTILINE)


def _python_modules(paths: list[str]) -> dict[str, str]:
    """Dotted module name -> path, for every .py file; names from the repo root and from package roots."""
    pyfiles = {p for p in paths if p.endswith(".py")}
    inits = {posixpath.dirname(p) for p in pyfiles if posixpath.basename(p) == "__init__.py"}
    mods: dict[str, str] = {}
    for p in sorted(pyfiles):
        parts = p[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts:
            continue
        # the top of the package chain this file belongs to (handles src/ and nested project layouts)
        d = posixpath.dirname(p)
        top = len(d.split("/")) if d else 0
        while d and d in inits:
            d = posixpath.dirname(d)
            top -= 1
        for start in sorted({0, max(top, 0)}):
            name = ".".join(parts[start:])
            if name:
                mods.setdefault(name, p)
    return mods


def _not_run_on_import(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:`` (annotations only) and
    ``if __name__ == "__main__":`` (a script's demo): blocks whose imports do not run when a module is imported."""
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    ):
        return True
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_statements(tree: ast.AST):
    """Import statements that run when the module is loaded: module level, module-level ``if``/``try``/
    ``with``/loops and class bodies; not function bodies, ``if TYPE_CHECKING:`` nor ``if __name__ ==
    "__main__":`` blocks. Statements only,
    no expressions: several times faster than ast.walk on real code."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        fields: tuple[str, ...] = ("body", "orelse", "finalbody", "handlers", "cases")
        if isinstance(node, ast.If) and _not_run_on_import(node.test):
            fields = ("orelse",)
        for name in fields:
            for child in getattr(node, name, None) or ():
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    yield child
                elif isinstance(child, ast.AST):
                    stack.append(child)


def _python_imports(path: str, text: str, modules: dict[str, str]) -> set[str]:
    names: list[tuple[int, str, list[str]]] = []  # (level, module, imported names)
    try:
        tree = ast.parse(text)
        for node in _import_statements(tree):
            if isinstance(node, ast.Import):
                names.extend((0, a.name, []) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.append((node.level, node.module or "", [a.name for a in node.names]))
    # Python 2 or broken code: the regex still finds most. SystemError: CPython 3.11's "AST constructor
    # recursion depth mismatch" when a finalizer raises while the tree is built (as megatron's half-built
    # IndexedDataset did); it costs that file's parse, not its repository.
    except (SyntaxError, ValueError, RecursionError, SystemError):
        for m in _PY_FROM.finditer(text):
            mod = m.group(1)
            level = len(mod) - len(mod.lstrip("."))
            names.append((level, mod.lstrip("."), [n.strip("() ") for n in m.group(2).split(",")]))
        for m in _PY_IMPORT.finditer(text):
            names.extend((0, n.strip().split(" ")[0], []) for n in m.group(1).split(",") if n.strip())
    pkg = path[:-3].split("/")[:-1]
    own = {name for name, p in modules.items() if p == path}
    deps = set()
    for level, mod, imported in names:
        if level:  # relative: resolve against this file's package, named from the repository root
            if level - 1 > len(pkg):
                continue
            base_parts = pkg[: len(pkg) - (level - 1)]
            bases = [".".join(base_parts + ([mod] if mod else []))]
        else:
            bases = [mod]
        for base in bases:
            # 'from pkg import sub' needs pkg/sub.py; 'from pkg import name' (or *) needs pkg itself
            base = base.strip(".")
            cands = [f"{base}.{n}".strip(".") for n in imported if n != "*" and f"{base}.{n}".strip(".") in modules]
            if not imported or len(cands) < len(imported):
                cands.append(base)
            for cand in cands:
                target = modules.get(cand)
                # 'import a.b.c' also depends on a.b and a; take the longest known prefix
                while target is None and "." in cand:
                    cand = cand.rsplit(".", 1)[0]
                    target = modules.get(cand)
                if target and cand not in own:
                    deps.add(target)
    deps.discard(path)
    return deps


def _resolve_relative(path: str, spec: str, pathset: set[str], exts: tuple[str, ...]) -> str | None:
    base = posixpath.normpath(posixpath.join(posixpath.dirname(path), spec))
    for cand in [base] + [base + e for e in exts] + [posixpath.join(base, "index" + e) for e in exts]:
        if cand in pathset:
            return cand
    return None


def file_dependencies(files: dict[str, str]) -> dict[str, set[str]]:
    """path -> the set of repository paths it imports."""
    index = _PathIndex(sorted(files))
    deps: dict[str, set[str]] = {}
    for p in index.paths:
        text = files[p]
        d: set[str] = set()
        if not text:  # nothing to parse (pull_context passes every path, with text only where it reads)
            deps[p] = d
            continue
        if p.endswith(".py"):
            d = _python_imports(p, text, index.modules)
        elif p.endswith(_JS_EXT):
            d = _js_imports(p, text, index)
        elif p.endswith(_C_EXT):
            d = _c_includes(p, text, index)
        elif p.endswith(".rs"):
            d = _rust_mods(p, text, index)
        elif p.endswith((".java", ".kt")):
            d = _java_imports(text, index)
        elif p.endswith(".go"):
            d = _go_imports(text, index)
        d.discard(p)
        deps[p] = d
    return deps


class _PathIndex:
    """The repository's paths, indexed the ways the languages' imports name them."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.pathset = set(paths)
        self.modules = _python_modules(paths)
        self.by_basename: dict[str, list[str]] = defaultdict(list)
        self.java: dict[str, str] = {}  # dotted class name -> path
        self.go_dirs: dict[str, list[str]] = defaultdict(list)
        for p in paths:
            self.by_basename[posixpath.basename(p)].append(p)
            if p.endswith((".java", ".kt")):
                self.java[p.rsplit(".", 1)[0].replace("/", ".")] = p
            if p.endswith(".go"):
                self.go_dirs[posixpath.dirname(p)].append(p)


def _js_imports(path: str, text: str, index: _PathIndex) -> set[str]:
    out = set()
    for m in _JS_IMPORT.finditer(text):
        spec = m.group(1)
        if spec.startswith("."):
            t = _resolve_relative(path, spec, index.pathset, _JS_EXT + (".json",))
            if t:
                out.add(t)
    return out


def _c_includes(path: str, text: str, index: _PathIndex) -> set[str]:
    out = set()
    for m in _C_INCLUDE.finditer(text):
        t = _resolve_relative(path, m.group(1), index.pathset, ())
        if t is None:  # include paths: same relative path elsewhere, else a unique basename
            hits = [q for q in index.paths if q.endswith("/" + m.group(1)) or q == m.group(1)]
            hits = hits or index.by_basename.get(posixpath.basename(m.group(1)), [])
            t = hits[0] if len(hits) == 1 else None
        if t:
            out.add(t)
    return out


def _rust_mods(path: str, text: str, index: _PathIndex) -> set[str]:
    out = set()
    here = posixpath.dirname(path)
    stem = posixpath.basename(path)[:-3]
    mod_dir = here if stem in ("lib", "main", "mod") else posixpath.join(here, stem)
    for m in _RUST_MOD.finditer(text):
        for cand in (posixpath.join(mod_dir, m.group(1) + ".rs"), posixpath.join(mod_dir, m.group(1), "mod.rs")):
            if cand in index.pathset:
                out.add(cand)
                break
    return out


def _java_imports(text: str, index: _PathIndex) -> set[str]:
    out = set()
    for m in _JAVA_IMPORT.finditer(text):
        name = m.group(1)
        hits = [q for k, q in index.java.items() if k == name or k.endswith("." + name)]
        if len(hits) == 1:
            out.add(hits[0])
    return out


def _go_imports(text: str, index: _PathIndex) -> set[str]:
    out: set[str] = set()
    specs = [s for blk in _GO_IMPORT_BLOCK.findall(text) for s in re.findall(r'"([^"]+)"', blk)]
    specs += _GO_IMPORT_ONE.findall(text)
    for spec in specs:
        for dirname, gofiles in index.go_dirs.items():
            if dirname and (spec == dirname or spec.endswith("/" + dirname)):
                out.update(gofiles)
    return out


def strongly_connected_components(nodes: list[str], deps: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative: deep import chains do not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(deps[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(deps[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    comps.append(comp)
    return comps


def _order_component(comp: list[str], deps: dict[str, set[str]]) -> list[str]:
    """A cycle broken deterministically: repeatedly the member with the fewest unmet imports inside the
    component (then library before tests before examples, then by path)."""
    if len(comp) == 1:
        return comp
    members = set(comp)
    pending = {p: len(deps[p] & members) for p in comp}
    order: list[str] = []
    while pending:
        p = min(pending, key=lambda q: (pending[q], file_group(q), q))
        del pending[p]
        order.append(p)
        for q in pending:
            if p in deps[q]:
                pending[q] -= 1
    return order


def order_by_dependencies(deps: dict[str, set[str]]) -> list[str]:
    """Topological order of the components of ``deps`` (path -> paths it imports); see the module doc."""
    nodes = sorted(deps)
    comps = strongly_connected_components(nodes, deps)
    comp_of = {p: i for i, comp in enumerate(comps) for p in comp}
    waiting = [0] * len(comps)  # components each one still waits for
    users: dict[int, set[int]] = defaultdict(set)
    for p in nodes:
        for q in deps[p]:
            a, b = comp_of[p], comp_of[q]
            if a != b and a not in users[b]:
                users[b].add(a)
                waiting[a] += 1
    key = [min((file_group(p), p) for p in comp) for comp in comps]
    heap = [(key[i], i) for i in range(len(comps)) if waiting[i] == 0]
    heapq.heapify(heap)
    order: list[str] = []
    while heap:
        _, i = heapq.heappop(heap)
        order.extend(_order_component(comps[i], deps))
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(heap, (key[j], j))
    return order


def dependency_order(files: dict[str, str]) -> list[str]:
    """Paths ordered so that imported files come first; see the module doc."""
    return order_by_dependencies(file_dependencies(files))


def forward_imports(order: list[str], deps: dict[str, set[str]]) -> tuple[int, int]:
    """(imports whose target comes later in ``order``, all resolved imports): how well an order holds."""
    pos = {p: i for i, p in enumerate(order)}
    edges = [(p, q) for p, ds in deps.items() for q in ds if p in pos and q in pos]
    return sum(pos[q] > pos[p] for p, q in edges), len(edges)
