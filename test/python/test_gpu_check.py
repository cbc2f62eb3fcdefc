"""scripts/gpu_check.sh and bench/cuda_benchmark.py on a machine without a GPU: the script's dry run
lists every step, without a GPU it stops with exit status 2 before building anything, its reading
of ctest's JUnit file fails a skipped *_CUDA test; and the CUDA benchmark's cases run on the CPU at
tiny shapes, where posenc's rotary agrees with transformers' apply_rotary_pos_emb, so that the code
a GPU machine will run is exercised here.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cuda_benchmark  # noqa: E402

STEPS = ["configure", "build", "cuda-tests", "benchmark", "profile", "ctest", "sanitizer-memcheck-", "sanitizer-racecheck-",
         "sanitizer-initcheck-", "cuda-tests-ran", "report"]


def gpu_present():
    if torch.cuda.is_available():
        return True
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listing.returncode == 0 and "GPU" in listing.stdout


@pytest.fixture()
def checkout(tmp_path):
    """The scripts in a tree of their own, so that a run can be seen to build nothing."""
    os.makedirs(tmp_path / "scripts")
    for name in ("gpu_check.sh", "gpu_check_report.py"):
        shutil.copy(os.path.join(ROOT, "scripts", name), tmp_path / "scripts" / name)
    return tmp_path


def run_script(checkout, *args):
    return subprocess.run(["bash", str(checkout / "scripts" / "gpu_check.sh"), *args], capture_output=True, text=True, timeout=300)


def test_dry_run_lists_every_step(checkout):
    result = run_script(checkout, "--dry-run")
    assert result.returncode == 0, result.stderr
    steps = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ") and ":" not in line.split()[0]]
    for step in STEPS:
        assert any(s == step or (step.endswith("-") and s.startswith(step)) for s in steps), f"{step} missing from:\n{result.stdout}"
    out = result.stdout
    assert "-DPOSENC_CUDA=ON" in out and "-DPOSENC_TEST_PER_CASE=ON" in out and "-DCMAKE_BUILD_TYPE=Release" in out and "-DPOSENC_BUILD_TESTS=ON" in out
    for tool in ("memcheck", "racecheck", "initcheck"):
        assert f"--tool {tool} --error-exitcode 1" in out
    assert "--gtest_filter=\\*_CUDA\\*" in out and "--output-junit" in out and "bench/cuda_benchmark.py" in out
    assert not (checkout / "build").exists(), "the dry run created build/"


@pytest.mark.skipif(gpu_present(), reason="this machine has a GPU: the script would run the whole check")
def test_without_gpu_exits_2_before_building(checkout):
    result = run_script(checkout)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == ["gpu_check: cannot run here: no NVIDIA GPU here (nvidia-smi lists none, and no torch sees one)"]
    assert not (checkout / "build").exists(), "the script built something without a GPU"


def junit(path, outcomes):
    """A ctest JUnit file with these (name, status) test cases."""
    cases = []
    for name, status in outcomes:
        inner = '<skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>' if status == "notrun" else ""
        cases.append(f'<testcase name="{name}" classname="{name}" time="0.1" status="{status}">{inner}</testcase>')
    path.write_text(f'<?xml version="1.0" encoding="UTF-8"?><testsuite name="posenc" tests="{len(cases)}">{"".join(cases)}</testsuite>')
    return str(path)


@pytest.mark.parametrize("outcomes, passes", [
    ([("Kernels.RotaryOnGpuMatchesCpu_CUDA", "run"), ("Kernels.Other", "run")], True),
    ([("Kernels.RotaryOnGpuMatchesCpu_CUDA", "notrun"), ("RotaryQk.OnGpuMatchesCpu_CUDA", "run")], False),
    ([("Kernels.RotaryOnGpuMatchesCpu_CUDA", "fail")], False),
    ([("Kernels.Other", "run")], False),  # no *_CUDA test at all
])
def test_a_skipped_cuda_test_fails_the_check(tmp_path, outcomes, passes):
    path = junit(tmp_path / "ctest.xml", outcomes)
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check_report.py"), "cuda-tests", path],
                            capture_output=True, text=True)
    assert (result.returncode == 0) == passes, result.stdout + result.stderr


def test_report_names_the_failed_step_and_the_skipped_test(tmp_path):
    junit(tmp_path / "ctest.xml", [("Kernels.RotaryOnGpuMatchesCpu_CUDA", "notrun")])
    (tmp_path / "steps.tsv").write_text("build\tpassed\t120\tcmake --build build/gpu\n"
                                        "sanitizer-memcheck-kernels_test\tfailed (exit 1)\t40\tcompute-sanitizer\n"
                                        "cuda-tests-ran\tfailed (exit 1)\t1\tpython\n")
    (tmp_path / "sanitizer-memcheck-kernels_test.log").write_text("========= ERROR SUMMARY: 2 errors\n")
    (tmp_path / "environment.txt").write_text("GPU: NVIDIA H100 80GB HBM3, 9.0\n")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check_report.py"), "report", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["result"] == "failed"
    assert report["cuda_tests"] == [{"name": "Kernels.RotaryOnGpuMatchesCpu_CUDA", "outcome": "skipped"}]
    assert report["sanitizers"][0]["summary"] == "ERROR SUMMARY: 2 errors"
    text = (tmp_path / "report.md").read_text()
    assert "**FAILED**: 1 of 3 steps passed" in text and "| memcheck | kernels_test | failed (exit 1) |" in text
    assert "GPU: NVIDIA H100 80GB HBM3, 9.0" in text


def test_sanitizer_binaries_are_the_programs_that_list_cuda_tests(tmp_path):
    """Two GPU runs (H200 and H100, CMake 4.4) found ctest naming `cmake` as the program of every
    *_CUDA test, so compute-sanitizer ran cmake: the programs are now asked for their tests."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import gpu_check_report

    def program(path, listing, status=0):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{listing}EOF\nexit {status}\n")
        path.chmod(0o755)
        return str(path)

    kernels = program(tmp_path / "test" / "kernels_test", "Kernels.\n  RotaryOnGpuMatchesCpu_CUDA\n  OnCpu\n")
    typed = program(tmp_path / "test" / "typed_test", "Typed/0.  # TypeParam = float\n  Runs_CUDA  # GetParam() = 1\n")
    program(tmp_path / "test" / "cpu_test", "Cpu.\n  Adds\n  NotCUDA_really\n")
    program(tmp_path / "test" / "broken_test", "Kernels.\n  X_CUDA\n", status=1)
    program(tmp_path / "test" / "CMakeFiles" / "stale_test", "Kernels.\n  X_CUDA\n")
    (tmp_path / "test" / "notes_test").write_text("Kernels.\n  X_CUDA\n")  # not executable
    assert gpu_check_report.cuda_binaries(str(tmp_path)) == [kernels, typed]
    assert not gpu_check_report.lists_cuda_tests("Suite.\n  A\nOther_CUDA.\n  B\n")
    # the CUDA-graph pass: only the programs with such a test (the second H100 run failed on
    # the others, whose filter matched nothing)
    graphs = program(tmp_path / "test" / "device_entry_test", "DeviceEntry.\n  ModuleForwardsCaptureInACudaGraph_CUDA\n")
    assert gpu_check_report.cuda_binaries(str(tmp_path), re.compile("CudaGraph.*_CUDA$")) == [graphs]


