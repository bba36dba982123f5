"""The modules of the Python package import one another as a DAG: each imports in a fresh
interpreter, their module-level imports have no cycle, and no function imports a tilus module
(the usual way to hide a cycle). And `import tilus` needs nothing but the standard library and
the dependencies pyproject.toml declares (what `pip install .` installs)."""
import ast
import os
import re
import subprocess
import sys

import pytest

import tilus

from conftest import ROOT

PACKAGE = os.path.dirname(tilus.__file__)
# The instruction families (tilus/instructions/) count as one module of the graph: the union of
# their modules' imports of the package's modules.
SUBPACKAGES = ["instructions"]
MODULES = sorted([f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py")] + SUBPACKAGES)


def _imports(module):
    """(tilus modules imported, whether inside a function) for each import statement."""
    if module in SUBPACKAGES:
        folder = os.path.join(PACKAGE, module)
        return [imp for f in sorted(os.listdir(folder)) if f.endswith(".py")
                for imp in _file_imports(os.path.join(folder, f), depth=2)]
    return _file_imports(os.path.join(PACKAGE, module + ".py"), depth=1)


def _file_imports(path, depth):
    """The imports of one file `depth` packages below tilus's root (1: tilus/x.py)."""
    tree = ast.parse(open(path).read())
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom) and (child.level or (child.module or "").split(".")[0] == "tilus"):
                if child.level and child.level < depth:
                    visit(child, inner)  # within its own subpackage
                    continue
                parts = child.module.split(".")[0 if child.level else 1:][:1] if child.module else []
                names = parts or [a.name for a in child.names]
                # `from . import x` of something that is no .py module (_C, __version__) loads the package
                out.append(([n if n in MODULES else "__init__" for n in names if n != "_C"], inner))
            elif isinstance(child, ast.Import):
                names = [a.name.split(".")[1] for a in child.names if a.name.startswith("tilus.")]
                out.append(([n for n in names if n != "_C"], inner))
            visit(child, inner)

    visit(tree, False)
    return out


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_in_a_fresh_interpreter(module):
    name = "tilus" if module == "__init__" else f"tilus.{module}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(PACKAGE), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr


def test_module_imports_form_a_dag_and_no_function_imports_tilus():
    graph = {}
    for m in MODULES:
        graph[m] = set()
        for names, in_function in _imports(m):
            assert not (in_function and names), f"tilus/{m}.py imports {names} inside a function"
            graph[m].update(n for n in names if n != m)
    done, path = set(), []

    def visit(m):
        assert m not in path, "import cycle: " + " -> ".join(path[path.index(m):] + [m])
        if m in done:
            return
        path.append(m)
        for n in sorted(graph[m]):
            visit(n)
        path.pop()
        done.add(m)

    for m in MODULES:
        visit(m)
    assert graph["tracing"] == set() and "__init__" not in set().union(*(graph[m] for m in MODULES if m != "__init__"))


def test_nvidia_tilus_type_names_are_the_same_types():
    import tilus
    pairs = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8",
             "i64": "int64", "u8": "uint8", "u64": "uint64", "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2",
             "f6e3m2": "float6_e3m2", "f4e2m1": "float4_e2m1", "f7e5m1": "float7_e5m1", "f5e3m1": "float5_e3m1"}
    for bits in range(1, 8):
        pairs.update({f"i{bits}": f"int{bits}", f"int{bits}b": f"int{bits}", f"u{bits}": f"uint{bits}",
                      f"uint{bits}b": f"uint{bits}"})
    for alias, name in pairs.items():
        assert getattr(tilus, alias) is getattr(tilus, name), alias
        assert getattr(tilus, alias) == tilus.dtype(name), alias
    assert tilus.int4b.bits == 4 and tilus.f6e2m3.bits == 6


def test_layout_functions_take_ints_or_a_list():
    import pytest
    import tilus
    assert tilus.spatial(4, 8) == tilus.spatial([4, 8]) == tilus.spatial((4, 8))
    assert tilus.local(2, 1) * tilus.spatial(2, 16) == tilus.local([2, 1]) * tilus.spatial([2, 16])
    assert tilus.column_local(2, 2) == tilus.column_local([2, 2]) != tilus.local(2, 2)
    assert tilus.column_spatial(2, 4).num_threads == 8
    for bad in [(), (4, "x"), (0, 8), ([4, 8.0],), (True, 2)]:
        with pytest.raises(tilus.CompileError, match=r"tilus\.spatial: the shape must be positive ints"):
            tilus.spatial(*bad)


def _declared_dependencies():
    """The distribution names in pyproject.toml's [project] dependencies (what `pip install .`
    installs beside tilus), as module names."""
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    body = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S).group(1)
    deps = re.search(r"^dependencies\s*=\s*(\[.*?\])", body, re.M | re.S)
    names = eval(deps.group(1), {}, {}) if deps else []  # a list of strings
    return sorted(re.match(r"[A-Za-z0-9_.-]+", n).group(0).lower().replace("-", "_") for n in names)


# Blocks every import of a top-level module that is neither the standard library, tilus, nor a
# module named on the command line: the interpreter a fresh `pip install .` leaves.
_ONLY_DECLARED = """
import importlib.abc, sys
allowed = set(sys.argv[1].split(",")) | {"tilus"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in allowed or top.startswith("_") and top[1:] in sys.stdlib_module_names:
            return None
        raise ModuleNotFoundError(f"No module named {name!r} (not declared in pyproject.toml)", name=name)
sys.meta_path.insert(0, Block())
import tilus
print(tilus.float32)
"""


@pytest.mark.skipif(sys.version_info < (3, 10), reason="sys.stdlib_module_names needs Python 3.10")
def test_import_tilus_needs_only_the_declared_dependencies():
    # `pip install .` into a fresh venv, then `import tilus`: only pyproject.toml's dependencies
    # are there. numpy is one (host tensors and the CPU backend's arrays).
    declared = _declared_dependencies()
    assert "numpy" in declared, declared
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(PACKAGE), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _ONLY_DECLARED, ",".join(declared)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "float32"
    # The check can fail: without the declaration, the same import stops at numpy.
    r = subprocess.run([sys.executable, "-c", _ONLY_DECLARED, ""], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "No module named 'numpy'" in r.stderr, r.stderr
