"""scripts/torch_matrix.py without building anything: the rows it keeps, the tables it writes into
docs/install.md and README.md, pytest's summary as it reads it, and the environments of its two
routes. (The building and testing route itself runs in CI as `scripts/test.sh newest`.)"""

import importlib.util
import json
import os
import shutil

import pytest

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="module")
def matrix():
    spec = importlib.util.spec_from_file_location("torch_matrix", os.path.join(SOURCE_ROOT, "scripts", "torch_matrix.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(torch, route, result="passed", **fields):
    base = {"torch": torch, "route": route, "torch_cuda": "13.2", "date": "2026-11-29", "nvcc": "13.0",
            "result": result, "wheel": "built", "cmake_package": "passed", "tests": {"passed": 10, "skipped": 2},
            "seconds": 600, "build_seconds": 480}
    base.update(fields)
    return base


def test_pytest_summary_is_found_before_what_torch_prints_after_it(matrix):
    output = "....\nFAILED a.py::t - x\n2 failed, 1081 passed, 157 skipped in 90.1s\nException ignored in: <...>\n"
    assert matrix.test_counts(output) == {"failed": 2, "passed": 1081, "skipped": 157}
    assert matrix.test_counts("no summary at all") == {}
    assert matrix.test_counts("1 error, 3 passed in 1s") == {"error": 1, "passed": 3}


def test_table_orders_versions_numerically_and_says_why_a_route_is_impossible(matrix):
    rows = [row("2.15.0", "toolkit", cuda_arch_list="9.0", onnx=True), row("2.10.0", "no-toolkit", compiled="-O0"),
            row("2.6.0", "toolkit", result="impossible", torch_cuda="12.4",
                reason="torch is built for CUDA 12.4; the installed nvcc is 13.0 (another major version)"),
            row("2.15.0", "no-toolkit", result="failed", reason="FAILED test_ops.py::x")]
    lines = matrix.table(rows).splitlines()
    body = lines[2:]
    assert [line.split("|")[1].strip().split(" ")[0] for line in body] == ["2.6.0", "2.10.0", "2.15.0", "2.15.0"]
    assert "impossible: torch is built for CUDA 12.4" in body[0]
    assert "**passed** 10 passed, 2 skipped" in body[1]
    # how posenc's C++ was compiled: -O0 with --unoptimized; rows without the field are Release (-O3)
    assert "10 min (build 8 at -O0)" in body[1] and "(build 8 at -O3)" in body[3]
    assert "no-toolkit" in body[2] and "**FAILED**: FAILED test_ops.py::x" in body[2]
    assert "toolkit (nvcc 13.0, TORCH_CUDA_ARCH_LIST=9.0)" in body[3]
    assert "10 passed, 2 skipped (ONNX export included)" in body[3] and "ONNX" not in body[1]


def test_onnx_rows_use_the_versions_setup_sh_pins(matrix):
    """The ONNX packages of a matrix row are those CI tests with (scripts/setup.sh), and the ONNX
    subset names tests that exist in test_onnx.py."""
    setup = open(os.path.join(SOURCE_ROOT, "scripts", "setup.sh")).read()
    pins = matrix.onnx_pins()
    assert [pin.split("==")[0] for pin in pins] == ["onnx", "onnxscript", "onnxruntime"]
    for pin in pins:
        name, version = pin.split("==")
        assert f"{name}_version={version}\n" in setup
    source = open(os.path.join(SOURCE_ROOT, "test", "python", "test_onnx.py")).read()
    for node in matrix.ONNX_SUBSET:
        test = node.split("::")[1].split("[")[0]
        assert f"def {test}(" in source, node


def test_tables_are_written_between_the_markers_only(matrix, tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    for name in ("README.md", os.path.join("docs", "install.md")):
        shutil.copy(os.path.join(SOURCE_ROOT, name), root / name)
    before = {name: (root / name).read_text() for name in ("README.md", "docs/install.md")}
    monkeypatch.setattr(matrix, "ROOT", root)
    matrix.write_tables([row("2.15.0", "no-toolkit"), row("2.15.0", "toolkit"), row("2.6.0", "no-toolkit", result="failed")])
    for name, text in before.items():
        after = (root / name).read_text()
        begin, end = text.index(matrix.BEGIN), text.index(matrix.END)
        # everything outside the markers as it was
        assert after[:begin] == text[:begin]
        assert after[after.index(matrix.END):] == text[end:]
    readme = (root / "README.md").read_text()
    assert "2.15.0 (no-toolkit and toolkit)" in readme and "2.6.0" not in readme.split(matrix.BEGIN)[1].split(matrix.END)[0]


def test_the_committed_tables_are_those_of_the_committed_rows(matrix, tmp_path, monkeypatch):
    """docs/install.md and the README hold what docs/torch_matrix.json says (nobody edited them by hand)."""
    rows = json.loads(open(os.path.join(SOURCE_ROOT, "docs", "torch_matrix.json")).read())["rows"]
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    for name in ("README.md", os.path.join("docs", "install.md")):
        shutil.copy(os.path.join(SOURCE_ROOT, name), root / name)
    monkeypatch.setattr(matrix, "ROOT", root)
    matrix.write_tables(rows)
    for name in ("README.md", os.path.join("docs", "install.md")):
        assert (root / name).read_text() == open(os.path.join(SOURCE_ROOT, name)).read(), \
            f"{name} is stale: run scripts/torch_matrix.py --tables-only"


def test_no_toolkit_route_takes_cuda_off_path_and_keeps_the_compilers(matrix, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/local/cuda/bin:/usr/bin:/opt/cuda-13.0/bin:/bin")
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    env = matrix.route_environment("no-toolkit", "/usr/local/cuda/bin/nvcc")
    assert env["PATH"] == "/usr/bin:/bin" and "CUDA_HOME" not in env
    env = matrix.route_environment("toolkit", "/usr/local/cuda/bin/nvcc")
    assert env["PATH"] == "/usr/bin:/bin:/usr/local/cuda/bin"
    # an nvcc in /usr/bin (Debian's nvidia-cuda-toolkit) does not take the compilers off PATH
    env = matrix.route_environment("toolkit", "/usr/bin/nvcc")
    assert env["PATH"] == "/usr/bin:/bin"
