"""`pip install --no-build-isolation .` of posenc's source tree (scikit-build-core driving the
CMake build against the torch of this Python), into a scratch directory; then, in a fresh
interpreter without POSENC_LIBRARY, `import posenc` finds its own library and its modules run.

Slow (it compiles the library): run by ctest as python.pip_install, on the pip flavour only.
"""

import os
import subprocess
import sys

import pytest

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_pip_install_gives_import_posenc(tmp_path):
    pytest.importorskip("scikit_build_core", reason="pip install needs scikit-build-core in this Python (scripts/setup.sh pip)")
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k != "POSENC_LIBRARY"}
    env["PATH"] = env.get("PATH", "") + ":/usr/local/cuda/bin"  # pip's torch is a CUDA build: nvcc
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(os.cpu_count() or 2)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--disable-pip-version-check",
         "--target", str(target), "-C", f"build-dir={tmp_path / 'build'}", SOURCE_ROOT],
        capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    assert (target / "posenc" / "lib" / "libposenc.so").is_file()
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
