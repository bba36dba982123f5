#!/usr/bin/env python3
"""The command lines of scripts/demo.sh, scripts/test.sh and run_examples; run by ctest as
`repo_scripts` (tests/repo/CMakeLists.txt). Nothing here installs or builds: where a script
would build, `cmake` and `ctest` are fakes on the PATH that record their arguments, and
TILUS_SKIP_INSTALL=1 keeps apt-get and pip away.

- demo.sh / test.sh --help and -h print their usage and exit 0 at once, without building;
- demo.sh's help names every option, TILUS_TARGET and every example; `demo.sh --list` prints
  exactly what `run_examples --list` prints;
- an unknown option or example name is exit code 2 with a message, before any build;
- demo.sh builds the run_examples target only and passes its flags and names on (default:
  matmul_mma matmul_mma_large); test.sh builds everything and runs ctest with JUnit output;
- run_examples --help, --list, unknown options and names.

usage: test_scripts.py --root REPO --run-examples PATH
"""
import argparse
import os
import stat
import subprocess
import sys
import tempfile

FAKE_CMAKE = r"""#!/usr/bin/env bash
printf 'cmake %s\n' "$*" >> "$FAKE_LOG"
if [ "${1:-}" = "--build" ]; then
  mkdir -p "$2/examples/cpp"
  printf '#!/usr/bin/env bash\nprintf "run_examples %%s\\n" "$*" >> "$FAKE_LOG"\n' > "$2/examples/cpp/run_examples"
  chmod +x "$2/examples/cpp/run_examples"
fi
"""
FAKE_CTEST = r"""#!/usr/bin/env bash
printf 'ctest %s\n' "$*" >> "$FAKE_LOG"
while [ $# -gt 0 ]; do
  if [ "$1" = "--output-junit" ]; then
    printf '<testsuite><testcase name="fake" status="run"/></testsuite>\n' > "$2"
  fi
  shift
done
"""

from checks import check, finish


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--run-examples", required=True)
    args = ap.parse_args()
    demo = os.path.join(args.root, "scripts", "demo.sh")
    test = os.path.join(args.root, "scripts", "test.sh")

    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = os.path.join(tmp, "bin")
        os.mkdir(bin_dir)
        for name, text in (("cmake", FAKE_CMAKE), ("ctest", FAKE_CTEST)):
            path = os.path.join(bin_dir, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        log = os.path.join(tmp, "log")
        build = os.path.join(tmp, "build")
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], FAKE_LOG=log,
                   TILUS_BUILD_DIR=build, TILUS_SKIP_INSTALL="1", TILUS_JOBS="2")
        env.pop("TILUS_TARGET", None)

        def run(cmd):
            if os.path.exists(log):
                os.remove(log)
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            calls = open(log).read().splitlines() if os.path.exists(log) else []
            return p, calls

        listed = subprocess.run([args.run_examples, "--list"], capture_output=True, text=True, timeout=60)
        examples = listed.stdout.split()
        check(listed.returncode == 0 and len(examples) >= 5, "run_examples --list prints the examples",
              listed.stdout + listed.stderr)

        for script in (demo, test):
            name = os.path.basename(script)
            for flag in ("--help", "-h"):
                p, calls = run([script, flag])
                check(p.returncode == 0 and p.stdout.startswith("usage:"), f"{name} {flag}: usage, exit 0",
                      f"exit {p.returncode}\n{p.stdout}{p.stderr}")
                check(not calls and not os.path.exists(build), f"{name} {flag}: nothing configured or built",
                      "\n".join(calls))
            p, calls = run([script, "--no-such-option"])
            check(p.returncode == 2 and "--no-such-option" in p.stderr and "--help" in p.stderr,
                  f"{name} --no-such-option: exit 2 naming it", f"exit {p.returncode}\n{p.stderr}")
            check(not calls, f"{name} --no-such-option: nothing built", "\n".join(calls))

        p, _ = run([demo, "--help"])
        for word in ["--cpu", "--gpu", "--checked", "--list", "TILUS_TARGET"] + examples:
            check(word in p.stdout, f"demo.sh --help mentions {word}")
        p, calls = run([demo, "--list"])
        check(p.returncode == 0 and p.stdout.split() == examples, "demo.sh --list == run_examples --list",
              f"demo.sh: {p.stdout.split()}\nrun_examples: {examples}")
        check(not calls, "demo.sh --list: nothing built")

        p, calls = run([demo, "--cpu", "no_such_example"])
        check(p.returncode == 2 and "no_such_example" in p.stderr and all(e in p.stderr for e in examples),
              "demo.sh no_such_example: exit 2 listing the examples", f"exit {p.returncode}\n{p.stderr}")
        check(not calls, "demo.sh no_such_example: nothing built", "\n".join(calls))

        p, calls = run([demo, "--cpu", "--checked", "vector_add", "softmax"])
        builds = [c for c in calls if c.startswith("cmake --build")]
        check(p.returncode == 0, "demo.sh --cpu --checked vector_add softmax runs", p.stdout + p.stderr)
        check(len(builds) == 1 and builds[0].split()[-2:] == ["--target", "run_examples"],
              "demo.sh builds the run_examples target only", "\n".join(calls))
        check("run_examples --cpu --checked vector_add softmax" in calls,
              "demo.sh passes its flags and names to run_examples", "\n".join(calls))
        p, calls = run([demo])
        check("run_examples matmul_mma matmul_mma_large" in calls,
              "demo.sh runs matmul_mma matmul_mma_large by default", "\n".join(calls))

        p, calls = run([test])
        builds = [c for c in calls if c.startswith("cmake --build")]
        tests = [c for c in calls if c.startswith("ctest ")]
        check(p.returncode == 0 and len(builds) == 1 and "--target" not in builds[0],
              "test.sh builds everything", f"exit {p.returncode}\n" + "\n".join(calls) + p.stderr)
        check(len(tests) == 1 and "--output-junit" in tests[0], "test.sh runs ctest with JUnit output",
              "\n".join(calls))
        check("test summary" in p.stdout, "test.sh prints the test summary", p.stdout + p.stderr)

    # run_examples itself: these exit before any backend is touched.
    p = subprocess.run([args.run_examples, "--help"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "usage:" in p.stdout and all(e in p.stdout for e in examples),
          "run_examples --help: usage with every example, exit 0", p.stdout + p.stderr)
    p = subprocess.run([args.run_examples, "--cpu", "vector_add", "no_such_example"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 2 and "no_such_example" in p.stderr and all(e in p.stderr for e in examples)
          and "PASS" not in p.stdout, "run_examples no_such_example: exit 2 listing the examples, nothing run",
          f"exit {p.returncode}\n{p.stdout}{p.stderr}")
    p = subprocess.run([args.run_examples, "--no-such-option"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--no-such-option" in p.stderr, "run_examples --no-such-option: exit 2",
          f"exit {p.returncode}\n{p.stdout}{p.stderr}")

    return finish("test_scripts")


if __name__ == "__main__":
    sys.exit(main())