def test_report_reads_racecheck_summaries_and_names_the_graph_pass(tmp_path):
    (tmp_path / "steps.tsv").write_text("sanitizer-racecheck-kernels_test\tpassed\t9\tcompute-sanitizer\n"
                                        "sanitizer-memcheck_graphs-device_entry_test\tpassed\t5\tcompute-sanitizer\n")
    (tmp_path / "sanitizer-racecheck-kernels_test.log").write_text(
        "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    (tmp_path / "sanitizer-memcheck_graphs-device_entry_test.log").write_text("========= ERROR SUMMARY: 0 errors\n")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check_report.py"), "report", str(tmp_path)],
                   capture_output=True, text=True)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["sanitizers"] == [
        {"tool": "racecheck", "binary": "kernels_test", "status": "passed",
         "summary": "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"},
        {"tool": "memcheck (CUDA graphs, caching allocator)", "binary": "device_entry_test", "status": "passed",
         "summary": "ERROR SUMMARY: 0 errors"}]


def test_missing_reference_names_fail_with_the_pinned_version_and_skip_with_another():
    """The GPU machine's transformers (5.17) lacks names the tests import from the pinned 5.23.0:
    there the module is skipped, saying why; with the pinned version the import error stands."""
    import types
    from conftest import pinned_version, skip_unless_pinned
    error = ImportError("cannot import name '_get_alibi_slopes'")
    with pytest.raises(ImportError):
        skip_unless_pinned(types.SimpleNamespace(__name__="transformers", __version__=pinned_version("transformers")), error)
    with pytest.raises(pytest.skip.Exception, match=f"transformers 5.17.0 lacks .* pinned {pinned_version('transformers')}"):
        skip_unless_pinned(types.SimpleNamespace(__name__="transformers", __version__="5.17.0"), error)


