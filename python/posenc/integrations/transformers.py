"""Hugging Face transformers models that rotate queries and keys with posenc's rotary operators.

``apply_posenc_rope(model)`` patches one model instance (not its class, not other models): its
attention layers become instances of a subclass (``Posenc<Class>``) whose forward is their class's
own code, calling ``torch.ops.posenc.apply_rotary_qk`` (or ``apply_rotary`` for a function that
turns one tensor) where that code calls its modeling file's rotary function. The model's rotary
embedding still makes cos and sin (so every rope type, scaling and position id works as before);
posenc rotates q and k with them in one pass, reading each token's row once for all heads.

    import posenc.integrations.transformers as posenc_hf
    model = transformers.AutoModelForCausalLM.from_pretrained(...)
    posenc_hf.apply_posenc_rope(model)     # the same model, patched; generate, compile, save as before

**Discovery, not a list.** No model type is named here. A model is served when every rotary
function its text attention calls is one posenc computes exactly, decided from the function itself
by a numerical probe (``rotation_form``): the function is called on random q, k and angles in
float32, in each of the forms below, and compared with posenc's operator on the same inputs; the
first form that agrees (within 1e-5, where a wrong form is off by the size of the values) is the
function's form. A probe, not a list of source fingerprints, because what matters is what the
function computes: a newer transformers that rewrites a function without changing its meaning is
still served, and one that changes its meaning is refused. The sha256 of each function's source is
reported with its form (``describe_posenc_rope``) so that a reader can see which code was probed.
The forms (every one transformers 5.23.0's text attention uses, with posenc's operator):

* pairing: ``halves`` (pairs (i, i + R/2): LLaMA's rotate_half) or ``interleaved`` (pairs
  (2i, 2i + 1): Cohere, GLM, GPT-J, Helium, ERNIE 4.5, DeepSeek-V4);
* cos/sin layout, as the function reads them: ``cat`` (each token's R/2 values twice,
  cat(freqs, freqs): LLaMA's rotary embedding), ``repeat`` (repeat_interleave(freqs, 2): Cohere's)
  or ``half`` (the R/2 values once: GPT-J, gpt-oss, DeepSeek-V4);
* placement: the ``first`` R channels of the head (R = the whole head or fewer: GPT-NeoX, Phi-3,
  GLM; the rest passed through) or the ``last`` R (DeepSeek-V4);
* output: ``same`` channel order, or ``deinterleaved`` (MLA's apply_rotary_pos_emb_interleave:
  the pairs (2i, 2i + 1) rotated and written as halves);
* call: ``qk`` (q, k, cos, sin[, unsqueeze_dim]; k may be None), ``x`` (one tensor: Gemma 3n,
  Gemma 4, GPT-J, DeepSeek-V4: q-only and k-only calls) or ``complex`` (xq, xk, freqs_cis: Llama 4
  and DeepSeek-V2 multiply pairs (2i, 2i + 1) as complex numbers by cos + i sin, which is the
  interleaved rotation).

The probe also fixes the heads layout a function without ``unsqueeze_dim`` assumes. Whether the
model's rotary embedding makes cos and sin in the layout the form reads is checked when the model
is patched (``cat``: equal halves; ``repeat``: equal pairs), by calling each rotary embedding of
the model (``*RotaryEmbedding`` modules, every layer type) on a few positions. Vision towers'
rotary functions (``*_vision``, ``*_2d*``, ``apply_multidimensional_rope``) are left to the model's
own code. Anything else is refused with a ``ValueError`` before anything is changed, naming the
function and why.

Equal to the unpatched model in float32 (the rotation is the same arithmetic, each output rounded
once); in bfloat16 and float16 posenc computes in float32 and rounds once, where transformers rounds
each product and the sum (or, in the files that upcast, the same as posenc), so results differ by
at most a few units in the last place of the dtype. The result has q's dtype (transformers'
formula promotes, e.g. bfloat16 q times float32 cos under autocast gives float32; posenc keeps
bfloat16).
"""

import ast
import collections
import copy
import hashlib
import importlib
import inspect
import os
import re
import sys
import textwrap
import threading
import types

import torch

import posenc  # noqa: F401  (loads the operators)

__all__ = ["apply_posenc_rope", "remove_posenc_rope", "is_patched", "describe_posenc_rope", "rotation_form",
           "replacement_for", "RotationForm"]

# A rotary function of a modeling file: what a class's forward calls by a global name like these.
_ROTARY_NAME = re.compile(r"^apply_\w*(rotary|rope)\w*$")
# Rotary functions of vision towers (2-D/3-D positions of patches), left to the model's own code.
_VISION_NAME = re.compile(r"(vision|_2d|multidimensional)")

#: The form of a rotary function posenc computes exactly (see the module docstring).
RotationForm = collections.namedtuple(
    "RotationForm", ["call", "pairing", "layout", "placement", "output", "heads_first", "partial", "inverse",
                     "k_none"],
    defaults=[False, None])  # k_none: what a qk call with k=None returns: "q", "pair" (q, None), or None (refused)


