"""scikit-build-core metadata provider of posenc's pyproject.toml: the wheel depends on exactly the
torch it is built against (libposenc.so links that torch's libraries and registers its operators
through that torch's ABI): ``torch==<public version>``, e.g. ``torch==2.11.0`` for any local build
of 2.11.0 (``+cu130``, ``+cpu``), ``torch==2.6.0a0`` for NVIDIA's ``2.6.0a0+git...``. (A local label
is not pinned: a CUDA build of the wheel beside a ``+cpu`` torch of the same release installs, and
``import posenc`` then fails to load the library with the loader's message.) Not part of the
installed package."""

from packaging.version import Version

__all__ = ["dynamic_metadata"]


def dynamic_metadata(field, settings=None, project=None):
    if field != "dependencies":
        raise RuntimeError(f"posenc_metadata provides 'dependencies' only, not '{field}'")
    if settings:
        raise RuntimeError(f"posenc_metadata takes no settings, but got {sorted(settings)}")
    import torch

    return [f"torch=={Version(torch.__version__).public}"]
