#!/usr/bin/env python3
"""Builds and tests posenc against every torch release a user may have: the torch × route matrix.

For each torch version, in a virtual environment of its own (torch from PyPI, about 5 GB):

1. builds the wheel, ``pip wheel --no-build-isolation .`` (the README's Python route), keeping its
   CMake build folder;
2. installs that build as a CMake package (``cmake --install``) and builds and runs test/consumer
   against it with ``find_package(posenc)`` (the C++ route, test/consumer/run.cmake);
3. installs the wheel and runs the test subset (SUBSET below: every family through the operators,
   posenc.nn, TorchScript export, torch.compile / torch.export, fake and meta tensors) against it,
   and, where torch has the ONNX exporter posenc uses (>= 2.9), ONNX_SUBSET with the pinned onnx,
   onnxscript and ONNX Runtime (not with ``--ci``).

Two routes per version: ``no-toolkit`` (nvcc hidden, CUDA_HOME unset, ``POSENC_CUDA=OFF``: the CPU
kernels against the CPU libraries of pip's CUDA torch, what a machine without a CUDA toolkit gets)
and ``toolkit`` (nvcc on PATH; only where nvcc's CUDA major version is the torch's, else the row says
why not; ``TORCH_CUDA_ARCH_LIST`` from the environment, else posenc's choice, cmake/posencCuda.cmake).

The results are kept in docs/torch_matrix.json (one row per version and route, the newest run
replacing the older) and the table is written from it into docs/install.md and the README's list of
tested versions, between their ``torch-matrix`` markers. It downloads gigabytes and takes about 15
minutes per version and route on 2 cores (2 to 4 with ``--unoptimized``, once the environment is
made), so the matrix runs outside CI; CI runs one row, the newest
torch release, with ``--ci`` (scripts/test.sh newest: no-toolkit route compiled at -O0, nothing
written to docs/; its environment, about 5 GB, stays in build/torch_matrix/venvs/torch-newest).

The subset skips the tests that need posenc's CLI or C++ test tool (the C++ side of the TorchScript
and checkpoint round trips, about 150 tests): those run in CI on the pinned torch.

    scripts/torch_matrix.py                          # every version of VERSIONS, both routes
    scripts/torch_matrix.py --unoptimized            # the same, posenc's C++ at -O0
    scripts/torch_matrix.py --versions 2.6.0 2.15.0 --routes no-toolkit
    scripts/torch_matrix.py --versions newest --ci   # what CI runs
    scripts/torch_matrix.py --tables-only            # rewrite the tables from the JSON
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ["2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
ROUTES = ["no-toolkit", "toolkit"]
SCIKIT_BUILD_CORE = "scikit-build-core==0.11.6"
# The test subset: each family through its operators and posenc.nn modules (rotary, sinusoidal and
# learned tables, biases, vision), TorchScript export, torch.compile / torch.export with dynamic
# shapes, fake and meta tensors, context-parallel positions, DTensor's sharding rules, the out= and
# aliasing rules. Tests that
# need posenc's CLI or C++ test tool, or transformers/diffusers/timm, are not in it (those run on the
# pinned torch in CI).
SUBSET = ["test_ops.py", "test_rotary.py", "test_positions.py", "test_export.py", "test_dynamic_shapes.py",
          "test_attention_bias.py", "test_vision.py", "test_context_parallel.py", "test_distributed.py", "test_call_safety.py",
          "test_fake_devices.py", "test_package.py"]
# ONNX export (posenc.onnx, torch.onnx.export(dynamo=True) at opset 23: torch >= 2.9), one export per
# family and the refusals, run by ONNX Runtime, with onnx / onnxscript / onnxruntime at the versions
# scripts/setup.sh pins (test_onnx.py's exact tolerances are those of the pinned ONNX Runtime).
# Matrix rows only: CI runs all of test_onnx.py on the pinned torch, and its newest-torch row stays
# without it (about 3 minutes more).
ONNX_SUBSET = ["test_onnx.py::" + name for name in (
    "test_sequence_encodings_equal_posenc[dtype0-sinusoidal]", "test_token_and_position_embedding_equals_posenc",
    "test_rotary_equals_posenc[dtype0-half_split]", "test_rotary_equals_posenc[dtype0-interleaved]",
    "test_rotary_qk_with_gqa_and_dynamic_heads", "test_multimodal_rotary_equals_posenc[False]",
    "test_timesteps_equal_posenc[options0]", "test_timestep_embedder_equals_posenc", "test_conformer_block_equals_posenc",
    "test_attention_biases_keep_their_lengths_dynamic", "test_query_temperatures_equal_posenc",
    "test_tables_built_per_call_keep_their_length", "test_unsupported_calls_are_refused_with_the_reason",
    "test_export_writes_a_file_onnx_runtime_loads")]
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
JSON_PATH = ROOT / "docs" / "torch_matrix.json"
BEGIN, END = "<!-- torch-matrix:begin -->", "<!-- torch-matrix:end -->"


def log(message):
    print(f"torch_matrix: {message}", flush=True)


def run(command, env=None, cwd=None, logfile=None):
    """Runs a command, its output appended to logfile; returns (ok, seconds, last lines of output)."""
    start = time.monotonic()
    result = subprocess.run([str(part) for part in command], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if logfile:
        with open(logfile, "a") as handle:
            handle.write(f"$ {' '.join(map(str, command))}\n{result.stdout}\n")
    return result.returncode == 0, time.monotonic() - start, result.stdout[-3000:]


def nvcc_version():
    for candidate in [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]:
        if candidate and os.access(candidate, os.X_OK):
            out = subprocess.run([candidate, "--version"], capture_output=True, text=True).stdout
            match = re.search(r"release (\d+)\.(\d+)", out)
            if match:
                return candidate, f"{match.group(1)}.{match.group(2)}"
    return None, None


def route_environment(route, nvcc):
    env = dict(os.environ)
    # (directories of CUDA toolkits only: an nvcc in /usr/bin stays, with the compilers beside it;
    # the route's POSENC_CUDA=OFF is what keeps the toolkit out of the build)
    path = [entry for entry in env.get("PATH", "").split(":") if entry and "cuda" not in entry.lower()]
    for variable in ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "CUDAToolkit_ROOT"):
        env.pop(variable, None)
    if route == "toolkit" and os.path.dirname(nvcc) not in path:
        path.append(os.path.dirname(nvcc))
    env["PATH"] = ":".join(path)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def make_venv(work, version, logfile, upgrade=False):
    """The environment of one torch version; returns (python, torch version, torch's CUDA) or None."""
    venv = work / "venvs" / f"torch-{version}"
    python = venv / "bin" / "python"
    requirement = "torch" if version == "newest" else f"torch=={version}"
    probe = [python, "-c", "import torch, pytest, numpy, scikit_build_core; print('torch-matrix:', torch.__version__, torch.version.cuda)"]
    ok, _, out = run(probe, logfile=logfile) if python.exists() else (False, 0, "")
    if not ok or (version == "newest" and upgrade):
        log(f"creating {venv} with {requirement} (about 5 GB)")
        if not python.exists():
            ok, _, out = run([sys.executable, "-m", "venv", venv], logfile=logfile)
            if not ok:
                return None
        ok, _, out = run([python, "-m", "pip", "install", "--quiet", "--no-cache-dir", "--upgrade", requirement, "numpy",
                          "pytest", SCIKIT_BUILD_CORE], logfile=logfile)
        if not ok:
            log(f"installing {requirement} failed:\n{out}")
            return None
        ok, _, out = run(probe, logfile=logfile)
        if not ok:
            return None
    marked = [line.split()[1:] for line in out.splitlines() if line.startswith("torch-matrix: ")]
    if not marked:
        return None
    torch_version, torch_cuda = marked[-1]
    return python, torch_version, None if torch_cuda == "None" else torch_cuda


def onnx_pins():
    """onnx, onnxscript and onnxruntime at the versions scripts/setup.sh installs (`<name>_version=`)."""
    pins = {}
    for line in (ROOT / "scripts" / "setup.sh").read_text().splitlines():
        name, _, value = line.partition("_version=")
        if name in ONNX_PACKAGES and value:
            pins[name] = value.strip()
    missing = set(ONNX_PACKAGES) - set(pins)
    if missing:
        raise LookupError(f"scripts/setup.sh pins no {sorted(missing)}")
    return [f"{name}=={pins[name]}" for name in ONNX_PACKAGES]


def add_onnx(python, logfile):
    """Installs the pinned ONNX packages into a matrix environment where they are not; returns
    whether they are there."""
    pins = onnx_pins()
    check = ("import sys, importlib.metadata as m; sys.exit([f'{p}=={m.version(p)}' for p in "
             f"{ONNX_PACKAGES!r}] != {pins!r})")
    if run([python, "-c", check], logfile=logfile)[0]:
        return True
    ok, _, out = run([python, "-m", "pip", "install", "--quiet", "--no-cache-dir", *pins], logfile=logfile)
    if not ok:
        log(f"installing {pins} failed:\n{out}")
    return ok


def test_counts(output):
    """The counts of pytest's summary line (the last line that has one: torch may print after it)."""
    summary = ""
    for line in reversed(output.splitlines()):
        if re.search(r"\d+ (passed|failed|errors?)\b", line):
            summary = line
            break
    counts = {}
    for number, what in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed)", summary):
        counts[what.rstrip("s") if what.startswith("error") else what] = int(number)
    return counts