def _describe_form(form):
    heads = "" if form.heads_first is None else (", q and k [B, H, L, D]" if form.heads_first else
                                                  ", q and k [B, L, H, D]")
    return (f"{'inverse ' if form.inverse else ''}{form.pairing} pairs, cos/sin {form.layout}, "
            f"{form.placement} R channels{' (R may be less than the head)' if form.partial else ' (whole heads)'}"
            f"{', written de-interleaved' if form.output == 'deinterleaved' else ''}, call {form.call}{heads}")


# The patched classes live in modules named by this prefix and the modeling file
# (posenc.integrations._posenc_rope_modeling_llama.PosencLlamaAttention), which
# posenc.integrations can rebuild in a fresh process, so that a pickled patched model loads.
PATCHED_MODULE_PREFIX = "posenc.integrations._posenc_rope_"

# Held while the patched modules and classes are looked up and made (apply_posenc_rope from many
# threads at once, unpickling): one module per modeling file and one class per attention class,
# the ones pickle finds by name. Also guards the cache of probed functions.
_lock = threading.RLock()
_forms = {}  # function -> RotationForm, or the reason it is refused (a str)


def _source_sha256(function):
    """sha256 of a function's source without its docstring, decorators and comments, or None."""
    try:
        source = inspect.getsource(inspect.unwrap(function))
        node = ast.parse(textwrap.dedent(source)).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    node.decorator_list = []
    if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
            and isinstance(node.body[0].value.value, str):
        node.body = node.body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.unparse(node).encode()).hexdigest()


def _transformers_version():
    import transformers

    return transformers.__version__


# --- the call conventions -------------------------------------------------------------------------

def _convention(function):
    """(call, parameter names, unsqueeze default or None) of a rotary function, or a reason (str)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError) as error:
        return f"its signature cannot be read ({error})"
    names = list(parameters)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters.values()):
        return f"it takes *args or **kwargs ({', '.join(names)})"
    unsqueeze = parameters["unsqueeze_dim"].default if "unsqueeze_dim" in parameters else None
    if names[:4] == ["q", "k", "cos", "sin"] and set(names[4:]) <= {"position_ids", "unsqueeze_dim"}:
        return "qk", names, unsqueeze
    if len(names) >= 3 and names[0] in ("x", "tensor", "hidden_states") and set(names[1:3]) == {"cos", "sin"} \
            and set(names[3:]) <= {"unsqueeze_dim"}:
        return "x", names, unsqueeze
    if names == ["xq", "xk", "freqs_cis"]:
        return "complex", names, None
    return (f"its arguments ({', '.join(names)}) are none of the calls posenc knows: (q, k, cos, sin[, "
            "unsqueeze_dim]), (x, cos, sin[, unsqueeze_dim]) or (xq, xk, freqs_cis)")


def _bind(names, args, kwargs, function_name):
    if len(args) > len(names):
        raise TypeError(f"{function_name}() takes {len(names)} arguments but {len(args)} were given")
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in values:
            raise TypeError(f"{function_name}() got an unexpected or repeated argument '{key}'")
        values[key] = value
    return values


# --- posenc's rotation in each form ---------------------------------------------------------------

def _half_values(table, layout):
    if layout == "cat":
        return table[..., :table.shape[-1] // 2]
    if layout == "repeat":
        return table[..., 0::2]
    return table


def _rotate_tensors(tensors, cos, sin, form, unsqueeze_dim):
    """posenc's rotation of each tensor of `tensors` (None passes through) by cos/sin in `form`."""
    heads_first = form.heads_first if form.heads_first is not None else unsqueeze_dim == 1
    if form.heads_first is None and unsqueeze_dim not in (1, 2):
        raise ValueError(f"posenc apply_rotary_pos_emb: unsqueeze_dim must be 1 (q, k [B, H, L, D]) or "
                         f"2 ([B, L, H, D]), but got {unsqueeze_dim}")
    present = [t for t in tensors if t is not None]
    if any(t.dim() != 4 for t in present) or cos.dim() != 3 or sin.shape != cos.shape:
        raise ValueError(f"posenc apply_rotary_pos_emb: q and k must be 4-D and cos, sin [B, L, R] of one shape, "
                         f"but got {[list(t.shape) for t in present]}, cos {list(cos.shape)}, sin {list(sin.shape)}")
    first = present[0]
    batch, length, head = first.shape[0], first.shape[2 if heads_first else 1], first.shape[-1]
    rows = cos.shape[0]
    if cos.shape[1] != length or rows not in (1, batch):
        raise ValueError(f"posenc apply_rotary_pos_emb: cos and sin must be [B, L, R] or [1, L, R] for q of batch "
                         f"{batch} and length {length}, but got {list(cos.shape)}")
    if cos.requires_grad or sin.requires_grad:
        raise ValueError("posenc apply_rotary_pos_emb: cos and sin must not require grad (posenc differentiates "
                         "with respect to q and k only); compute them under torch.no_grad()")
    if form.layout != "half" and cos.shape[-1] % 2 != 0:
        raise ValueError(f"posenc apply_rotary_pos_emb: cos and sin must have an even width R (each token's R/2 "
                         f"values twice, as the model's rotary embedding makes them), but got {cos.shape[-1]}; posenc "
                         "rotates pairs of channels and cannot rotate an odd count")
    cos_rows = _half_values(cos, form.layout)
    sin_rows = _half_values(sin, form.layout)
    width = 2 * cos_rows.shape[-1]
    if any(t.shape[-1] != head for t in present) or width > head or (width != head and not form.partial):
        raise ValueError(f"posenc apply_rotary_pos_emb: q, k and cos must have one width (this model rotates whole "
                         f"heads), or cos a narrower one where the model rotates part of each head, but got "
                         f"{[t.shape[-1] for t in present]} and cos {cos.shape[-1]} ({form.layout} layout)")
    half = width // 2
    cos_rows = cos_rows.reshape(rows * length, half)
    sin_rows = sin_rows.reshape(rows * length, half)
    # One row per token of the batch; with rows shared by the batch ([1, L, R]), rows 0 .. L - 1.
    positions = torch.arange(rows * length, device=first.device).view(rows, length) if rows > 1 else None
    interleaved = form.pairing == "interleaved"
    last = form.placement == "last" and width != head

    def prepare(t):
        return t.narrow(-1, head - width, width) if last else t

    def finish(t, rotated):
        if form.output == "deinterleaved":
            # MLA: pairs (2i, 2i + 1) rotated and written as halves (even channels, then odd).
            rotated = torch.cat((rotated[..., 0::2], rotated[..., 1::2]), dim=-1)
        return torch.cat((t.narrow(-1, 0, head - width), rotated), dim=-1) if last else rotated

    if len(present) == 2:
        q, k = present
        rq, rk = torch.ops.posenc.apply_rotary_qk(prepare(q), prepare(k), cos_rows, sin_rows, 0, positions,
                                                  interleaved, heads_first, form.inverse, None, 1.0)
        results = iter((finish(q, rq), finish(k, rk)))
    else:
        x = present[0]
        results = iter((finish(x, torch.ops.posenc.apply_rotary(prepare(x), cos_rows, sin_rows, 0, positions,
                                                                interleaved, heads_first, form.inverse, None,
                                                                1.0)),))
    return [None if t is None else next(results) for t in tensors]


