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
    (tmp_path / "cpp.json").write_text(json.dumps(cpp))
    (tmp_path / "python.json").write_text(json.dumps(python))
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_report.py"), str(tmp_path / "cpp.json"),
                             str(tmp_path / "python.json"), str(tmp_path / "out")],
                            capture_output=True, text=True, env={**os.environ, "POSENC_BENCH_CHART": "0"})
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / "benchmarks.json").read_text())["ratios"]
    assert report[f"add out= / copy_ {key}"] == {"value": 1.2, "better": "lower"}
    assert report[f"add in-place / copy_ {key}"] == {"value": 0.8, "better": "lower"}
    assert report[f"add module vs Python {key}"] == {"value": 2.0, "better": "higher"}
    assert "| 8x2048x1024 | float32 | 1 |" in (tmp_path / "out" / "benchmarks.md").read_text()
