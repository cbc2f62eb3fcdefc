"""Every model type of transformers (pinned in scripts/setup.sh) whose modeling file builds a
rotary embedding, read by posenc from its default config and compared with its own rotary class
and apply function (model_types.py): none may rotate differently without a warning, the share that
is equal must not fall, and docs/rope_models.md must say what the comparison finds. Plus the model
types whose own default config does not run in their code (GLM-4.1V's), with a config like their
checkpoints'.

Tolerance (as in test_rope_hf.py): transformers computes its angles in float32 (an error of about
p * 2^-24 rad at position p), posenc in float64, rounded once; posenc's result must be no further
from a float64 evaluation of the model's own code than transformers' float32 result, plus one
float32 ulp of the output.
"""

import importlib
import os
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is installed in the pip test environment only (scripts/setup.sh)")

import model_types  # noqa: E402
from test_rope_hf import float64_everywhere, max_error, posenc_package  # noqa: E402,F401
from test_rope_qk_mrope import grid_positions  # noqa: E402

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "rope_models.md")
BEGIN, END = "<!-- model types: begin -->\n", "<!-- model types: end -->\n"


@pytest.fixture(scope="module")
def results(posenc_package, posenc_cli, tmp_path_factory):
    """Every model type compared with its own code through posenc.nn, and through the C++ module
    the CLI builds from the same config.json and exports (`posenc export --module rotary
    --hf-config ... --heads-first --cached-len 64`), which must turn q and k as posenc.nn's module
    does, bit for bit. The export caches 64 rows (or max_len, if fewer) (small files; the calls' rows near the context's
    end are computed per call, which must equal posenc.nn's cached rows too). One export per form of
    the module options (rope type, pairing, partial rotation, which rope parameters are given,
    where the cos/sin take the attention factor: the paths the export takes), the first layer of that
    form; the other layers' values (bases, factors, lengths) are the same code's and are compared
    with the model's own code above through posenc.nn."""
    import json
    import subprocess

    directory = tmp_path_factory.mktemp("model_types")
    exported = {}

    def export(config, layer, layer_type):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read = posenc_package.nn.read_hf_rope_config(config, layer=layer,
                                                         layer_type=None if layer is not None else layer_type)
        options = read["module"]
        key = json.dumps([options.get("pairing"), options["rotary_dim"] < options["head_dim"],
                          options.get("attention_factor_in_cos_sin"), sorted(options), sorted(options.get("rope_scaling") or {}),
                          (options.get("rope_scaling") or {}).get("rope_type")])
        if key in exported and exported[key][0] != options:
            return None  # (a form exported already, with other values)
        if key not in exported:
            path, out = directory / "config.json", directory / f"rope{len(exported)}.pt"
            path.write_text(config.to_json_string(use_diff=False))
            chosen = ["--layer", str(layer)] if layer is not None else ["--layer-type", layer_type] if layer_type else []
            cached = min(64, read["module"]["max_len"])
            result = subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(path), "--heads-first",
                                     "--cached-len", str(cached), *chosen, "-o", str(out)], capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(result.stderr.strip())
            exported[key] = options, torch.jit.load(str(out))
        return exported[key][1]

    results = model_types.compare_all(posenc_package, export)
    assert len(exported) >= 15, sorted(exported)  # (the forms of transformers' configs, exported and compared)
    return results


def test_no_model_type_rotates_differently_without_a_warning(results):
    silent = {model_type: detail for model_type, (status, detail) in results.items() if status == "different"}
    assert not silent, silent
    equal = [model_type for model_type, (status, _) in results.items() if status.startswith("equal")]
    compared = [model_type for model_type, (status, _) in results.items() if status not in ("not a text rotary", "not compared")]
    # 206 of 221 at this writing (the rest warned or refused, each saying why); about 60% before the table
    assert len(equal) >= 200 and len(equal) >= 0.9 * len(compared), (len(equal), len(compared))
    for model_type, (status, detail) in results.items():
        assert status in model_types.ORDER, (model_type, status)
        if status in ("warned", "refused", "not compared", "equal, warned"):
            assert detail, model_type  # each says why