def _replacement(function, form):
    """posenc's function in place of `function` (a rotary function of the form `form`), taking the
    same arguments."""
    call, names, unsqueeze_default = _convention(function)
    name = function.__name__

    if call == "qk":
        def rotate(*args, **kwargs):
            values = _bind(names, args, kwargs, name)
            q, k = values["q"], values.get("k")
            unsqueeze = values.get("unsqueeze_dim", unsqueeze_default)
            if k is None and form.k_none is None:
                raise ValueError(f"posenc {name}: k must be a tensor (the model's function takes no k=None)")
            rq, rk = _rotate_tensors([q, k], values["cos"], values["sin"], form, unsqueeze)
            if k is None:  # as the model's function answers (Qwen4-exp: q; Mistral Large 4: (q, None))
                return rq if form.k_none == "q" else (rq, None)
            return rq, rk
    elif call == "complex":
        def rotate(*args, **kwargs):
            values = _bind(names, args, kwargs, name)
            freqs = values["freqs_cis"]
            if not torch.is_complex(freqs):
                raise ValueError(f"posenc {name}: freqs_cis must be complex (cos + i sin), but got {freqs.dtype}")
            # (a + ib)(cos + i sin) on pairs (2i, 2i + 1): the interleaved rotation by cos and sin.
            return tuple(_rotate_tensors([values["xq"], values["xk"]], freqs.real, freqs.imag, form, None))
    else:
        def rotate(*args, **kwargs):
            values = _bind(names, args, kwargs, name)
            unsqueeze = values.get("unsqueeze_dim", unsqueeze_default)
            return _rotate_tensors([values[names[0]]], values["cos"], values["sin"], form, unsqueeze)[0]

    rotate.__name__ = name
    rotate.__qualname__ = name
    rotate.__doc__ = f"posenc's rotation in place of {function.__module__}.{name} ({_describe_form(form)})."
    rotate._posenc_original = function
    return rotate


# --- the probe ------------------------------------------------------------------------------------

_CANDIDATES = [(pairing, layout, placement, output, inverse)
               for inverse in (False, True)
               for output in ("same", "deinterleaved")
               for placement in ("first", "last")
               for pairing in ("halves", "interleaved")
               for layout in ("cat", "repeat", "half")
               if not (output == "deinterleaved" and (pairing == "halves" or placement == "last"))]


