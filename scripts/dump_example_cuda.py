"""Writes the CUDA source of every example kernel to a folder, one file per kernel and
specialization, so that a refactoring can show the generated code unchanged (diff -r the folders
of two builds). Needs no GPU: the Python examples are traced and their CUDA written for sm_90a
(nothing runs), and the C++ examples come from `print_ir --cuda`.

    PYTHONPATH=build/python python3 scripts/dump_example_cuda.py OUT_DIR [--build build]
"""
import argparse
import contextlib
import io
import hashlib
import os
import runpy
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_examples(out, arch):
    # Set before tilus is imported: it reads them once. Nothing runs, so no launch takes the fast path.
    os.environ["TILUS_EXAMPLES_QUICK"] = "1"
    os.environ["TILUS_TARGET"] = "cpu"
    os.environ["TILUS_FAST_PATH"] = "0"
    import tilus  # noqa: F401
    from tilus import _C, launch
    seen = {}

    def record(script, call):
        program = launch.specialized(script, call)
        src = _C.compile_cuda_source(program, arch)
        name = type(script).__name__
        digest = hashlib.sha256(src.encode()).hexdigest()[:12]
        key = (name, digest)
        if key not in seen:
            seen[key] = True
            with open(os.path.join(out, f"py-{current[0]}-{name}-{digest}.cu"), "w") as f:
                f.write(src)
        return launch._Compiled(None, "cpu", program)

    launch._compile = record
    launch.run = lambda compiled, call: None
    sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
    import common
    common.check = lambda *a, **k: None
    # Examples that need a GPU to run still compile: they see one, and take host arrays.
    host_arrays = common.arrays

    def arrays(*a, **k):
        on_gpu, common.on_gpu = common.on_gpu, lambda: False
        try:
            return host_arrays(*a, **k)
        finally:
            common.on_gpu = on_gpu
    common.arrays = arrays
    no_gpu = common.on_gpu
    try:  # the persistent examples size their grids by the GPU's SMs: an H100's 132
        import types
        import torch
        torch.cuda.get_device_properties = lambda *a: types.SimpleNamespace(multi_processor_count=132)
    except Exception:
        pass
    current = [""]
    failures = []
    for fn in sorted(os.listdir(os.path.join(ROOT, "examples", "python"))):
        if not fn.endswith(".py") or fn == "common.py":
            continue
        current[0] = fn[:-3]
        try:
            # An example that skips itself without a GPU runs again seeing one (taking host arrays).
            for on_gpu in (no_gpu, lambda: True):
                common.on_gpu = on_gpu
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    runpy.run_path(os.path.join(ROOT, "examples", "python", fn), run_name="__main__")
                if "skipped" not in buf.getvalue():
                    break
        except BaseException as e:  # an example that needs what this machine lacks
            import traceback
            failures.append(f"{fn}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    return failures


def cpp_examples(out, build, arch):
    exe = os.path.join(build, "examples", "cpp", "print_ir")
    for flags in ([], ["--divisible"]):
        r = subprocess.run([exe, "--cuda", arch, *flags], capture_output=True, text=True)
        name = "cpp" + "".join(f.replace("--", "-") for f in flags)
        with open(os.path.join(out, f"{name}.cu"), "w") as f:
            f.write(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--arch", default="sm_90a")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cpp_examples(a.out, a.build, a.arch)
    failures = python_examples(a.out, a.arch)
    files = sorted(os.listdir(a.out))
    print(f"{len(files)} files in {a.out}")
    for f in failures:
        print("not dumped:", f)


if __name__ == "__main__":
    main()
