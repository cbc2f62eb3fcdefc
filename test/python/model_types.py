"""Every model type of transformers (pinned in scripts/setup.sh) whose modeling file builds a
rotary embedding, compared with posenc: transformers' default config of the type, its own rotary
class and the apply function its attention calls, against
``posenc.nn.RotaryEmbedding.from_hf_config(config)`` (posenc's C++ reader, the one of ``posenc
export --hf-config``), at the last positions of the type's context.

Used by test_rope_model_types.py (no type may give a silently different rotation, and
docs/rope_models.md must say what this finds) and by ``python test/python/model_types.py
--markdown`` (which writes that table).

Statuses:
- ``equal``: equal to the model's own code (no further from a float64 evaluation of that code than
  its float32, plus one float32 ulp), at text positions and, for M-RoPE, at an image grid's, with
  no warning;
- ``equal, warned``: equal here, and posenc warns of a key it does not apply (a rule that bears on
  other sizes or layers: MLA's ``qk_rope_head_dim``, layers without rotary, ...);
- ``warned``: different, and posenc's reader warns naming the rule it does not apply (an error with
  ``strict``);
- ``refused``: posenc's reader refuses the config with a message that says what is missing;
- ``different``: different with no warning, the one status that must not occur;
- ``not a text rotary``: the type's config has no text positions (a vision or audio encoder,
  whose rotary takes a patch grid: posenc.nn's vision RoPE modules, not a config reader, mirror
  those);
- ``not compared``: this harness cannot call the model's code generically (the reason is given).
"""

import contextlib
import importlib
import inspect
import sys
import warnings

import torch

LENGTH = 8
HEADS = 2
PER_LAYER_HINT = "per-layer attribute"


@contextlib.contextmanager
def float64_everywhere():
    """transformers' float32 dtypes mean float64 while this is active (its code, evaluated exactly)."""
    saved = torch.float, torch.float32, torch.Tensor.float
    torch.float = torch.float32 = torch.float64
    torch.Tensor.float = torch.Tensor.double
    try:
        yield
    finally:
        torch.float, torch.float32, torch.Tensor.float = saved


def _modeling(model_type):
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    name = model_type_to_module_name(model_type)
    try:
        return importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    except Exception:  # (a model type without a modeling file of its own, or an optional dependency)
        return None


def _rotary_classes(modeling):
    """The module's own *RotaryEmbedding classes, text ones first."""
    names = [name for name in dir(modeling) if name.endswith("RotaryEmbedding")
             and inspect.isclass(getattr(modeling, name)) and getattr(modeling, name).__module__ == modeling.__name__]
    grid = ("Vision", "Audio", "Encoder", "Vit", "2D", "Visual", "Image", "Patch")
    text = [name for name in names if "Text" in name or not any(word in name for word in grid)]
    return [getattr(modeling, name) for name in sorted(text, key=lambda name: ("Text" not in name, name))], names


def _rotary_class_of(modeling, text, classes):
    """The rotary class that the model class of `text`'s configuration builds (its
    `self.rotary_emb = ...RotaryEmbedding(`), else the first text rotary class of the module."""
    import re
    wanted = type(text).__name__
    for name in dir(modeling):
        model = getattr(modeling, name)
        if not (inspect.isclass(model) and model.__module__ == modeling.__name__):
            continue
        annotation = model.__dict__.get("__annotations__", {}).get("config")
        if getattr(annotation, "__name__", annotation) != wanted:
            continue
        try:
            source = inspect.getsource(model.__init__)
        except (OSError, TypeError):
            continue
        built = re.search(r"rotary_emb\s*=\s*(\w+RotaryEmbedding)\(", source)
        if built and inspect.isclass(getattr(modeling, built.group(1), None)):
            return getattr(modeling, built.group(1))
    return classes[0]