def _probe_inputs(generator, heads_first, width, head=16):
    batch, heads, kv_heads, length = 2, 3, 1, 5

    def tensor(h):
        shape = (batch, h, length, head) if heads_first else (batch, length, h, head)
        return torch.randn(shape, generator=generator)

    positions = torch.randint(0, 60, (batch, length, 1), generator=generator).float()
    inv_freq = torch.rand(width // 2, generator=generator) + 0.05
    angles = positions * inv_freq
    return tensor(heads), tensor(kv_heads), angles


def _laid_out(values, layout):
    if layout == "cat":
        return torch.cat((values, values), dim=-1)
    if layout == "repeat":
        return values.repeat_interleave(2, dim=-1)
    return values


def _agrees(function, names, call, form, unsqueeze, heads_first, width, generator):
    q, k, angles = _probe_inputs(generator, heads_first, width)
    cos, sin = _laid_out(angles.cos(), form.layout), _laid_out(angles.sin(), form.layout)
    kwargs = {} if unsqueeze is None else {"unsqueeze_dim": unsqueeze}
    if "position_ids" in names:  # (posenc's rows are cos/sin's own: a function that reads these differs)
        kwargs["position_ids"] = torch.arange(q.shape[2 if heads_first else 1]).flip(0)[None]
    try:
        with torch.no_grad():
            if call == "complex":
                freqs = torch.polar(torch.ones_like(angles), angles)
                theirs = function(q, k, freqs)
                ours = _rotate_tensors([q, k], freqs.real, freqs.imag, form, None)
            elif call == "qk":
                theirs = function(q, k, cos, sin, **kwargs)
                ours = _rotate_tensors([q, k], cos, sin, form, unsqueeze)
            else:
                theirs = (function(**{names[0]: q, "cos": cos, "sin": sin}, **kwargs),)
                ours = _rotate_tensors([q], cos, sin, form, unsqueeze)
    except Exception:  # noqa: BLE001  (whatever the model's code raises: not inputs it takes)
        return None  # this form's inputs are not ones the function takes
    if not isinstance(theirs, (tuple, list)) or len(theirs) != len(ours):
        return False
    return all(isinstance(t, torch.Tensor) and t.shape == o.shape and bool(((t - o).abs() <= 1e-5).all())
               for t, o in zip(theirs, ours))


def _k_none(function, form, generator):
    """What the function returns for k=None (q-only calls: Qwen4-exp returns q, Mistral Large 4's
    shared-KV layers get (q, None)), checked against posenc's q; None where it takes no k=None."""
    if form.call != "qk":
        return None
    heads_first = True if form.heads_first is None else form.heads_first
    q, _, angles = _probe_inputs(generator, heads_first, 16)
    cos, sin = _laid_out(angles.cos(), form.layout), _laid_out(angles.sin(), form.layout)
    kwargs = {} if form.heads_first is not None else {"unsqueeze_dim": 1}
    try:
        with torch.no_grad():
            theirs = function(q, None, cos, sin, **kwargs)
            ours = _rotate_tensors([q], cos, sin, form, kwargs.get("unsqueeze_dim"))[0]
    except Exception:  # noqa: BLE001  (it takes no k=None)
        return None
    if isinstance(theirs, torch.Tensor):
        kind, value = "q", theirs
    elif isinstance(theirs, (tuple, list)) and len(theirs) == 2 and theirs[1] is None:
        kind, value = "pair", theirs[0]
    else:
        return None
    return kind if value.shape == ours.shape and bool(((value - ours).abs() <= 1e-5).all()) else None


def _probe(function):
    convention = _convention(function)
    if isinstance(convention, str):
        return convention
    call, names, unsqueeze_default = convention
    generator = torch.Generator().manual_seed(0)
    # With unsqueeze_dim, both heads layouts through it (heads_first decided per call); without,
    # the one layout the function assumes, fixed in the form.
    variants = [(None, [(1, True), (2, False)])] if unsqueeze_default is not None else \
        [(True, [(None, True)]), (False, [(None, False)])]
    for pairing, layout, placement, output, inverse in _CANDIDATES:
        if call == "complex" and layout != "half":
            continue  # (freqs_cis holds each pair's cos + i sin once)
        for heads_first, probes in variants:
            form = RotationForm(call, pairing, layout, placement, output, heads_first, True, inverse)
            whole = [_agrees(function, names, call, form, u, h, 16, generator) for u, h in probes]
            if not all(whole):
                continue
            partial = [_agrees(function, names, call, form, u, h, 8, generator) for u, h in probes]
            if any(result is False for result in partial):
                continue  # narrower cos is rotated otherwise (another placement)
            return form._replace(partial=all(partial), k_none=_k_none(function, form, generator))
    return "it computes none of the rotations posenc performs (probed in every form, float32, on random inputs)"


def _underlying(value, name):
    """The Python function behind a modeling file's global `name`: the function itself, or, where
    the `kernels` package is installed and transformers' hub decorator made the function an
    nn.Module (kernels' Func, calling the function unless a hub kernel was chosen), the function
    its forward closes over."""
    if isinstance(value, types.FunctionType) or not isinstance(value, torch.nn.Module):
        return value
    forward = getattr(type(value), "forward", None)
    for cell in getattr(forward, "__closure__", None) or ():
        contents = cell.cell_contents
        if isinstance(contents, types.FunctionType) and name in (None, contents.__name__):
            return contents
    return value


def _cache_key(function):
    # What the function computes depends on the globals it reads (rotate_half): a rebound global
    # (a monkeypatch, a reloaded file) is probed again.
    names = getattr(getattr(function, "__code__", None), "co_names", ())
    scope = getattr(function, "__globals__", {})
    return function, tuple((name, id(scope.get(name))) for name in names if name in scope)


def rotation_form(function):
    """The ``RotationForm`` of a transformers rotary function, found by the probe (cached per
    function and the globals it reads), or raises ``ValueError`` naming why posenc cannot compute
    it."""
    if not callable(function):
        raise TypeError(f"posenc: rotation_form takes a rotary function (a transformers modeling file's "
                        f"apply_rotary_pos_emb or the like), but got {type(function).__name__}")
    function = _underlying(function, getattr(function, "__name__", None))
    key = _cache_key(function)
    with _lock:
        form = _forms.get(key)
        if form is None:
            form = _forms[key] = _probe(function)
    if isinstance(form, str):
        name = getattr(function, "__qualname__", None) or type(function).__name__
        raise ValueError(f"posenc: {getattr(function, '__module__', '')}.{name} cannot be replaced: {form}")
    return form


def replacement_for(function):
    """posenc's function in place of the rotary function ``function`` (same arguments, same
    results within the stated rounding), or raises ``ValueError`` where posenc cannot compute it:
    what ``apply_posenc_rope`` puts in a patched layer's namespace, for modeling code of your own."""
    form = rotation_form(function)
    return _replacement(_underlying(function, getattr(function, "__name__", None)), form)


# --- the model's attention layers and rotary embeddings -------------------------------------------

def _rotating_methods(cls):
    """{method name: function} of cls's methods (its own and inherited, below torch.nn.Module) that
    call a rotary function of a transformers modeling file by a global name: forward, and helpers
    such as an indexer's (Mistral Large 4) or a cross-attention's. Text attention only."""
    methods = {}
    for klass in cls.__mro__:
        if klass in (torch.nn.Module, object):
            break
        for name, value in vars(klass).items():
            if name in methods or not isinstance(value, types.FunctionType):
                continue
            scope = inspect.unwrap(value).__globals__  # (through @torch.no_grad() and the like)
            if str(scope.get("__name__", "")).startswith("transformers.") and any(
                    _ROTARY_NAME.match(n) and not _VISION_NAME.search(n) and callable(scope.get(n))
                    for n in inspect.unwrap(value).__code__.co_names):
                methods[name] = value
    # (a name defined lower in the MRO without a rotary call hides the one above it)
    return {name: function for name, function in methods.items() if _defined(cls, name) is function}


def _defined(cls, name):
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def _rotary_calls(cls):
    """(modeling module, [rotary function names], {method name: function}) of cls, or
    (None, [], {}) where no method of cls rotates."""
    methods = _rotating_methods(cls)
    if not methods:
        return None, [], {}
    modules = {inspect.unwrap(function).__globals__["__name__"] for function in methods.values()}
    if len(modules) > 1:
        raise ValueError(f"posenc: {cls.__name__}'s methods that rotate live in several modeling files "
                         f"({', '.join(sorted(modules))}); posenc patches one file per class, so the model was left "
                         "unpatched")
    module = sys.modules.get(modules.pop())
    names = {n for function in methods.values() for n in inspect.unwrap(function).__code__.co_names
             if _ROTARY_NAME.match(n) and not _VISION_NAME.search(n) and callable(module.__dict__.get(n))}
    return module, sorted(names), methods


def _slices_last_axis(node):
    """Whether an argument expression may cut cos/sin along their last axis (cos[..., :n],
    cos.narrow(-1, ...)): the layout checked on the rotary embedding's tables would then not be
    what reaches the function (MiniMax M3's indexer with an index head narrower than the rotary)."""
    for part in ast.walk(node):
        if isinstance(part, ast.Call) and isinstance(part.func, ast.Attribute) and part.func.attr in (
                "narrow", "split", "chunk", "unbind", "tensor_split", "index_select", "gather"):
            return True
        if isinstance(part, ast.Subscript):
            items = list(part.slice.elts) if isinstance(part.slice, ast.Tuple) else [part.slice]
            ellipsis = any(isinstance(i, ast.Constant) and i.value is Ellipsis for i in items)
            last = items[-1]
            full = isinstance(last, ast.Slice) and last.lower is None and last.upper is None and last.step is None
            if (ellipsis or len(items) >= 3) and not full:
                return True
    return False


def _check_call_sites(cls, methods, modeling, forms):
    """Every call of a replaced function in cls's rotating methods passes cos and sin (freqs_cis)
    whole along their last axis, or raises ValueError."""
    for method_name, method in methods.items():
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(method))))
        except (OSError, TypeError, SyntaxError) as error:
            raise ValueError(f"posenc: the source of {cls.__name__}.{method_name} cannot be read ({error}), so posenc "
                             "cannot check what it passes to its rotary function; the model was left unpatched") \
                from None
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in forms):
                continue
            convention = _convention(_underlying(modeling.__dict__[node.func.id], node.func.id))
            names = convention[1]
            tables = [n for n in names if n in ("cos", "sin", "freqs_cis")]
            passed = [node.args[names.index(n)] for n in tables if names.index(n) < len(node.args)]
            passed += [keyword.value for keyword in node.keywords if keyword.arg in tables]
            for argument in passed:
                if _slices_last_axis(argument):
                    raise ValueError(f"posenc: {cls.__name__}.{method_name} passes {ast.unparse(argument)} to "
                                     f"{node.func.id}: cos/sin cut along their last axis, whose layout posenc cannot "
                                     "check when patching; the model was left unpatched")