# --- the benchmark's cases on the CPU ------------------------------------------------------------

TINY = cuda_benchmark.Model(q_heads=4, kv_heads=2, head_dim=16, rope_theta=500000.0, hidden=32, vocab=50)
TINY_SHAPES = [cuda_benchmark.Shape("decode_b1", 1, 1, 63, large=False), cuda_benchmark.Shape("decode_b3", 3, 1, 63, large=False),
               cuda_benchmark.Shape("prefill_b2x8", 2, 8, 0, large=True)]


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers", reason="transformers is installed in the pip test environment only (scripts/setup.sh)")


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="the benchmark compares with torch.compile (PyTorch >= 2.0)")
def test_benchmark_cases_run_and_agree_on_cpu(posenc_ops, transformers):
    """Every case, checked and timed on the CPU: posenc's rotary (in place and out of place) within
    rope_bound of HF's apply_rotary_pos_emb (4 unit roundoffs of the dtype times |x1| + |x2|: HF
    rounds cos/sin, both products and the sum to the dtype, posenc rounds once; see rope_bound), the
    add and the fused embedding within two roundings of the eager formulation, copy_ exact."""
    report = cuda_benchmark.run(posenc_ops, device="cpu", model=TINY, shapes=TINY_SHAPES, samples=2)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed
    cases = {"rope_qk": ["posenc_qk", "posenc_qk_inplace", "hf_eager", "hf_compiled", "roofline_copy"],
             "add_table": ["posenc_add", "posenc_add_inplace", "eager", "roofline_copy"],
             "token_position": ["posenc_fused", "eager", "roofline_copy"]}
    expected = {(family, case, shape.name, dtype) for family, names in cases.items() for case in names
                for shape in TINY_SHAPES for dtype in cuda_benchmark.DTYPES}
    assert {(r["family"], r["case"], r["shape"], r["dtype"]) for r in report["benchmarks"]} == expected
    assert {(c["name"]) for c in report["checks"]} == {"/".join(key) for key in expected}
    assert all(r["real_time_us"] > 0 and r["gbps"] > 0 for r in report["benchmarks"])
    # the targets: bandwidth for each posenc case at the large shape, the decode time at each decode
    # shape, torch.compile for the rotary ones everywhere
    kinds = {}
    for target in report["targets"]:
        kinds.setdefault(target["target"], set()).add(target["case"])
        assert isinstance(target["met"], bool)
    posenc_cases = [(f, c) for f, names in cases.items() for c in names if c.startswith("posenc")]
    assert kinds[">= 90% of copy_ bandwidth"] == {f"{f}/{c}/prefill_b2x8/{d}" for f, c in posenc_cases for d in cuda_benchmark.DTYPES}
    assert kinds["decode call <= 8 us"] == {f"{f}/{c}/{s}/{d}" for f, c in posenc_cases for s in ("decode_b1", "decode_b3") for d in cuda_benchmark.DTYPES}
    assert kinds["ahead of torch.compile (HF)"] == {f"rope_qk/{c}/{s.name}/{d}" for c in ("posenc_qk", "posenc_qk_inplace")
                                                    for s in TINY_SHAPES for d in cuda_benchmark.DTYPES}
    text = cuda_benchmark.markdown(dict(report, device="cpu"))
    assert "### rope_qk" in text and f"of {len(report['checks'])} agree" in text


