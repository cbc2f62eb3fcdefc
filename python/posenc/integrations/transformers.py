"""Hugging Face transformers models that rotate queries and keys with posenc's fused q+k operator.

``apply_posenc_rope(model)`` patches one model instance (not its class, not other models): the
attention layers of a supported model type call ``torch.ops.posenc.apply_rotary_qk`` where their
own code calls the modeling file's ``apply_rotary_pos_emb``. The model's rotary embedding still
makes cos and sin (so every rope type, scaling and position id works as before); posenc rotates
q and k with them in one pass, reading each token's row once for all heads.

    import posenc.integrations.transformers as posenc_hf
    model = transformers.AutoModelForCausalLM.from_pretrained(...)
    posenc_hf.apply_posenc_rope(model)     # the same model, patched; generate, compile, save as before

Equal to the unpatched model in float32 (the rotation is the same arithmetic, each output rounded
once); in bfloat16 and float16 posenc computes in float32 and rounds once, where transformers rounds
each product and the sum, so results differ by at most a few units in the last place of the dtype.
Unsupported models are refused with a ``ValueError`` before anything is changed.
"""

import ast
import importlib
import inspect
import sys
import types

import torch

import posenc  # noqa: F401  (loads the operators)

__all__ = ["SUPPORTED_MODEL_TYPES", "apply_posenc_rope", "remove_posenc_rope", "is_patched"]

#: The model types whose rotary application posenc replaces, and the form of each modeling file's
#: ``apply_rotary_pos_emb``: "halves" (the whole head, pairs (i, i + D/2): LLaMA's function) or
#: "partial" (the first R = cos.shape[-1] channels in halves, the rest passed through: GPT-NeoX's
#: and Phi-3's). Each is tested on a small random model against its unpatched self
#: (test/python/test_transformers_integration.py).
SUPPORTED_MODEL_TYPES = {
    "llama": "halves",
    "mistral": "halves",
    "mixtral": "halves",
    "qwen2": "halves",
    "qwen2_moe": "halves",
    "qwen3": "halves",
    "qwen3_moe": "halves",
    "gemma": "halves",
    "gemma2": "halves",
    "gemma3_text": "halves",
    "granite": "halves",
    "starcoder2": "halves",
    "olmo": "halves",
    "olmo2": "halves",
    "smollm3": "halves",
    "stablelm": "halves",
    "phi": "halves",
    "persimmon": "halves",
    "gpt_neox": "partial",
    "phi3": "partial",
}

# The modeling files whose apply_rotary_pos_emb defines each form (compared as syntax trees, without
# docstrings and decorators, so that a transformers release that changes a function is refused
# rather than patched with a different meaning).
_FORM_REFERENCES = {
    "halves": ("llama", "olmo"),
    "partial": ("gpt_neox", "phi3"),
}

# Where a model type's modeling file lives when it is not models/<type>/modeling_<type>.py.
_MODELING_MODULES = {"gemma3_text": "gemma3"}

_PATCHED = "_posenc_rope_patched"


def _modeling_module(model_type):
    name = _MODELING_MODULES.get(model_type, model_type)
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _syntax(function):
    """The syntax tree of a function's arguments and body, without its docstring and decorators."""
    node = ast.parse(inspect.cleandoc("\n" + inspect.getsource(inspect.unwrap(function)))).body[0]
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return ast.dump(node.args) + ast.dump(ast.Module(body=body, type_ignores=[]))


def _form_of(model_type, modeling):
    form = SUPPORTED_MODEL_TYPES[model_type]
    function = getattr(modeling, "apply_rotary_pos_emb", None)
    rotate_half = getattr(modeling, "rotate_half", None)
    if function is None or rotate_half is None:
        raise ValueError(f"posenc: {modeling.__name__} has no apply_rotary_pos_emb/rotate_half in this "
                         f"transformers ({_transformers_version()}); posenc cannot patch '{model_type}' models")
    references = [_modeling_module(name) for name in _FORM_REFERENCES[form]]
    if _syntax(rotate_half) != _syntax(references[0].rotate_half) or all(
            _syntax(function) != _syntax(reference.apply_rotary_pos_emb) for reference in references):
        raise ValueError(
            f"posenc: {modeling.__name__}.apply_rotary_pos_emb in this transformers ({_transformers_version()}) "
            f"is not the '{form}' rotation posenc replaces (that of {', '.join(_FORM_REFERENCES[form])}); "
            "the model was left unpatched. posenc is tested with transformers 5.23.0")
    return form


def _transformers_version():
    import transformers

    return transformers.__version__