def _original_class(module):
    return type(module).__dict__.get("_posenc_rope_original", type(module))


def _layout_ok(table, layout):
    if table.device.type == "meta":
        raise ValueError("posenc: the model's rotary embedding makes its cos and sin on the meta device (a model "
                         "without weights yet), so posenc cannot check their layout; patch the model once its "
                         "weights are loaded. The model was left unpatched")
    half = table.shape[-1] // 2
    if layout == "cat":
        return table.shape[-1] % 2 == 0 and torch.equal(table[..., :half], table[..., half:])
    if layout == "repeat":
        return table.shape[-1] % 2 == 0 and torch.equal(table[..., 0::2], table[..., 1::2])
    return True


def _rotary_tables(model):
    """(name, cos, sin) of every text rotary embedding of the model at a few positions, or raises."""
    tables = []
    for name, module in model.named_modules():
        if not type(module).__name__.endswith("RotaryEmbedding") or "VisionRotary" in type(module).__name__:
            continue  # (a vision tower's: its rotary functions are left to the model's code)
        try:
            parameters = list(inspect.signature(module.forward).parameters)
        except (TypeError, ValueError):
            continue
        if parameters[:2] != ["x", "position_ids"]:
            continue  # a vision tower's (patch grids, timestamps): not what text attention reads
        tensor = next(iter(module.buffers()), None)
        device = tensor.device if tensor is not None else torch.device("cpu")
        layer_types = [None]
        if "layer_type" in parameters:
            # Per-layer-type tables keep a <layer type>_inv_freq buffer each (Gemma 3, Beam, ...).
            declared = [n[:-len("_inv_freq")] for n, _ in module.named_buffers(recurse=False)
                        if n.endswith("_inv_freq") and not n.endswith("original_inv_freq")]
            layer_types = sorted(set(declared)) or [None]
        for layer_type in layer_types:
            kwargs = {} if layer_type is None else {"layer_type": layer_type}
            try:
                # A copy: a dynamic rotary embedding updates its frequencies when called, and the
                # model must stay as it was (refused or not).
                with torch.no_grad():
                    cos, sin = copy.deepcopy(module)(torch.zeros(1, 6, 1, device=device),
                                                     torch.arange(3, 9, device=device)[None], **kwargs)
            except Exception as error:  # noqa: BLE001  (any failure means: not checked, so refused)
                raise ValueError(f"posenc: the model's rotary embedding {name} ({type(module).__name__}) could not be "
                                 f"called on a few positions to check the layout of its cos and sin "
                                 f"({type(error).__name__}: {error}); the model was left unpatched") from error
            label = f"{name}[{layer_type}]" if layer_type is not None else name
            if not (isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor) and cos.dim() == 3
                    and cos.shape == sin.shape):
                raise ValueError(f"posenc: the model's rotary embedding {label} ({type(module).__name__}) makes no "
                                 "cos and sin of shape [B, L, R] for positions [1, L], so posenc cannot check their "
                                 "layout; the model was left unpatched")
            tables.append((label, cos, sin))
    return tables