def test_warned_model_types_are_errors_when_strict(results, posenc_package):
    warned = [model_type for model_type, (status, _) in results.items() if status in ("warned", "equal, warned")]
    # (2 at this writing: MiniMax-M3-VL's rotary_dim; Llama 4's, Ministral 3's and Mistral 4's query
    # temperatures, Moonshine-Streaming's pairs, DeepSeek-V4's last channels and ERNIE 4.5-VL's
    # M-RoPE are applied since)
    assert len(warned) >= 2, warned
    for model_type in warned:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = transformers.AutoConfig.for_model(model_type)
            layer_types = getattr(config.get_text_config(), "layer_types", None)
            with pytest.raises(ValueError, match="posenc does not apply"):
                # (a per-layer config is read for its first layer)
                posenc_package.nn.read_hf_rope_config(config, strict=True, layer=0 if layer_types else None)


# Model types that the comparison classes as not a text rotary but whose rotary class turns token
# positions and runs on their default config: compared with their own code here, read without a
# warning.
SUB_MODELS = {
    "deepseek_ocr2_encoder": "DeepseekOcr2TextRotaryEmbedding",
    "higgs_audio_v2": "HiggsAudioV2RotaryEmbedding",
    "lasr_encoder": "LasrEncoderRotaryEmbedding",
    "pocket_tts_audio_tokenizer": "PocketTTSAudioTokenizerRotaryEmbedding",
    "pocket_tts_audio_tokenizer_decoder": "PocketTTSAudioTokenizerRotaryEmbedding",
    "pocket_tts_audio_tokenizer_encoder": "PocketTTSAudioTokenizerRotaryEmbedding",
}