def _rotate(q, k, cos, sin, unsqueeze_dim, form):
    if unsqueeze_dim not in (1, 2):
        raise ValueError(f"posenc apply_rotary_pos_emb: unsqueeze_dim must be 1 (q, k [B, H, L, D]) or "
                         f"2 ([B, L, H, D]), but got {unsqueeze_dim}")
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or sin.shape != cos.shape:
        raise ValueError(f"posenc apply_rotary_pos_emb: q and k must be 4-D and cos, sin [B, L, R] of one shape, "
                         f"but got q {list(q.shape)}, k {list(k.shape)}, cos {list(cos.shape)}, sin {list(sin.shape)}")
    heads_first = unsqueeze_dim == 1
    batch, length = q.shape[0], q.shape[2 if heads_first else 1]
    rows, width = cos.shape[0], cos.shape[2]
    if cos.shape[1] != length or rows not in (1, batch):
        raise ValueError(f"posenc apply_rotary_pos_emb: cos and sin must be [B, L, R] or [1, L, R] for q of batch "
                         f"{batch} and length {length}, but got {list(cos.shape)}")
    if form == "halves" and (q.shape[-1] != width or k.shape[-1] != width):
        raise ValueError(f"posenc apply_rotary_pos_emb: q, k and cos must have one width (this model rotates whole "
                         f"heads), but got q {q.shape[-1]}, k {k.shape[-1]}, cos {width}")
    if cos.requires_grad or sin.requires_grad:
        raise ValueError("posenc apply_rotary_pos_emb: cos and sin must not require grad (posenc differentiates "
                         "with respect to q and k only); compute them under torch.no_grad()")
    half = width // 2
    # The model's cos/sin repeat their R/2 values in both halves (cat(freqs, freqs)): posenc's tables
    # are one half (a view), one row per token.
    cos_rows = cos[..., :half].reshape(rows * length, half)
    sin_rows = sin[..., :half].reshape(rows * length, half)
    # One row per token of the batch; with rows shared by the batch ([1, L, R]), rows 0 .. L - 1.
    positions = torch.arange(rows * length, device=q.device).view(rows, length) if rows > 1 else None
    return torch.ops.posenc.apply_rotary_qk(q, k, cos_rows, sin_rows, 0, positions, False, heads_first, False,
                                            None, 1.0)


def _replacement(form):
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        """posenc's rotation of q and k by the model's cos and sin (posenc.integrations.transformers)."""
        return _rotate(q, k, cos, sin, unsqueeze_dim, form)

    return apply_rotary_pos_emb


def _calls_rope(cls, modeling):
    forward = cls.__dict__.get("forward")
    return (isinstance(forward, types.FunctionType) and forward.__globals__ is modeling.__dict__
            and "apply_rotary_pos_emb" in forward.__code__.co_names)


def _patched_namespace(modeling, form):
    """A copy of the modeling file's namespace with posenc's apply_rotary_pos_emb: a module of its own
    in sys.modules (torch.compile finds a function's globals by their module's name), made once per
    modeling file."""
    name = f"{__name__}._patched.{modeling.__name__.rsplit('.', 1)[-1]}"
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        module.__dict__.update({key: value for key, value in vars(modeling).items() if key not in ("__name__", "__spec__", "__loader__")})
        module.__dict__["apply_rotary_pos_emb"] = _replacement(form)
        sys.modules[name] = module
    return module.__dict__


def _patched_forward(module, namespace):
    original = type(module).forward
    function = types.FunctionType(original.__code__, namespace, original.__name__, original.__defaults__,
                                  original.__closure__)
    function.__kwdefaults__ = original.__kwdefaults__
    function.__qualname__ = original.__qualname__
    function.__doc__ = original.__doc__
    return types.MethodType(function, module)


def _attention_layers(model):
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if not isinstance(model, torch.nn.Module) or model_type is None:
        raise ValueError(f"posenc: apply_posenc_rope takes a transformers model (a torch.nn.Module with a "
                         f"config), but got {type(model).__name__}")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"posenc: apply_posenc_rope supports the model types {sorted(SUPPORTED_MODEL_TYPES)}, but "
                         f"this model is '{model_type}' ({type(model).__name__}); the model was left unpatched")
    modeling = _modeling_module(model_type)
    form = _form_of(model_type, modeling)
    layers = [m for m in model.modules() if type(m).__module__ == modeling.__name__ and _calls_rope(type(m), modeling)]
    if not layers:
        raise ValueError(f"posenc: no module of this {type(model).__name__} calls {modeling.__name__}."
                         "apply_rotary_pos_emb from its forward; the model was left unpatched")
    return layers, modeling, form


def apply_posenc_rope(model):
    """Makes ``model`` (a transformers model of a type in ``SUPPORTED_MODEL_TYPES``) rotate queries and
    keys with ``torch.ops.posenc.apply_rotary_qk``. Patches this instance only: each attention layer
    gets a forward that is its class's forward with the modeling file's ``apply_rotary_pos_emb``
    replaced. Parameters, buffers, state-dict keys, config and outputs (see the module docstring)
    stay as they were; ``generate``, ``torch.compile`` and ``save_pretrained`` work as before.
    Patching a patched model changes nothing. Raises ``ValueError``, with the model unchanged, for a
    model type posenc does not support or a transformers whose rotation is not the one posenc
    replaces. Returns ``model``."""
    layers, modeling, form = _attention_layers(model)
    namespace = _patched_namespace(modeling, form)
    forwards = [(layer, _patched_forward(layer, namespace)) for layer in layers if not is_patched(layer)]
    for layer, forward in forwards:
        layer.forward = forward
        setattr(layer, _PATCHED, True)
    return model


def remove_posenc_rope(model):
    """Undoes ``apply_posenc_rope``: the attention layers call their class's forward again. Returns
    ``model``."""
    for module in model.modules():
        if module.__dict__.get(_PATCHED, False):
            del module.forward
            delattr(module, _PATCHED)
    return model


def is_patched(model):
    """Whether ``model`` (or any of its submodules) rotates with posenc."""
    return any(module.__dict__.get(_PATCHED, False) for module in model.modules())