TINY_KV_SHAPES = [cuda_benchmark.KvShape("decode_b3", prefill=0, decode=3, past=63, large=False),
                  cuda_benchmark.KvShape("mixed_24", prefill=20, decode=4, past=63, large=True)]


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="the benchmark compares with torch.compile (PyTorch >= 2.0)")
def test_kv_cache_benchmark_cases_run_and_agree_on_cpu(posenc_ops, transformers):
    """The fused KV-cache write's cases, checked and timed on the CPU: posenc's fused write, posenc's
    rotation then index_copy_, HF's apply_rotary_pos_emb then index_copy_ (eager, compiled) all leave
    the same queries and caches (rope_bound for the rotated rows, values exact), copy_ exact; the
    targets: the speedup over the rotation-then-write everywhere, the roofline at the large shape."""
    report = cuda_benchmark.run_kv_cache(posenc_ops, device="cpu", model=TINY, shapes=TINY_KV_SHAPES, samples=2)
    failed = [c for c in report["checks"] if not c["passed"]]
    assert not failed, failed
    names = ["posenc_fused", "posenc_rotate_then_write", "hf_eager", "hf_compiled", "roofline_copy"]
    expected = {("kv_cache", case, shape.name, dtype) for case in names for shape in TINY_KV_SHAPES
                for dtype in cuda_benchmark.DTYPES}
    assert {(r["family"], r["case"], r["shape"], r["dtype"]) for r in report["benchmarks"]} == expected
    kinds = {}
    for target in report["targets"]:
        kinds.setdefault(target["target"], set()).add(target["case"])
    assert kinds[">= 1.3x posenc's rotation then write"] == {f"kv_cache/posenc_fused/{s.name}/{d}" for s in TINY_KV_SHAPES
                                                             for d in cuda_benchmark.DTYPES}
    assert kinds["<= 1.2x copy_ of its bytes"] == {f"kv_cache/posenc_fused/mixed_24/{d}" for d in cuda_benchmark.DTYPES}
    assert "### kv_cache" in cuda_benchmark.markdown(dict(report, device="cpu"))


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="the benchmark's cases include torch.compile (PyTorch >= 2.0)")
def test_profile_runs_each_posenc_case_and_copy_once_per_large_shape(posenc_ops, transformers):
    """The profile step's program (ncu --profile-from-start off): at each large shape and dtype, each
    posenc case and copy_ of each family, in the order their kernels run (no HF or eager case)."""
    profiled = cuda_benchmark.profile(posenc_ops, device="cpu", model=TINY, shapes=TINY_SHAPES)
    expected = [f"{family}/{case}/prefill_b2x8/{dtype}" for dtype in cuda_benchmark.DTYPES
                for family, cases in (("rope_qk", ["posenc_qk", "posenc_qk_inplace", "roofline_copy"]),
                                      ("add_table", ["posenc_add", "posenc_add_inplace", "roofline_copy"]),
                                      ("token_position", ["posenc_fused", "roofline_copy"]))
                for case in cases]
    assert profiled == expected


class OneOffOps:
    """posenc's operators, but the rotary ones a position early (inside the table, which the
    operators check): what the check must catch."""

    def __init__(self, ops):
        self.ops = ops

    def __getattr__(self, name):
        return getattr(self.ops, name)

    def apply_rotary_qk(self, q, k, cos, sin, offset):
        return self.ops.apply_rotary_qk(q, k, cos, sin, offset - 1)

    def apply_rotary_qk_(self, q, k, cos, sin, offset):
        self.ops.apply_rotary_qk_(q, k, cos, sin, offset - 1)


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="the benchmark compares with torch.compile (PyTorch >= 2.0)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_check_catches_a_wrong_rotation(posenc_ops, transformers, dtype):
    shape = cuda_benchmark.Shape("prefill", 2, 8, 5, large=True)

    def errors(ops):  # of posenc's cases (torch.compile's is left uncompiled: it is not called)
        return {c.name: cuda_benchmark.check(c) for c in cuda_benchmark.rope_cases(ops, TINY, shape, dtype, "cpu", {})
                if c.name.startswith("posenc")}

    right, wrong = errors(posenc_ops), errors(OneOffOps(posenc_ops))
    assert right["posenc_qk"] <= 1 and right["posenc_qk_inplace"] <= 1
    assert wrong["posenc_qk"] > 1 and wrong["posenc_qk_inplace"] > 1