def one_route(work, version, route, python, torch_version, torch_cuda, logfile, unoptimized=False, onnx=False):
    row = {"torch": torch_version, "route": route, "torch_cuda": torch_cuda or "none",
           "date": datetime.date.today().isoformat()}
    nvcc, nvcc_release = nvcc_version()
    row["nvcc"] = nvcc_release if route == "toolkit" else "hidden"
    if route == "toolkit":
        if not torch_cuda:
            row.update(result="impossible", reason="a CPU-only torch has no CUDA kernels to build")
            return row
        if not nvcc:
            row.update(result="impossible", reason="no nvcc installed")
            return row
        if nvcc_release.split(".")[0] != torch_cuda.split(".")[0]:
            row.update(result="impossible",
                       reason=f"torch is built for CUDA {torch_cuda}; the installed nvcc is {nvcc_release} "
                              "(another major version)")
            return row
    env = route_environment(route, nvcc)
    if route == "toolkit":
        row["cuda_arch_list"] = env.get("TORCH_CUDA_ARCH_LIST") or "posenc's choice"
    tag = f"{version}-{route}"
    build_dir = work / "build" / tag
    wheel_dir = work / "wheels" / tag
    shutil.rmtree(build_dir, ignore_errors=True)
    shutil.rmtree(wheel_dir, ignore_errors=True)
    start = time.monotonic()
    cuda_define = "OFF" if route == "no-toolkit" else "ON"
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(os.cpu_count() or 2)
    # --ci and --unoptimized: compiled at -O0, as test_pip_install.py does (a fraction of the compile
    # time): they check that the build, the packages and the results are right, not the code's speed.
    optimization = ["-C", "cmake.define.CMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG"] if unoptimized else []
    row["compiled"] = "-O0" if unoptimized else "-O3"
    ok, seconds, out = run([python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", wheel_dir,
                            "-C", f"build-dir={build_dir}", "-C", f"cmake.define.POSENC_CUDA={cuda_define}",
                            *optimization, ROOT], env=env, logfile=logfile)
    row["wheel"] = "built" if ok else "FAILED"
    row["build_seconds"] = round(seconds)
    if not ok:
        errors = [line.strip() for line in out.splitlines() if "CMake Error" in line or "error:" in line
                  or "#error" in line or "fatal" in line]
        row.update(result="failed", reason="the wheel did not build: " + (errors[0] if errors else last_line(out))[:300],
                   seconds=round(time.monotonic() - start))
        return row
    wheels = sorted(wheel_dir.glob("posenc-*.whl"))
    if not wheels:
        row.update(result="failed", reason="pip wheel wrote no posenc wheel", seconds=round(time.monotonic() - start))
        return row
    row["wheel_file"] = wheels[0].name
    # The CMake package from the same objects: the build folder configured again as a plain CMake
    # build (SKBUILD off: the libraries' RUNPATH names the torch's lib folder, not the wheel's
    # ../../torch/lib; only a relink), installed, and used by test/consumer with find_package(posenc).
    prefix = subprocess.run([python, "-c", "import torch; print(torch.utils.cmake_prefix_path)"], env=env,
                            capture_output=True, text=True).stdout.strip()
    ok, _, out = run(["cmake", "-S", ROOT, "-B", build_dir, "-DSKBUILD=OFF", f"-DCMAKE_PREFIX_PATH={prefix}"],
                     env=env, logfile=logfile)
    ok = ok and run(["cmake", "--build", build_dir, "--target", "posenc", "posenc_io"], env=env, logfile=logfile)[0]
    ok = ok and run(["cmake", f"-DPOSENC_BUILD_DIR={build_dir}", f"-DCONSUMER_SOURCE_DIR={ROOT}/test/consumer",
                      f"-DWORK_DIR={work}/consumer/{tag}", "-DGENERATOR=Ninja",
                      "-P", ROOT / "test" / "consumer" / "run.cmake"], env=env, logfile=logfile)[0]
    row["cmake_package"] = "passed" if ok else "FAILED"
    ok_install, _, out_install = run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                                      wheels[0]], env=env, logfile=logfile)
    if not ok_install:
        row.update(result="failed", reason="the wheel did not install", seconds=round(time.monotonic() - start))
        return row
    site = subprocess.run([python, "-c", "import posenc, os; print(os.path.dirname(posenc.__file__))"], env=env,
                          capture_output=True, text=True)
    if site.returncode != 0:
        row.update(result="failed", reason="import posenc failed: " + last_line(site.stderr)[:200],
                   seconds=round(time.monotonic() - start))
        return row
    library_dir = Path(site.stdout.strip()) / "lib"
    libraries = [sorted(library_dir.glob(pattern)) for pattern in ("libposenc.so*", "libposenc_io.so*")]
    if not all(libraries):
        row.update(result="failed", reason=f"the wheel has no libposenc / libposenc_io in {library_dir}",
                   seconds=round(time.monotonic() - start))
        return row
    test_env = dict(env, POSENC_LIBRARY=str(libraries[0][0]), POSENC_IO_LIBRARY=str(libraries[1][0]))
    subset = SUBSET + (ONNX_SUBSET if onnx else [])
    row["onnx"] = bool(onnx)
    ok_tests, test_seconds, out = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
                                       *[f"{ROOT / 'test' / 'python'}/{name}" for name in subset]],
                                      env=test_env, cwd=work, logfile=logfile)
    row["tests"] = test_counts(out)
    row["test_seconds"] = round(test_seconds)
    row["seconds"] = round(time.monotonic() - start)
    passed = ok_tests and row["cmake_package"] == "passed"
    row["result"] = "passed" if passed else "failed"
    if not passed:
        failures = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))]
        row["reason"] = ("; ".join(failures[:5]) or last_line(out))[:600] if not ok_tests \
            else "the CMake package's consumer did not build or run"
    return row


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no output)"