def model_types():
    """The model types whose modeling file defines a rotary embedding class."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    found = []
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        modeling = _modeling(model_type)
        if modeling is not None and _rotary_classes(modeling)[1]:
            found.append(model_type)
    return found


def _head_width(text, layer_type, layer):
    if layer is not None:  # per_layer_config (Gemma 4, EmbeddingGemma 2): the layer's own
        own = next((fields.get("head_dim") for key, fields in text.to_dict()["per_layer_config"].items()
                    if int(key) == layer), None)  # (its keys may be zero-padded: "05")
        if own:
            return int(own)
    # (DeepSeek-V4: whole heads [nope | rope], its apply function turning their last channels; MLA's
    # rope parts elsewhere)
    names = ("head_dim",) if getattr(text, "model_type", None) == "deepseek_v4" else ("qk_rope_head_dim", "head_dim")
    for name in names:
        try:
            value = getattr(text, name, None)
        except Exception:  # Gemma 4: head_dim is a per-layer attribute
            value = None
            if layer_type == "full_attention":
                value = getattr(text, "global_head_dim", None)
            if value is None:
                value = text.to_dict().get("head_dim")
        if value:
            return int(value)
    return text.hidden_size // text.num_attention_heads


def _apply(modeling, text):
    """The apply function the model's attention calls, as (q, k, cos, sin) -> (q, k), [B, H, L, D]."""
    interleave = getattr(modeling, "apply_rotary_pos_emb_interleave", None)
    if interleave is not None and getattr(text, "rope_interleave", True):
        return interleave
    single = getattr(modeling, "apply_rotary_pos_emb", None)
    if single is not None and list(inspect.signature(single).parameters)[1] == "cos":  # (x, cos, sin): Gemma 3n/4
        return lambda q, k, cos, sin: (single(q, cos, sin), single(k, cos, sin))
    if single is not None:
        return single
    complex_apply = getattr(modeling, "apply_rotary_emb", None)
    if complex_apply is not None:  # Llama 4, DeepSeek-V2: [B, L, H, D] and complex frequencies
        def apply(q, k, freqs_cis, _):
            try:  # DeepSeek-V2: [B, H, L, D]
                return complex_apply(q, k, freqs_cis)
            except RuntimeError:  # Llama 4: [B, L, H, D]
                q_out, k_out = complex_apply(q.transpose(1, 2), k.transpose(1, 2), freqs_cis)
                return q_out.transpose(1, 2), k_out.transpose(1, 2)
        return apply
    return None


def _hf_rotate(rotary, apply, q, k, positions, layer_type):
    tables = rotary(q, positions) if layer_type is None else rotary(q, positions, layer_type)
    if torch.is_tensor(tables):  # complex frequencies (Llama 4, DeepSeek-V2)
        return apply(q, k, tables, None)
    cos, sin = tables
    width = cos.shape[-1]
    try:
        return apply(q, k, cos, sin)
    except RuntimeError:  # (partial rotation: the model's attention splits the head itself)
        q_out, k_out = apply(q[..., :width], k[..., :width], cos, sin)
        return torch.cat((q_out, q[..., width:]), -1), torch.cat((k_out, k[..., width:]), -1)


def _first_line(error):
    return str(error).split("\nException raised from")[0].splitlines()[0] if str(error) else type(error).__name__