@pytest.mark.parametrize("model_type", sorted(SUB_MODELS))
def test_sub_models_rotate_as_their_code(posenc_package, model_type):
    """Sub-models and encoders whose rotary class turns token positions (Higgs Audio v2's Llama
    decoder, the audio tokenizers' and encoders' transformers, DeepSeek-OCR 2's text encoder): their
    default config read by posenc is equal to that class and their apply function (model_types'
    comparison, at the last positions of the context), with no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type)
    text = config.get_text_config()
    modeling = model_types._modeling(model_type)
    rotary_class = getattr(modeling, SUB_MODELS[model_type])
    status, detail = model_types.compare_layer(posenc_package, model_type, config, text, rotary_class,
                                               model_types._apply(modeling, text), None, None)
    assert (status, detail) == ("equal", ""), (status, detail)


def test_encoders_are_never_read_silently(results, posenc_package):
    """The model types the comparison classes as not a text rotary (vision and audio encoders,
    sub-models, attention without rotary): reading their default config either stops with a
    message or warns of a rule of the model type that posenc does not apply, never gives options
    silently. The exceptions are compared with their code: the PE audio / video encoders (read as
    their code pairs channels, test_pe_encoders_rotate_pairs_as_their_code) and SUB_MODELS."""
    compared_elsewhere = {"pe_audio_encoder", "pe_video_encoder", "pe_audio_video_encoder", *SUB_MODELS}
    silent, checked = {}, 0
    for model_type, (status, _) in results.items():
        if status != "not a text rotary" or model_type in compared_elsewhere:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                config = transformers.AutoConfig.for_model(model_type)
            except Exception:
                continue  # (no default config to read)
            checked += 1
            try:
                posenc_package.nn.read_hf_rope_config(config)
            except (ValueError, RuntimeError):
                continue
        if not any("posenc does not apply" in str(w.message) and "model_type" in str(w.message) for w in caught):
            silent[model_type] = "read without a warning"
    assert not silent, silent
    assert checked >= 80, checked  # (90 at this writing: every one of them with a default config)


def test_docs_list_every_model_type_with_its_status(results):
    with open(DOCS, encoding="utf-8") as file:
        text = file.read()
    assert BEGIN in text and END in text, f"{DOCS} lost its markers"
    table = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    expected = model_types.markdown(results)
    assert table == expected, ("docs/rope_models.md is out of date: rewrite the table between its markers with "
                               "'python test/python/model_types.py --markdown'")


def test_nanochat_turns_by_minus_theta_as_its_code(results, posenc_package):
    """NanoChat's rotate_half is cat(x2, -x1): its code turns by -theta. posenc reads the type as
    inverse, and the comparison with its own code (model_types.py) finds them equal, where posenc
    warned before; a kwarg still overrides the config."""
    assert results["nanochat"][0] == "equal", results["nanochat"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model("nanochat")
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(config)
    assert module.inverse and "inverse=True" in repr(module)
    assert not posenc_package.nn.RotaryEmbedding.from_hf_config(config, inverse=False).inverse


@pytest.mark.parametrize("layer_type", ["main", "compress"])
def test_deepseek_v4_rotates_the_last_channels_as_its_code(results, posenc_package, layer_type):
    """DeepSeek-V4's heads are [nope | rope]: its apply_rotary_pos_emb turns the last
    head_dim * partial_rotary_factor channels, pairs (2i, 2i + 1), with its rotary class's
    cos/sin of each rope layer type ("main", "compress"). posenc reads the type as whole heads with
    rotate_last_channels and the interleaved pairing, equal to the model's code on full heads (the
    model_types comparison, near the end of the context); turning the leading channels instead, as
    posenc did before, is not."""
    assert results["deepseek_v4"][0] == "equal", results["deepseek_v4"]
    modeling = importlib.import_module("transformers.models.deepseek_v4.modeling_deepseek_v4")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model("deepseek_v4")
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(config, layer_type=layer_type, heads_first=True,
                                                              max_len=4096)
    assert (module.head_dim, module.rotary_dim, module.pairing, module.rotate_last_channels) == (
        512, 64, "interleaved", True)
    torch.manual_seed(5)
    q = torch.randn(1, 2, 6, 512)
    positions = torch.arange(4000, 4006)[None]

    def theirs(q):
        cos, sin = modeling.DeepseekV4RotaryEmbedding(config)(q, positions, layer_type)
        return modeling.apply_rotary_pos_emb(q, cos, sin)

    hf = theirs(q)
    with float64_everywhere():
        reference = theirs(q.double())
    ours = module(q, 4000)
    ulp = 2 ** -23 * reference.abs().max().item()
    assert max_error(ours, reference) <= max_error(hf, reference) + ulp
    assert torch.equal(ours[..., :448], q[..., :448])
    leading = posenc_package.nn.RotaryEmbedding.from_hf_config(config, layer_type=layer_type, heads_first=True,
                                                               max_len=4096, rotate_last_channels=False)
    assert max_error(leading(q, 4000), reference) > 1e-2


@pytest.mark.parametrize("form", ["checkpoint", "minimal"])
def test_deepseek_v4_config_json_reads_as_its_configuration_class(posenc_package, form):
    """A DeepSeek-V4 config.json as checkpoints ship it (flat: rope_theta, compress_rope_theta, a YaRN
    rope_scaling, qk_rope_head_dim) or with its sizes only: posenc builds the rope sets "main" and
    "compress" as DeepseekV4Config does (compress: compress_rope_theta, the YaRN block, attention
    factor 1; main: rope_theta, default; head_dim * qk_rope_head_dim / head_dim channels at the end
    of each head), and each layer reads its kind's set. Equal to DeepSeek-V4's own rotary class and
    apply function, built from the same file by transformers, for both sets and for a layer by
    index."""
    modeling = importlib.import_module("transformers.models.deepseek_v4.modeling_deepseek_v4")
    layer_types = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
    sizes = {"hidden_size": 1024, "num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": 3,
             "max_position_embeddings": 65536 * 16, "layer_types": layer_types}
    file = {"model_type": "deepseek_v4", **sizes}
    if form == "checkpoint":
        file.update(head_dim=512, qk_rope_head_dim=64, rope_theta=10000.0, compress_rope_theta=160000.0,
                    rope_scaling={"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                                  "beta_fast": 32, "beta_slow": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(**{k: v for k, v in file.items()})
    rope_sets = config.rope_parameters
    assert set(rope_sets) == {"main", "compress"}
    torch.manual_seed(7)
    q = torch.randn(1, 2, 6, 512)
    start = 65536 * 2  # (past YaRN's original context)
    positions = torch.arange(start, start + 6)[None]
    for choice, rope_set in (({"layer_type": "main"}, "main"), ({"layer_type": "compress"}, "compress"),
                             ({"layer": 0}, "main"), ({"layer": 2}, "compress")):
        module = posenc_package.nn.RotaryEmbedding.from_hf_config(file, heads_first=True, **choice)
        assert (module.head_dim, module.rotary_dim, module.rotate_last_channels) == (512, 64, True), choice
        cos, sin = modeling.DeepseekV4RotaryEmbedding(config)(q, positions, rope_set)
        hf = modeling.apply_rotary_pos_emb(q, cos, sin)
        with float64_everywhere():
            cos64, sin64 = modeling.DeepseekV4RotaryEmbedding(config)(q.double(), positions, rope_set)
            reference = modeling.apply_rotary_pos_emb(q.double(), cos64, sin64)
        ulp = 2 ** -23 * reference.abs().max().item()
        assert max_error(module(q, start), reference) <= max_error(hf, reference) + ulp, choice
    # the two sets differ (bases 1e4 and 1.6e5, YaRN in the checkpoint's compress set)
    main = posenc_package.nn.RotaryEmbedding.from_hf_config(file, layer_type="main")
    compress = posenc_package.nn.RotaryEmbedding.from_hf_config(file, layer_type="compress")
    assert not torch.equal(main.inv_freq, compress.inv_freq)
    assert (compress.rope_type == "yarn") == (form == "checkpoint")


@pytest.mark.parametrize("model_type", ["ernie4_5_vl_moe_text", "ernie4_5_vl_moe"])
def test_ernie4_5_vl_rotates_as_its_code(results, posenc_package, model_type):
    """ERNIE 4.5-VL's text rotary pairs (2i, 2i + 1) (rotate_half_text), and its recomposition of
    pre-permuted frequencies gives frequency i the height axis (even i) or the width axis (odd i)
    over the first 2 * 22 pairs and time after, from sections given as (height, width, time).
    posenc reads the interleaved pairing and mrope_hw_alternating with sections (time, height,
    width): equal to its code at text positions near the end of the context and at an image grid's
    [3, B, L] positions; Qwen2-VL's contiguous blocks, or the half-split pairing, are not."""
    assert results[model_type][0] == "equal", results[model_type]
    modeling = importlib.import_module("transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type)
    text = config.get_text_config()
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(config, heads_first=True)
    assert (module.pairing, module.mrope_section, module.mrope_hw_alternating) == ("interleaved", [20, 22, 22], True)
    torch.manual_seed(3)
    length = model_types.LENGTH
    q, k = torch.randn(1, 2, length, 128), torch.randn(1, 1, length, 128)
    start = text.max_position_embeddings - 2 * length
    text_positions = torch.arange(start, start + length)[None].expand(3, 1, length)

    def theirs(q, k, positions):
        cos, sin = modeling.Ernie4_5_VLMoeTextRotaryEmbedding(text)(q, positions)
        return modeling.apply_rotary_pos_emb(q, k, cos, sin)

    for positions in (text_positions, model_types.grid_positions(start)):
        q_hf, k_hf = theirs(q, k, positions)
        with float64_everywhere():
            q_ref, k_ref = theirs(q.double(), k.double(), positions)
        q_ours, k_ours = module.forward_positions(q, positions), module.forward_positions(k, positions)
        ulp = 2 ** -23 * max(q_ref.abs().max().item(), k_ref.abs().max().item())
        assert max_error(q_ours, q_ref) <= max_error(q_hf, q_ref) + ulp
        assert max_error(k_ours, k_ref) <= max_error(k_hf, k_ref) + ulp
    blocks = posenc_package.nn.RotaryEmbedding.from_hf_config(config, heads_first=True, mrope_hw_alternating=False)
    assert max_error(blocks.forward_positions(q, positions), q_ref) > 1e-2
    halves = posenc_package.nn.RotaryEmbedding.from_hf_config(config, heads_first=True, pairing="half_split")
    assert max_error(halves.forward_positions(q, positions), q_ref) > 1e-2
    # sections given in the config are read in its code's order (height, width, time)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        given = posenc_package.nn.read_hf_rope_config({
            "model_type": "ernie4_5_vl_moe_text", "hidden_size": 512, "num_attention_heads": 4,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [24, 24, 16]}})
    assert given["module"]["mrope_section"] == [16, 24, 24] and given["module"]["mrope_hw_alternating"]


