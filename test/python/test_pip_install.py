"""The Python package as Python users install it: `pip wheel --no-build-isolation .` of posenc's
source tree (scikit-build-core driving the CMake build against the torch of this Python; the same
build backend `pip install .` runs), then
* the wheel installed into a scratch directory: in a fresh interpreter without POSENC_LIBRARY,
  `import posenc` finds its own library and its modules run;
* the wheel's metadata pins the torch it was built against (torch==<release>);
* the wheel installed into a fresh virtual environment with no compiler on PATH (CC, CXX and
  nvcc unavailable) and no package index, its torch requirement met by this environment's torch,
  and posenc's Python test suites passing there against the installed package.

The build compiles the CPU kernels only (POSENC_CUDA=OFF): the route that needs no CUDA toolkit
(cmake/posencTorchDirect.cmake), checked here to link no CUDA library. That AUTO takes the same
route on a machine without a toolkit is checked by configuring with the toolkit hidden (a private
mount namespace; skipped where the system does not allow one). It compiles without optimization
(-O0 for Release, the build type pyproject.toml sets; about half the compile time): this test
checks the packaging, the install and that route, not optimized code, which is the pip flavour's
library and what its tests run.

Slow (it compiles the library once): run by ctest as python.pip_install, on the pip flavour only.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import pinned_version

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))

# The suites run against the installed wheel: operators, rotary modules, attention biases and the
# transformers integration (posenc.integrations must be in the wheel too).
INSTALLED_SUITES = ["test_ops.py", "test_rotary.py", "test_attention_bias.py", "test_transformers_integration.py"]
# less the integration's two torch.compile runs (25 s of the suites' 110 s here): the installed operators
# under torch.compile are test_ops', test_rotary's and test_attention_bias' compile tests
INSTALLED_DESELECTED = ["test_transformers_integration.py::test_compiled_patched_model",
                        "test_transformers_integration.py::test_compiled_generation"]


def without_library_variables(*others):
    """This process's environment without the variables that name posenc's libraries (the package
    under test must load its own: a config reader of another build would bring a second libposenc,
    which posenc refuses) and without `others`."""
    return {k: v for k, v in os.environ.items() if k not in ("POSENC_LIBRARY", "POSENC_IO_LIBRARY", *others)}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("scikit_build_core", reason="the wheel needs scikit-build-core in this Python (scripts/setup.sh pip)")
    root = tmp_path_factory.mktemp("wheel")
    env = without_library_variables()
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(os.cpu_count() or 2)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--disable-pip-version-check",
         "-w", str(root / "dist"), "-C", f"build-dir={root / 'build'}", "-C", "cmake.define.POSENC_CUDA=OFF",
         "-C", "cmake.define.CMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG", SOURCE_ROOT],
        capture_output=True, text=True, env=env)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    wheels = list((root / "dist").glob("posenc-0.1.0-*.whl"))
    assert len(wheels) == 1, wheels
    return {"path": wheels[0], "build": root / "build"}


def test_pip_install_gives_import_posenc(wheel, tmp_path):
    target = tmp_path / "site"
    env = without_library_variables()
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
         "--target", str(target), str(wheel["path"])],
        capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    library = target / "posenc" / "lib" / "libposenc.so"
    assert library.is_file() and (target / "posenc" / "lib" / "libposenc_io.so").is_file()
    # The CPU route: no CUDA compiler ran, and the library needs no CUDA library.
    assert not list(wheel["build"].rglob("*.cu.o"))
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "libtorch_cpu.so" in needed and "libc10.so" in needed, needed
    assert not any(name in needed for name in ("cuda", "cudart", "nvrtc")), needed
    assert (target / "posenc" / "nn.py").is_file()
    assert (target / "posenc" / "integrations" / "transformers.py").is_file()
    assert not (target / "build_support").exists() and not (target / "posenc_metadata.py").exists()
    check = """