def _attention_layers(model):
    """[(layer, modeling module, {name: form})] of the model's text attention, or raises ValueError."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if not isinstance(model, torch.nn.Module) or config is None:
        raise ValueError(f"posenc: apply_posenc_rope takes a transformers model (a torch.nn.Module with a "
                         f"config), but got {type(model).__name__}")
    if not isinstance(model_type, str):
        raise ValueError(f"posenc: apply_posenc_rope reads the model type from config.model_type, which must be a "
                         f"string (it names the model in posenc's messages), but this {type(model).__name__}'s is "
                         f"{type(model_type).__name__} {model_type!r}; the model was left unpatched")
    layers, checked = [], set()
    for layer in model.modules():
        cls = _original_class(layer)
        modeling, names, methods = _rotary_calls(cls)
        if not names:
            continue
        forms = {}
        for name in names:
            try:
                forms[name] = rotation_form(_underlying(modeling.__dict__[name], name))
            except ValueError as error:
                raise ValueError(f"{error}; {cls.__name__} of this '{model_type}' model calls it, so the model was "
                                 "left unpatched") from None
        if cls not in checked:
            _check_call_sites(cls, methods, modeling, forms)
            checked.add(cls)
        layers.append((layer, modeling, forms, methods))
    if not layers:
        raise ValueError(f"posenc: no module of this '{model_type}' model ({type(model).__name__}) calls a rotary "
                         "function (apply_..._rotary_... or apply_..._rope... of its modeling file) from its forward; "
                         "the model was left unpatched")
    for layer, _, _, methods in layers:
        for name in methods:
            if name in layer.__dict__:
                raise ValueError(f"posenc: {type(layer).__name__} {layer.__dict__[name]!r} has a {name} of its own "
                                 "(a hook or another patch set on the instance); posenc patches the class's methods "
                                 "only, so the model was left unpatched")
    _check_tables(model, model_type, layers)
    return layers


def _check_tables(model, model_type, layers):
    layouts = {(form.layout, form.partial) for _, _, forms, _ in layers for form in forms.values()}
    if all(layout == "half" for layout, _ in layouts):
        return
    tables = _rotary_tables(model)
    if not tables:
        raise ValueError(f"posenc: this '{model_type}' model has no rotary embedding module (a *RotaryEmbedding "
                         "taking x and position_ids) whose cos and sin posenc could check; the model was left "
                         "unpatched")
    for layout, _ in layouts:
        for name, cos, sin in tables:
            if not (_layout_ok(cos, layout) and _layout_ok(sin, layout)):
                raise ValueError(f"posenc: the rotary function of this '{model_type}' model reads cos and sin as "
                                 f"'{layout}' (each token's R/2 values twice), but its rotary embedding {name} makes "
                                 f"them otherwise (cos {list(cos.shape)}); posenc would rotate by other angles, so "
                                 "the model was left unpatched")


# --- the patched modules and classes --------------------------------------------------------------

def _patched_module(modeling, forms):
    """The module of the patched classes of one modeling file: a copy of the file's namespace (taken
    again at every call, so later changes to the file's other globals are seen) with posenc's
    rotary functions, registered in sys.modules (torch.compile finds a function's globals, and
    pickle a class, by their module's name)."""
    name = PATCHED_MODULE_PREFIX + modeling.__name__.rsplit(".", 1)[-1]
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name, f"posenc's patched classes of {modeling.__name__}")
        module.__getattr__ = _class_maker(modeling, module)
        sys.modules[name] = module
    keep = {key: module.__dict__[key] for key in list(module.__dict__) if key.startswith("Posenc")}
    replaced = module.__dict__.get("_posenc_replaced", {})
    module.__dict__.update({key: value for key, value in vars(modeling).items()
                            if key not in ("__name__", "__doc__", "__spec__", "__loader__", "__package__")})
    module.__dict__.update(keep)
    for function_name, form in forms.items():
        replaced[function_name] = _replacement(_underlying(modeling.__dict__[function_name], function_name), form)
    module.__dict__.update(replaced)
    module.__dict__["_posenc_replaced"] = replaced
    return module