@pytest.mark.parametrize("model_type, pairing", [("glm4v_text", "interleaved"), ("glm4v_moe_text", "half_split")])
def test_glm4v_rotates_as_its_code(posenc_package, model_type, pairing):
    """GLM-4.1V / GLM-4.5V: contiguous M-RoPE sections, [8, 12, 12] unless the config gives them,
    on half the head (their checkpoints' partial_rotary_factor 0.5; the default config of the type
    gives none, and its own code then fails), GLM-4.1V pairing (2i, 2i + 1) (rotate_half_llm),
    GLM-4.5V halves. Image-grid positions near the end of the context, against each one's rotary
    class and apply_rotary_pos_emb."""
    name = model_type.removesuffix("_text")
    modeling = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(
            model_type, hidden_size=512, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
            max_position_embeddings=4096, partial_rotary_factor=0.5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(config, heads_first=True)
    assert module.pairing == pairing and module.rotary_dim == 64 and module.mrope_section == [8, 12, 12]
    rotary_class = next(getattr(modeling, n) for n in dir(modeling) if n.endswith("TextRotaryEmbedding"))
    torch.manual_seed(11)
    positions = grid_positions(2)
    q, k = torch.randn(2, 4, 12, 128), torch.randn(2, 2, 12, 128)

    def theirs(q, k):
        cos, sin = rotary_class(config=config)(q, positions)
        return modeling.apply_rotary_pos_emb(q, k, cos, sin)

    q_hf, k_hf = theirs(q, k)
    with float64_everywhere():
        q_ref, k_ref = theirs(q.double(), k.double())
    for ours, hf, reference in ((module.forward_positions(q, positions), q_hf, q_ref),
                                (module.forward_positions(k, positions), k_hf, k_ref)):
        ulp = 2 ** -23 * reference.abs().max().item()
        assert max_error(ours, reference) <= max_error(hf, reference) + ulp
    # the pairing and sections are the code's: the other pairing or other sections differ
    other = "half_split" if pairing == "interleaved" else "interleaved"
    for change in ({"pairing": other}, {"mrope_section": [16, 8, 8]}):
        changed = posenc_package.nn.RotaryEmbedding.from_hf_config(config, heads_first=True, **change)
        assert max_error(changed.forward_positions(q, positions), q_ref) > 0.1, change


@pytest.mark.parametrize("folder, model_type", [("pe_audio", "pe_audio_encoder"), ("pe_video", "pe_video_encoder"),
                                                ("pe_audio_video", "pe_audio_video_encoder")])
def test_pe_encoders_rotate_pairs_as_their_code(posenc_package, folder, model_type):
    """The PE audio / video / audio-video encoders turn time positions in pairs (2i, 2i + 1)
    (stack_freqs: [[cos, -sin], [sin, cos]] on each pair), which their config does not say: posenc
    reads the types as interleaved (it read halves, silently, before). Against each encoder's own
    rotary class and apply_rotary_pos_emb near the end of its context; the halves differ."""
    modeling = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type, hidden_size=256, num_attention_heads=2, head_dim=128)
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(config, heads_first=True)
    assert module.pairing == "interleaved" and module.rotary_dim == 128
    rotary_class = next(getattr(modeling, n) for n in dir(modeling) if n.endswith("EncoderRotaryEmbedding"))
    torch.manual_seed(13)
    offset = config.max_position_embeddings - 16
    positions = torch.arange(offset, offset + 16)[None]
    q, k = torch.randn(1, 2, 16, 128), torch.randn(1, 2, 16, 128)

    def theirs(q, k):
        cos, sin = rotary_class(config=config)(q, positions)
        return modeling.apply_rotary_pos_emb(q, k, cos, sin)

    hf = theirs(q, k)
    with float64_everywhere():
        reference = theirs(q.double(), k.double())
    for ours, their, exact in zip(module.forward_qk(q, k, offset), hf, reference):
        ulp = 2 ** -23 * exact.abs().max().item()
        assert max_error(ours, exact) <= max_error(their, exact) + ulp
    halves = posenc_package.nn.RotaryEmbedding.from_hf_config(config, heads_first=True, pairing="half_split")
    assert max_error(halves.forward_qk(q, k, offset)[0], reference[0]) > 0.1


