"""Hugging Face transformers models that rotate queries and keys with posenc's fused q+k operator.

``apply_posenc_rope(model)`` patches one model instance (not its class, not other models): its
attention layers become instances of a subclass (``Posenc<Class>``) whose forward is their class's
own code, calling ``torch.ops.posenc.apply_rotary_qk`` where that code calls the modeling file's
``apply_rotary_pos_emb``. The model's rotary embedding still
makes cos and sin (so every rope type, scaling and position id works as before); posenc rotates
q and k with them in one pass, reading each token's row once for all heads.

    import posenc.integrations.transformers as posenc_hf
    model = transformers.AutoModelForCausalLM.from_pretrained(...)
    posenc_hf.apply_posenc_rope(model)     # the same model, patched; generate, compile, save as before

Equal to the unpatched model in float32 (the rotation is the same arithmetic, each output rounded
once); in bfloat16 and float16 posenc computes in float32 and rounds once, where transformers rounds
each product and the sum, so results differ by at most a few units in the last place of the dtype.
The result has q's dtype (transformers' formula promotes, e.g. bfloat16 q times float32 cos under
autocast gives float32; posenc keeps bfloat16). cos and sin must be what the model's rotary
embedding makes, the R/2 values of each token twice (cat(freqs, freqs)): posenc reads the first
half.
Unsupported models are refused with a ``ValueError`` before anything is changed.
"""

import ast
import hashlib
import importlib
import inspect
import sys
import textwrap
import threading
import types

import torch

import posenc  # noqa: F401  (loads the operators)

__all__ = ["SUPPORTED_MODEL_TYPES", "apply_posenc_rope", "remove_posenc_rope", "is_patched"]

#: The model types whose rotary application posenc replaces, and the form of each modeling file's
#: ``apply_rotary_pos_emb``: "halves" (the whole head, pairs (i, i + D/2): LLaMA's function),
#: "partial" (the first R = cos.shape[-1] channels in halves, the rest passed through: GPT-NeoX's
#: and Phi-3's) or "interleaved" (the whole head, pairs (2i, 2i + 1), computed in float32:
#: Cohere's). Each is tested on a small random model against its unpatched self
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
    "cohere": "interleaved",
}

# The functions each form replaces, as transformers 5.23.0 writes them: sha256 of their source
# without docstring, decorators and comments (ast.unparse), so that a transformers release that
# changes a function, in any modeling file and in the reference files themselves, is refused
# rather than patched with a different meaning. "halves": LLaMA's and OLMo's apply_rotary_pos_emb
# (every generated copy is one of them); "partial": GPT-NeoX's and Phi-3's; "interleaved":
# Cohere's.
_FORM_FINGERPRINTS = {
    "halves": {
        "4a8f8b85ee37bd3fdcb3cd5290bea811ada42a032591078e916200182f73656f",
        "92ec8cff28b47c788cea65c9fe196d4c5e39d443ce37bf4218515d230adb3af0",
    },
    "partial": {
        "d979b6dc501d84b5a022d5672eeaa1b0bfe2674393a7000aea57a3a10de0fd77",
        "9af4c6b9d14681cfc477e2a567580ba16718dc7c5b7e7f488fab00a3155feb69",
    },
    "interleaved": {
        "e8f88cb26b9ab6f87a9a098ee4c9b64d6ee30d33acd03b21584be514970802a4",
    },
}
# rotate_half of each form: LLaMA's (halves, partial), Cohere's (pairs (2i, 2i + 1)).
_ROTATE_HALF_FINGERPRINTS = {
    "halves": {"7b6c9b425ca04287b0d1187fe8f5be68f7e98e5a26b955275ef63e701173e587"},
    "partial": {"7b6c9b425ca04287b0d1187fe8f5be68f7e98e5a26b955275ef63e701173e587"},
    "interleaved": {"aaf0544cc6c97a6033599c6ade53c27b16ded945a1a0fd0916c5fb5cf02e71fd"},
}

# Where a model type's modeling file lives when it is not models/<type>/modeling_<type>.py.
_MODELING_MODULES = {"gemma3_text": "gemma3"}

# The patched classes live in modules named by this prefix and the modeling file
# (posenc.integrations._posenc_rope_modeling_llama.PosencLlamaAttention), which
# posenc.integrations can rebuild in a fresh process, so that a pickled patched model loads.
PATCHED_MODULE_PREFIX = "posenc.integrations._posenc_rope_"

# Held while the patched modules and classes are looked up and made (apply_posenc_rope from many
# threads at once, unpickling): one module per modeling file and one class per attention class,
# the ones pickle finds by name.
_lock = threading.RLock()


