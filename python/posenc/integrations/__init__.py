"""posenc inside other libraries' models.

* ``posenc.integrations.transformers``: ``apply_posenc_rope(model)`` makes a Hugging Face
  transformers model rotate its queries and keys with posenc's fused q+k operator.

Each integration is imported on its own (``import posenc.integrations.transformers``), so that
``import posenc`` never imports the library it integrates with.
"""

__all__ = []
