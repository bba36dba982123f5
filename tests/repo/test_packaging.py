#!/usr/bin/env python3
"""The license, the Python package's metadata and the README's prerequisites; run by ctest as
`repo_packaging` and `repo_package_metadata` (tests/repo/CMakeLists.txt).

usage: test_packaging.py --root REPO            LICENSE, pyproject.toml, README prerequisites
       test_packaging.py --root REPO --metadata  the metadata `pip install .` would write, from
                                                  scikit-build-core (exit 77, skipped, where it
                                                  is not installed or too old)
"""
import argparse
import hashlib
import os
import re
import shutil
import sys
import tempfile

# sha256 of the Apache License 2.0 as the Apache Software Foundation publishes it
# (https://www.apache.org/licenses/LICENSE-2.0.txt, Debian's /usr/share/common-licenses/Apache-2.0).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"

from checks import check, finish


def read(root, *path):
    with open(os.path.join(root, *path), encoding="utf-8") as f:
        return f.read()


def pyproject(root):
    text = read(root, "pyproject.toml")
    try:
        import tomllib  # Python 3.11
        return tomllib.loads(text)
    except ImportError:
        pass
    try:
        import tomli
        return tomli.loads(text)
    except ImportError:
        pass
    # The few keys checked here, without a TOML parser (Python 3.9 / 3.10 without tomli).
    def value(section, key):
        body = re.search(r"^\[%s\]\s*$(.*?)(?=^\[|\Z)" % re.escape(section), text, re.M | re.S)
        m = body and re.search(r"^%s\s*=\s*(.+)$" % re.escape(key), body.group(1), re.M)
        return eval(m.group(1), {}, {}) if m else None  # strings and lists of strings
    return {"build-system": {"requires": value("build-system", "requires")},
            "project": {k: value("project", k) for k in ("name", "license", "license-files", "requires-python")}}


def minimum(requires, name):
    for r in requires:
        m = re.match(r"^%s\s*>=\s*([0-9.]+)$" % re.escape(name), r)
        if m:
            return m.group(1)
    return None


def static_checks(root):
    with open(os.path.join(root, "LICENSE"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    check(digest == APACHE_2_SHA256, "LICENSE is the Apache License 2.0, verbatim", f"sha256 {digest}")

    meta = pyproject(root)
    project, requires = meta["project"], meta["build-system"]["requires"]
    check(project.get("license") == "Apache-2.0", 'pyproject.toml: license = "Apache-2.0"', str(project.get("license")))
    check("LICENSE" in (project.get("license-files") or []), "pyproject.toml: license-files has LICENSE")
    skbuild = minimum(requires, "scikit-build-core")
    # A license as an SPDX string (PEP 639) needs scikit-build-core 0.11; 0.10 refuses it.
    check(skbuild is not None and tuple(map(int, skbuild.split("."))) >= (0, 11),
          "pyproject.toml: scikit-build-core>=0.11 (PEP 639 license)", str(requires))

    readme = read(root, "README.md")
    check(re.search(r"^## Prerequisites\s*$", readme, re.M) is not None, "README has a Prerequisites section")
    prereq = readme.split("## Prerequisites", 1)[-1].split("\n## ", 1)[0]
    cmake_min = re.search(r"cmake_minimum_required\(VERSION ([0-9.]+)\)", read(root, "CMakeLists.txt")).group(1)
    python_min = re.match(r"^>=\s*([0-9.]+)$", project.get("requires-python", "")).group(1)
    pybind_min = minimum(requires, "pybind11")
    llvm_min = re.search(r"LLVM_VERSION_MAJOR GREATER_EQUAL (\d+)", read(root, "src", "CMakeLists.txt")).group(1)
    for what, version in (("CMake", cmake_min), ("Python", python_min), ("pybind11", pybind_min),
                          ("LLVM", llvm_min), ("scikit-build-core", skbuild)):
        pattern = r"%s\b[^|]{0,40}?\b%s\s+or\s+newer" % (re.escape(what), re.escape(version))
        check(re.search(pattern, prereq) is not None,
              f"README prerequisites: {what} {version} or newer (as the build requires)")
    common = read(root, "scripts", "common.sh")
    table = re.search(r"declare -A TILUS_PACKAGES=\((.*?)\n\)", common, re.S).group(1)
    packages = re.findall(r"\[([\w+.-]+)\]=", table) + ["llvm-dev"]
    pip = re.search(r'pip install -q ([\w -]+?) >/dev/null', common).group(1).split()
    for p in packages + pip:
        check(f"`{p}`" in prereq, f"README prerequisites name `{p}`, which the scripts install")
    check("pip install -v ." in readme, "README says how to see pip install's progress (pip install -v .)")


def metadata_check(root):
    try:
        import scikit_build_core
        from scikit_build_core.build import prepare_metadata_for_build_wheel
    except ImportError:
        print("skipped: scikit-build-core is not installed (pip install scikit-build-core)")
        return 77
    skbuild = minimum(pyproject(root)["build-system"]["requires"], "scikit-build-core")
    have = tuple(int(x) for x in re.findall(r"\d+", scikit_build_core.__version__)[:2])
    if have < tuple(int(x) for x in skbuild.split(".")[:2]):
        print(f"skipped: scikit-build-core {scikit_build_core.__version__} is older than {skbuild}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        os.mkdir(src)
        for name in ("pyproject.toml", "README.md", "LICENSE", "CMakeLists.txt"):
            shutil.copy(os.path.join(root, name), src)
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        cwd = os.getcwd()
        os.chdir(src)
        try:
            dist_info = prepare_metadata_for_build_wheel(out)
        finally:
            os.chdir(cwd)
        text = read(out, dist_info, "METADATA")
        check(re.search(r"^License-Expression: Apache-2\.0$", text, re.M) is not None,
              "METADATA: License-Expression: Apache-2.0", text[:400])
        check(re.search(r"^License-File: LICENSE$", text, re.M) is not None, "METADATA: License-File: LICENSE")
        check(os.path.exists(os.path.join(out, dist_info, "licenses", "LICENSE")) or
              os.path.exists(os.path.join(out, dist_info, "LICENSE")), "the license file is in the dist-info")
        check(re.search(r"^Name: tilus$", text, re.M) is not None, "METADATA: Name: tilus")
        # `import tilus` needs numpy (tests/python/test_imports.py): pip must install it.
        check(re.search(r"^Requires-Dist: numpy[^;\n]*$", text, re.M) is not None,
              "METADATA: Requires-Dist: numpy (not an extra)",
              "\n".join(l for l in text.splitlines() if l.startswith("Requires")))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--metadata", action="store_true")
    args = ap.parse_args()
    root = os.path.realpath(args.root)
    if args.metadata:
        rc = metadata_check(root)
        if rc == 77:
            return rc
    else:
        static_checks(root)
    return finish("test_packaging")


if __name__ == "__main__":
    sys.exit(main())
