#!/usr/bin/env python3
"""Checks the Markdown files of the repository (README.md, CHANGELOG.md, docs/*.md, ...) against
the repository itself; run by ctest as `repo_docs` (tests/repo/CMakeLists.txt).

- every relative link ([text](path), [text](path#anchor), [text](#anchor)) names a file or
  folder inside the repository that exists, and its anchor a heading of that file;
- no link or text points outside the repository: absolute paths of a machine (/work/...,
  /home/...), `../` that leaves the repository, file:// URLs;
- every path written in `code` (src/..., examples/cpp/matmul_mma.h, ir/lowering.h, tilus/transform.py,
  matmul_copy.h) names a file or folder of the repository, except the few listed in NOT_FILES
  (build outputs, the in-memory NVRTC header, CUDA's headers);
- every example name given to scripts/demo.sh or run_examples, and every `matmul_*` /
  `vector_add` / `softmax` / `layer_norm` name in code, is an example: a name
  `run_examples --list` prints (C++) or a file of examples/python/.

usage: check_docs.py --root REPO [--run-examples PATH_TO_run_examples]
Without --run-examples the C++ example names are read from examples/cpp/run_examples.cpp.
Exit code 0 when every check holds, 1 with one line per problem otherwise.
"""
import argparse
import os
import re
import subprocess
import sys
import unicodedata

# Folders that are not part of the repository's sources (build trees, caches, logs).
SKIP_DIRS = {".git", ".cache", "__pycache__", "node_modules", "gpu-logs", "carry", ".whl", ".gl"}

# Paths the docs name that are not files of the repository, each with why.
NOT_FILES = {
    "tilus/device.h": "the in-memory header NVRTC compiles against (src/codegen/cuda/device/ embedded)",
    "cuda_fp16.h": "CUDA toolkit header",
    "cuda_bf16.h": "CUDA toolkit header",
    "cpu.ll": "written by TILUS_DUMP_IR",
    "kernel.cu": "written by TILUS_DUMP_IR",
    "meta.json": "a file of the disk cache",
}
# Prefixes of paths that are build outputs or on the user's machine, not in the repository.
NOT_FILE_PREFIXES = ("build/", "build-", "gpu-logs/", "~/", "$")

# Absolute paths of a particular machine, file:// URLs.
OUTSIDE = re.compile(r"""(?<![\w.~$-])(/work/|/home/|/root/|/Users/|/mnt/|file://)[^\s`)\]>,;'"]*""")

PATH_EXTENSIONS = {"h", "cpp", "cuh", "cu", "py", "sh", "md", "txt", "cmake", "toml", "json", "cfg", "in", "yml"}
COMPONENT = re.compile(r"^(\.ci|\.\.|[A-Za-z_][A-Za-z0-9_-]*(\.(%s))?)$" % "|".join(sorted(PATH_EXTENSIONS)))
EXAMPLE_LIKE = re.compile(r"^(matmul_[a-z0-9_]+|vector_add|softmax|layer_norm)$")


def markdown_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build") and
                         not (rel == "." and x.startswith(".") and x != ".ci"))
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]
    return out


def repo_paths(root):
    """Every file and folder of the repository, as paths relative to root."""
    paths = set()
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not (rel == "." and x.startswith("build"))]
        for name in dirs + files:
            paths.add(os.path.normpath(os.path.join(rel, name)))
    return paths


def split_fences(text):
    """(prose, code): the text outside fenced code blocks (fence lines blanked, so line numbers
    stay) and the lines inside them, each as (line number, line)."""
    prose, code, fence = [], [], None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m and (fence is None or m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)):
            fence = m.group(1) if fence is None else None
            prose.append("")
            continue
        if fence is None:
            prose.append(line)
        else:
            prose.append("")
            code.append((n, line))
    return prose, code


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"`|\*\*|__", "", heading.strip()).lower()
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    h = "".join(c for c in h if c in " -_" or unicodedata.category(c)[0] in "LN")
    return h.replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        prose, _ = split_fences(f.read())
    seen, out = {}, set()
    for line in prose:
        out.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        k = seen.get(s, 0)
        seen[s] = k + 1
        out.add(s if k == 0 else f"{s}-{k}")
    return out


