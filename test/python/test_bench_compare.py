"""The benchmark regression guard (scripts/bench_compare.py, scripts/bench.sh --compare): ratios,
never absolute times, each compared in its own direction; and the report's benchmarks.json."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_compare  # noqa: E402


def run_report(tmp_path, cpp, python):
    """bench_report.py on a synthetic run (Google Benchmark JSON `cpp`, the Python rows `python`):
    its output folder, after checking that it succeeded."""
    (tmp_path / "cpp.json").write_text(json.dumps(cpp))
    (tmp_path / "python.json").write_text(json.dumps(python))
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_report.py"), str(tmp_path / "cpp.json"),
                             str(tmp_path / "python.json"), str(tmp_path / "out")],
                            capture_output=True, text=True, env={**os.environ, "POSENC_BENCH_CHART": "0"})
    assert result.returncode == 0, result.stderr
    return tmp_path / "out"


def ratios(**values):
    return {name: {"value": value, "better": better} for name, (value, better) in values.items()}


def test_a_ratio_is_worse_in_its_own_direction():
    old = ratios(out_copy=(1.00, "lower"), speedup=(4.0, "higher"), same=(2.0, "lower"))
    new = ratios(out_copy=(1.20, "lower"), speedup=(3.2, "higher"), same=(2.2, "lower"))
    worse = {name: round(change, 3) for name, _, _, change in bench_compare.regressions(old, new, 0.15)}
    assert worse == {"out_copy": 1.2, "speedup": 1.25}  # +10% on "same" is within 15%


def test_improvements_and_missing_ratios_are_not_flagged():
    old = ratios(a=(1.5, "lower"), b=(3.0, "higher"), gone=(1.0, "lower"))
    new = ratios(a=(1.0, "lower"), b=(6.0, "higher"), added=(9.0, "lower"))
    assert bench_compare.regressions(old, new, 0.15) == []


def test_the_command_fails_on_a_regression(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"ratios": ratios(x=(1.0, "lower"))}))
    for value, status in [(1.1, 0), (1.3, 1)]:
        new.write_text(json.dumps({"ratios": ratios(x=(value, "lower"))}))
        result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_compare.py"), str(old), str(new)],
                                capture_output=True, text=True)
        assert result.returncode == status, result.stdout + result.stderr
    assert "WORSE x: 1.000 -> 1.300 (+30% worse)" in result.stdout


def test_the_report_writes_the_ratios_it_shows(tmp_path):
    """bench_report.py on a small synthetic run: benchmarks.json holds the ratios of the tables."""
    key = "8x2048x1024/float32/threads:1"
    cpp = {"context": {"num_cpus": 2, "mhz_per_cpu": 1000, "libtorch": "2.11.0"},
           "benchmarks": [{"name": f"add/{case}/{key}/real_time", "aggregate_name": "median", "real_time": value,
                           "time_unit": "us"}
                          for case, value in [("posenc_out", 300.0), ("posenc_inplace", 200.0), ("roofline_copy", 250.0),
                                              ("posenc_module", 900.0), ("python_reference", 1800.0)]]}
    python = {"torch": "2.11.0", "benchmarks": []}
    run_report(tmp_path, cpp, python)
    report = json.loads((tmp_path / "out" / "benchmarks.json").read_text())["ratios"]
    assert report[f"add out= / copy_ {key}"] == {"value": 1.2, "better": "lower"}
    assert report[f"add in-place / copy_ {key}"] == {"value": 0.8, "better": "lower"}
    assert report[f"add module vs Python {key}"] == {"value": 2.0, "better": "higher"}
    assert "| 8x2048x1024 | float32 | 1 |" in (tmp_path / "out" / "benchmarks.md").read_text()


def test_the_report_shows_decoding_checks_allocation_and_why_a_target_missed(tmp_path):
    """The decoding step (rope_decode), the cost of each of its checks (decode_checks) and out of
    place q+k against copy_ plus the fresh allocation become tables and targets; a missed target
    says what stands in its way."""
    def row(name, us):
        return {"name": f"{name}/real_time", "aggregate_name": "median", "real_time": us, "time_unit": "us"}

    step = "1x1x32q8kx128/float32/threads:1"
    batch = "64x1x32q8kx128/bfloat16/threads:1"
    large = "8x2048x32q8kx128/float32/threads:1"
    benchmarks = [row(f"rope_decode/posenc_qk_inplace_cached/{step}", 0.9), row(f"rope_decode/roofline_copy/{step}", 1.0),
                  row(f"rope_decode/posenc_qk_inplace_cached/{batch}", 48.0), row(f"rope_decode/roofline_copy/{batch}", 16.0),
                  row(f"rope_qk/posenc_qk/{large}", 150000.0), row(f"rope_qk/roofline_copy/{large}", 30000.0),
                  row(f"rope_qk/fresh_allocation/{large}", 150000.0)]
    checks = {"module_call": 0.86, "operator_call": 0.8, "check_arguments": 0.08, "check_overlap": 0.1,
              "check_range": 0.005, "check_frequencies": 0.11, "check_scale": 0.008}
    benchmarks += [row(f"decode_checks/{case}/{step}", us) for case, us in checks.items()]
    cpp = {"context": {"num_cpus": 2, "mhz_per_cpu": 1000, "libtorch": "2.11.0"}, "benchmarks": benchmarks}
    run_report(tmp_path, cpp, {"torch": "2.11.0", "benchmarks": []})
    report = (tmp_path / "out" / "benchmarks.md").read_text()
    ratios = json.loads((tmp_path / "out" / "benchmarks.json").read_text())["ratios"]
    assert ratios[f"decode q+k in place / copy_ {batch}"] == {"value": 3.0, "better": "lower"}
    assert abs(ratios[f"q+k out of place / (copy_ + fresh allocation) {large}"]["value"] - 150 / 180) < 1e-12
    targets = {line.split(" | ")[0].lstrip("| "): line for line in report.splitlines() if line.startswith("| ")}
    assert "| yes | 0.90 us |" in targets[f"decode q+k {step}: <= 2 us per C++ call"]
    missed = targets[f"decode q+k {batch}: within 1.5x of copy_"]
    assert "| **no** | 3.00x |" in missed and "compute-bound" in missed
    assert "| yes | 0.83x |" in targets[f"q+k out of place {large}: within 2x of copy_ plus the fresh allocation"]
    # each check's time and its share of the operator's call; the rest is dispatch and the kernel
    assert "| 100 ns | 12% |" in report  # the overlap checks: 0.1 of 0.8 us
    assert "| the rest of the operator's call: dispatch, the kernel (40 rows of 128) | 620 ns | 78% |" in report


def test_every_comparison_table_shows_the_compiled_reference(tmp_path):
    """torch.compile of the reference (py_compiled/<case>/compiled_reference, 2 threads) appears in
    each comparison table beside the row it compares with: the C++ tables' 2-thread rows and
    posenc's rows of the Python tables; 1-thread rows and cases without a compiled run show "-"."""
    def row(name, us):
        return {"name": f"{name}/real_time", "aggregate_name": "median", "real_time": us, "time_unit": "us"}

    benchmarks = [row(f"add/{case}/8x2048x1024/float32/threads:{threads}", us)
                  for threads in (1, 2) for case, us in [("posenc_out", 300.0), ("posenc_inplace", 200.0), ("roofline_copy", 250.0)]]
    benchmarks += [row("attention_bias/alibi_full_posenc/32x2048x2048/float32/threads:2", 1500.0)]
    cpp = {"context": {"num_cpus": 2, "mhz_per_cpu": 1000, "libtorch": "2.11.0"}, "benchmarks": benchmarks}
    python = {"torch": "2.11.0", "benchmarks": [
        {"name": "py_compiled/add/8x2048x1024/float32/compiled_reference", "real_time_us": 4321.0, "compile_s": 1.0},
        {"name": "py_compiled/add/8x2048x1024/float32/posenc", "real_time_us": 4000.0},
        {"name": "py_compiled/add/8x2048x1024/float32/posenc_compiled", "real_time_us": 4100.0, "compile_s": 0.1},
        {"name": "py_compiled/alibi_full/32x2048x2048/float32/compiled_reference", "real_time_us": 1777.0, "compile_s": 1.0},
        {"name": "py_compiled/timestep_embedding/1024x256/float32/compiled_reference", "real_time_us": 128.0, "compile_s": 1.0},
        {"name": "py_attention_bias/alibi_full/32x2048x2048/eager/threads:2", "real_time_us": 3000.0},
        {"name": "py_attention_bias/alibi_full/32x2048x2048/posenc/threads:2", "real_time_us": 1500.0},
        {"name": "py_attention_bias/alibi_full_causal/32x2048x2048/posenc/threads:2", "real_time_us": 2100.0},
        {"name": "py_vision/timestep_embedding/1024x256/diffusers/threads:2", "real_time_us": 270.0},
        {"name": "py_vision/timestep_embedding/1024x256/posenc/threads:2", "real_time_us": 116.0},
    ]}
    run_report(tmp_path, cpp, python)
    lines = (tmp_path / "out" / "benchmarks.md").read_text().splitlines()
    add = [line for line in lines if line.startswith("| 8x2048x1024 | float32 |")]
    assert add[0].endswith("| - |") and add[1].endswith("| 4.32 ms |")
    assert "| py_attention_bias/alibi_full/32x2048x2048/posenc/threads:2 | 1.50 ms | 1.78 ms |" in lines
    assert "| py_attention_bias/alibi_full/32x2048x2048/eager/threads:2 | 3.00 ms | - |" in lines
    assert "| py_attention_bias/alibi_full_causal/32x2048x2048/posenc/threads:2 | 2.10 ms | - |" in lines
    assert "| py_vision/timestep_embedding/1024x256/posenc/threads:2 | 116.00 us | 128.00 us |" in lines
    assert "| attention_bias/alibi_full_posenc/32x2048x2048/float32/threads:2 | 1.50 ms | 1.78 ms |" in lines
