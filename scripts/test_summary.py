#!/usr/bin/env python3
"""Prints what scripts/test.sh ran: per ctest test, the tests of its suite that passed, were
skipped and failed, and the reasons tests were skipped, from the JUnit files in RESULTS_DIR:
ctest.xml (ctest --output-junit), <executable>.xml (GoogleTest, GTEST_OUTPUT=xml:DIR/) and
pytest.xml (pytest --junitxml). Standard library only.

usage: test_summary.py RESULTS_DIR
Exit code: 0, or 1 when RESULTS_DIR holds no ctest.xml.
"""
import collections
import os
import re
import sys
import xml.etree.ElementTree as ET


def cases(path):
    """(passed, skipped, failed, [skip reason, ...]) of the test cases of a GoogleTest or pytest
    JUnit file."""
    passed = skipped = failed = 0
    reasons = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            skipped += 1
            node = case.find("skipped")
            reasons.append(reason(node.get("message", "") if node is not None else ""))
        elif case.get("status", "run") == "run":
            passed += 1
    return passed, skipped, failed, reasons


def reason(message):
    """The reason of a skip message without GoogleTest's file:line line or pytest's location."""
    lines = [l for l in message.strip().split("\n") if l.strip()]
    if len(lines) > 1 and re.match(r"^\S+:\d+$", lines[0].strip()):
        lines = lines[1:]
    text = " ".join(l.strip() for l in lines) or "(no reason given)"
    return re.sub(r"^Skipped: ", "", text)


def ctest_tests(path):
    """[(name, status, skip reason)] of ctest's JUnit file; status: passed, skipped (by
    SKIP_REGULAR_EXPRESSION or SKIP_RETURN_CODE), failed, not run (e.g. a missing executable:
    ctest counts it as failed), disabled."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        status = case.get("status", "")
        skipped = case.find("skipped")
        message = skipped.get("message", "") if skipped is not None else ""
        if case.find("failure") is not None or case.find("error") is not None or status == "fail":
            out.append((name, "failed", None))
        elif status == "disabled":
            out.append((name, "disabled", None))
        elif skipped is not None and message.startswith("SKIP_"):
            output = case.findtext("system-out") or ""
            said = [l.strip() for l in output.split("\n") if l.lower().startswith("skipped")]  # run_examples
            out.append((name, "skipped", said[0] if said else message))
        elif skipped is not None or status == "notrun":
            out.append((name, "not run", None))
        else:
            out.append((name, "passed", None))
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    results = argv[1]
    ctest = os.path.join(results, "ctest.xml")
    if not os.path.exists(ctest):
        print(f"test summary: no {ctest}", file=sys.stderr)
        return 1
    rows = []
    totals = [0, 0, 0]
    why = collections.defaultdict(collections.Counter)  # reason -> {suite: count}
    for name, status, skip_reason in ctest_tests(ctest):
        inner = os.path.join(results, f"{name}.xml")
        if not os.path.exists(inner) and name == "pytest":
            inner = os.path.join(results, "pytest.xml")
        if os.path.exists(inner):
            try:
                p, s, f, reasons = cases(inner)
            except ET.ParseError:
                rows.append((name, status, "(its results file does not parse)"))
                continue
            for r in reasons:
                why[r][name] += 1
            totals = [totals[0] + p, totals[1] + s, totals[2] + f]
            rows.append((name, status, f"{p:5d} passed {s:5d} skipped {f:5d} failed"))
        else:
            if skip_reason:
                why[skip_reason][name] += 1
            rows.append((name, status, "(one test)"))
    width = max((len(r[0]) for r in rows), default=4)
    print(f"\n[tilus] test summary: {len(rows)} ctest tests")
    for name, status, counts in rows:
        print(f"  {name:<{width}}  {status:<7}  {counts}")
    print(f"  {'total':<{width}}  {'':<7}  {totals[0]:5d} passed {totals[1]:5d} skipped {totals[2]:5d} failed"
          " (in the suites that report their tests)")
    if why:
        print("[tilus] skipped, by reason:")
        for r, suites in sorted(why.items(), key=lambda kv: -sum(kv[1].values())):
            where = ", ".join(f"{s} {n}" for s, n in suites.most_common())
            print(f"  {sum(suites.values()):5d}  {r}  ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