def compare_layer(posenc, model_type, config, text, rotary_class, apply, layer_type, layer, export=None):
    """(status, detail) of one layer type (None: the only one), read as layer `layer` where the
    config has a per_layer_config. `export(config, layer, layer_type)`, where given, returns the C++
    module built from the same config (the CLI's TorchScript export), which must turn q and k as
    posenc.nn's module does, bit for bit, or None where it compares that layer's form elsewhere."""
    try:
        rotary = rotary_class(config=text)
    except Exception as error:
        return "not compared", f"its rotary class cannot be built from its default config ({_first_line(error)[:80]})"
    head_dim = _head_width(text, layer_type, layer)
    context = getattr(text, "max_position_embeddings", None) or 2048
    offset = max(0, context - LENGTH)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, LENGTH, head_dim, generator=generator)
    k = torch.randn(1, HEADS, LENGTH, head_dim, generator=generator)
    calls = [(offset, torch.arange(offset, offset + LENGTH)[None])]
    if getattr(rotary, "mrope_section", None) is not None:  # M-RoPE: an image grid too
        calls.append((None, grid_positions(max(0, context - 2 * LENGTH))))
    references = []
    try:
        with torch.no_grad():
            for _, positions in calls:
                hf = _hf_rotate(rotary, apply, q, k, positions, layer_type)
                with float64_everywhere():
                    rotary64 = rotary_class(config=text)
                    reference = _hf_rotate(rotary64, apply, q.double(), k.double(), positions, layer_type)
                references.append((hf, reference))
    except Exception as error:
        return "not compared", f"its code does not run on [B, H, L, D] queries here ({_first_line(error)[:80]})"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            read = posenc.nn.read_hf_rope_config(config, layer=layer, layer_type=None if layer is not None else layer_type)
        except (ValueError, RuntimeError) as error:
            return "refused", _first_line(error)
    try:
        module = posenc.nn.RotaryEmbedding(**{**read["module"], "heads_first": True})
    except (ValueError, RuntimeError) as error:
        return "refused", _first_line(error)
    notice = _notice(read, [str(w.message) for w in caught if issubclass(w.category, UserWarning)])
    worst = None
    for (offset, positions), ((q_hf, k_hf), (q_ref, k_ref)) in zip(calls, references):
        try:
            if offset is not None:
                q_ours, k_ours = module.forward_qk(q, k, offset)
            else:
                q_ours, k_ours = module.forward_positions(q, positions), module.forward_positions(k, positions)
        except (RuntimeError, ValueError) as error:
            return ("warned" if notice else "different"), notice or _first_line(error)
        ulp = 2 ** -23 * max(q_ref.abs().max().item(), k_ref.abs().max().item(), 1.0)
        ours = max((q_ours.double() - q_ref).abs().max().item(), (k_ours.double() - k_ref).abs().max().item())
        theirs = max((q_hf.double() - q_ref).abs().max().item(), (k_hf.double() - k_ref).abs().max().item())
        if ours > theirs + ulp:
            worst = f"posenc's error {ours:.2g}, transformers' {theirs:.2g}" + ("" if offset is not None else " (image grid)")
            break
    if worst is None and export is not None:
        worst = _export_differs(module, export, config, layer, layer_type, q, k, calls)
    if worst is None:
        return ("equal, warned" if notice else "equal"), notice
    return ("warned", notice) if notice else ("different", worst)


def _export_differs(module, export, config, layer, layer_type, q, k, calls):
    """Why the C++ module of the same config (export) turns q and k otherwise than posenc.nn's
    `module` at the calls' offsets; None where it does not."""
    try:
        exported = export(config, layer, layer_type)
    except Exception as error:
        return f"the C++ module's export failed: {_first_line(error)[:120]}"
    if exported is None:  # (export's choice: a form it compared on another layer)
        return None
    for offset, _ in calls:
        if offset is None:
            continue  # (image grids: posenc.nn's multimodal positions, compared above)
        ours = module.forward_qk(q, k, offset)
        theirs = exported.forward_qk(q, k, offset)
        if not all(torch.equal(a, b) for a, b in zip(ours, theirs)):
            return f"the C++ module (CLI export) differs from posenc.nn's at offset {offset}"
    return None


def grid_positions(start):
    """[3, 1, LENGTH] M-RoPE positions from `start`: text, a 2 x 3 image grid, text."""
    positions = torch.empty(3, 1, LENGTH, dtype=torch.long)
    positions[:, 0, :1] = start
    rows, columns = torch.meshgrid(torch.arange(2), torch.arange(3), indexing="ij")
    positions[0, 0, 1:7] = start + 1
    positions[1, 0, 1:7] = start + 1 + rows.reshape(-1)
    positions[2, 0, 1:7] = start + 1 + columns.reshape(-1)
    positions[:, 0, 7:] = start + 4
    return positions


def _notice(read, messages):
    """The keys posenc warned of, each with the audit's reason."""
    import re
    keys = []
    for message in messages:
        match = re.search(r"posenc does not apply (.*?) \(an unknown", message)
        keys += match.group(1).split(", ") if match else [message.splitlines()[0]]
    reasons = {row["key"]: row["reason"] for row in read["audit"]}
    return "; ".join(f"`{key}`: {reasons[key]}" if key in reasons else key for key in keys)