def cpp_example_names(root, run_examples):
    if run_examples:
        out = subprocess.run([run_examples, "--list"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise SystemExit(f"{run_examples} --list failed ({out.returncode}): {out.stderr}")
        return set(out.stdout.split())
    with open(os.path.join(root, "examples", "cpp", "run_examples.cpp"), encoding="utf-8") as f:
        return set(re.findall(r'^\s*\{"([a-z0-9_]+)",', f.read(), re.M))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--run-examples")
    args = ap.parse_args()
    root = os.path.realpath(args.root)
    paths = repo_paths(root)
    basenames = {os.path.basename(p) for p in paths}
    cpp_examples = cpp_example_names(root, args.run_examples)
    py_examples = {f[:-3] for f in os.listdir(os.path.join(root, "examples", "python")) if f.endswith(".py")}
    if len(cpp_examples) < 5:
        raise SystemExit(f"found only {sorted(cpp_examples)} as C++ example names")
    problems = []
    files = markdown_files(root)

    def exists_in_repo(target):
        return os.path.normpath(os.path.relpath(target, root)) in paths or os.path.realpath(target) == root

    def inside(target):
        return os.path.realpath(target) == root or os.path.realpath(target).startswith(root + os.sep)

    def check_code_path(rel, n, p, md_dir):
        p = p.rstrip(".,;:")
        if p in NOT_FILES or p.startswith(NOT_FILE_PREFIXES):
            return
        parts = p.rstrip("/").split("/")
        if not all(COMPONENT.match(c) for c in parts):
            return  # not a path: int8/16/32, tilus.min/max, self.blockIdx.x/.y
        if len(parts) == 1 and not p.endswith("/"):
            if "." in p and p not in basenames:
                problems.append(f"{rel}:{n}: `{p}`: no file of that name in the repository")
            return
        target = os.path.normpath(os.path.join(md_dir, p))
        from_root = os.path.normpath(os.path.join(root, p))
        if not inside(target) and not inside(from_root):
            problems.append(f"{rel}:{n}: `{p}` is outside the repository")
            return
        if exists_in_repo(from_root) or exists_in_repo(target):
            return
        norm = os.path.normpath(p)
        if any(q == norm or q.endswith(os.sep + norm) for q in paths):
            return  # ir/lowering.h (include/tilus/ir/lowering.h), tilus/transform.py (python/tilus/...)
        problems.append(f"{rel}:{n}: `{p}` does not exist in the repository")

    def check_example_args(rel, n, words):
        for w in words:
            w = w.strip("`,;.")
            if not w or w.startswith("-") or w in ("…", "...") or "=" in w or w.startswith(("[", "<", "$", "|", ">")):
                if w.startswith(("|", ">", "2>", "&")):
                    return
                continue
            if w not in cpp_examples:
                names = " ".join(sorted(cpp_examples))
                problems.append(f"{rel}:{n}: `{w}` is not an example of run_examples ({names})")

    for md in files:
        rel = os.path.relpath(md, root)
        md_dir = os.path.dirname(md)
        with open(md, encoding="utf-8") as f:
            text = f.read()
        prose, code = split_fences(text)
        all_lines = list(enumerate(text.split("\n"), 1))
        for n, line in all_lines:
            for m in OUTSIDE.finditer(line):
                problems.append(f"{rel}:{n}: `{m.group(0)}` is a path outside the repository")
        for n, line in enumerate(prose, 1):
            for m in re.finditer(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
                link = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", link) and not link.startswith("file:"):
                    continue  # https:, mailto:
                path, _, anchor = link.partition("#")
                if path.startswith("/"):
                    problems.append(f"{rel}:{n}: link `{link}` is an absolute path")
                    continue
                target = os.path.normpath(os.path.join(md_dir, path)) if path else md
                if not inside(target):
                    problems.append(f"{rel}:{n}: link `{link}` points outside the repository")
                elif not exists_in_repo(target):
                    problems.append(f"{rel}:{n}: link `{link}`: {os.path.relpath(target, root)} does not exist")
                elif anchor and target.endswith(".md") and anchor not in anchors(target):
                    problems.append(f"{rel}:{n}: link `{link}`: no heading with anchor #{anchor} in "
                                    f"{os.path.relpath(target, root)}")
            for m in re.finditer(r"`([^`]+)`", line):
                span = m.group(1).strip()
                words = span.split()
                if words and os.path.basename(words[0]) in ("demo.sh", "run_examples"):
                    check_example_args(rel, n, words[1:])
                elif len(words) == 1:
                    check_code_path(rel, n, span, md_dir)
                    if EXAMPLE_LIKE.match(span) and span not in cpp_examples and span not in py_examples:
                        problems.append(f"{rel}:{n}: `{span}` is not an example (C++: "
                                        f"{' '.join(sorted(cpp_examples))}; Python: {' '.join(sorted(py_examples))})")
        for n, line in code:
            words = line.split("#")[0].split()
            for i, w in enumerate(words):
                if os.path.basename(w) in ("demo.sh", "run_examples"):
                    check_example_args(rel, n, words[i + 1:])
                    break

    for p in problems:
        print(p)
    print(f"check_docs: {len(files)} Markdown files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
