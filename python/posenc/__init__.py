"""posenc: positional encodings for PyTorch, from the LibTorch library of the same name.

``import posenc`` loads posenc's operators into ``torch.ops.posenc`` (the library built with the
package, ``posenc/lib/libposenc.so``, or the one named by the environment variable
``POSENC_LIBRARY``), and the config reader ``posenc/lib/libposenc_io.so`` where it is found
(``POSENC_IO_LIBRARY``), and gives

* ``posenc.ops``: the operators (``posenc.ops.sinusoidal_table(5000, 512)`` etc.), usable under
  ``torch.compile(fullgraph=True)`` and ``torch.export``;
* ``posenc.nn``: ``torch.nn.Module`` versions of posenc's C++ modules with the same options,
  defaults, state-dict keys and shapes, computing through the same operators (so the same outputs
  on CPU, bit for bit).

The library must be loaded by the torch it was built against (``posenc.torch_version``), once per
process: a second libposenc (another file) where one is loaded (refused before it is loaded: its
operators' registration would abort the process) and a ``POSENC_LIBRARY`` that names no libposenc
are an ImportError that says what to do.
"""

import os

import torch

__all__ = ["ops", "nn", "distributed", "library_path", "io_library_path", "torch_version", "__version__"]

__version__ = "0.1.0"


def _find_library():
    override = os.environ.get("POSENC_LIBRARY")
    if override:
        return os.path.abspath(override)
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libposenc.so")
    if not os.path.exists(bundled):
        raise ImportError(
            f"posenc: the operator library {bundled} is missing; install the package with "
            "'pip install --no-build-isolation .' from posenc's source tree, or set POSENC_LIBRARY "
            "to a libposenc.so built against this torch")
    return bundled


def _loaded_files():
    """The real paths of the files mapped into this process (/proc/self/maps, where there is one)
    and of the libraries torch.ops.load_library loaded."""
    files = {os.path.realpath(path) for path in torch.ops.loaded_libraries}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    files.add(os.path.realpath(fields[5].rstrip("\n")))
    except OSError:
        pass
    return files


def _registered():
    return hasattr(torch.ops.posenc, "sinusoidal_table")


def _load_library(path):
    """Loads libposenc from `path`. Refused with an ImportError, before anything is loaded, where
    loading would abort the process (a second libposenc, another file, where one has registered
    posenc's operators already: registering them twice aborts) or leave it without operators (no
    such file, a file that is no library, another library)."""
    named = f"POSENC_LIBRARY={os.environ['POSENC_LIBRARY']}" if os.environ.get("POSENC_LIBRARY") else path
    fix = ("set POSENC_LIBRARY to the libposenc.so of a posenc build against this torch "
           f"({torch.__version__}; a build's src/libposenc.so), or unset it to use the package's own")
    if not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else "does not exist"
        raise ImportError(f"posenc: {named} names no library ({path} {what}); {fix}")
    if os.path.basename(path).startswith("libposenc_io"):
        raise ImportError(f"posenc: {named} is posenc's config reader (libposenc_io), not its operator library; "
                          "point POSENC_LIBRARY at the libposenc.so of the same build, and POSENC_IO_LIBRARY "
                          "at this one")
    if _registered():
        loaded = _loaded_files()
        if os.path.realpath(path) not in loaded:
            found = sorted(p for p in loaded if os.path.basename(p).startswith("libposenc.so"))
            where = f" by {', '.join(found)}" if found else ""
            raise ImportError(
                f"posenc: {named}: posenc's operators are registered in this process already{where}; loading "
                f"a second libposenc ({os.path.realpath(path)}) would register them again, which aborts the "
                "process. Use one libposenc per process: point POSENC_LIBRARY at the one loaded, or import "
                "posenc in a fresh process")
    try:
        torch.ops.load_library(path)  # (the file loaded already: nothing is registered twice)
    except OSError as error:
        raise ImportError(f"posenc: {named} could not be loaded ({error.__cause__ or error}); it must be "
                          f"posenc's operator library: {fix}") from error
    if not _registered():
        raise ImportError(f"posenc: {named} was loaded but registered no posenc operator: it is not posenc's "
                          f"operator library; {fix}")


library_path = _find_library()
_load_library(library_path)


