"""Every public name of tilus says what it does in `help()` and an IDE: the package's names,
the members of tilus.Script and of the tensor classes, the classes of tilus._C that users meet
and their members, and the functions of tilus.testing. And tilus/_C.pyi, the type stubs of the
extension module, stays in step with it: it parses, names everything the package takes from
tilus._C, names nothing tilus._C lacks, and declares each class's members as they are."""
import ast
import inspect
import os
import re
import types

import pytest

import tilus
from tilus import _C

PACKAGE = os.path.dirname(tilus.__file__)
STUB = os.path.join(PACKAGE, "_C.pyi")

# The classes of tilus._C that the public API hands out (beyond those tilus re-exports):
# tilus.trace -> Program, Script.compiled -> GpuKernel, the CPU backend's CpuKernel, the layout
# functions -> RegisterLayout, autotune_report -> TuneEntry, a tensor's .t -> Tensor.
USER_CLASSES = [_C.Program, _C.GpuKernel, _C.CpuKernel, _C.RegisterLayout, _C.TuneEntry, _C.Tensor]
PUBLIC_SUBMODULES = [tilus.testing]

# "name(arg0: int) -> tilus._C.Expr": the line pybind11 writes first (for overloads, numbered).
_SIGNATURE = re.compile(r"^\s*(\d+\.\s*)?[A-Za-z_][\w.]*\(.*\)(\s*->\s*.+)?\s*$")


def _own_text(doc):
    """A docstring without pybind11's generated signature lines: what a person wrote."""
    lines = [line for line in (doc or "").splitlines()
             if not _SIGNATURE.match(line) and line.strip() != "Overloaded function."]
    return "\n".join(lines).strip()


def _public(names):
    return sorted(n for n in names if not n.startswith("_"))


def _members(cls):
    """(name, attribute) of a class's public members that tilus defines: those of Python's and
    pybind11's own base classes (Exception.args, ...) are left out."""
    out = []
    for name in _public(dir(cls)):
        owner = next(c for c in cls.__mro__ if name in c.__dict__)
        if owner.__module__ in ("builtins", "pybind11_builtins"):
            continue
        out.append((name, owner.__dict__[name]))
    return out


