"""Every transformers model type whose modeling file rotates queries and keys, against
posenc.integrations.transformers (transformers_sweep.py): each built small and random from its
own config class and run unpatched and patched. The drop-in decides by itself (no list of model
types): a type is served (equal within 1e-5 of the largest output, float32, and posenc's operators
called at least once per patched layer), refused with the model unchanged, or not buildable small
here (why is in the table). A patched model that differs, raises, or does not call posenc fails;
so does a docs/models.md table that is not this sweep's.

1e-5 rather than test_transformers_integration's 1e-6: a few types run several layers with
mixture-of-experts routing or state-space blocks between the attention layers, where a last-ulp
difference in one rotation can move a float32 sum more; a wrong rotation is off by the size of the
values.
"""

import os
import sys

import pytest

from conftest import requires_torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

transformers = pytest.importorskip("transformers")
pytestmark = requires_torch(2, 4, "transformers 5")

import transformers_sweep  # noqa: E402


@pytest.fixture(scope="module")
def rows(posenc_ops):
    import posenc.integrations.transformers as hf

    return transformers_sweep.sweep(hf)


def test_every_rotating_model_type_is_served_or_refused_unchanged(rows):
    failed = [row for row in rows if row[1] not in ("served", "refused", "not buildable")]
    assert not failed, "\n".join(" | ".join(row) for row in failed)
    served = {model_type for model_type, result, _ in rows if result == "served"}
    # The types posenc served from a hand list before discovery, and one of each form beyond it.
    assert {"llama", "mistral", "qwen2", "qwen3", "gemma2", "phi3", "gpt_neox", "cohere", "glm", "glm4", "gptj",
            "deepseek_v3", "gpt_oss", "nanochat", "helium", "ernie4_5"} <= served, sorted(served)


def test_the_table_in_docs_models_md_is_this_sweep(rows):
    if transformers.__version__ != "5.23.0":
        pytest.skip(f"docs/models.md is written with transformers 5.23.0, not {transformers.__version__}")
    assert transformers_sweep.documented_table() == transformers_sweep.table(rows), (
        "docs/models.md's table is stale: run test/python/transformers_sweep.py --write")