def load_rows():
    if JSON_PATH.exists():
        return json.loads(JSON_PATH.read_text())["rows"]
    return []


def version_key(version):
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def table(rows):
    lines = ["| torch (CUDA of the wheel) | route | wheel + CMake package | test subset | time | run on |",
             "|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (version_key(r["torch"]), ROUTES.index(r["route"]))):
        route = row["route"]
        if route == "toolkit" and row.get("nvcc"):
            route += f" (nvcc {row['nvcc']}" + (f", TORCH_CUDA_ARCH_LIST={row['cuda_arch_list']}" if "cuda_arch_list" in row else "") + ")"
        if row["result"] == "impossible":
            lines.append(f"| {row['torch']} ({row['torch_cuda']}) | {route} | impossible: {row['reason']} | | | {row['date']} |")
            continue
        counts = row.get("tests", {})
        tests = ", ".join(f"{counts[key]} {key}" for key in ("passed", "failed", "error", "skipped") if counts.get(key))
        build = f"wheel {row.get('wheel', '?')}, package {row.get('cmake_package', 'not run')}"
        verdict = "**passed**" if row["result"] == "passed" else f"**FAILED**: {row.get('reason', '')}"
        if row.get("onnx"):
            tests += " (ONNX export included)"
        minutes = f"{row.get('seconds', 0) / 60:.0f} min (build {row.get('build_seconds', 0) / 60:.0f} at {row.get('compiled', '-O3')})"
        lines.append(f"| {row['torch']} ({row['torch_cuda']}) | {route} | {build} | {verdict} {tests} | {minutes} | {row['date']} |")
    return "\n".join(lines)


def replace_between(path, text):
    content = path.read_text()
    begin, end = content.index(BEGIN), content.index(END)
    path.write_text(content[:begin + len(BEGIN)] + "\n" + text + "\n" + content[end:])


def write_tables(rows):
    replace_between(ROOT / "docs" / "install.md", table(rows))
    passing = sorted({row["torch"] for row in rows if row["result"] == "passed"}, key=version_key)
    routes = {}
    for row in rows:
        if row["result"] == "passed":
            routes.setdefault(row["torch"], set()).add(row["route"])
    listed = ", ".join(f"{version} ({' and '.join(sorted(routes[version], key=ROUTES.index))})" for version in passing)
    replace_between(ROOT / "README.md",
                    f"Tested torch releases (`scripts/torch_matrix.py`, [the table](docs/install.md#the-torch-matrix)): "
                    f"{listed or 'none yet'}.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=VERSIONS, help="torch versions, or 'newest'")
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=ROUTES)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "torch_matrix",
                        help="where the environments, builds and logs go (default: build/torch_matrix)")
    parser.add_argument("--keep-venvs", action="store_true", help="keep each environment (5 GB) after its run")
    parser.add_argument("--ci", action="store_true", help="write nothing to docs/; exit 1 if a route fails (implies --unoptimized)")
    parser.add_argument("--unoptimized", action="store_true",
                        help="compile posenc's C++ at -O0 (a fraction of the compile time; the row and table say so); "
                             "nvcc's CUDA flags stay those of Release")
    parser.add_argument("--upgrade", action="store_true", help="with 'newest': reinstall torch if a newer one exists")
    parser.add_argument("--tables-only", action="store_true", help="rewrite the tables from docs/torch_matrix.json")
    args = parser.parse_args()
    rows = load_rows()
    if args.tables_only:
        write_tables(rows)
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    status = 0
    for version in args.versions:
        logfile = args.work / f"torch-{version}.log"
        logfile.write_text("")
        made = make_venv(args.work, version, logfile, args.upgrade)
        if made is None:
            log(f"torch {version}: no environment (see {logfile})")
            status = 1
            continue
        python, torch_version, torch_cuda = made
        # ONNX export where torch has it (>= 2.9, test_onnx.py's own condition), outside --ci
        onnx = not args.ci and version_key(torch_version) >= (2, 9) and add_onnx(python, logfile)
        for route in args.routes:
            log(f"torch {torch_version} ({torch_cuda}), {route}: building and testing (log: {logfile})")
            try:
                row = one_route(args.work, version, route, python, torch_version.split("+")[0], torch_cuda, logfile,
                                unoptimized=args.ci or args.unoptimized, onnx=onnx)
            except Exception as error:  # a row for it, and on to the next
                row = {"torch": torch_version.split("+")[0], "route": route, "torch_cuda": torch_cuda or "none",
                       "date": datetime.date.today().isoformat(), "result": "failed",
                       "reason": f"torch_matrix.py: {type(error).__name__}: {error}"}
            log(f"torch {torch_version}, {route}: {row['result']} {row.get('tests', '')} {row.get('reason', '')}")
            if row["result"] == "failed":
                status = 1
                if args.ci:
                    print("".join(logfile.read_text().splitlines(keepends=True)[-80:]), flush=True)
            if not args.ci:
                rows = [r for r in rows if (r["torch"], r["route"]) != (row["torch"], row["route"])] + [row]
                JSON_PATH.write_text(json.dumps({"rows": sorted(rows, key=lambda r: (version_key(r["torch"]), r["route"]))},
                                                indent=1) + "\n")
                write_tables(rows)
        if not args.keep_venvs and not args.ci:
            shutil.rmtree(args.work / "venvs" / f"torch-{version}", ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