def _documented():
    """(what, docstring) of every public name this test holds to a docstring."""
    out = []

    def add_class(what, cls):
        out.append((what, cls.__doc__))
        for name, attr in _members(cls):
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, types.MemberDescriptorType):  # a slot: its doc is in a __slots__ dict
                out.append((f"{what}.{name}", inspect.getdoc(attr)))
            else:
                out.append((f"{what}.{name}", attr.__doc__))

    for name in _public(dir(tilus)):
        obj = getattr(tilus, name)
        what = f"tilus.{name}"
        if isinstance(obj, type):
            add_class(what, obj)
        elif isinstance(obj, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
            out.append((what, obj.__doc__))
        else:  # a value (tilus.float16, ...): its type says what it is
            out.append((f"{what} ({type(obj).__name__})", type(obj).__doc__))
    for module in PUBLIC_SUBMODULES:
        for name in _public(dir(module)):
            obj = getattr(module, name)
            if getattr(obj, "__module__", None) == module.__name__:
                out.append((f"{module.__name__}.{name}", obj.__doc__))
    for cls in USER_CLASSES:
        add_class(f"tilus._C.{cls.__name__}", cls)
    for name in _public(dir(_C)):  # every function and class of the module, internal ones too
        obj = getattr(_C, name)
        if isinstance(obj, (type, types.BuiltinFunctionType)):
            out.append((f"tilus._C.{name}", obj.__doc__))
    return out


def test_the_walk_reaches_the_public_api():
    names = {what for what, _ in _documented()}
    for expected in ["tilus.Script.copy", "tilus.Script.copy_async", "tilus.Script.global_view", "tilus.Script.dot",
                     "tilus.Script.thread_group", "tilus.Script.exp", "tilus.Script.source", "tilus.Script.range",
                     "tilus.RegisterTensor.to", "tilus.RegisterTensor.T", "tilus.GlobalTensor.shape",
                     "tilus.Region.offsets", "tilus.DataType.from_name", "tilus.Expr.dtype", "tilus.Var.name",
                     "tilus.CompileError", "tilus.local", "tilus.cdiv", "tilus.testing.do_bench",
                     "tilus.visualize_layout", "tilus._C.RegisterLayout.owners", "tilus._C.Program.text",
                     "tilus._C.GpuKernel.registers", "tilus.float16 (DataType)"]:
        assert expected in names


def test_every_public_name_has_a_docstring():
    missing = [what for what, doc in _documented() if not _own_text(doc)]
    assert not missing, "no docstring (or only pybind11's signature): " + ", ".join(missing)


def test_the_instruction_methods_show_their_parameters():
    # help() shows the method's own signature through the wrapper that checks its arguments
    sig = inspect.signature(tilus.Script.copy_async)
    assert list(sig.parameters) == ["self", "src", "dst", "offsets", "dims", "evict", "check_bounds"]
    assert sig.parameters["dst"].annotation is tilus.SharedTensor
    assert "cp.async" in tilus.Script.copy_async.__doc__
    assert inspect.signature(tilus.Script.exp).return_annotation is tilus.RegisterTensor


def _stub():
    with open(STUB) as f:
        return ast.parse(f.read(), STUB)


def _stub_names(body):
    """Names a stub's module or class body defines (imports are not re-exported by a stub)."""
    names = set()
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _used_from_C():
    """Names the package's modules take from tilus._C: `from ._C import x` and `_C.x`."""
    used = set()
    for f in sorted(os.listdir(PACKAGE)):
        if not f.endswith(".py"):
            continue
        with open(os.path.join(PACKAGE, f)) as src:
            tree = ast.parse(src.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "_C" and node.level == 1:
                used.update(a.name for a in node.names)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "_C":
                used.add(node.attr)
    return used


def test_the_stub_parses_and_names_what_the_package_takes_from_C():
    names = _stub_names(_stub().body)
    reexported = {n for n in dir(tilus) if not n.startswith("_") and getattr(_C, n, None) is getattr(tilus, n)}
    assert reexported >= {"DataType", "Expr", "CompileError", "replicated"}
    used = _used_from_C() | reexported
    assert {"Builder", "TuneSpace", "local", "spatial"} <= used
    missing = sorted(n for n in used if n not in names)
    assert not missing, f"tilus/_C.pyi lacks {missing}: add their stubs (signatures as in python/src/bindings.cpp)"
    stale = sorted(n for n in names if not n.startswith("_") and not hasattr(_C, n))
    assert not stale, f"tilus/_C.pyi names {stale}, which tilus._C does not have"


def test_the_stub_declares_each_class_as_it_is():
    for node in _stub().body:
        if not isinstance(node, ast.ClassDef) or not hasattr(_C, node.name):
            continue
        cls = getattr(_C, node.name)
        stub = {n for n in _stub_names(node.body) if not n.startswith("_")}
        runtime = set(_public(vars(cls)))  # its own members (a stub class inherits the rest as Python does)
        assert stub == runtime, (f"tilus/_C.pyi, class {node.name}: lacks {sorted(runtime - stub)}, "
                                 f"has extra {sorted(stub - runtime)}")


@pytest.mark.parametrize("name", ["_C.pyi", "py.typed"])
def test_the_package_ships_its_type_information(name):
    # PEP 561: the marker says the package's inline annotations and stubs are to be used
    assert os.path.isfile(os.path.join(PACKAGE, name))


def test_the_docs_that_help_names_ship_with_the_package():
    # help() and the messages name docs/<page>.md: the package holds them (tilus/docs/, in the
    # build tree as in a wheel, from one list in python/CMakeLists.txt), so a pip install has them.
    texts = [doc or "" for _, doc in _documented()]
    for root, _, files in os.walk(PACKAGE):
        texts += [open(os.path.join(root, f), encoding="utf-8").read() for f in files if f.endswith((".py", ".pyi"))]
    named = sorted({m for t in texts for m in re.findall(r"\bdocs/([\w-]+\.md)", t)})
    assert "python.md" in named and "gpu.md" in named, named
    missing = [n for n in named if not os.path.isfile(os.path.join(PACKAGE, "docs", n))]
    assert not missing, f"help() names docs that {PACKAGE}/docs lacks: {missing}"
    assert "docs" in tilus.__doc__ and "tilus.__file__" in tilus.__doc__  # and says where they are


def test_the_docs_list_every_elementwise_math_method():
    # docs/instructions.md (the C++ and Python reference) and docs/python.md name every unary
    # math method of tilus.Script, and the same ones.
    from conftest import ROOT
    from tilus.script import _UNARY
    methods = set(_UNARY) | {"gelu"}
    for page in ("instructions.md", "python.md"):
        text = open(os.path.join(ROOT, "docs", page), encoding="utf-8").read()
        row = re.search(r"`abs exp [a-z0-9 ]+`", text).group(0).strip("`").split()
        listed = set(row) | ({"gelu"} if "`gelu(x, approximate" in text else set())
        assert listed == methods, (page, sorted(methods - listed), sorted(listed - methods))
