#!/usr/bin/env python3
"""Fails when a function of posenc's sources is longer than the limit (150 lines).

    scripts/check_function_length.py                 # src/, include/ and python/ of the project
    scripts/check_function_length.py --limit N PATH  # other files or folders, another limit

A function's length is its lines from its signature to its closing brace (or its last line in
Python), comments and blank lines included, as lizard (https://github.com/terryyin/lizard)
counts them. A long function is split into named steps (src/io/hf_config.cpp's ConfigReader is
the example), never exempted: there is no list of exceptions.
"""

import argparse
import pathlib
import sys

import lizard

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ("src", "include", "python")
SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".py"}


def source_files(paths):
    for path in paths:
        if path.is_file():
            yield path
        else:
            yield from sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def long_functions(paths, limit):
    """(file, first line, name, length) of each function over `limit` lines."""
    found = []
    for path in source_files(paths):
        for function in lizard.analyze_file(str(path)).function_list:
            if function.length > limit:
                found.append((path, function.start_line, function.long_name, function.length))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=150, help="most lines a function may have")
    parser.add_argument("paths", nargs="*", type=pathlib.Path,
                        help="files or folders (default: the project's src, include and python)")
    args = parser.parse_args(argv)
    paths = args.paths or [ROOT / name for name in SOURCES]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error("no such file or folder: " + ", ".join(missing))
    found = long_functions(paths, args.limit)
    for path, line, name, length in found:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"{shown}:{line}: {name} has {length} lines, over the limit of {args.limit}; "
              "split it into named steps")
    if found:
        return 1
    print(f"check_function_length: every function is at most {args.limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