def _find_io_library():
    here = os.path.dirname(library_path)
    override = os.environ.get("POSENC_IO_LIBRARY")
    if override:
        # The io library links the libposenc of its own build: one from another build would bring a
        # second libposenc into the process, whose operators' registration aborts it.
        where = os.path.dirname(os.path.realpath(override))
        beside = os.path.dirname(os.path.realpath(library_path))
        if where not in (beside, os.path.join(beside, "io")):
            raise ImportError(
                f"posenc: POSENC_IO_LIBRARY={override} is not the config reader of the operator library "
                f"{library_path} (it must lie beside it, or in its io/ folder, as a build or the package "
                "places them); point POSENC_LIBRARY and POSENC_IO_LIBRARY at the same build, or unset "
                "POSENC_IO_LIBRARY to use the one beside the operators")
        return os.path.abspath(override)
    for candidate in (os.path.join(here, "libposenc_io.so"), os.path.join(here, "io", "libposenc_io.so")):
        if os.path.exists(candidate):  # (the package's lib/, or a build tree's src/io/)
            return os.path.abspath(candidate)
    return None


#: libposenc_io, the config.json reader (``torch.ops.posenc.read_hf_rope_config``, used by
#: ``posenc.nn.read_hf_rope_config``): beside libposenc.so (the package, a build's ``src/io/``), or
#: the one named by the environment variable ``POSENC_IO_LIBRARY``, which must be of the same build
#: (beside it, or in its ``io/`` folder; ImportError otherwise); None where there is none (the config
#: reader then says so).
io_library_path = _find_io_library()
if io_library_path is not None:
    try:
        torch.ops.load_library(io_library_path)
    except OSError as error:  # (the operators work without it; read_hf_rope_config then says why)
        import warnings

        warnings.warn(f"posenc: the config reader {io_library_path} could not be loaded ({error}); "
                      "posenc.nn.read_hf_rope_config is unavailable", RuntimeWarning)
        io_library_path = None

#: torch's version in this process (the library was built against it).
torch_version = torch.__version__
#: The operators, ``torch.ops.posenc``.
ops = torch.ops.posenc



def _register_fake_kernels() -> None:
    """Fake kernels of the operators that may take no tensor (FakeTensorMode, torch.compile and
    torch.export cannot infer their device): rope_frequencies returns float64 tensors, inv_freq on
    the device of its positions when given, else on `device` (default: the CPU);
    sinusoidal_columns a float64 [2, d_model] plan on `device`; rotary_embedding_frequencies the
    module's float64 frequencies on the CPU."""
    register = getattr(torch.library, "register_fake", None)
    if register is None:  # torch < 2.4: no fake kernels from Python
        return

    def rope_frequencies(rotary_dim, base=10000.0, rope_parameters="{}", freq_factors=None, seq_len=None,
                         positions=None, frequencies=None, device=None):
        if positions is not None and device is not None:
            device = torch.device(device)
            if device.type != positions.device.type or (device.index is not None and device.index != positions.device.index):
                raise RuntimeError(f"posenc::rope_frequencies: with positions, inv_freq lies on their device "
                                   f"({positions.device}), but device = {device} was given; leave device out "
                                   "or move the positions")
        where = positions.device if positions is not None else (device or "cpu")
        return (torch.empty(rotary_dim // 2, dtype=torch.float64, device=where),
                torch.empty((), dtype=torch.float64, device="cpu"))

    register("posenc::rope_frequencies", rope_frequencies)

    def sinusoidal_columns(d_model, base=10000.0, channels="interleaved", frequencies="paper", device=None):
        return torch.empty(2, d_model, dtype=torch.float64, device=device or "cpu")

    register("posenc::sinusoidal_columns", sinusoidal_columns)

    def rotary_embedding_frequencies(module):
        # (made on the host from the options alone, whose variant sets the shapes: computed, then
        # described)
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            computed = torch.ops.posenc.rotary_embedding_frequencies(module)
        return tuple(torch.empty(t.shape, dtype=t.dtype, device="cpu") for t in computed)

    register("posenc::rotary_embedding_frequencies", rotary_embedding_frequencies)


_register_fake_kernels()

# DTensor's sharding rules of the operators (posenc.distributed: this layer, as the fake kernels),
# registered where torch.distributed and DTensor's public registration exist.
from . import distributed  # noqa: E402  (needs the operators loaded)

distributed.register_sharding_rules()

from . import nn  # noqa: E402  (needs the operators loaded)