@pytest.mark.parametrize("rope_interleave", [True, False])
def test_mla_rotates_its_rope_part_as_deepseek_v3(posenc_package, posenc_cli, tmp_path, rope_interleave):
    """DeepSeek-V3 (MLA): only the qk_rope_head_dim channels of a head turn, held apart (q_pe,
    k_pe); with rope_interleave their pairs (2i, 2i + 1) are regrouped into halves first
    (apply_rotary_pos_emb_interleave), else they turn as halves. YaRN as its checkpoints have it.
    posenc's module from the config (Python, and the CLI's TorchScript export) against the model's
    own rotary class and the apply function its attention calls, near and past the original
    context."""
    import subprocess
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as modeling
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(
            "deepseek_v3", hidden_size=512, num_attention_heads=4, num_key_value_heads=4, qk_rope_head_dim=32,
            qk_nope_head_dim=64, v_head_dim=64, max_position_embeddings=8192, rope_interleave=rope_interleave,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 2048, "beta_fast": 32, "beta_slow": 1,
                             "mscale": 1.0, "mscale_all_dim": 1.0})
    path = tmp_path / "config.json"
    config.to_json_file(str(path))
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(str(path), heads_first=True)
    assert (module.head_dim, module.rotary_dim, module.deinterleave) == (32, 32, rope_interleave)
    out = tmp_path / "rope.pt"
    result = subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(path), "--heads-first",
                             "-o", str(out)], capture_output=True, text=True)
    assert result.returncode == 0 and "Warning" not in result.stderr, result.stderr
    exported = torch.jit.load(str(out))
    apply = modeling.apply_rotary_pos_emb_interleave if rope_interleave else modeling.apply_rotary_pos_emb
    torch.manual_seed(13)
    q_pe, k_pe = torch.randn(2, 4, 16, 32), torch.randn(2, 1, 16, 32)  # (MLA's k_pe: one head)
    for offset in (2048 - 8, 8192 - 16):
        positions = torch.arange(offset, offset + 16)[None].expand(2, 16)

        def theirs(q, k):
            cos, sin = modeling.DeepseekV3RotaryEmbedding(config=config)(q, positions)
            return apply(q, k, cos, sin)

        q_hf, k_hf = theirs(q_pe, k_pe)
        with float64_everywhere():
            q_ref, k_ref = theirs(q_pe.double(), k_pe.double())
        for name, (q_ours, k_ours) in (("posenc.nn", module.forward_qk(q_pe, k_pe, offset)),
                                       ("export", exported.forward_qk(q_pe, k_pe, offset))):
            for ours, hf, reference in ((q_ours, q_hf, q_ref), (k_ours, k_hf, k_ref)):
                ulp = 2 ** -23 * reference.abs().max().item()
                assert max_error(ours, reference) <= max_error(hf, reference) + ulp, (name, offset)
    # the regrouping is what makes the difference: without it (or with pairs kept in place) it differs
    for change in ({"deinterleave": not rope_interleave}, {"deinterleave": False, "pairing": "interleaved"}):
        other = posenc_package.nn.RotaryEmbedding.from_hf_config(str(path), heads_first=True, **change)
        assert max_error(other.forward(q_pe, 8192 - 16), q_ref) > 0.1, change
    with pytest.raises(ValueError, match="deinterleave regroups pairs"):
        posenc_package.nn.RotaryEmbedding(32, 64, deinterleave=True, pairing="interleaved")