ORDER = ["different", "not compared", "refused", "warned", "equal, warned", "equal", "not a text rotary"]


def compare(posenc, model_type, export=None):
    """(status, detail) of a model type (its worst layer type's); `export`: see compare_layer."""
    import re
    from transformers import AutoConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config = AutoConfig.for_model(model_type)
        except Exception as error:
            return "not compared", f"its default config cannot be built ({_first_line(error)[:80]})"
        text = config.get_text_config()
    # (a composite whose language model is another type's, e.g. Kimi-K2.5's DeepSeek-V3: that type's code)
    modeling = _modeling(model_type)
    own = getattr(text, "model_type", model_type)
    if own != model_type and _modeling(own) is not None and _rotary_classes(_modeling(own))[0]:
        modeling = _modeling(own)
    classes, _ = _rotary_classes(modeling)
    grid_config = re.search(r"(Vision|ViT|VQVAE|Perceiver|Adapter)\w*Config$", type(text).__name__) and "Text" not in type(text).__name__
    if (not classes or grid_config or getattr(text, "rope_parameters", None) is None
            or "position_ids" not in inspect.signature(classes[0].forward).parameters):
        return "not a text rotary", "a vision or audio encoder: its rotary turns a grid or time stamps, not text positions"
    apply = _apply(modeling, text)
    if apply is None:
        return "not compared", "no apply function of its own (its attention applies the rotation inline)"
    rotary_class = _rotary_class_of(modeling, text, classes)
    takes_layer_type = "layer_type" in inspect.signature(rotary_class.forward).parameters
    layer_types = list(getattr(text, "layer_types", None) or []) if takes_layer_type else []
    try:  # (layer types without attention, e.g. LFM3's "conv", have no frequencies of their own)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = rotary_class(config=text)
        rotary_types = [t for t in set(layer_types) if hasattr(built, f"{t}_inv_freq")]
        if rotary_types:
            layer_types = [t for t in layer_types if t in rotary_types]
        elif takes_layer_type and all(hasattr(built, f"{t}_inv_freq") for t in getattr(built, "layer_types", None) or [None]):
            # (DeepSeek-V4: its rotary's own layer types, the rope_parameters keys "main" / "compress",
            # which its attention layers' kinds name through rope_layer_type)
            layer_types = list(built.layer_types)
    except Exception:  # (compare_layer reports a class that cannot be built)
        pass
    per_layer = bool(text.to_dict().get("per_layer_config"))
    results = []
    for layer_type in sorted(set(layer_types)) or [None]:
        layer = layer_types.index(layer_type) if per_layer and layer_type is not None else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            status, detail = compare_layer(posenc, model_type, config, text, rotary_class, apply, layer_type, layer,
                                           export)
        results.append((status, (f"{layer_type}: " if layer_type and detail else "") + detail))
    worst = min(results, key=lambda result: ORDER.index(result[0]))[0]
    return worst, "; ".join(detail for status, detail in results if status == worst and detail)


def compare_all(posenc, export=None):
    return {model_type: compare(posenc, model_type, export) for model_type in model_types()}


def markdown(results):
    from collections import Counter
    import transformers
    counts = Counter(status for status, _ in results.values())
    lines = [f"| status | model types (transformers {transformers.__version__}) |", "|---|---|"]
    for status in ORDER:
        if counts[status]:
            lines.append(f"| {status} | {counts[status]} |")
    lines += ["", "| model type | status | why |", "|---|---|---|"]
    for model_type, (status, detail) in sorted(results.items()):
        why = detail.replace("|", "\\|")
        lines.append(f"| `{model_type}` | {status} | {why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
    import posenc
    found = compare_all(posenc)
    if "--markdown" in sys.argv:
        print(markdown(found), end="")
    else:
        for model_type, (status, detail) in found.items():
            print(f"{model_type}: {status}: {detail}")