def _class_maker(modeling, module):
    """The patched module's __getattr__ (PEP 562): Posenc<Class> made on first use, for a class of the
    modeling file that this process has not patched yet (unpickling a model whose layers another
    model of the same file did not have, e.g. MiniMax M3's indexer)."""

    def __getattr__(attribute):
        cls = modeling.__dict__.get(attribute[len("Posenc"):]) if attribute.startswith("Posenc") else None
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
            with _lock:
                try:
                    owner, names, _ = _rotary_calls(cls)
                    if owner is modeling and names:
                        _patched_module(modeling, {n: rotation_form(_underlying(modeling.__dict__[n], n))
                                                   for n in names})
                        return _patched_class(cls, module)
                except ValueError as error:
                    raise AttributeError(f"module {module.__name__!r} cannot make {attribute}: {error}") from None
        raise AttributeError(f"module {module.__name__!r} has no attribute {attribute!r}")

    return __getattr__


def _patched_class(cls, module):
    """cls with its rotating methods (forward and the helpers that rotate) run in `module`'s
    namespace: module.Posenc<cls.__name__>, made once."""
    name = "Posenc" + cls.__name__
    patched = module.__dict__.get(name)
    if patched is None or patched.__bases__ != (cls,):
        namespace = {"__module__": module.__name__, "__qualname__": name, "_posenc_rope_original": cls}
        for method_name, original in _rotating_methods(cls).items():
            namespace[method_name] = _rebound(original, module.__dict__, f"{name}.{method_name}")
        patched = type(name, (cls,), namespace)
        setattr(module, name, patched)
    return patched


