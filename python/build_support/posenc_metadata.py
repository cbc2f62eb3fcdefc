"""scikit-build-core metadata provider of posenc's pyproject.toml: the wheel depends on exactly the
torch it is built against (libposenc.so links that torch's libraries and registers its operators
through that torch's ABI), e.g. ``torch==2.11.0`` for any local build of 2.11.0 (``+cu130``, ``+cpu``).
Not part of the installed package."""

import re

__all__ = ["dynamic_metadata"]


def dynamic_metadata(field, settings=None, project=None):
    if field != "dependencies":
        raise RuntimeError(f"posenc_metadata provides 'dependencies' only, not '{field}'")
    if settings:
        raise RuntimeError(f"posenc_metadata takes no settings, but got {sorted(settings)}")
    import torch

    release = re.match(r"\d+(\.\d+)*", torch.__version__)
    if release is None:
        raise RuntimeError(f"posenc: cannot read a release from torch.__version__ = {torch.__version__!r}")
    return [f"torch=={release.group(0)}"]
