#!/usr/bin/env python3
"""Skipped tests are reported as skipped; run by ctest as `repo_skip_reporting`
(tests/repo/CMakeLists.txt), with the three fixture executables of tests/cpp/skip_fixture.cpp:
all_skipped (two tests, both GTEST_SKIP), mixed (one passes, one skips), failing (one fails,
one skips).

- tests/cpp/gtest_main.cpp prints the all-skipped line for all_skipped only, and keeps
  GoogleTest's exit codes (0, 0, 1);
- ctest, given the same SKIP_REGULAR_EXPRESSION as the real suites, reports all_skipped as
  "Skipped", mixed as "Passed" (not wholly skipped) and failing as "Failed";
- scripts/test_summary.py, on the JUnit files that ctest and GoogleTest write, counts each
  suite's passed/skipped/failed tests and lists the skip reasons;
- pytest's: ctest, given the pytest test's SKIP_REGULAR_EXPRESSION, reports a pytest run whose
  tests all skip as "Skipped", one that passes and skips as "Passed", one that fails as
  "Failed", with pytest's plain output and with the -rs --junitxml that scripts/test.sh adds
  (skipped, visibly, where pytest is not installed).

usage: test_skip_reporting.py --fixtures DIR --regex REGEX --pytest-regex REGEX --ctest PATH
                              --summary PATH
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

from checks import check, finish


def cmake_quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


PYTEST_FILES = {
    "all_skipped": "import pytest\n\ndef test_a():\n    pytest.skip('no GPU')\n\n"
                   "@pytest.mark.skipif(True, reason='no CPU backend')\ndef test_b():\n    pass\n",
    "mixed": "import pytest\n\ndef test_a():\n    pytest.skip('no GPU')\n\ndef test_b():\n    assert True\n",
    "failing": "import pytest\n\ndef test_a():\n    pytest.skip('no GPU')\n\ndef test_b():\n    assert False\n",
}


def pytest_checks(args):
    try:
        import pytest  # noqa: F401
    except ImportError:
        print("skipped: pytest is not installed; the pytest skip expression is not checked")
        return
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "CTestTestfile.cmake"), "w") as f:
            for kind, text in PYTEST_FILES.items():
                path = os.path.join(tmp, f"test_{kind}.py")
                with open(path, "w") as t:
                    t.write(text)
                # As python/CMakeLists.txt runs the real suite.
                argv = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path)
                cmd = " ".join(cmake_quote(a) for a in argv)
                f.write(f"add_test(pytest_{kind} {cmd})\n")
                f.write(f"set_tests_properties(pytest_{kind} PROPERTIES SKIP_REGULAR_EXPRESSION "
                        f"{cmake_quote(args.pytest_regex)})\n")
        for addopts in ("", f"-rs --junitxml={os.path.join(tmp, 'pytest.xml')}"):
            env = dict(os.environ, PYTEST_ADDOPTS=addopts)
            p = subprocess.run([args.ctest, "--test-dir", tmp], capture_output=True, text=True, env=env, timeout=300)
            out = p.stdout
            for kind, want in (("all_skipped", "Skipped"), ("mixed", "Passed"), ("failing", "Failed")):
                m = re.search(rf"pytest_{kind} \.+\**\s*(\w+)", out)
                check(m is not None and m.group(1) == want,
                      f"ctest: pytest whose tests {kind.replace('_', ' ')} is {want} (PYTEST_ADDOPTS='{addopts[:3]}')",
                      out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--regex", required=True)
    ap.add_argument("--pytest-regex", required=True)
    ap.add_argument("--ctest", required=True)
    ap.add_argument("--summary", required=True)
    args = ap.parse_args()
    kinds = {"all_skipped": (0, True), "mixed": (0, False), "failing": (1, False)}
    env = {k: v for k, v in os.environ.items() if k not in ("GTEST_OUTPUT", "GTEST_FILTER")}
    exe = {k: os.path.abspath(os.path.join(args.fixtures, f"skip_fixture_{k}")) for k in kinds}

    for kind, (rc, all_skipped) in kinds.items():
        p = subprocess.run([exe[kind]], capture_output=True, text=True, env=env, timeout=60)
        check(p.returncode == rc, f"{kind}: exit code {rc}", f"exit {p.returncode}\n{p.stdout}")
        matched = re.search(args.regex, p.stdout + p.stderr) is not None
        check(matched == all_skipped, f"{kind}: the all-skipped line {'printed' if all_skipped else 'not printed'}",
              p.stdout)

    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results")
        os.mkdir(results)
        with open(os.path.join(tmp, "CTestTestfile.cmake"), "w") as f:
            for kind in kinds:
                # Named as the executables, as the real suites are, so the summary finds their files.
                f.write(f"add_test(skip_fixture_{kind} {cmake_quote(exe[kind])})\n")
                f.write(f"set_tests_properties(skip_fixture_{kind} PROPERTIES SKIP_REGULAR_EXPRESSION "
                        f"{cmake_quote(args.regex)})\n")
            # ctest's JUnit marks a test whose executable is missing as skipped too: it is not one.
            f.write(f"add_test(missing_executable {cmake_quote(os.path.join(tmp, 'no_such_executable'))})\n")
        junit = os.path.join(results, "ctest.xml")
        p = subprocess.run([args.ctest, "--test-dir", tmp, "--output-junit", junit], capture_output=True, text=True,
                           env=dict(env, GTEST_OUTPUT=f"xml:{results}/"), timeout=120)
        out = p.stdout

        def status(kind):
            m = re.search(rf"skip_fixture_{kind} \.+\**\s*(\w+)", out)
            return m.group(1) if m else None

        check(status("all_skipped") == "Skipped", "ctest: all_skipped is Skipped", out)
        check(status("mixed") == "Passed", "ctest: mixed is Passed", out)
        check(status("failing") == "Failed", "ctest: failing is Failed", out)

        s = subprocess.run([sys.executable, args.summary, results], capture_output=True, text=True, timeout=60)
        text = s.stdout
        check(s.returncode == 0, "test_summary.py exits 0", text + s.stderr)

        def row(kind):
            m = re.search(rf"skip_fixture_{kind}\s+(\w+)\s+(\d+) passed\s+(\d+) skipped\s+(\d+) failed", text)
            return (m.group(1),) + tuple(int(x) for x in m.groups()[1:]) if m else None

        check(row("all_skipped") == ("skipped", 0, 2, 0), "summary: all_skipped 0 passed 2 skipped", text)
        check(row("mixed") == ("passed", 1, 1, 0), "summary: mixed 1 passed 1 skipped", text)
        check(row("failing") == ("failed", 0, 1, 1), "summary: failing 1 skipped 1 failed", text)
        check(re.search(r"missing_executable\s+not run", text) is not None, "summary: a missing executable is not run",
              text)
        check(re.search(r"\b3\s+fixture: no such device\s+\(", text) is not None,
              "summary: the reason of three skips, without GoogleTest's file:line", text)
        check(re.search(r"\b1\s+fixture: no such library\s+\(skip_fixture_all_skipped 1\)", text) is not None,
              "summary: the reason of one skip and where", text)

    pytest_checks(args)
    return finish("test_skip_reporting")


if __name__ == "__main__":
    sys.exit(main())
