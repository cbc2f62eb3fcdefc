"""Fixtures for posenc's Python tests. ctest passes the built artifacts through the environment:

POSENC_LIBRARY    libposenc.so (loaded with torch.ops.load_library)
POSENC_CLI        the posenc program
POSENC_TEST_TOOL  the C++ side of the round-trip tests (test/tools/test_tool.cpp)
POSENC_REPORT_DIR where measured figures are written (optional)
"""

import os
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split("+")[0].split("a")[0].split(".")[:2])


def _path(variable):
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} is not set (run these tests through ctest)")
    return value


@pytest.fixture(scope="session")
def posenc_ops():
    torch.ops.load_library(_path("POSENC_LIBRARY"))
    return torch.ops.posenc


@pytest.fixture(scope="session")
def posenc_cli():
    return _path("POSENC_CLI")


@pytest.fixture(scope="session")
def test_tool():
    tool = _path("POSENC_TEST_TOOL")

    def run(*args, expect_failure=False):
        result = subprocess.run([tool, *map(str, args)], capture_output=True, text=True)
        if expect_failure:
            assert result.returncode != 0, f"expected {args[0]} to fail:\n{result.stdout}"
        else:
            assert result.returncode == 0, f"{args[0]} failed:\n{result.stderr}"
        return result

    return run


@pytest.fixture(scope="session")
def report_dir():
    directory = os.environ.get("POSENC_REPORT_DIR")
    if directory:
        os.makedirs(directory, exist_ok=True)
    return directory


def requires_torch(major, minor, what):
    return pytest.mark.skipif(TORCH_VERSION < (major, minor), reason=f"{what} needs PyTorch >= {major}.{minor} (have {torch.__version__})")


def pinned_version(package):
    """The version of a reference library that scripts/setup.sh installs (its `<package>_version=`)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "setup.sh")) as f:
        for line in f:
            if line.startswith(f"{package}_version="):
                return line.split("=", 1)[1].strip()
    raise LookupError(f"scripts/setup.sh pins no {package}")


def skip_unless_pinned(module, error):
    """For a test module whose reference names are missing from the installed library: fails where
    the pinned version is installed (the names must be there), and skips the module elsewhere (a
    machine with another version, e.g. the GPU machine's own transformers), saying which."""
    installed = getattr(module, "__version__", "unknown")
    pinned = pinned_version(module.__name__)
    if installed == pinned:
        raise error
    pytest.skip(f"{module.__name__} {installed} lacks what these tests compare with ({error}); "
                f"they are written against the pinned {pinned} (scripts/setup.sh)", allow_module_level=True)



def conformer_block(nn, d_model=16, num_heads=4, max_len=64):
    """A Conformer block's positions and self-attention from posenc.nn (``nn``): x -> attention of
    RelPositionalEncoding's scaled x against its relative positions."""

    class ConformerBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.positions = nn.RelPositionalEncoding(d_model, max_len=max_len)
            self.attention = nn.RelPositionMultiheadAttention(d_model, num_heads)

        def forward(self, x):
            x, pos_emb = self.positions(x)
            return self.attention(x, x, x, pos_emb)

    return ConformerBlock()


def finish_rank(rank, directory):
    """The end of a gloo rank's work: a barrier (every rank done before any tears gloo down), then
    the marker `rank{rank}.done` in `directory` that spawn_ranks reads."""
    import torch.distributed as dist
    dist.barrier()
    open(os.path.join(directory, f"rank{rank}.done"), "w").close()


def spawn_ranks(rank_main, args, world_size, directory):
    """torch.multiprocessing.spawn of `rank_main(rank, *args)` on `world_size` processes whose work
    ends with finish_rank(rank, directory). torch's gloo teardown (destroy_process_group and the
    interpreter's exit) aborts now and then on torch 2.13 and 2.15 ("terminate called without an
    active exception"), after every rank has finished: such an abort, with every rank's marker
    written, is a warning; any other failure (a rank's error, an abort before the markers) is
    raised, but for gloo's failure to connect the ranks (connectFullMesh, seen under load), after
    which the ranks start once more (the file store among `args`, a path named store*, removed)."""
    import warnings
    import torch.multiprocessing as mp
    for attempt in (1, 2):
        try:
            mp.spawn(rank_main, args=args, nprocs=world_size, join=True)
            return
        except mp.ProcessRaisedException as error:
            # gloo's connection of the ranks to each other (connectFullMesh) fails now and then on a
            # loaded 2-core machine, before any rank has done its work: once, the ranks start again
            # (with a fresh file store: the failed run's is removed).
            if attempt == 2 or "connectFullMesh" not in str(error):
                raise
            warnings.warn(f"gloo could not connect the ranks; starting them again: {str(error).strip().splitlines()[-1]}")
            for arg in args:
                if isinstance(arg, str) and os.path.basename(arg).startswith("store") and os.path.isfile(arg):
                    os.remove(arg)
        except mp.ProcessExitedException as error:
            done = all(os.path.exists(os.path.join(directory, f"rank{r}.done")) for r in range(world_size))
            if not done or error.signal_name != "SIGABRT":
                raise
            warnings.warn(f"torch's gloo teardown aborted after every rank had finished its work: {error}")
            return
