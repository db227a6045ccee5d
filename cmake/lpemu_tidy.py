#!/usr/bin/env python3
"""clang-tidy over one library layer (ctest tidy/library/LAYER), with a record of clean results.

clang-tidy gives the same answer for the same input, so a source whose input is unchanged since a
run that found it clean is not parsed again. A source's key is the SHA-256 of everything that
input is made of:

  - `clang-tidy --version` and the checked-in .clang-tidy;
  - the compile command of the source (compile_commands.json), with the source and build folders
    written as placeholders so that two clones of the same commit agree;
  - the path and contents of every file the source includes, system headers too (the dependency
    list clang++ of the same LLVM version reports with -M for that command);
  - the names of the headers under src/ and include/ (a new header can change what an include finds).

A key found in the checked-in record (tests/tidy/clean.txt) or in the build folder's own
(BUILD_DIR/tidy/clean-LAYER.txt, which this script appends to) counts as clean; every other
source is checked with clang-tidy. Without clang++ of clang-tidy's version no key is computed and
every source is checked. `--update-record` checks every layer and rewrites the checked-in record
with exactly the keys of the current sources (`make tidy-record`).
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

RECORD = os.path.join("tests", "tidy", "clean.txt")


def sha256_bytes(data):
    """Hex SHA-256 of bytes."""
    return hashlib.sha256(data).hexdigest()


class Keys:
    """Computes the input key of a source (module docstring); None where it cannot."""

    def __init__(self, tidy, source_dir, build_dir):
        self.source_dir = os.path.realpath(source_dir)
        self.build_dir = os.path.realpath(build_dir)
        self.file_hashes = {}
        name = os.path.basename(tidy)
        clangpp = name.replace("clang-tidy", "clang++")
        self.clangpp = shutil.which(clangpp) if clangpp != name else None
        version = subprocess.run([tidy, "--version"], capture_output=True, check=False).stdout
        with open(os.path.join(self.source_dir, ".clang-tidy"), "rb") as f:
            config = f.read()
        names = []
        for top in ("src", "include"):
            for root, _dirs, files in os.walk(os.path.join(self.source_dir, top)):
                names += [os.path.relpath(os.path.join(root, f), self.source_dir) for f in files
                          if f.endswith((".hpp", ".h"))]
        self.common = sha256_bytes(version + b"\0" + config + b"\0" + "\n".join(sorted(names)).encode())

    def normalise(self, text):
        """Writes the build and source folders as placeholders (build first: it may lie inside)."""
        return text.replace(self.build_dir, "@BUILD@").replace(self.source_dir, "@SOURCE@")

    def file_hash(self, path):
        """SHA-256 of one file's normalised path and contents, computed once per file."""
        real = os.path.realpath(path)
        if real not in self.file_hashes:
            with open(real, "rb") as f:
                self.file_hashes[real] = sha256_bytes(self.normalise(real).encode() + b"\0" + f.read())
        return self.file_hashes[real]

    def key(self, entry):
        """The key of one compile_commands.json entry, or None where clang++ cannot list its inputs."""
        if self.clangpp is None:
            return None
        args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
        # The object file is no input; what is left names the flags and the source.
        kept = []
        skip = False
        for a in args[1:]:
            if skip:
                skip = False
                continue
            if a == "-o":
                skip = True
                continue
            kept.append(a)
        with tempfile.TemporaryDirectory(prefix="lpemu-tidy-") as tmp:
            deps = os.path.join(tmp, "deps.d")
            cmd = [self.clangpp] + [a for a in kept if a != "-c"] + \
                  ["-M", "-MF", deps, "-Wno-unknown-warning-option", "-w"]
            done = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, check=False)
            if done.returncode != 0:
                return None
            with open(deps, encoding="utf-8") as f:
                text = f.read()
        inputs = text.split(":", 1)[1].replace("\\\n", " ").split()
        parts = [self.common, self.normalise(" ".join(kept))]
        parts += [self.file_hash(os.path.join(entry["directory"], p)) for p in inputs]
        return sha256_bytes("\n".join(parts).encode())