def _rebound(function, scope, qualname):
    """`function` reading its globals from `scope`. A decorated function (functools.wraps, as
    @torch.no_grad() makes) is rebuilt around its rebound inner function: the wrapper's closure
    cell that held the inner function holds the rebound one."""
    inner = getattr(function, "__wrapped__", None)
    if inner is None:
        method = types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__,
                                    function.__closure__)
        method.__kwdefaults__ = function.__kwdefaults__
        method.__doc__ = function.__doc__
    else:
        rebound_inner = _rebound(inner, scope, qualname)
        cells = function.__closure__ or ()

        def holds(cell, value):
            try:
                return cell.cell_contents is value
            except ValueError:  # (an empty cell)
                return False

        if not any(holds(cell, inner) for cell in cells):
            raise ValueError(f"posenc: {qualname} is wrapped by a decorator that does not keep the function it "
                             "wraps in its closure; posenc cannot rebuild it, so the model was left unpatched")
        closure = tuple(types.CellType(rebound_inner) if holds(cell, inner) else cell for cell in cells)
        method = types.FunctionType(function.__code__, function.__globals__, function.__name__,
                                    function.__defaults__, closure)
        method.__kwdefaults__ = function.__kwdefaults__
        method.__dict__.update(function.__dict__)
        method.__wrapped__ = rebound_inner
        method.__doc__ = function.__doc__
    method.__qualname__ = qualname
    return method


def _modeling_file(stem):
    """The transformers modeling module whose file is `stem`.py (modeling_llama)."""
    import transformers

    folder = stem[len("modeling_"):]
    root = os.path.join(os.path.dirname(transformers.__file__), "models")
    candidates = [folder] + sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, stem + ".py")))
    for candidate in candidates:
        if os.path.isfile(os.path.join(root, candidate, stem + ".py")):
            return importlib.import_module(f"transformers.models.{candidate}.{stem}")
    raise ImportError(f"posenc: no transformers modeling file is named {stem}.py")


def _rebuild_patched_module(name):
    """Makes the module `name` (PATCHED_MODULE_PREFIX + modeling file) with every patched class its
    modeling file can have: what unpickling a patched model in a fresh process imports."""
    modeling = _modeling_file(name[len(PATCHED_MODULE_PREFIX):])
    with _lock:
        classes = []
        forms = {}
        for value in list(vars(modeling).values()):
            if isinstance(value, type) and issubclass(value, torch.nn.Module) and value.__module__ == modeling.__name__:
                try:
                    owner, names, _ = _rotary_calls(value)
                except ValueError:
                    continue
                if owner is modeling and names:
                    try:
                        forms.update({n: rotation_form(_underlying(modeling.__dict__[n], n)) for n in names})
                    except ValueError:
                        continue
                    classes.append(value)
        module = _patched_module(modeling, forms)
        for cls in classes:
            _patched_class(cls, module)
    return module


def apply_posenc_rope(model):
    """Makes ``model`` (a transformers model) rotate queries and keys with posenc's operators, where
    every rotary function its text attention calls is one posenc computes exactly (see the module
    docstring: found by a probe of each function, not from a list of model types). Patches this
    instance only: each attention layer becomes an instance of a subclass of its class
    (``Posenc<Class>``, in a module of posenc's) whose forward is its class's forward with the
    modeling file's rotary functions replaced. Parameters, buffers, state-dict keys, config and
    outputs (see the module docstring) stay as they were; ``generate``, ``torch.compile``,
    ``save_pretrained``, ``copy.deepcopy``, pickling and ``nn.DataParallel`` replicas work as
    before. Patching a patched model changes nothing. Raises ``ValueError``, with the model
    unchanged, where a rotary function is none of posenc's forms, the model's rotary embedding makes
    cos and sin in another layout than its function reads, no layer calls a rotary function, or an
    attention layer's instance has a forward of its own. Returns ``model``."""
    layers = _attention_layers(model)
    with _lock:
        patches = []
        for layer, modeling, forms, _ in layers:
            module = _patched_module(modeling, forms)
            patches.append((layer, _patched_class(_original_class(layer), module)))
    for layer, patched in patches:
        layer.__class__ = patched
    return model


def describe_posenc_rope(model):
    """What ``apply_posenc_rope`` would do with ``model``, without changing it: a list of
    (modeling file, function name, form description, sha256 of the function's source) for each
    rotary function its text attention calls. Raises the ``ValueError`` that apply_posenc_rope
    would."""
    seen = {}
    for _, modeling, forms, _ in _attention_layers(model):
        for name, form in forms.items():
            function = _underlying(modeling.__dict__[name], name)
            seen[(modeling.__name__, name)] = (modeling.__name__, name, _describe_form(form), _source_sha256(function))
    return sorted(seen.values())


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