def test_layers_without_rotary_are_the_models_own(posenc_package, posenc_cli, tmp_path):
    """SmolLM3 (no_rope_layers, 1 = the layer rotates), Llama 4 (one layer in
    no_rope_layer_interval without, when no_rope_layers is absent) and Beam (a layer type whose
    rope parameters are null): the reader lists the layers that rotate as transformers' config and
    attention classes have them, without a warning; a layer without rotary is refused by
    from_hf_config and the CLI export, and `posenc rope` says so; a layer that rotates equals the
    model's own rotary class."""
    import subprocess
    from transformers.models.smollm3 import modeling_smollm3 as modeling
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model("smollm3", hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                                   num_hidden_layers=8, max_position_embeddings=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the rule is applied
        read = posenc_package.nn.read_hf_rope_config(config)
    rotating = [bool(modeling.SmolLM3Attention(config, layer).use_rope) for layer in range(8)]
    assert read["rotary_layers"] == rotating and not all(rotating) and any(rotating)
    nope, rope = rotating.index(False), rotating.index(True)
    assert posenc_package.nn.read_hf_rope_config(config, layer=nope)["rotates"] is False
    with pytest.raises(ValueError, match=f"layer {nope} has no rotary"):
        posenc_package.nn.RotaryEmbedding.from_hf_config(config, layer=nope)
    path = tmp_path / "config.json"
    config.to_json_file(str(path))
    export = subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(path), "--layer", str(nope),
                             "-o", str(tmp_path / "rope.pt")], capture_output=True, text=True)
    assert export.returncode != 0 and f"layer {nope} has no rotary" in export.stderr, export.stderr
    shown = subprocess.run([posenc_cli, "rope", "--hf-config", str(path), "--layer", str(nope)], capture_output=True, text=True)
    assert shown.returncode == 0 and "has no rotary" in shown.stdout, shown
    shown = subprocess.run([posenc_cli, "rope", "--hf-config", str(path)], capture_output=True, text=True)
    assert f"rotary in {sum(rotating)} of 8 layers" in shown.stdout, shown.stdout
    module = posenc_package.nn.RotaryEmbedding.from_hf_config(config, layer=rope, heads_first=True)
    torch.manual_seed(17)
    q, k = torch.randn(1, 4, 8, 64), torch.randn(1, 2, 8, 64)
    positions = torch.arange(1016, 1024)[None]
    cos, sin = modeling.SmolLM3RotaryEmbedding(config=config)(q, positions)
    q_hf, k_hf = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    q_ours, k_ours = module.forward_qk(q, k, 1016)
    assert max_error(q_ours, q_hf.double()) < 1e-3 and max_error(k_ours, k_hf.double()) < 1e-3  # (float32 angles near 1e3)
    # Llama 4: no no_rope_layers in the config, the interval's (default 4)
    text = {"model_type": "llama4_text", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "max_position_embeddings": 1024, "num_hidden_layers": 8}
    expected = transformers.AutoConfig.for_model(**text).no_rope_layers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        read = posenc_package.nn.read_hf_rope_config(text)
        assert read["rotary_layers"] == [bool(x) for x in expected] and not all(read["rotary_layers"])
        read = posenc_package.nn.read_hf_rope_config({**text, "no_rope_layer_interval": 2})
        assert read["rotary_layers"] == [True, False] * 4
    for bad, message in (({"no_rope_layers": [1, 2]}, "must hold 0 or 1 per layer"),
                         ({"no_rope_layers": "all"}, "must be a list of 0 or 1"),
                         ({"no_rope_layer_interval": 0}, "must be >= 1")):
        with pytest.raises(ValueError, match=message):
            posenc_package.nn.read_hf_rope_config({**text, **bad})
    with pytest.raises(ValueError, match="is not a layer of this model"):
        posenc_package.nn.read_hf_rope_config({**text, "no_rope_layers": [1, 1, 0]}, layer=5)
    # Beam: per-layer-type rope parameters whose full-attention set is null (those layers have none)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        beam = transformers.AutoConfig.for_model("beam")
    assert beam.rope_parameters["full_attention"] is None
    full = posenc_package.nn.read_hf_rope_config(beam, layer_type="full_attention")
    assert full["rotates"] is False and posenc_package.nn.read_hf_rope_config(beam, layer_type="sliding_attention")["rotates"]
    with pytest.raises(ValueError, match="layer type full_attention has no rotary"):
        posenc_package.nn.RotaryEmbedding.from_hf_config(beam, layer_type="full_attention")
