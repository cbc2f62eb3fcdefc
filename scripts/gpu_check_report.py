"""The parts of scripts/gpu_check.sh that read files: which test binaries hold the *_CUDA tests,
whether every *_CUDA test ran, and the report. Standard library only.

    python scripts/gpu_check_report.py cuda-binaries BUILD_DIR [REGEX]  # one binary a line (REGEX: of
                                                                        # the tests, default _CUDA$)
    python scripts/gpu_check_report.py cuda-tests JUNIT_XML      # exit 1 unless every *_CUDA test ran and passed
    python scripts/gpu_check_report.py report REPORT_DIR         # REPORT_DIR/report.md and report.json
"""

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

CUDA_TEST = re.compile(r"_CUDA$")


def lists_cuda_tests(gtest_listing, pattern=CUDA_TEST):
    """Whether a GoogleTest program's --gtest_list_tests output names a test whose full name
    (Suite.Test) matches `pattern` (*_CUDA by default). The listing has "Suite." lines, then one
    indented line per test, each possibly followed by a "# GetParam() = ..." comment."""
    suite = ""
    for line in gtest_listing.splitlines():
        words = line.split()
        if not words:
            continue
        if not line.startswith(" "):
            suite = words[0]
        elif pattern.search(suite + words[0]):
            return True
    return False


