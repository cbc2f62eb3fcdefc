"""Every transformers model type whose modeling file rotates queries and keys, built small and
random, through posenc.integrations.transformers.apply_posenc_rope: served (equal to the unpatched
model, posenc's operators called), refused (ValueError, model unchanged) or not buildable (why).

Used by test_transformers_models.py (which requires every row to be one of these and docs/models.md's
table to be this sweep's), and run by hand to write the table:

    POSENC_LIBRARY=$PWD/build/pip/src/libposenc.so .venv/bin/python test/python/transformers_sweep.py --write
"""

import argparse
import copy
import importlib
import inspect
import os
import re
import sys
import warnings

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOC = os.path.join(ROOT, "docs", "models.md")
BEGIN, END = "<!-- transformers models: begin (test/python/transformers_sweep.py --write) -->", \
    "<!-- transformers models: end -->"

# The sizes every config (and each of its sub-configs) is shrunk to, where it takes the field.
SHRINK = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, head_dim=16, moe_intermediate_size=32,
              shared_expert_intermediate_size=32, num_experts=4, num_local_experts=4, n_routed_experts=4,
              num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1, kv_lora_rank=16,
              q_lora_rank=24, qk_rope_head_dim=8,
              qk_nope_head_dim=8, v_head_dim=16, num_layers=2, n_layer=2, n_head=4, n_embd=64, d_model=64,
              encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
              encoder_ffn_dim=96, decoder_ffn_dim=96, encoder_hidden_size=64, num_decoder_layers=2,
              depth=2, embed_dim=64, num_heads=4, out_hidden_size=64, vision_layers=2, text_hidden_size=64,
              vocab_size_per_layer_input=128, hidden_size_per_layer_input=8, num_kv_shared_layers=0,
              pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
MAX_PARAMETERS = 40_000_000  # a shrunk model larger than this is reported as not buildable small
TOLERANCE = 1e-5  # of the largest output: float32, the same arithmetic on both sides (see the test)
ROTARY = re.compile(r"^apply_\w*(rotary|rope)\w*$")


def _modeling_modules(model_type):
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    import transformers

    folder = model_type_to_module_name(model_type)
    path = os.path.join(os.path.dirname(transformers.__file__), "models", folder)
    if not os.path.isdir(path):
        return []
    modules = []
    for name in sorted(os.listdir(path)):
        if name.startswith("modeling_") and name.endswith(".py") and not name.startswith("modeling_tf_"):
            try:
                modules.append(importlib.import_module(f"transformers.models.{folder}.{name[:-3]}"))
            except Exception:  # noqa: BLE001  (a modeling file that needs another package)
                continue
    return modules


def _rotates(module):
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, torch.nn.Module) and value.__module__ == module.__name__:
            forward = value.__dict__.get("forward")
            forward = inspect.unwrap(forward) if forward is not None else None  # (through decorators)
            if forward is not None and hasattr(forward, "__code__") and any(
                    ROTARY.match(n) and callable(module.__dict__.get(n)) for n in forward.__code__.co_names):
                return True
    return False