def _modeling_module(model_type):
    name = _MODELING_MODULES.get(model_type, model_type)
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _fingerprint(function):
    """sha256 of a function's source without its docstring, decorators and comments."""
    try:
        source = inspect.getsource(inspect.unwrap(function))
    except (OSError, TypeError) as error:
        raise ValueError(f"posenc: the source of {getattr(function, '__qualname__', function)} cannot be read "
                         f"({error}), so posenc cannot check what it would replace; the model was left unpatched")
    node = ast.parse(textwrap.dedent(source)).body[0]
    node.decorator_list = []
    if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
            and isinstance(node.body[0].value.value, str):
        node.body = node.body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.unparse(node).encode()).hexdigest()


def _form_of(model_type, modeling):
    form = SUPPORTED_MODEL_TYPES[model_type]
    function = getattr(modeling, "apply_rotary_pos_emb", None)
    rotate_half = getattr(modeling, "rotate_half", None)
    if function is None or rotate_half is None:
        raise ValueError(f"posenc: {modeling.__name__} has no apply_rotary_pos_emb/rotate_half in this "
                         f"transformers ({_transformers_version()}); posenc cannot patch '{model_type}' models")
    if _fingerprint(rotate_half) not in _ROTATE_HALF_FINGERPRINTS[form] or \
            _fingerprint(function) not in _FORM_FINGERPRINTS[form]:
        raise ValueError(
            f"posenc: {modeling.__name__}.apply_rotary_pos_emb in this transformers ({_transformers_version()}) "
            f"is not the '{form}' rotation posenc replaces (transformers 5.23.0's); the model was left unpatched")
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
    if form in ("halves", "interleaved") and (q.shape[-1] != width or k.shape[-1] != width):
        raise ValueError(f"posenc apply_rotary_pos_emb: q, k and cos must have one width (this model rotates whole "
                         f"heads), but got q {q.shape[-1]}, k {k.shape[-1]}, cos {width}")
    if cos.requires_grad or sin.requires_grad:
        raise ValueError("posenc apply_rotary_pos_emb: cos and sin must not require grad (posenc differentiates "
                         "with respect to q and k only); compute them under torch.no_grad()")
    if width % 2 != 0:
        raise ValueError(f"posenc apply_rotary_pos_emb: cos and sin must have an even width R (each token's R/2 "
                         f"values twice, as the model's rotary embedding makes them), but got {width}; posenc "
                         "rotates pairs of channels and cannot rotate an odd count")
    half = width // 2
    # The model's cos/sin hold each token's R/2 values twice: in both halves (cat(freqs, freqs))
    # or, interleaved (Cohere, pairs (2i, 2i + 1)), twice in a row (repeat_interleave). posenc's
    # tables are one copy, one row per token (a strided view; the operator reads it as it lies or
    # makes it contiguous, a copy of [rows * L, R/2]); both compute in float32 and round once.
    interleaved = form == "interleaved"
    columns = slice(None, None, 2) if interleaved else slice(None, half)
    cos_rows = cos[..., columns].reshape(rows * length, half)
    sin_rows = sin[..., columns].reshape(rows * length, half)
    # One row per token of the batch; with rows shared by the batch ([1, L, R]), rows 0 .. L - 1.
    positions = torch.arange(rows * length, device=q.device).view(rows, length) if rows > 1 else None
    return torch.ops.posenc.apply_rotary_qk(q, k, cos_rows, sin_rows, 0, positions, interleaved, heads_first, False,
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


def _patched_module(modeling, form):
    """The module of the patched classes of one modeling file: a copy of the file's namespace (taken
    again at every call, so later changes to the file's other globals are seen) with posenc's
    apply_rotary_pos_emb, registered in sys.modules (torch.compile finds a function's globals, and
    pickle a class, by their module's name)."""
    name = PATCHED_MODULE_PREFIX + modeling.__name__.rsplit(".", 1)[-1]
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name, f"posenc's patched classes of {modeling.__name__}")
        sys.modules[name] = module
    keep = {key: module.__dict__[key] for key in list(module.__dict__) if key.startswith("Posenc")}
    module.__dict__.update({key: value for key, value in vars(modeling).items()
                            if key not in ("__name__", "__doc__", "__spec__", "__loader__", "__package__")})
    module.__dict__.update(keep)
    module.__dict__["apply_rotary_pos_emb"] = _replacement(form)
    return module


def _patched_class(cls, module):
    """cls with its own forward run in `module`'s namespace: module.Posenc<cls.__name__>, made once."""
    name = "Posenc" + cls.__name__
    patched = module.__dict__.get(name)
    if patched is None or patched.__bases__ != (cls,):
        original = cls.__dict__["forward"]
        forward = types.FunctionType(original.__code__, module.__dict__, original.__name__, original.__defaults__,
                                     original.__closure__)
        forward.__kwdefaults__ = original.__kwdefaults__
        forward.__qualname__ = f"{name}.forward"
        forward.__doc__ = original.__doc__
        patched = type(name, (cls,), {"forward": forward, "__module__": module.__name__, "__qualname__": name,
                                      "_posenc_rope_original": cls})
        setattr(module, name, patched)
    return patched