import os, torch, posenc
assert os.path.dirname(posenc.library_path) == os.path.join(os.path.dirname(posenc.__file__), "lib"), posenc.library_path
pe = posenc.nn.PositionalEncoding(16, 32)
x = torch.randn(2, 5, 16)
assert torch.equal(pe(x), x + torch.ops.posenc.sinusoidal_table(32, 16)[:5])
rope = posenc.nn.RotaryEmbedding.from_hf_config({"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 32})
assert os.path.dirname(posenc.io_library_path) == os.path.dirname(posenc.library_path), posenc.io_library_path
assert rope.head_dim == 16 and rope.max_len == 32
print("ok", posenc.__version__)
"""
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0 and "ok 0.1.0" in run.stdout, run.stderr


def test_wheel_pins_the_torch_it_was_built_against(wheel):
    import torch

    with zipfile.ZipFile(wheel["path"]) as archive:
        metadata = archive.read("posenc-0.1.0.dist-info/METADATA").decode()
    everything = [Requirement(line) for line in re.findall(r"^Requires-Dist: (.*)$", metadata, flags=re.M)]
    requirements = [r for r in everything if r.marker is None]
    assert len(requirements) == 1, everything
    # the rest: the optional ONNX export's ("pip install posenc[onnx]"), pinned as scripts/setup.sh pins them
    assert {(r.name, str(r.specifier)) for r in everything if r.marker is not None} == {
        (name, f"=={pinned_version(name)}") for name in ("onnx", "onnxscript", "onnxruntime")}, everything
    requirement = requirements[0]
    # exactly this torch: its release, any local build of it (+cu130, +cpu), nothing else
    assert requirement.name == "torch" and str(requirement.specifier).startswith("=="), requirement
    assert requirement.specifier.contains(torch.__version__, prereleases=True), (requirement, torch.__version__)
    release = Version(torch.__version__).release
    for other in (release[:-1] + (release[-1] + 1,), release[:1] + (release[1] + 1,) + release[2:]):
        assert not requirement.specifier.contains(".".join(map(str, other)), prereleases=True), requirement


def test_wheel_installs_and_passes_the_tests_in_a_fresh_environment_without_a_compiler(wheel, tmp_path):
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(fresh)], check=True, capture_output=True)
    python = fresh / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # The same torch (and pytest, transformers for the tests) without copying gigabytes: this
    # environment's site-packages, read through a .pth after the fresh one's own, behind the folders
    # of PYTHONPATH (scripts/gpu_check.sh puts the pinned reference libraries there on a machine
    # whose own differ). posenc is not there.
    outer = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if os.path.isdir(p) and not os.path.exists(os.path.join(p, "posenc"))]
    with open(os.path.join(site, "outer_environment.pth"), "w") as pth:
        pth.write("".join(f"{path}\n" for path in [*outer, sysconfig.get_paths()["purelib"]]))
    env = without_library_variables("PYTHONPATH", "VIRTUAL_ENV")
    probe = subprocess.run([str(python), "-c", "import posenc"], capture_output=True, text=True, env=env, cwd=tmp_path)
    if probe.returncode == 0:
        pytest.skip("this environment has a posenc installed, which the fresh one would see through the .pth")
    assert "No module named 'posenc'" in probe.stderr, probe.stderr

    # No compiler anywhere: PATH holds only the environment's own programs; no index to download from
    # (the torch requirement must be met by the torch that is there).
    bare = dict(env, PATH=str(fresh / "bin"), CC="/bin/false", CXX="/bin/false", CUDACXX="/bin/false")
    for compiler in ("cc", "gcc", "c++", "g++", "nvcc"):
        assert shutil.which(compiler, path=bare["PATH"]) is None, compiler
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
                              str(wheel["path"])], capture_output=True, text=True, env=bare, cwd=tmp_path)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    assert "Successfully installed posenc-0.1.0" in install.stdout, install.stdout

    # posenc's suites, copied where their sys.path entry for the source tree's python/ leads nowhere,
    # so that `import posenc` is the installed package with its bundled library.
    tests = tmp_path / "copy" / "test" / "python"
    shutil.copytree(os.path.dirname(os.path.abspath(__file__)), tests, ignore=shutil.ignore_patterns("__pycache__"))
    # the pins the tests read (conftest.pinned_version)
    os.makedirs(tmp_path / "copy" / "scripts")
    shutil.copy(os.path.join(SOURCE_ROOT, "scripts", "setup.sh"), tmp_path / "copy" / "scripts")
    library = subprocess.run([str(python), "-c", "import posenc; print(posenc.library_path)"], capture_output=True,
                             text=True, env=env, cwd=tmp_path)
    assert library.returncode == 0 and library.stdout.strip().startswith(site), library.stdout + library.stderr
    deselected = [argument for test in INSTALLED_DESELECTED for argument in ("--deselect", test)]
    run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *INSTALLED_SUITES, *deselected],
                         capture_output=True, text=True, env=dict(env, POSENC_LIBRARY=library.stdout.strip()), cwd=tests)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and " failed" not in run.stdout, run.stdout[-2000:]
    assert f"{len(INSTALLED_DESELECTED)} deselected" in run.stdout, run.stdout[-2000:]


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
    assert "(CUDA: OFF," in run.stdout, run.stdout[-3000:]
