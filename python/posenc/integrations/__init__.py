"""posenc inside other libraries' models.

* ``posenc.integrations.transformers``: ``apply_posenc_rope(model)`` makes a Hugging Face
  transformers model rotate its queries and keys with posenc's fused q+k operator.

Each integration is imported on its own (``import posenc.integrations.transformers``), so that
``import posenc`` never imports the library it integrates with. This package only knows where the
transformers integration keeps its patched classes (modules
``posenc.integrations._posenc_rope_<modeling file>``), so that unpickling a patched model in a
fresh process finds them: importing such a module imports the integration, which rebuilds it.
"""

import importlib.abc
import importlib.util
import sys

__all__ = []

_PATCHED_PREFIX = __name__ + "._posenc_rope_"


class _PatchedClassesFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(_PATCHED_PREFIX) and fullname not in sys.modules:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        from . import transformers as integration

        return integration._rebuild_patched_module(spec.name)

    def exec_module(self, module):
        pass


if not any(isinstance(finder, _PatchedClassesFinder) for finder in sys.meta_path):
    sys.meta_path.append(_PatchedClassesFinder())