def _rebuild_patched_module(name):
    """Makes the module `name` (PATCHED_MODULE_PREFIX + modeling file) with every patched class its
    modeling file can have: what unpickling a patched model in a fresh process imports."""
    stem = name[len(PATCHED_MODULE_PREFIX):]
    for model_type in SUPPORTED_MODEL_TYPES:
        if f"modeling_{_MODELING_MODULES.get(model_type, model_type)}" == stem:
            modeling = _modeling_module(model_type)
            form = _form_of(model_type, modeling)
            with _lock:
                module = _patched_module(modeling, form)
                for value in list(vars(modeling).values()):
                    if isinstance(value, type) and issubclass(value, torch.nn.Module) and _calls_rope(value, modeling):
                        _patched_class(value, module)
            return module
    raise ImportError(f"posenc: {name} names no modeling file of a supported model type")


def _attention_layers(model):
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if not isinstance(model, torch.nn.Module) or model_type is None:
        raise ValueError(f"posenc: apply_posenc_rope takes a transformers model (a torch.nn.Module with a "
                         f"config), but got {type(model).__name__}")
    if not isinstance(model_type, str):
        raise ValueError(f"posenc: apply_posenc_rope reads the model type from config.model_type, which must be a "
                         f"string (one of {sorted(SUPPORTED_MODEL_TYPES)}), but this {type(model).__name__}'s is "
                         f"{type(model_type).__name__} {model_type!r}; the model was left unpatched")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"posenc: apply_posenc_rope supports the model types {sorted(SUPPORTED_MODEL_TYPES)}, but "
                         f"this model is '{model_type}' ({type(model).__name__}); the model was left unpatched")
    modeling = _modeling_module(model_type)
    form = _form_of(model_type, modeling)
    layers = [m for m in model.modules()
              if _original_class(m).__module__ == modeling.__name__ and _calls_rope(_original_class(m), modeling)]
    if not layers:
        raise ValueError(f"posenc: no module of this {type(model).__name__} calls {modeling.__name__}."
                         "apply_rotary_pos_emb from its forward; the model was left unpatched")
    for layer in layers:
        if "forward" in layer.__dict__:
            raise ValueError(f"posenc: {type(layer).__name__} {layer.__dict__['forward']!r} has a forward of its own "
                             "(a hook or another patch set on the instance); posenc patches the class's forward "
                             "only, so the model was left unpatched")
    return layers, modeling, form


def _original_class(module):
    return type(module).__dict__.get("_posenc_rope_original", type(module))


def apply_posenc_rope(model):
    """Makes ``model`` (a transformers model of a type in ``SUPPORTED_MODEL_TYPES``) rotate queries and
    keys with ``torch.ops.posenc.apply_rotary_qk``. Patches this instance only: each attention layer
    becomes an instance of a subclass of its class (``Posenc<Class>``, in a module of posenc's)
    whose forward is its class's forward with the modeling file's ``apply_rotary_pos_emb``
    replaced. Parameters, buffers, state-dict keys, config and outputs (see the module docstring)
    stay as they were; ``generate``, ``torch.compile``, ``save_pretrained``, ``copy.deepcopy``,
    pickling and ``nn.DataParallel`` replicas work as before. Patching a patched model changes
    nothing. Raises ``ValueError``, with the model unchanged, for a model type posenc does not
    support, a transformers whose rotation is not the one posenc replaces, or an attention layer
    whose instance has a forward of its own. Returns ``model``."""
    layers, modeling, form = _attention_layers(model)
    with _lock:
        module = _patched_module(modeling, form)
        classes = [(layer, _patched_class(_original_class(layer), module)) for layer in layers]
    for layer, patched in classes:
        layer.__class__ = patched
    return model


def _check_module(model, function):
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"posenc: {function} takes a model (a torch.nn.Module), but got {type(model).__name__}")


def remove_posenc_rope(model):
    """Undoes ``apply_posenc_rope``: the attention layers are instances of their own class again.
    Returns ``model``."""
    _check_module(model, "remove_posenc_rope")
    for module in model.modules():
        module.__class__ = _original_class(module)
    return model


def is_patched(model):
    """Whether ``model`` (or any of its submodules) rotates with posenc."""
    _check_module(model, "is_patched")
    return any("_posenc_rope_original" in type(module).__dict__ for module in model.modules())
