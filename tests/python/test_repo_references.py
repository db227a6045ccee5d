"""No tracked file refers to a file the repository does not have (ctest docs/repo_references).

Checks, in every tracked *.md, *.toml, *.cpp, *.hpp, *.h, *.py and *.cmake file: repository paths
(docs/, formats/, data/, tests/, include/, src/, experiments/, bench/, cmake/) exist; relative
Markdown links resolve; nothing cites a file kept outside the repository. Failures name FILE:LINE."""

import os
import re
import subprocess

import pytest

SOURCE = os.path.abspath(os.environ.get("LPEMU_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
EXTENSIONS = (".md", ".toml", ".cpp", ".hpp", ".h", ".py", ".cmake")
ROOTS = ("docs", "formats", "data", "tests", "include", "src", "experiments", "bench", "cmake")

# A path-like token: a known top-level folder, then path characters, ending in a name.
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w.+/-]*[\w+-])" % "|".join(ROOTS))
# Relative Markdown link targets: [text](target) that is not a URL or an anchor.
LINK_RE = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
# Things that must never be cited: files kept outside the repository, issue numbers.
BANNED = [
    (re.compile(r"tensor-cores\.md"), "the tensor-core notes are docs/tensor-core-model.md"),
    (re.compile(r"\b(?:DESIGN|STYLE)\.md\b"), "no such file in the repository"),
    (re.compile(r"shared/reference|\.\./shared\b"), "a file outside the repository"),
    (re.compile(r"/work/"), "an absolute path of one machine"),
    (re.compile(r"\b[Ii]ssue #?[0-9]+"), "an issue number (say what, not which ticket)"),
]

# Tokens that look like repository paths but are not references to a file, each with its reason.
ALLOW = {
    "data/models/NAME/model.h5": "the lookup rule of --model, NAME a placeholder",
    "data/models/NAME": "the lookup rule of --model, NAME a placeholder",
    "experiments/plans/NAME.toml": "the lookup rule of --plan, NAME a placeholder",
    "experiments/big.toml": "an example experiment of the user's own (a Slurm array)",
    "tests/fuzz/smoke_corpus": "written by the fuzz smoke runs under build/fuzz",
    "tests/fuzz/smoke_findings": "written by the fuzz smoke runs under build/fuzz",
    "tests/fuzz/lpemu_fuzz_npy": "a built program under build/fuzz",
    "src/encoder.py": "GPT-2's tokenizer source in the openai/gpt-2 repository",
    "formats/element/my.toml": "the file named in expected error messages of a unit test",
    "docs/doc_examples": "a ctest name",
    "docs/repo_references": "a ctest name",
}
# Folders under which names are made at run time or are outputs of a run, not tracked files.
RUNTIME_PREFIXES = ("data/models/stories260K/activations.h5:/",)
# Files whose text is about these patterns (the checker itself and its documentation).
SELF = {"tests/python/test_repo_references.py", "docs/architecture.md"}


def tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=SOURCE, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [p for p in out.decode().split("\0") if p.endswith(EXTENSIONS)]


def is_placeholder(token):
    """Paths made at run time or written as patterns: NNNN, <layer>, *, {a,b}, NAME, ..."""
    return bool(re.search(r"NNNN|<|>|\*|\{|\}|\bNAME\b|\bFILE\b|\bDIR\b|\.\.\.|\bX\b|_X\b|\$", token))


def exists(rel):
    return os.path.exists(os.path.join(SOURCE, rel))


def candidates(token):
    """The token, and the token without trailing punctuation or a ':dataset' / ':LINE' suffix."""
    t = token.rstrip(".,;:")
    yield t
    if ":" in t:
        yield t.split(":", 1)[0]


def check_file(rel, tracked):
    problems = []
    path = os.path.join(SOURCE, rel)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (UnicodeDecodeError, FileNotFoundError):
        return problems
    in_fence = False
    for n, line in enumerate(lines, 1):
        if rel not in SELF:
            for pattern, why in BANNED:
                if pattern.search(line):
                    problems.append(f"{rel}:{n}: {pattern.pattern}: {why}")
        if rel.endswith(".md") and line.startswith("```"):
            in_fence = not in_fence
        for m in PATH_RE.finditer(line):
            token = m.group(1)
            if token in ALLOW or is_placeholder(token) or token.startswith(RUNTIME_PREFIXES):
                continue
            # Output folders of examples and sweeps (out/...) never match ROOTS; build outputs do not either.
            if any(exists(c) for c in candidates(token)):
                continue
            # A file named by its stem (`src/io/npy` for npy.hpp and npy.cpp).
            if any(f.startswith(token + ".") for f in tracked):
                continue
            # A path named relative to its own file's folder (e.g. a model README naming its own files).
            if any(exists(os.path.join(os.path.dirname(rel), c)) for c in candidates(token)):
                continue
            problems.append(f"{rel}:{n}: '{token}' does not exist in the repository")
        if rel.endswith(".md") and not in_fence:
            for m in LINK_RE.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target) or target.startswith("/"):
                    continue
                if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
                    problems.append(f"{rel}:{n}: link target '{target}' does not exist")
    return problems


def test_no_reference_to_a_missing_file():
    files = tracked_files()
    tracked = set(files)
    problems = []
    for rel in files:
        problems += check_file(rel, tracked)
    assert not problems, "references to what the repository does not have:\n" + "\n".join(problems)


def test_allow_list_has_reasons():
    for token, why in ALLOW.items():
        assert why.strip(), token
