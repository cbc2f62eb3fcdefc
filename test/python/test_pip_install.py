"""`pip install --no-build-isolation .` of posenc's source tree (scikit-build-core driving the
CMake build against the torch of this Python), into a scratch directory; then, in a fresh
interpreter without POSENC_LIBRARY, `import posenc` finds its own library and its modules run.

The install builds the CPU kernels only (POSENC_CUDA=OFF): the route that needs no CUDA toolkit
(cmake/posencTorchDirect.cmake), checked here to link no CUDA library. That AUTO takes the same
route on a machine without a toolkit is checked by configuring with the toolkit hidden (a private
mount namespace; skipped where the system does not allow one).

Slow (it compiles the library): run by ctest as python.pip_install, on the pip flavour only.
"""

import glob
import os
import shutil
import subprocess
import sys

import pytest

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_pip_install_gives_import_posenc(tmp_path):
    pytest.importorskip("scikit_build_core", reason="pip install needs scikit-build-core in this Python (scripts/setup.sh pip)")
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k != "POSENC_LIBRARY"}
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(os.cpu_count() or 2)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--disable-pip-version-check",
         "--target", str(target), "-C", f"build-dir={tmp_path / 'build'}", "-C", "cmake.define.POSENC_CUDA=OFF",
         SOURCE_ROOT],
        capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    library = target / "posenc" / "lib" / "libposenc.so"
    assert library.is_file()
    # The CPU route: no CUDA compiler ran, and the library needs no CUDA library.
    assert not list((tmp_path / "build").rglob("*.cu.o"))
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "libtorch_cpu.so" in needed and "libc10.so" in needed, needed
    assert not any(name in needed for name in ("cuda", "cudart", "nvrtc")), needed
    assert (target / "posenc" / "nn.py").is_file()
    check = """
import os, torch, posenc
assert os.path.dirname(posenc.library_path) == os.path.join(os.path.dirname(posenc.__file__), "lib"), posenc.library_path
pe = posenc.nn.PositionalEncoding(16, 32)
x = torch.randn(2, 5, 16)
assert torch.equal(pe(x), x + torch.ops.posenc.sinusoidal_table(32, 16)[:5])
print("ok", posenc.__version__)
"""
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0 and "ok 0.1.0" in run.stdout, run.stderr


def test_configure_without_a_cuda_toolkit_takes_the_cpu_route(tmp_path):
    """POSENC_CUDA=AUTO against pip's CUDA torch on a machine without a toolkit: TorchConfig.cmake
    would fail ("Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries");
    posenc configures its CPU kernels instead. The toolkit is hidden by empty bind mounts in a
    private mount namespace (unshare -m, root only)."""
    compilers = {os.path.realpath(os.path.join(d, "nvcc")) for d in os.environ.get("PATH", "").split(os.pathsep)}
    compilers |= {os.path.join(d, "nvcc") for d in os.environ.get("PATH", "").split(os.pathsep)}
    # files first (some lie inside the directories), then the toolkit directories
    hidden = sorted(p for p in compilers if os.path.isfile(p)) + [
        p for p in ("/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"))) if os.path.isdir(p)]
    if not hidden:
        pytest.skip("no CUDA toolkit on this machine: every configure here is toolkit-free")
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("hiding the toolkit needs unshare -m as root")
    empty_dir, empty_file = tmp_path / "empty", tmp_path / "empty_file"
    empty_dir.mkdir()
    empty_file.touch()
    mounts = " && ".join(f"mount --bind {empty_dir if os.path.isdir(p) else empty_file} {p}" for p in hidden)
    import torch

    configure = (f"{mounts} && cmake -S {SOURCE_ROOT} -B {tmp_path / 'build'} "
                 f"-DPOSENC_BUILD_TESTS=OFF -DPOSENC_BUILD_CLI=OFF -DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path} "
                 f"-DPython3_EXECUTABLE={sys.executable}")
    run = subprocess.run(["unshare", "-m", "bash", "-c", configure], capture_output=True, text=True)
    if run.returncode != 0 and ("unshare failed" in run.stderr or "mount" in run.stderr and "ermission" in run.stderr):
        pytest.skip(f"no private mount namespace here: {run.stderr.strip()[:200]}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "no CUDA toolkit was found: CPU kernels only" in run.stdout, run.stdout[-3000:]
    assert "(CUDA: OFF)" in run.stdout, run.stdout[-3000:]
