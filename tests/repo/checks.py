"""The reporting the repository checks share: `check` prints one line per check and keeps the
failures, `finish` prints the count and gives the exit code."""

failures = []


def check(cond, what, detail=""):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)
        if detail:
            print("      " + detail.replace("\n", "\n      "))


def finish(name):
    print(f"{name}: {len(failures)} failed")
    return 1 if failures else 0