def read_record(path):
    """The keys of a record file ('KEY PATH' lines); empty where the file does not exist."""
    keys = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    keys.add(line.split()[0])
    return keys


def run_layer(args, layer, entries, keys, recorded, out_record):
    """Checks every source of one layer; returns [(relative path, key)] of clean sources, or None."""
    folder = os.path.join(args.source_dir, "src", layer)
    if not os.path.isdir(folder):
        print(f"LAYER='{layer}': expected a library layer, a folder of {args.source_dir}/src")
        return None
    sources = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".cpp"))
    clean, failed, todo = [], [], []
    for src in sources:
        rel = os.path.relpath(src, args.source_dir)
        entry = entries.get(os.path.realpath(src))
        if entry is None:
            print(f"{src}: not in {args.build_dir}/compile_commands.json (configure the build first)")
            failed.append(rel)
            continue
        key = keys.key(entry)
        if key is not None and key in recorded:
            clean.append((rel, key))
        else:
            todo.append((src, rel, key))

    def tidy(src):
        # The compile commands are g++'s: clang is told to ignore the warning options it lacks
        # and to leave warnings to the compiler build (-Werror there).
        return subprocess.run([args.clang_tidy, "--quiet", "-p", args.build_dir,
                               f"--config-file={args.source_dir}/.clang-tidy",
                               "--extra-arg=-Wno-unknown-warning-option", "--extra-arg=-Wno-error", src],
                              capture_output=True, text=True, check=False)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(tidy, [t[0] for t in todo]))
    for (_src, rel, key), done in zip(todo, results):
        if done.returncode != 0:
            print(done.stdout + done.stderr)
            failed.append(rel)
            continue
        clean.append((rel, key))
        if key is not None and out_record:
            with open(out_record, "a", encoding="utf-8") as f:
                f.write(f"{key} {rel}\n")
    checked = len(todo)
    if failed:
        print("clang-tidy found problems in:\n  " + "\n  ".join(failed))
        return None
    print(f"clang-tidy: {len(sources)} sources of layer {layer} clean "
          f"({checked} checked now, {len(sources) - checked} by a recorded clean result of the same input)")
    return clean


def main():
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clang-tidy", default="")
    p.add_argument("--build-dir", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--layer", action="append", default=[])
    p.add_argument("--jobs", type=int, default=1, help="clang-tidy processes at once")
    p.add_argument("--update-record", action="store_true",
                   help="check every given layer and rewrite tests/tidy/clean.txt with their keys")
    args = p.parse_args()
    if not args.clang_tidy or not os.path.exists(args.clang_tidy):
        print("clang-tidy not found: tidy/library skipped")
        return 0
    commands = os.path.join(args.build_dir, "compile_commands.json")
    if not os.path.exists(commands):
        print(f"{commands}: missing; configure with CMAKE_EXPORT_COMPILE_COMMANDS=ON")
        return 1
    with open(commands, encoding="utf-8") as f:
        entries = {os.path.realpath(os.path.join(e["directory"], e["file"])): e for e in json.load(f)}
    keys = Keys(args.clang_tidy, args.source_dir, args.build_dir)
    committed = os.path.join(args.source_dir, RECORD)
    os.makedirs(os.path.join(args.build_dir, "tidy"), exist_ok=True)
    all_clean, ok = [], True
    for layer in args.layer:
        own = os.path.join(args.build_dir, "tidy", f"clean-{layer}.txt")
        recorded = read_record(committed) | read_record(own)
        clean = run_layer(args, layer, entries, keys, recorded, own)
        if clean is None:
            ok = False
        else:
            all_clean += clean
    if not ok:
        return 1
    if args.update_record:
        if keys.clangpp is None:
            print("clang++ of clang-tidy's version not found: no keys, tests/tidy/clean.txt left as it was")
            return 1
        lines = sorted(f"{key} {rel}" for rel, key in all_clean)
        os.makedirs(os.path.dirname(committed), exist_ok=True)
        tmp = committed + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("# Keys of library sources clang-tidy found clean (cmake/lpemu_tidy.py; make tidy-record).\n")
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, committed)
        print(f"{committed}: {len(lines)} clean sources recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