def rotating_model_types():
    """The model types of this transformers whose modeling file rotates (any attention, any tower)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return [t for t in sorted(CONFIG_MAPPING_NAMES) if any(_rotates(m) for m in _modeling_modules(t))]


def _accepted(cls):
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return set()
    return set(parameters) - {"self", "kwargs"}


def _shrunk(config_class, head_dim=SHRINK["head_dim"]):
    """The keyword arguments that make `config_class` small: SHRINK's fields it takes, one layer of
    each of its default layer types (hybrids keep an attention layer), M-RoPE sections scaled to
    the smaller head."""
    accepted = _accepted(config_class)
    kwargs = {key: value for key, value in SHRINK.items() if key in accepted}
    try:
        default = config_class()
    except Exception:  # noqa: BLE001  (a config that needs arguments: SHRINK only)
        return kwargs
    layer_types = getattr(default, "layer_types", None)
    if "layer_types" in accepted and isinstance(layer_types, (list, tuple)) and layer_types:
        distinct = list(dict.fromkeys(layer_types))
        distinct = distinct + distinct[:max(0, 2 - len(distinct))]
        kwargs.update(layer_types=distinct, num_hidden_layers=len(distinct))
    rope = getattr(default, "rope_parameters", None)
    if "rope_parameters" in accepted and isinstance(rope, dict) and isinstance(rope.get("mrope_section"), list):
        sections = rope["mrope_section"]
        scaled = [max(1, s * (head_dim // 2) // sum(sections)) for s in sections]
        scaled[0] += head_dim // 2 - sum(scaled)
        kwargs["rope_parameters"] = {**rope, "mrope_section": scaled}
    return kwargs


def small_config(model_type, **overrides):
    """The config of `model_type` shrunk (its sub-configs too: text, vision, audio towers), with
    `overrides` applied to it and to each sub-config that has the field."""
    import transformers

    config_class = transformers.CONFIG_MAPPING[model_type]
    kwargs = {**_shrunk(config_class), **{k: v for k, v in overrides.items() if k in _accepted(config_class)}}
    sub_configs = getattr(config_class, "sub_configs", None) or {}
    try:
        default = config_class() if sub_configs else None
    except Exception:  # noqa: BLE001
        default = None
    for key, sub_class in sub_configs.items():
        if not isinstance(sub_class, type) or key not in _accepted(config_class):
            continue
        if not hasattr(sub_class, "model_type") or sub_class.__name__ == "AutoConfig":
            sub_class = type(getattr(default, key, None))  # AutoConfig: the default tower's class
            if sub_class is type(None):
                continue
            sub = {"model_type": getattr(getattr(default, key), "model_type", None)}
        else:
            sub = {}
        sub.update(_shrunk(sub_class))
        sub.update({k: v for k, v in overrides.items() if k in _accepted(sub_class)})
        kwargs[key] = {k: v for k, v in sub.items() if v is not None}
    config = config_class(**kwargs)
    for sub in [config] + [getattr(config, key, None) for key in sub_configs]:
        if sub is not None and hasattr(sub, "_attn_implementation"):
            sub._attn_implementation = "eager"
        rope = getattr(sub, "rope_parameters", None)
        if "mrope_section" in overrides and isinstance(rope, dict):
            rope["mrope_section"] = overrides["mrope_section"]
    return config


def _retries(error):
    """Overrides that may make a shrunk config buildable after `error`: MLA and a few others need
    as many key/value heads as query heads; M-RoPE sections must add up to the smaller rotary."""
    text = str(error)
    found = re.search(r"sum exactly to (\d+).*split_sizes=\[([\d, ]+)\]", text)
    if found:
        total, sections = int(found.group(1)), [int(v) for v in found.group(2).split(",")]
        scaled = [max(1, v * total // sum(sections)) for v in sections]
        scaled[0] += total - sum(scaled)
        return [{"mrope_section": scaled}]
    return [{"num_key_value_heads": SHRINK["num_attention_heads"]}, {"rotary_dim": 8}]


def _model_class(model_type):
    import transformers
    from transformers.models.auto import modeling_auto

    for mapping in (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, modeling_auto.MODEL_MAPPING_NAMES):
        name = mapping.get(model_type)
        if isinstance(name, (tuple, list)):
            name = name[0]
        if name and hasattr(transformers, name):
            return getattr(transformers, name)
    # Types without an Auto class (a composite model's text or tower part): the modeling file's
    # model class for this config, a causal LM first.
    config_class = transformers.CONFIG_MAPPING[model_type]
    found = [value for module in _modeling_modules(model_type) for value in vars(module).values()
             if isinstance(value, type) and issubclass(value, transformers.PreTrainedModel)
             and value.__module__ == module.__name__ and getattr(value, "config_class", None) is config_class
             and "PreTrained" not in value.__name__]
    found.sort(key=lambda c: (not c.__name__.endswith("ForCausalLM"), not c.__name__.endswith("Model"), c.__name__))
    return found[0] if found else None


def _output(model, tokens):
    parameters = inspect.signature(model.forward).parameters
    kwargs = {"input_ids": tokens}
    if "input_ids" not in parameters and "input_values" in parameters:
        # An audio model (Moonshine, PE audio): 0.5 s of a random waveform at 16 kHz.
        kwargs = {"input_values": torch.randn(tokens.shape[0], 8000, generator=torch.Generator().manual_seed(2))}
    if getattr(model.config, "is_encoder_decoder", False) or "decoder_input_ids" in parameters:
        kwargs["decoder_input_ids"] = tokens
    with torch.no_grad():
        try:
            out = model(**kwargs)
        except RuntimeError as error:
            if "input_values" not in kwargs or "channels" not in str(error):
                raise
            kwargs["input_values"] = kwargs["input_values"][:, None]  # (a waveform with a channel axis)
            out = model(**kwargs)
    value = getattr(out, "logits", None)
    if value is None:
        value = getattr(out, "last_hidden_state", None)
    if value is None:
        value = out[0]
    return value


class CountPosencCalls(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name().startswith("posenc::apply_rotary"):
            self.calls += 1
        return func(*args, **(kwargs or {}))


def _first_line(error):
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= 300 else text[:297] + "..."


def sweep_one(hf, model_type):
    """(result, detail): result is "served", "refused", "not buildable" or "FAILED"."""
    cls = _model_class(model_type)
    if cls is None:
        return "not buildable", "no model class for this type's config (Auto or in its modeling file)"
    attempts, tried, first_error = [{}], 0, None
    while tried < len(attempts):
        overrides = attempts[tried]
        tried += 1
        try:
            config = small_config(model_type, **overrides)
            with torch.device("meta"):
                meta = cls(config)
            size = sum(p.numel() for p in meta.parameters())
            if size > MAX_PARAMETERS:
                return "not buildable", (f"{size / 1e6:.0f}M parameters after shrinking (limit "
                                         f"{MAX_PARAMETERS / 1e6:.0f}M)")
            torch.manual_seed(0)
            model = cls(config).eval()
            tokens = torch.randint(3, 100, (2, 11), generator=torch.Generator().manual_seed(1))
            expected = _output(model, tokens)
            break
        except Exception as error:  # noqa: BLE001  (reported as the reason)
            first_error = first_error or error
            if tried == 1:
                attempts += _retries(error)
    else:
        return "not buildable", _first_line(first_error)
    patched = copy.deepcopy(model)
    try:
        hf.apply_posenc_rope(patched)
    except ValueError as error:
        if hf.is_patched(patched):
            return "FAILED", f"refused but patched: {error}"
        if not torch.equal(_output(patched, tokens), expected):
            return "FAILED", f"refused but changed: {error}"
        return "refused", str(error).splitlines()[0]
    layers = sum(1 for m in patched.modules() if "_posenc_rope_original" in type(m).__dict__)
    counter = CountPosencCalls()
    try:
        with counter:
            actual = _output(patched, tokens)
    except Exception as error:  # noqa: BLE001
        return "FAILED", f"patched model raised {_first_line(error)}"
    difference = (actual - expected).abs().max().item()
    scale = expected.abs().max().item()
    if not difference <= TOLERANCE * max(scale, 1e-30):
        return "FAILED", f"patched output differs by {difference:.3g} (largest {scale:.3g})"
    described = hf.describe_posenc_rope(model)
    calls = _rotary_calls(described, model, tokens)
    if counter.calls != calls:
        return "FAILED", (f"posenc's operators ran {counter.calls} times where the unpatched model called its rotary "
                          f"functions {calls} times")
    forms = sorted({form for _, _, form, _ in described})
    shrunk = f" (built with {', '.join(f'{k}={v}' for k, v in overrides.items())})" if overrides else ""
    return "served", f"{layers} layers; " + "; ".join(forms) + shrunk


def _rotary_calls(described, model, tokens):
    """How many times the unpatched model calls the rotary functions posenc replaces (layers whose
    code rotates only some of the time, as Cohere 2's global layers that do not, count as they
    call)."""
    calls = [0]
    originals = []
    for module_name, function_name, _, _ in described:
        module = sys.modules[module_name]
        original = module.__dict__[function_name]

        def counting(*args, _original=original, **kwargs):
            calls[0] += 1
            return _original(*args, **kwargs)

        originals.append((module, function_name, original))
        module.__dict__[function_name] = counting
    try:
        _output(model, tokens)
    finally:
        for module, function_name, original in originals:
            module.__dict__[function_name] = original
    return calls[0]


def sweep(hf, model_types=None):
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type in model_types or rotating_model_types():
            result, detail = sweep_one(hf, model_type)
            rows.append((model_type, result, detail))
    return rows


def table(rows):
    import transformers

    counts = {r: sum(1 for _, result, _ in rows if result == r) for r in ("served", "refused", "not buildable")}
    lines = [BEGIN,
             f"transformers {transformers.__version__}: {len(rows)} model types whose modeling file rotates; "
             f"{counts['served']} served, {counts['refused']} refused (unchanged), {counts['not buildable']} not "
             "buildable small here.", "",
             "| model type | result | forms, or why |", "|---|---|---|"]
    for model_type, result, detail in rows:
        lines.append(f"| `{model_type}` | {result} | {detail.replace('|', '/')} |")
    lines.append(END)
    return "\n".join(lines)


def documented_table():
    text = open(DOC, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        return None
    return text[text.index(BEGIN):text.index(END) + len(END)]


def write(rows):
    text = open(DOC, encoding="utf-8").read()
    new = table(rows)
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + new + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    with open(DOC, "w", encoding="utf-8") as out:
        out.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the table into docs/models.md")
    parser.add_argument("model_types", nargs="*")
    arguments = parser.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import posenc.integrations.transformers as hf

    rows = sweep(hf, arguments.model_types or None)
    for row in rows:
        print(" | ".join(row))
    if arguments.write:
        write(rows)


if __name__ == "__main__":
    main()