def cuda_binaries(build_dir, pattern=CUDA_TEST):
    """The GoogleTest programs of the build (executables named *_test) that hold *_CUDA tests (tests
    matching `pattern`), asked directly with --gtest_list_tests. ctest's listing is not read: on the GPU machines (CMake 4.4)
    it named a CMake wrapper as the program of every discovered test, twice in two forms."""
    found = []
    for directory, subdirectories, files in os.walk(build_dir):
        subdirectories[:] = sorted(d for d in subdirectories if d not in ("CMakeFiles", "_deps"))
        for name in sorted(files):
            path = os.path.join(directory, name)
            if not name.endswith("_test") or not os.access(path, os.X_OK):
                continue
            try:
                listing = subprocess.run([path, "--gtest_list_tests"], capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if listing.returncode == 0 and lists_cuda_tests(listing.stdout, pattern):
                found.append(path)
    return found


def cuda_tests(junit_path):
    """(name, outcome) of each *_CUDA test in a ctest JUnit file: passed, failed or skipped (ctest's
    'notrun': skipped by the test itself, or never started)."""
    outcomes = []
    for case in ElementTree.parse(junit_path).getroot().iter("testcase"):
        if CUDA_TEST.search(case.get("name", "")):
            status = case.get("status")
            outcome = {"run": "passed", "fail": "failed"}.get(status, "skipped")
            outcomes.append((case.get("name"), outcome))
    return outcomes


def check_cuda_tests(junit_path):
    if not os.path.exists(junit_path):
        print(f"{junit_path} is missing: ctest did not finish", file=sys.stderr)
        return 1
    outcomes = cuda_tests(junit_path)
    for name, outcome in outcomes:
        print(f"{outcome:8} {name}")
    bad = [name for name, outcome in outcomes if outcome != "passed"]
    if not outcomes:
        print(f"no *_CUDA test in {junit_path}", file=sys.stderr)
        return 1
    if bad:
        print(f"{len(bad)} of {len(outcomes)} *_CUDA tests did not pass (skipped with a GPU present counts as failed)", file=sys.stderr)
        return 1
    print(f"all {len(outcomes)} *_CUDA tests passed")
    return 0


def read_steps(report_dir):
    """steps.tsv: one line per step: name, status, seconds, command."""
    steps = []
    path = os.path.join(report_dir, "steps.tsv")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                name, status, seconds, command = line.rstrip("\n").split("\t", 3)
                steps.append({"name": name, "status": status, "seconds": int(seconds), "command": command})
    return steps


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def sanitizer_summary(log_path):
    """compute-sanitizer's summary line of a log ('ERROR SUMMARY: N errors', racecheck's 'RACECHECK
    SUMMARY: N hazards displayed (...)'), or what stands in for it."""
    for line in reversed(read_lines(log_path)):
        if "SUMMARY:" in line:
            return line.split("=========")[-1].strip()
    return "no SUMMARY line (see the log)"


def report(report_dir):
    steps = read_steps(report_dir)
    environment = dict(line.split(": ", 1) for line in read_lines(os.path.join(report_dir, "environment.txt")) if ": " in line)
    notes = read_lines(os.path.join(report_dir, "notes.txt"))
    junit = os.path.join(report_dir, "ctest.xml")
    if not os.path.exists(junit):
        junit = os.path.join(report_dir, "cuda_tests.xml")
    tests = cuda_tests(junit) if os.path.exists(junit) else []
    sanitizers = []
    for step in steps:
        if step["name"].startswith("sanitizer-"):
            _, tool, binary = step["name"].split("-", 2)
            # (memcheck_graphs: the CUDA-graph tests, under memcheck with the caching allocator)
            tool = tool.replace("_graphs", " (CUDA graphs, caching allocator)")
            sanitizers.append({"tool": tool, "binary": binary, "status": step["status"],
                               "summary": sanitizer_summary(os.path.join(report_dir, step["name"] + ".log"))})
    benchmark = None
    benchmark_path = os.path.join(report_dir, "cuda_benchmark.json")
    if os.path.exists(benchmark_path):
        with open(benchmark_path) as f:
            benchmark = json.load(f)
    passed = bool(steps) and all(step["status"] == "passed" for step in steps)
    result = {"result": "passed" if passed else "failed", "environment": environment, "steps": steps,
              "cuda_tests": [{"name": n, "outcome": o} for n, o in tests], "sanitizers": sanitizers,
              "benchmark": benchmark, "notes": notes}
    with open(os.path.join(report_dir, "report.json"), "w") as f:
        json.dump(result, f, indent=1)

    lines = ["# posenc GPU check", "",
             f"**{result['result'].upper()}**: {sum(s['status'] == 'passed' for s in steps)} of {len(steps)} steps passed "
             f"(scripts/gpu_check.sh; docs/gpu_check.md).", "", "## Environment", ""]
    lines += [f"- {key}: {value}" for key, value in environment.items()]
    lines += ["", "## Steps", "", "| step | result | seconds |", "|---|---|---|"]
    lines += [f"| {s['name']} | {s['status']} | {s['seconds']} |" for s in steps]
    lines += ["", f"## *_CUDA tests ({os.path.basename(junit)})", ""]
    lines += [f"- {o}: {n}" for n, o in tests] or ["- none found (see the ctest step)"]
    lines += ["", "## compute-sanitizer (*_CUDA tests)", "", "| tool | binary | result | summary |", "|---|---|---|---|"]
    lines += [f"| {s['tool']} | {s['binary']} | {s['status']} | {s['summary']} |" for s in sanitizers]
    lines += ["", "## Benchmarks (bench/cuda_benchmark.py)", ""]
    markdown_path = os.path.join(report_dir, "cuda_benchmark.md")
    if os.path.exists(markdown_path):
        with open(markdown_path) as f:
            lines.append(f.read().rstrip("\n"))
    else:
        lines.append("Not measured (see the benchmark step).")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    with open(os.path.join(report_dir, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0 if passed else 1


def main():
    if not (len(sys.argv) == 3 and sys.argv[1] in ("cuda-binaries", "cuda-tests", "report")
            or len(sys.argv) == 4 and sys.argv[1] == "cuda-binaries"):
        print(__doc__, file=sys.stderr)
        return 2
    command, path = sys.argv[1:3]
    if command == "cuda-binaries":
        pattern = re.compile(sys.argv[3]) if len(sys.argv) == 4 else CUDA_TEST
        print("\n".join(cuda_binaries(path, pattern)))
        return 0
    if command == "cuda-tests":
        return check_cuda_tests(path)
    return report(path)


if __name__ == "__main__":
    sys.exit(main())
