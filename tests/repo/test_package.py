#!/usr/bin/env python3
"""The CMake package (find_package(tilus)) as a C++ user outside the repository meets it: install
the build into a fresh prefix, configure and build tests/package against it (tilus::tilus), run
jit_user (trace, CUDA source, the CPU backend when installed, a bundle written), then build
bundle_user against that bundle with tilus_add_bundle() and run it: without a GPU the call must
fail with status 3 and say why, with one it must refuse the null pointers (status 1).

usage: test_package.py --root REPO --build BUILD_DIR --cmake CMAKE
"""
import argparse
import os
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAILED ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--cmake", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tilus-package-") as tmp:
        prefix, user = os.path.join(tmp, "prefix"), os.path.join(tmp, "user")
        run([a.cmake, "--install", a.build, "--prefix", prefix])
        config = os.path.join(prefix, "lib", "cmake", "tilus", "tilusConfig.cmake")
        if not os.path.exists(config):
            sys.exit(f"FAILED: the install has no {config}")
        source = os.path.join(a.root, "tests", "package")
        run([a.cmake, "-S", source, "-B", user, f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"])
        run([a.cmake, "--build", user, "-j", "2"])
        bundle = os.path.join(tmp, "bundle", "user_kernels")
        out = run([os.path.join(user, "jit_user"), bundle])
        if "kernel Axpy(n: int32, alpha: float32, x: float32*, y: float32*)" not in out:
            sys.exit(f"FAILED: jit_user printed no traced kernel:\n{out}")
        print(out.splitlines()[-2:] if out else "")
        if not os.path.exists(os.path.join(bundle, "user_kernels.h")):
            print("no NVRTC in this build: the bundle part is skipped")
            return
        run([a.cmake, "-S", source, "-B", user, f"-DBUNDLE_DIR={bundle}"])
        run([a.cmake, "--build", user, "-j", "2"])
        out = run([os.path.join(user, "bundle_user")])
        if not ("status 3: user_kernels_axpy: no GPU" in out or "status 1: user_kernels_axpy: argument 'x' is a null pointer" in out):
            sys.exit(f"FAILED: bundle_user printed:\n{out}")
        print(out.strip())
    print("package: ok")


if __name__ == "__main__":
    main()
