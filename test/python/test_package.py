"""The Python package (python/posenc): `import posenc` and the posenc.nn modules.

The modules are compared with the C++ modules through files the C++ side writes (the `posenc
export` program writes a C++ module as TorchScript, holding its tensors under the C++ state-dict
names): equal state-dict keys, shapes and tensors (bit for bit) and equal outputs. Then training,
torch.compile(fullgraph=True), torch.export, dtype casts, and DDP (gloo, 2 processes) against a
single process on the whole batch.

Run through ctest: the package is imported from the source tree with POSENC_LIBRARY naming the
build's libposenc.so (`test_pip_install` installs it with pip instead).
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from conftest import TORCH_VERSION, conformer_block, finish_rank, spawn_ranks

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_ROOT, "python"))


def requires_torch(major, minor, what):
    return pytest.mark.skipif(TORCH_VERSION < (major, minor), reason=f"{what} needs torch >= {major}.{minor} (this torch is {torch.__version__})")


@pytest.fixture(scope="module")
def posenc(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc as package

    return package


def export(cli, tmp_path, name, *args):
    path = tmp_path / f"{name}.pt"
    result = subprocess.run([cli, "export", *map(str, args), "-o", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return torch.jit.load(str(path))


def same_state(module, scripted):
    ours = module.state_dict()
    theirs = dict(scripted.state_dict())
    assert sorted(ours) == sorted(theirs)
    for key, value in ours.items():
        assert value.shape == theirs[key].shape and value.dtype == theirs[key].dtype, key
        assert torch.equal(value, theirs[key]), f"{key} differs from the C++ module's"


def test_import_loads_the_operators(posenc):
    assert posenc.ops is torch.ops.posenc
    assert os.path.samefile(posenc.library_path, os.environ["POSENC_LIBRARY"])
    assert posenc.ops.sinusoidal_table(4, 6).shape == (4, 6)
    for name in posenc.nn.__all__:
        module = getattr(posenc.nn, name)
        # (the modules, and read_hf_rope_config, the config reader they are built from)
        assert (issubclass(module, torch.nn.Module) if isinstance(module, type) else callable(module)) and module.__doc__


def test_import_refuses_a_config_reader_of_another_build(posenc, tmp_path):
    """POSENC_IO_LIBRARY naming an io library that is not beside the operators (another build's,
    which would bring a second libposenc whose registration aborts the process) is an ImportError
    that says what to do; the one beside them, named or not, loads."""
    import shutil

    elsewhere = tmp_path / "libposenc_io.so"
    shutil.copy(posenc.io_library_path, elsewhere)
    code = "import posenc, torch; print(posenc.io_library_path); print(hasattr(torch.ops.posenc, 'read_hf_rope_config'))"
    def run(io, library=posenc.library_path):
        env = {**os.environ, "PYTHONPATH": os.path.join(SOURCE_ROOT, "python"), "POSENC_LIBRARY": str(library)}
        env.pop("POSENC_IO_LIBRARY", None)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**env, **({"POSENC_IO_LIBRARY": io} if io else {})})

    refused = run(str(elsewhere))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert (f"ImportError: posenc: POSENC_IO_LIBRARY={elsewhere} is not the config reader of the operator library "
            f"{posenc.library_path}") in refused.stderr, refused.stderr
    assert "unset POSENC_IO_LIBRARY" in refused.stderr
    def loads_the_reader(result):  # (found by name, the reader may be the versioned file's link)
        assert result.returncode == 0, result.stderr
        found, registered = result.stdout.split()
        assert os.path.samefile(found, posenc.io_library_path) and registered == "True", result.stdout

    for io in (posenc.io_library_path, None):
        loads_the_reader(run(io))
    # the operators named through a link elsewhere: their build's reader is still theirs
    link = tmp_path / "link" / "libposenc.so"
    link.parent.mkdir()
    link.symlink_to(posenc.library_path)
    loads_the_reader(run(posenc.io_library_path, link))


@pytest.mark.parametrize("options, flags", [
    ({}, []),
    ({"base": 500.0, "layout": "concatenated", "spacing": "tensor2tensor", "scale": 2.5}, ["--base", 500.0, "--layout", "concatenated", "--spacing", "tensor2tensor", "--scale", 2.5]),
    ({"batch_first": False}, ["--seq-first"]),
])
def test_positional_encoding_is_the_cpp_module(posenc, posenc_cli, tmp_path, options, flags):
    module = posenc.nn.PositionalEncoding(33, 40, **options)
    scripted = export(posenc_cli, tmp_path, "pe", "--max-len", 40, "--d-model", 33, *flags)
    same_state(module, scripted)
    x = torch.randn(3, 9, 33) if module.batch_first else torch.randn(9, 3, 33)
    def same(ours, theirs):
        # The exported file computes x * scale + pe with TorchScript's own operators, which may
        # round x * scale once more than posenc's kernel: equal for scale 1, within an ulp else.
        if module.scale == 1.0:
            assert torch.equal(ours, theirs)
        else:
            torch.testing.assert_close(ours, theirs, rtol=2.0**-23, atol=2.0**-23)

    for offset in (0, 31):
        same(module(x, offset), scripted(x, offset))
    positions = torch.tensor([5, 0, 39, -1, 7, 7, 2, 1, 0])
    same(module.forward_positions(x, positions), scripted.forward_positions(x, positions))
    mask = torch.zeros(3, 9, dtype=torch.bool)
    mask[1, :4] = True
    mask = mask if module.batch_first else mask.t()
    same(module.forward_padded(x, mask), scripted.forward_padded(x, mask))
    with pytest.raises(RuntimeError, match="max_len"):
        module(x, 35)


def test_positional_encoding_extrapolates_and_takes_fractional_positions(posenc, posenc_cli, tmp_path):
    module = posenc.nn.PositionalEncoding(12, 16, beyond_max_len="extrapolate")
    scripted = export(posenc_cli, tmp_path, "pe", "--max-len", 16, "--d-model", 12, "--extrapolate")
    x = torch.randn(2, 6, 12)
    ours = module(x, 13)  # positions 13 .. 18: three from the table, three computed
    # computed rows are the table's definition rounded once: the in-table rows are the table's
    assert torch.equal(ours[:, :3], posenc.nn.PositionalEncoding(12, 16)(x[:, :3], 13))
    # the export computes past max_len with PyTorch's float64 sin/cos (last float32 bit)
    torch.testing.assert_close(ours, scripted(x, 13), rtol=0, atol=2.0**-23 * 4)
    whole = posenc.nn.PositionalEncoding(12, 64)(x, 13)
    assert torch.equal(ours, whole)  # computed rows equal a longer table's rows
    # every position past the table (decoding past max_len; padding adds nothing): the same rows
    assert torch.equal(module(x, 40), posenc.nn.PositionalEncoding(12, 64)(x, 40))
    past = torch.tensor([[-1, 20, 63, 17, -1, 16], [30, 31, 32, 33, 34, 35]])
    assert torch.equal(module.forward_positions(x, past), posenc.nn.PositionalEncoding(12, 64).forward_positions(x, past))
    assert torch.equal(module.forward_positions(x, past)[0, 0], x[0, 0])
    for dtype, scale in ((torch.float32, 2.5), (torch.float16, 1.5), (torch.bfloat16, 1.0), (torch.float64, 0.5)):
        # the product rounded as the table path's kernel rounds it, then the sum, then the dtype
        a = posenc.nn.PositionalEncoding(12, 16, beyond_max_len="extrapolate", scale=scale)(x.to(dtype), 13)
        b = posenc.nn.PositionalEncoding(12, 64, scale=scale)(x.to(dtype), 13)
        assert a.dtype == dtype and torch.equal(a, b), dtype
    fractional = module.forward_positions(x, torch.tensor([0.0, 1.0, 2.5, 40.0, 7.0, 7.25]))
    longer = posenc.nn.PositionalEncoding(12, 64)
    integer = longer.forward_positions(x, torch.tensor([0, 1, 2, 40, 7, 7]))
    assert torch.equal(fractional[:, [0, 1, 3, 4]], integer[:, [0, 1, 3, 4]])  # whole positions: the table's rows
    # a fractional position: sin(2.5 w_i) in the even columns (the definition, in float64)
    w = 10000.0 ** (-torch.arange(0, 12, 2, dtype=torch.float64) / 12)
    added = (fractional[:, 2, 0::2] - x[:, 2, 0::2]).double()
    torch.testing.assert_close(added, torch.sin(2.5 * w).expand(2, 6), rtol=0, atol=4 * 2.0**-23 * float(x.abs().max() + 1))
    with pytest.raises(RuntimeError, match="max_len"):
        posenc.nn.PositionalEncoding(12, 16)(x, 13)
    with pytest.raises(RuntimeError, match=r"LearnedPositionalEmbedding: floating-point positions \(Float\) are computed from the encoding's definition"):
        posenc.nn.LearnedPositionalEmbedding(12, 16).forward_positions(x, torch.zeros(6))


def test_positional_encoding_in_place_and_dropout(posenc):
    module = posenc.nn.PositionalEncoding(8, 16, inplace=True)
    x = torch.randn(2, 5, 8)
    expected = x + module.pe[:, :5]
    out = module(x)
    assert out.data_ptr() == x.data_ptr() and torch.equal(out, expected)
    dropped = posenc.nn.PositionalEncoding(8, 16, dropout=0.5).train()
    y = dropped(torch.randn(4, 16, 8))
    zeros = (y == 0).float().mean().item()
    assert 0.35 < zeros < 0.65  # 512 elements, p = 0.5: outside this 4.6-sigma band by chance < 1e-5
    assert torch.equal(dropped.eval()(x), dropped(x))
    with pytest.raises(ValueError, match="dropout"):
        posenc.nn.PositionalEncoding(8, 16, dropout=1.5)
    with pytest.raises(ValueError, match="layout"):
        posenc.nn.PositionalEncoding(8, 16, layout="sideways")


def test_tables_follow_the_cpp_casting_rule(posenc, posenc_ops):
    module = posenc.nn.PositionalEncoding(16, 24)
    module.double()  # recomputed in float64, not widened from float32
    assert module.pe.dtype == torch.float64
    assert torch.equal(module.pe[0], posenc_ops.sinusoidal_table(24, 16, dtype=torch.float64))
    module.half()  # never stored in 16 bits
    assert module.pe.dtype == torch.float32
    assert torch.equal(module.pe[0], posenc_ops.sinusoidal_table(24, 16))
    rope = posenc.nn.RotaryEmbedding(8, 12).to(torch.bfloat16)
    assert rope.cos.dtype == torch.float32 and rope.sin.dtype == torch.float32


def test_learned_embedding_state_dict_and_outputs(posenc, posenc_ops):
    torch.manual_seed(0)
    module = posenc.nn.LearnedPositionalEmbedding(12, 20, init_std=0.5, scale=2.0)
    assert list(module.state_dict()) == ["weight"] and module.weight.shape == (20, 12)
    assert 0.4 < module.weight.std().item() < 0.6
    x = torch.randn(2, 7, 12)
    assert torch.equal(module(x, 3), posenc_ops.add_position_table(x, module.weight, 3, True, None, 2.0))
    module(x, 3).sum().backward()  # the table's gradient: each used row gets 2 (the batch)
    expected = torch.zeros(20, 12)
    expected[3:10] = 2.0
    assert torch.equal(module.weight.grad, expected)


@pytest.mark.parametrize("config", [
    {"head_dim": 64, "rope_theta": 10000.0},
    {"head_dim": 128, "rope_theta": 500000.0, "partial_rotary_factor": 0.5,
     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    {"head_dim": 64, "rope_theta": 10000.0,
     "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}},
    {"head_dim": 32, "rope_theta": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    # MLA: the rope parts (qk_rope_head_dim) are the heads, their pairs regrouped into halves
    {"model_type": "deepseek_v3", "head_dim": 32, "qk_rope_head_dim": 32, "rope_theta": 10000.0},
])
def test_rotary_embedding_is_the_cpp_module(posenc, posenc_cli, tmp_path, config):
    """The C++ module from a Hugging Face config (posenc export --hf-config) against posenc.nn
    with the same rope_scaling block."""
    max_len = 128
    hf = {"max_position_embeddings": max_len, "num_attention_heads": 4, "hidden_size": 4 * config["head_dim"], **config}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    scripted = export(posenc_cli, tmp_path, "rope", "--module", "rotary", "--hf-config", path)
    rotary_dim = int(config["head_dim"] * config.get("partial_rotary_factor", 1.0))
    module = posenc.nn.RotaryEmbedding(config["head_dim"], max_len, base=config["rope_theta"], rotary_dim=rotary_dim,
                                       rope_scaling=config.get("rope_scaling"),
                                       deinterleave=config.get("model_type") == "deepseek_v3")
    same_state(module, scripted)
    # ... and read from the config by posenc's C++ reader, as a path and as a dict.
    for source in (path, hf):
        same_state(posenc.nn.RotaryEmbedding.from_hf_config(source), scripted)
    x = torch.randn(2, 10, 3, config["head_dim"])
    expected = scripted(x, 100)
    assert torch.equal(module(x, 100), expected)
    q, k = module.forward_qk(x, x[:, :, :1].contiguous(), 100)
    assert torch.equal(q, expected) and torch.equal(k, expected[:, :, :1])
    if config.get("rope_scaling", {}).get("rope_type") == "yarn":
        assert module.attention_factor > 1.0  # 0.1 ln(4) + 1


def test_deinterleave_with_partial_rotary_is_the_cpp_module(posenc, posenc_cli, tmp_path):
    """deinterleave on the first 8 of 16 channels (the rest pass through): posenc.nn and the C++
    module's TorchScript export agree bit for bit, and differ from the pairs kept in place only
    by the order of the rotated channels."""
    scripted = export(posenc_cli, tmp_path, "mla", "--module", "rotary", "--max-len", 64, "--head-dim", 16,
                      "--rotary-dim", 8, "--deinterleave")
    module = posenc.nn.RotaryEmbedding(16, 64, rotary_dim=8, deinterleave=True)
    same_state(module, scripted)
    assert "deinterleave=True" in repr(module)
    x = torch.randn(2, 10, 3, 16)
    assert torch.equal(module(x, 40), scripted(x, 40))
    q, k = module.forward_qk(x, x[:, :, :1].contiguous(), 40)
    assert torch.equal(q, scripted(x, 40)) and torch.equal(k, scripted(x[:, :, :1].contiguous(), 40))
    kept = posenc.nn.RotaryEmbedding(16, 64, rotary_dim=8, pairing="interleaved")(x, 40)
    regrouped = torch.cat([kept[..., 0:8:2], kept[..., 1:8:2], kept[..., 8:]], -1)
    assert torch.equal(module(x, 40), regrouped)
    assert torch.equal(module(x, 40)[..., 8:], x[..., 8:])


@pytest.mark.parametrize("pairing", ["half_split", "interleaved"])
def test_inverse_turns_by_minus_theta_as_the_cpp_module(posenc, posenc_cli, tmp_path, pairing):
    """inverse (NanoChat's rotation, rotate_half = cat(x2, -x1)): posenc.nn and the C++ module's
    TorchScript export agree bit for bit, turn by -theta (the float64 rotation by -sin within
    float32's error, as test_rotary bounds the rotation by theta), and the module without inverse
    turns the result back."""
    from reference import rope_cos_sin, rope_half_split, rope_interleaved

    scripted = export(posenc_cli, tmp_path, "nanochat", "--module", "rotary", "--max-len", 64, "--head-dim", 16,
                      "--pairing", pairing, "--inverse")
    module = posenc.nn.RotaryEmbedding(16, 64, pairing=pairing, inverse=True)
    same_state(module, scripted)
    assert "inverse=True" in repr(module) and scripted.inverse
    x = torch.randn(2, 10, 3, 16)
    y = module(x, 40)
    assert torch.equal(y, scripted(x, 40))
    q, k = module.forward_qk(x, x[:, :, :1].contiguous(), 40)
    assert torch.equal(q, y) and torch.equal(k, scripted(x[:, :, :1].contiguous(), 40))
    cos, sin = rope_cos_sin(torch.arange(40, 50), 16)
    reference = {"half_split": rope_half_split, "interleaved": rope_interleaved}[pairing]
    expected = reference(x.double(), cos, -sin, 16)
    bound = 4 * 2.0 ** -24 * (x.abs().max().item() * 2) + 2 * 2.0 ** -25 * x.abs().max().item()
    assert (y.double() - expected).abs().max().item() <= bound
    assert (y.double() - reference(x.double(), cos, sin, 16)).abs().max().item() > 100 * bound
    back = posenc.nn.RotaryEmbedding(16, 64, pairing=pairing)(y.double(), 40)
    assert torch.allclose(back, x.double(), rtol=0, atol=4 * bound)


@pytest.mark.parametrize("pairing", ["half_split", "interleaved"])
def test_rotate_last_channels_turns_the_trailing_channels_as_the_cpp_module(posenc, posenc_cli, tmp_path, pairing):
    """rotate_last_channels (DeepSeek-V4's [nope | rope] heads): posenc.nn and the C++ module's
    TorchScript export agree bit for bit; the leading channels pass through unchanged and the last
    rotary_dim turn as the float64 rotation of those channels (within float32's error, as
    test_inverse_turns_by_minus_theta_as_the_cpp_module), not as the leading ones would."""
    from reference import rope_cos_sin, rope_half_split, rope_interleaved

    scripted = export(posenc_cli, tmp_path, "last", "--module", "rotary", "--max-len", 64, "--head-dim", 16,
                      "--rotary-dim", 6, "--pairing", pairing, "--rotate-last-channels")
    module = posenc.nn.RotaryEmbedding(16, 64, rotary_dim=6, pairing=pairing, rotate_last_channels=True)
    same_state(module, scripted)
    assert "rotate_last_channels=True" in repr(module) and scripted.rotate_last
    x = torch.randn(2, 10, 3, 16)
    y = module(x, 40)
    assert torch.equal(y, scripted(x, 40))
    assert torch.equal(y[..., :10], x[..., :10])
    q, k = module.forward_qk(x, x[:, :, :1].contiguous(), 40)
    assert torch.equal(q, y) and torch.equal(k, scripted(x[:, :, :1].contiguous(), 40))
    cos, sin = rope_cos_sin(torch.arange(40, 50), 6)
    reference = {"half_split": rope_half_split, "interleaved": rope_interleaved}[pairing]
    expected = torch.cat([x[..., :10].double(), reference(x[..., 10:].double(), cos, sin, 6)], -1)
    bound = 4 * 2.0 ** -24 * (x.abs().max().item() * 2) + 2 * 2.0 ** -25 * x.abs().max().item()
    assert (y.double() - expected).abs().max().item() <= bound
    leading = posenc.nn.RotaryEmbedding(16, 64, rotary_dim=6, pairing=pairing)(x, 40)
    assert (y - leading).abs().max().item() > 100 * bound
    # the option comes from the config of DeepSeek-V4 (test_rope_model_types compares it with its code)
    assert not posenc.nn.RotaryEmbedding(16, 64, rotary_dim=6).rotate_last_channels


def _hf_rope(posenc, posenc_cli, tmp_path, config, **module_options):
    """The C++ module exported from a Hugging Face config, and posenc.nn's from the same fields."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    scripted = export(posenc_cli, tmp_path, "rope", "--module", "rotary", "--hf-config", path, *module_options.pop("flags", []))
    scaling = dict(config.get("rope_scaling") or {})
    mrope_section = scaling.pop("mrope_section", None)
    if scaling.get("type") == "mrope":
        scaling["type"] = "default"
    module = posenc.nn.RotaryEmbedding(config["head_dim"], config["max_position_embeddings"], base=config["rope_theta"],
                                       rope_scaling=scaling, mrope_section=mrope_section, **module_options)
    from_config = posenc.nn.RotaryEmbedding.from_hf_config(path, **module_options)
    same_state(from_config, scripted)
    assert (from_config.rope_type, from_config.mrope_section) == (module.rope_type, module.mrope_section)
    assert torch.equal(from_config.inv_freq, module.inv_freq)
    assert (from_config._long_inv_freq is None) == (module._long_inv_freq is None)
    return module, scripted


def _close_rotation(ours, theirs, x):
    # Rows past the cache are computed: posenc's from the C library's float64 cos/sin, the export's
    # from PyTorch's, which can differ in the last float32 bit of a table entry; a rotated value
    # sums two products, so up to 2 ulp of max|x| (rows from the cache are equal).
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2.0**-22 * float(x.abs().max()))


@pytest.mark.parametrize("scaling", [
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "longrope", "short_factor": [1.0 + 0.1 * i for i in range(8)], "long_factor": [1.5 + 0.5 * i for i in range(8)],
     "original_max_position_embeddings": 32},
])
def test_length_dependent_rope_is_the_cpp_module(posenc, posenc_cli, tmp_path, scaling):
    """dynamic NTK and LongRoPE switch frequencies per call once it passes the original length."""
    config = {"head_dim": 16, "rope_theta": 10000.0, "max_position_embeddings": 64, "num_attention_heads": 2,
              "hidden_size": 32, "rope_scaling": scaling}
    module, scripted = _hf_rope(posenc, posenc_cli, tmp_path, config, beyond_max_len="extrapolate", flags=["--extrapolate"])
    same_state(module, scripted)
    # the frequencies past the switch: longrope's long ones (the C++ module's), dynamic's per call
    assert torch.equal(module.inv_freq, scripted.inv_freq)
    if scaling["rope_type"] == "longrope":
        assert torch.equal(module._long_inv_freq, scripted.long_inv_freq) and module._long_inv_freq.numel() == 8
    else:
        assert module._long_inv_freq is None and scripted.long_inv_freq.numel() == 0
    x = torch.randn(2, 12, 2, 16)
    for offset in (0, 20, 40, 70):  # inside the original length, across it, past it, past max_len
        _close_rotation(module(x, offset), scripted(x, offset), x)
    positions = torch.tensor([3.5, 0.0, 80.25, 7.0, 1.0, 2.0, 33.0, 9.0, 10.0, 11.0, 12.0, 13.0])
    _close_rotation(module.forward_positions(x, positions), scripted.forward_positions(x, positions), x)
    if scaling["rope_type"] == "longrope":
        assert module.attention_factor == pytest.approx(math.sqrt(1 + math.log(2.0) / math.log(32)))
    short = module(x, 0)
    assert torch.equal(short, posenc.ops.apply_rotary(x, module.cos, module.sin, 0, None, False, False, False, None, module._rows_factor))


@pytest.mark.parametrize("interleaved", [False, True])
def test_multimodal_rope_is_the_cpp_module(posenc, posenc_cli, tmp_path, interleaved):
    """Qwen2-VL's M-RoPE (Qwen3-VL's interleaved sections)."""
    scaling = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    if interleaved:
        scaling["mrope_interleaved"] = True
    config = {"head_dim": 16, "rope_theta": 10000.0, "max_position_embeddings": 64, "num_attention_heads": 2,
              "hidden_size": 32, "rope_scaling": scaling}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    scripted = export(posenc_cli, tmp_path, "rope", "--module", "rotary", "--hf-config", path)
    module = posenc.nn.RotaryEmbedding(16, 64, mrope_section=[2, 3, 3], mrope_interleaved=interleaved)
    same_state(module, scripted)
    x = torch.randn(2, 6, 2, 16)
    positions = torch.stack([torch.arange(6).expand(2, 6), torch.tensor([[0, 0, 1, 1, 2, 2]] * 2), torch.tensor([[0, 1, 0, 1, 0, 1]] * 2)])
    _close_rotation(module.forward_positions(x, positions), scripted.forward_positions(x, positions), x)
    with pytest.raises(RuntimeError, match="no mrope_section"):  # (the C++ module's message)
        posenc.nn.RotaryEmbedding(16, 64).forward_positions(x, positions)


def test_rows_past_cached_len_are_the_cpp_module(posenc, posenc_cli, tmp_path):
    """cached_len < max_len: the rows past the cache are computed per call (the C++ module's
    semantics), the state dict holds the cached rows only, and max_len still holds."""
    scripted = export(posenc_cli, tmp_path, "rope", "--module", "rotary", "--head-dim", 8, "--max-len", 5000,
                      "--cached-len", 16)
    module = posenc.nn.RotaryEmbedding(8, 5000, cached_len=16)
    full = posenc.nn.RotaryEmbedding(8, 5000)
    same_state(module, scripted)
    assert module.cos.shape == (16, 4) and "cached_len=16" in repr(module)
    x = torch.randn(2, 6, 3, 8)
    for offset in (0, 12, 4994):
        assert torch.equal(module(x, offset), full(x, offset))  # the values a full cache holds
        _close_rotation(module(x, offset), scripted(x, offset), x)
    positions = torch.tensor([[0, 15, 16, 4999, -1, 3], [7, 8, 9, 10, 11, 4000]])
    assert torch.equal(module.forward_positions(x, positions), full.forward_positions(x, positions))
    q, k = module.forward_qk(x, x[:, :, :1].contiguous(), 4990)
    q_full, k_full = full.forward_qk(x, x[:, :, :1].contiguous(), 4990)
    assert torch.equal(q, q_full) and torch.equal(k, k_full)
    with pytest.raises(RuntimeError, match=r"offset \+ L <= max_len \(5000\), but got L = 6 and offset = 4995"):
        module(x, 4995)
    with pytest.raises(RuntimeError, match=r"positions must be < max_len \(5000\), but got 5000"):
        module.forward_positions(x, torch.tensor([0, 1, 2, 3, 5000, 5]))
    with pytest.raises(ValueError, match=r"cached_len must be in \[1, max_len = 100\], but got 101"):
        posenc.nn.RotaryEmbedding(8, 100, cached_len=101)
    with pytest.raises(ValueError, match="over posenc's limit of 2\\^28 elements .*; lower cached_len"):
        posenc.nn.RotaryEmbedding(128, 1 << 30, cached_len=1 << 23)
    # Llama 4 Scout's 10,485,760 positions need cached_len (their caches would hold 671M elements);
    # with 8192 cached rows the last positions against RoPE evaluated in float64 (float32 caches:
    # 2^-24 per entry).
    context = 10485760
    with pytest.raises(ValueError, match="over posenc's limit of 2\\^28 elements .*; set cached_len"):
        posenc.nn.RotaryEmbedding(128, context)
    assert posenc.nn.RotaryEmbedding(128, context, rotary_dim=2, cached_len=1).cached_len == 1
    rope = posenc.nn.RotaryEmbedding(128, context, base=500000.0, cached_len=8192)
    y = torch.randn(1, 3, 2, 128)
    angles = torch.arange(context - 3, context, dtype=torch.float64)[:, None] * rope.inv_freq[None, :]
    cos, sin = angles.cos()[None, :, None], angles.sin()[None, :, None]
    a, b = y.double()[..., :64], y.double()[..., 64:]
    expected = torch.cat((a * cos - b * sin, b * cos + a * sin), -1)
    torch.testing.assert_close(rope(y, context - 3).double(), expected, rtol=0, atol=4 * 2.0**-24 * float(y.abs().max()))


def test_read_hf_rope_config(posenc, tmp_path):
    """posenc.nn.read_hf_rope_config: the C++ reader's options, head counts and audit; its
    warnings as Python warnings, strict as a ValueError."""
    config = {"model_type": "cohere", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 512, "rope_theta": 8000.0}
    read = posenc.nn.read_hf_rope_config(config)
    assert read["module"] == {"head_dim": 64, "max_len": 512, "base": 8000.0, "rotary_dim": 64, "pairing": "interleaved",
                              "rope_scaling": {"rope_type": "default", "max_position_embeddings": 512},
                              "attention_factor_in_cos_sin": True}
    assert (read["num_attention_heads"], read["num_key_value_heads"]) == (4, 2)
    assert {entry["key"]: entry["status"] for entry in read["audit"]}["rope_theta"] == "used"
    gemma = {"model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64,
             "max_position_embeddings": 512, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0}
    with pytest.warns(UserWarning, match="rope_local_base_freq"):
        posenc.nn.RotaryEmbedding.from_hf_config(gemma)
    with pytest.raises(ValueError, match="rope_local_base_freq"):
        posenc.nn.RotaryEmbedding.from_hf_config(gemma, strict=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "rope_scaling": {"rope_type": "yarn", "factr": 4.0}}))
    with pytest.raises(ValueError, match="factr"):
        posenc.nn.read_hf_rope_config(str(path), strict=True)
    with pytest.raises(ValueError, match="num_attention_heads"):
        posenc.nn.read_hf_rope_config({"hidden_size": 64})
    with pytest.raises(TypeError, match="a path, a dict or a transformers.PretrainedConfig"):
        posenc.nn.read_hf_rope_config(42)
    module = posenc.nn.RotaryEmbedding.from_hf_config(config, heads_first=True, cached_len=16)
    assert (module.heads_first, module.cached_len, module.pairing) == (True, 16, "interleaved")


def test_alpha_belongs_to_ntk_alpha(posenc):
    """A Hunyuan block pasted as it is ("dynamic" with an alpha) is refused, naming ntk_alpha, which
    reads it (config.json's Hunyuan types are read that way by the config reader)."""
    with pytest.raises(ValueError, match="alpha is read by rope type 'ntk_alpha' only, but rope_type is 'dynamic'"):
        posenc.nn.RotaryEmbedding(16, 64, rope_scaling={"type": "dynamic", "alpha": 1000.0, "factor": 1.0})
    module = posenc.nn.RotaryEmbedding(16, 64, rope_scaling={"rope_type": "ntk_alpha", "alpha": 1000.0})
    base = 10000.0 * 1000.0 ** (16 / 14)
    expected = 1.0 / base ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    torch.testing.assert_close(module.inv_freq, expected, rtol=4e-16, atol=0)


def test_rotary_embedding_errors(posenc):
    with pytest.raises(ValueError, match="unknown rope_parameters key 'factr'; posenc reads rope_type, rope_theta, mrope_section, mrope_interleaved and factor"):
        posenc.nn.RotaryEmbedding(8, 16, rope_scaling={"rope_type": "linear", "factr": 2.0})
    with pytest.raises(ValueError, match="unknown rope_parameters.rope_type 'ntk-by-parts'; posenc knows default, .*, proportional and ntk_alpha"):
        posenc.nn.RotaryEmbedding(8, 16, rope_scaling={"rope_type": "ntk-by-parts"})
    with pytest.raises(ValueError, match="rope_parameters.factor must be a number, but is a string"):
        posenc.nn.RotaryEmbedding(8, 16, rope_scaling={"rope_type": "linear", "factor": "2"})
    with pytest.raises(ValueError, match="rotary_dim"):
        posenc.nn.RotaryEmbedding(8, 16, rotary_dim=10)
    with pytest.raises(ValueError, match="rope type 'linear' needs a scaling factor"):  # the operator's check
        posenc.nn.RotaryEmbedding(8, 16, rope_scaling={"rope_type": "linear"})
    with pytest.raises(ValueError, match="mrope_section must hold three"):  # sections summing to 5 pairs, not 4
        posenc.nn.RotaryEmbedding(8, 16, mrope_section=[1, 2, 2])
    with pytest.raises(RuntimeError, match="max_len"):
        posenc.nn.RotaryEmbedding(8, 16)(torch.randn(1, 4, 1, 8), 13)
    extrapolating = posenc.nn.RotaryEmbedding(8, 16, beyond_max_len="extrapolate")
    assert extrapolating(torch.randn(1, 4, 1, 8), 13).shape == (1, 4, 1, 8)


def _modules_with_state(nn):
    return {
        "PositionalEncoding": nn.PositionalEncoding(8, 16),
        "LearnedPositionalEmbedding": nn.LearnedPositionalEmbedding(8, 16),
        "TokenAndPositionEmbedding": nn.TokenAndPositionEmbedding(30, 8, 16, positions="learned"),
        "RotaryEmbedding": nn.RotaryEmbedding(8, 16),
        "TimestepEmbedder": nn.TimestepEmbedder(16, frequency_embedding_size=8),
        "RelativePositionBias": nn.RelativePositionBias(4),
        "RelPositionMultiheadAttention": nn.RelPositionMultiheadAttention(8, 2),
    }


@pytest.mark.parametrize("name", ["PositionalEncoding", "LearnedPositionalEmbedding", "TokenAndPositionEmbedding",
                                  "RotaryEmbedding", "TimestepEmbedder", "RelativePositionBias",
                                  "RelPositionMultiheadAttention"])
def test_a_failed_load_leaves_the_module_unchanged(posenc, name):
    """load_state_dict applies the whole state or nothing: a state whose last tensor has the wrong
    shape (or that holds a key the module does not have) raises and leaves every parameter and
    buffer as it was, as the C++ modules' loads do (torch's own load would have copied the others)."""
    module = _modules_with_state(posenc.nn)[name]
    before = {key: value.clone() for key, value in module.state_dict().items()}
    changed = {key: value + 1.0 if value.is_floating_point() else value for key, value in before.items()}
    last = list(changed)[-1]
    wrong_shape = dict(changed)
    wrong_shape[last] = torch.zeros(*[size + 1 for size in changed[last].shape])
    unexpected = dict(changed)
    unexpected["not_a_key"] = torch.zeros(1)
    for bad in (wrong_shape, unexpected):
        with pytest.raises(RuntimeError):
            module.load_state_dict(bad)
        after = module.state_dict()
        assert list(after) == list(before)
        for key in before:
            assert torch.equal(after[key], before[key]), f"{name}.{key} changed by a failed load"
    parameters = [id(p) for p in module.parameters()]
    if TORCH_VERSION >= (2, 1):  # assign=True replaces the objects: a failed load puts them back
        with pytest.raises(RuntimeError):
            module.load_state_dict(wrong_shape, assign=True)
        assert [id(p) for p in module.parameters()] == parameters
        assert all(torch.equal(module.state_dict()[key], before[key]) for key in before)
    # a good state still loads whole
    module.load_state_dict(changed)
    assert all(torch.equal(module.state_dict()[key], changed[key]) for key in before)


def test_vision_modules_compute_through_the_operators(posenc, posenc_ops):
    t = torch.tensor([0.0, 1.5, 999.0])
    steps = posenc.nn.Timesteps(33, flip_sin_to_cos=True, downscale_freq_shift=0.0)
    assert torch.equal(steps(t), posenc_ops.timestep_embedding(t, 33, True, 0.0))
    with pytest.raises(ValueError, match=r"Timesteps: embedding_dim must be in \[2, 2\^28\], but got 0"):
        posenc.nn.Timesteps(0)
    embedder = posenc.nn.TimestepEmbedder(48, frequency_embedding_size=16)
    assert sorted(embedder.state_dict()) == ["mlp.0.bias", "mlp.0.weight", "mlp.2.bias", "mlp.2.weight"]
    assert embedder.mlp[0].weight.shape == (48, 16)
    expected = embedder.mlp(posenc_ops.timestep_embedding(t, 16, True, 0.0))
    assert torch.equal(embedder(t), expected)

    ids = torch.tensor([[0.0, 1.0, 2.0], [0.5, -3.0, 4.0]])
    axial = posenc.nn.AxialRotaryEmbedding([4, 6, 6])
    x = torch.randn(1, 2, 3, 16)
    cos, sin = posenc_ops.axial_rotary_tables(ids, [4, 6, 6], dtype=torch.float32)
    assert torch.equal(axial(x, ids), posenc_ops.apply_rotary(x, cos, sin, interleaved=True))

    rope = posenc.nn.VisionRotaryEmbedding(16, ref_feat_shape=[2, 2])
    q = torch.randn(1, 2, 1 + 3 * 4, 16)
    out = rope(q, [3, 4])
    assert torch.equal(out[:, :, :1], q[:, :, :1])  # the class token is not rotated
    ids = posenc_ops.grid_ids([3, 4], [2, 2], dtype=torch.float64)
    cos, sin = posenc_ops.axial_rotary_tables(ids, [8, 8], dtype=torch.float32)
    assert torch.equal(out[:, :, 1:], posenc_ops.apply_rotary(q[:, :, 1:], cos, sin, interleaved=True, heads_first=True))
    with pytest.raises(RuntimeError, match="VisionRotaryEmbedding: expected 1 prefix tokens \\+ 4 x 4 = 17 tokens"):
        rope(q, [4, 4])  # (the C++ module's message)


@pytest.mark.parametrize("heads_first", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_vision_rotary_modules_make_the_cpp_modules_call(posenc, posenc_ops, heads_first, dtype):
    """AxialRotaryEmbedding and VisionRotaryEmbedding call the C++ modules' call
    (src/ops/vision/module.cpp) through axial_rotary_embedding_call / vision_rotary_embedding_call:
    the same operators in the same order, float64 tables for float64 inputs and float32 ones
    otherwise, the prefix tokens left as they are; so equal, bit for bit, to those operators."""
    generator = torch.Generator().manual_seed(11)
    tables_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    along = 2 if heads_first else 1
    for pairing in ("interleaved", "half_split"):
        axial = posenc.nn.AxialRotaryEmbedding([4, 6, 2], theta=500.0, pairing=pairing, heads_first=heads_first)
        ids = torch.randn(7, 3, generator=generator, dtype=torch.float64) * 40
        x = torch.randn((2, 3, 7, 14) if heads_first else (2, 7, 3, 14), generator=generator).to(dtype)
        cos, sin = posenc_ops.axial_rotary_tables(ids, [4, 6, 2], 500.0, tables_dtype)
        assert torch.equal(axial(x, ids), posenc_ops.apply_rotary(x, cos, sin, 0, None, pairing == "interleaved", heads_first))

        rope = posenc.nn.VisionRotaryEmbedding(16, temperature=100.0, ref_feat_shape=[4, 6], grid_offset=0.5,
                                               grid_indexing="xy", pairing=pairing, num_prefix_tokens=2,
                                               heads_first=heads_first)
        grid = [3, 5]
        x = torch.randn((2, 3, 2 + 15, 18) if heads_first else (2, 2 + 15, 3, 18), generator=generator).to(dtype)
        ids = posenc_ops.grid_ids(grid, [4, 6], 0.5, "xy", torch.float64)
        cos, sin = posenc_ops.axial_rotary_tables(ids, [8, 8], 100.0, tables_dtype)
        rotated = posenc_ops.apply_rotary(x.narrow(along, 2, 15), cos, sin, 0, None, pairing == "interleaved", heads_first)
        assert torch.equal(rope(x, grid), torch.cat([x.narrow(along, 0, 2), rotated], along))
    with pytest.raises(RuntimeError, match="AxialRotaryEmbedding: expected ids on the input's device"):
        posenc.nn.AxialRotaryEmbedding([4, 6, 2])(torch.zeros(1, 7, 2, 12), torch.zeros(7, 3, device="meta"))


@pytest.mark.parametrize("flags", [[], ["--learned"], ["--padding-idx", 0], ["--learned", "--padding-idx", 3]])
def test_token_and_position_embedding_is_the_cpp_module(posenc, test_tool, tmp_path, flags):
    path = tmp_path / "token.pt"
    test_tool("export-token", "--vocab", 11, "--d-model", 10, "--max-len", 16, "--seed", 4, *flags, path)
    scripted = torch.jit.load(str(path))
    padding_idx = flags[flags.index("--padding-idx") + 1] if "--padding-idx" in flags else None
    module = posenc.nn.TokenAndPositionEmbedding(11, 10, 16, positions="learned" if "--learned" in flags else "sinusoidal",
                                                 padding_idx=padding_idx)
    with torch.no_grad():  # the C++ module's random tables; the sinusoidal pe must already be equal
        module.tokens.weight.copy_(dict(scripted.state_dict())["tokens.weight"])
        if "--learned" in flags:
            module.positions.weight.copy_(dict(scripted.state_dict())["positions.weight"])
    same_state(module, scripted)
    module.eval()
    ids = torch.tensor([[0, 3, 3, 5, 10, 1], [3, 3, 0, 0, 2, 9]])
    # The export computes tokens * sqrt(d_model) + table with TorchScript's operators (the product
    # rounded first); posenc's fused kernel may differ by an ulp.
    for offset in (0, 7):
        torch.testing.assert_close(module(ids, offset), scripted(ids, offset), rtol=2.0**-23, atol=2.0**-23)
    positions = torch.tensor([4, 0, 1, -1, 15, 2])
    torch.testing.assert_close(module.forward_positions(ids, positions), scripted.forward_positions(ids, positions),
                               rtol=2.0**-23, atol=2.0**-23)
    if padding_idx is None:  # the module is the operator with its tables (bit for bit)
        expected, _ = posenc.ops.token_and_position_embedding(ids, module.tokens.weight, module._table(), 7, True, None, math.sqrt(10))
        assert torch.equal(module(ids, 7), expected)
    with pytest.raises(RuntimeError, match="TokenAndPositionEmbedding: expected integer token ids"):  # the C++ module's message
        module(ids.float())


def test_token_and_position_embedding_extrapolates(posenc):
    torch.manual_seed(6)
    short = posenc.nn.TokenAndPositionEmbedding(11, 10, 16, padding_idx=0, beyond_max_len="extrapolate").eval()
    longer = posenc.nn.TokenAndPositionEmbedding(11, 10, 64, padding_idx=0).eval()
    longer.tokens.load_state_dict(short.tokens.state_dict())
    ids = torch.tensor([[0, 3, 3, 5, 10, 1], [3, 3, 4, 0, 2, 9]])
    # computed rows (positions 13 .. 18) and their sums are a longer table's, bit for bit
    assert torch.equal(short(ids, 13), longer(ids, 13))
    assert torch.equal(short(ids, 13)[0, 0], torch.zeros(10))
    positions = torch.tensor([0.5, 1.0, 2.0, 3.0, 4.0, 5.0])
    fractional = short.forward_positions(ids, positions)
    assert torch.equal(fractional[:, 1:], longer.forward_positions(ids, positions.long())[:, 1:])
    assert not torch.allclose(fractional[:, 0], longer.forward_positions(ids, positions.long())[:, 0])
    with pytest.raises(RuntimeError, match="max_len"):
        longer(ids, 60)
    with pytest.raises(ValueError, match="extrapolate"):
        posenc.nn.TokenAndPositionEmbedding(11, 10, 16, positions="learned", beyond_max_len="extrapolate")


def test_alibi_is_the_cpp_module(posenc, test_tool, tmp_path):
    path = tmp_path / "alibi.pt"
    test_tool("export-attention", "alibi", "--num-heads", 12, "--first-head", 4, "--heads", 4, path)
    scripted = torch.jit.load(str(path))
    module = posenc.nn.ALiBi(12, first_head=4, heads=4)
    same_state(module, scripted)
    assert torch.equal(module(5, 9), scripted(5, 9))
    assert torch.equal(module(5, 9, 3, True), scripted(5, 9, 3, True))
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 0, 0]])
    assert torch.equal(module.forward_causal(9, mask), scripted.forward_causal(9, mask))
    with pytest.raises(ValueError, match="ALiBi: a shard of heads first_head .. first_head \\+ heads - 1 must lie in the model's 12 heads"):
        posenc.nn.ALiBi(12, first_head=10, heads=4)  # heads 10..13 of 12


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_bias_is_the_cpp_module(posenc, test_tool, tmp_path, bidirectional):
    """A Python-trained T5 bias (random here) saved with torch.save, loaded by the C++ module."""
    torch.manual_seed(3)
    module = posenc.nn.RelativePositionBias(6, num_buckets=16, max_distance=40, bidirectional=bidirectional)
    assert list(module.state_dict()) == ["relative_attention_bias.weight"]
    path = tmp_path / "t5.pt"
    torch.save({f"layer.0.{k}": v for k, v in module.state_dict().items()}, str(path))
    flags = [] if bidirectional else ["--causal"]
    test_tool("t5-bias", "--num-heads", 6, "--num-buckets", 16, "--max-distance", 40, *flags,
              "--query-length", 7, "--key-length", 50, "--offset", 43, "--prefix", "layer.0.", path, tmp_path / "bias.pt")
    expected = torch.load(str(tmp_path / "bias.pt"))
    with torch.no_grad():
        assert torch.equal(module(7, 50, 43), expected)
    with pytest.raises(ValueError, match="RelativePositionBias: num_buckets must be >= 4 when bidirectional"):
        posenc.nn.RelativePositionBias(6, num_buckets=1)


@pytest.mark.parametrize("flags", [[], ["--legacy"], ["--unscaled"]])
def test_rel_positional_encoding_is_the_cpp_module(posenc, test_tool, tmp_path, flags):
    path = tmp_path / "rel.pt"
    test_tool("export-attention", "rel-encoding", "--d-model", 12, "--max-len", 20, *flags, path)
    scripted = torch.jit.load(str(path))
    module = posenc.nn.RelPositionalEncoding(12, max_len=20, legacy="--legacy" in flags, scale_input="--unscaled" not in flags)
    same_state(module, scripted)
    x = torch.randn(2, 7, 12)
    for offset in (0, 13):
        ours, theirs = module(x, offset), scripted(x, offset)
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
        no_frames = torch.randn(2, 0, 12)  # an empty chunk: no positions
        assert module(no_frames, offset)[1].shape == scripted(no_frames, offset)[1].shape == (1, 0, 12)
    with pytest.raises(RuntimeError, match="RelPositionalEncoding: the 14 cached and 7 new positions must fit in the table's max_len = 20"):
        module(x, 14)


def test_conformer_attention_is_the_cpp_module(posenc, test_tool, tmp_path):
    """A Python-initialized RelPositionMultiheadAttention, saved with torch.save and loaded by the
    C++ module, attends the same input with the same relative positions: equal outputs (the same
    ATen operations in the same order)."""
    torch.manual_seed(5)
    attention = posenc.nn.RelPositionMultiheadAttention(16, 4).eval()
    torch.save({f"encoder.self_attn.{k}": v for k, v in attention.state_dict().items()}, str(tmp_path / "attn.pt"))
    x = torch.randn(2, 9, 16)
    torch.save(x, str(tmp_path / "x.pt"))
    test_tool("conformer-attention", "--d-model", 16, "--num-heads", 4, "--prefix", "encoder.self_attn.",
              tmp_path / "attn.pt", tmp_path / "x.pt", tmp_path / "out.pt")
    _, pos_emb = posenc.nn.RelPositionalEncoding(16, max_len=9, scale_input=False)(x)
    with torch.no_grad():
        expected = attention(x, x, x, pos_emb)
    assert torch.equal(torch.load(str(tmp_path / "out.pt")), expected)
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)  # [B, 1, 1, Lk]: the keys each batch may attend
    mask[1, :, :, 6:] = False
    with torch.no_grad():
        masked = attention(x, x, x, pos_emb, mask)
    assert torch.isfinite(masked).all() and not torch.equal(masked[1], expected[1]) and torch.equal(masked[0], expected[0])
    with pytest.raises(RuntimeError, match="RelPositionMultiheadAttention: pos_emb must be"):
        attention(x, x, x, pos_emb[:, :5])


class _Model(torch.nn.Module):
    def __init__(self, nn):
        super().__init__()
        self.embed = torch.nn.Linear(8, 16)
        self.positions = nn.PositionalEncoding(16, 64)
        self.learned = nn.LearnedPositionalEmbedding(16, 64)
        self.rope = nn.RotaryEmbedding(8, 64)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = self.learned(self.positions(self.embed(x)))
        b, l, _ = h.shape
        q = self.rope(h.view(b, l, 2, 8)).reshape(b, l, 16)
        return self.head(torch.tanh(q))


@requires_torch(2, 4, "torch.compile(fullgraph=True) of custom operators")
def test_modules_compile_fullgraph_and_export(posenc):
    torch.manual_seed(0)
    model = _Model(posenc.nn).eval()
    x = torch.randn(2, 11, 8)
    expected = model(x)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), expected, rtol=0, atol=0)
    length = torch.export.Dim("length", min=2, max=64)
    program = torch.export.export(model, (x,), dynamic_shapes={"x": {1: length}})
    other = torch.randn(2, 30, 8)
    assert torch.equal(program.module()(other), model(other))


class _RotaryStep(torch.nn.Module):
    """A decoding step through posenc.nn.RotaryEmbedding's methods, which read the caches from the
    module's _buffers and call the operators' overloads."""

    def __init__(self, nn):
        super().__init__()
        self.rope = nn.RotaryEmbedding(8, 64, rope_scaling={"rope_type": "yarn", "factor": 2.0,
                                                            "original_max_position_embeddings": 32})

    def forward(self, q, k, v, k_cache, v_cache, seqlens):
        q_rotated, k_rotated = self.rope.forward_qk(q, k, 5)
        self.rope.forward_kv_cache_(q, k, v, k_cache, v_cache, seqlens)
        return q_rotated + k_rotated.sum(2, keepdim=True) + self.rope(q, 2)


@requires_torch(2, 4, "torch.compile(fullgraph=True) of mutating custom operators")
def test_rotary_methods_compile_fullgraph(posenc):
    torch.manual_seed(0)
    step = _RotaryStep(posenc.nn).eval()
    args = [torch.randn(2, 3, 4, 8), torch.randn(2, 3, 2, 8), torch.randn(2, 3, 2, 8), torch.zeros(2, 16, 2, 8),
            torch.zeros(2, 16, 2, 8), torch.tensor([0, 4])]
    eager_args = [a.clone() for a in args]
    expected = step(*eager_args)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(*args), expected)
    for written, eager in zip(args, eager_args):  # q and the caches, written in place alike
        assert torch.equal(written, eager)
    # the module's buffers are what the compiled step reads: a cast module's (float64) caches
    step.double()
    assert step.rope.cos.dtype == torch.float64
    assert torch.equal(compiled(*[a.double() if a.is_floating_point() else a for a in eager_args]),
                       step(*[a.double() if a.is_floating_point() else a for a in eager_args]))


@requires_torch(2, 4, "torch.compile(fullgraph=True) of custom operators")
def test_vision_rotary_modules_compile_and_export_with_dynamic_shapes(posenc):
    """The vision modules' call operators compare the input's sizes without reading them
    (src/ops/vision/module.cpp): torch.export keeps the token count and the batch symbolic."""
    axial = posenc.nn.AxialRotaryEmbedding([4, 6, 6]).eval()
    length = torch.export.Dim("length", min=2, max=512)
    program = torch.export.export(axial, (torch.randn(2, 9, 2, 16), torch.randn(9, 3)),
                                  dynamic_shapes=({1: length}, {0: length}))
    x, ids = torch.randn(2, 30, 2, 16), torch.randn(30, 3)
    assert torch.equal(program.module()(x, ids), axial(x, ids))
    compiled = torch.compile(axial, fullgraph=True, backend="aot_eager", dynamic=True)
    assert torch.equal(compiled(x, ids), axial(x, ids))

    class Patches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rope = posenc.nn.VisionRotaryEmbedding(16)

        def forward(self, q):
            return self.rope(q, [3, 4])

    patches = Patches()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(patches, (torch.randn(2, 3, 13, 16),), dynamic_shapes=({0: batch},))
    q = torch.randn(5, 3, 13, 16)
    assert torch.equal(program.module()(q), patches(q))


@requires_torch(2, 4, "torch.export of custom operators with dynamic shapes")
def test_relative_and_timestep_modules_compile_and_export_with_dynamic_shapes(posenc):
    """The relative modules' and the timestep embedder's call operators compare the inputs' sizes
    without reading them (src/ops/bias/relative_module.cpp, vision_module.cpp): torch.export keeps a
    Conformer block's batch and frame count, and the timestep count, symbolic."""
    torch.manual_seed(0)
    model = conformer_block(posenc.nn).eval()
    batch, length = torch.export.Dim("batch", min=1, max=16), torch.export.Dim("length", min=2, max=64)
    program = torch.export.export(model, (torch.randn(2, 9, 16),), dynamic_shapes=({0: batch, 1: length},))
    x = torch.randn(3, 30, 16)
    with torch.no_grad():
        expected = model(x)
        assert torch.equal(program.module()(x), expected)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
        assert torch.equal(compiled(x), expected)

    embedder = posenc.nn.TimestepEmbedder(16, frequency_embedding_size=8).eval()
    count = torch.export.Dim("count", min=2, max=256)
    program = torch.export.export(embedder, (torch.rand(4) * 1000,), dynamic_shapes=({0: count},))
    t = torch.rand(37) * 1000
    with torch.no_grad():
        assert torch.equal(program.module()(t), embedder(t))


STEPS, WORLD_SIZE = 3, 2


def _train(nn, batch, targets, ddp_rank=None):
    torch.manual_seed(0)
    net = _Model(nn)
    model = net if ddp_rank is None else torch.nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gradients = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(batch), targets)
        loss.backward()
        gradients.append({name: p.grad.clone() for name, p in net.named_parameters()})
        optimizer.step()
    return gradients, {name: t.detach().clone() for name, t in net.state_dict().items()}


def _ddp_rank(rank, store, result_dir):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD_SIZE)
    try:
        import posenc

        batch, targets = torch.load(os.path.join(result_dir, "data.pt"))
        half = batch.shape[0] // WORLD_SIZE
        mine = slice(rank * half, (rank + 1) * half)
        torch.save(_train(posenc.nn, batch[mine], targets[mine], ddp_rank=rank), os.path.join(result_dir, f"rank{rank}.pt"))
        # Both ranks done before either tears gloo down (a rank that fails above does not reach
        # this; mp.spawn stops the other)
        finish_rank(rank, result_dir)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="this torch has no gloo backend")
def test_ddp_equals_one_process_on_the_whole_batch(posenc, tmp_path):
    """DDP averages the ranks' gradients; with a mean loss over equal halves, that is the gradient
    of the whole batch, so every step's gradients and the trained weights match one process. The
    tables are buffers computed from the options, the same on every rank (DDP broadcasts rank 0's
    buffers; they are equal anyway). Tolerance: the two ranks' float32 sums are added in another
    order than the single process's (a few ulp)."""
    torch.manual_seed(1)
    batch, targets = torch.randn(4, 12, 8), torch.randn(4, 12, 4)
    torch.save((batch, targets), tmp_path / "data.pt")
    spawn_ranks(_ddp_rank, (str(tmp_path / "store"), str(tmp_path)), WORLD_SIZE, str(tmp_path))
    gradients, weights = _train(posenc.nn, batch, targets)
    for rank in range(WORLD_SIZE):
        ddp_gradients, ddp_weights = torch.load(tmp_path / f"rank{rank}.pt")
        for step, (ours, theirs) in enumerate(zip(gradients, ddp_gradients)):
            for name in ours:
                torch.testing.assert_close(theirs[name], ours[name], rtol=1e-5, atol=1e-6, msg=f"rank {rank}, step {step}, {name}")
        assert sorted(ddp_weights) == sorted(weights)
        for name in weights:
            torch.testing.assert_close(ddp_weights[name], weights[name], rtol=1e-5, atol=1e-6)
        assert torch.equal(ddp_weights["positions.pe"], weights["positions.pe"])


def test_trained_in_python_runs_in_cpp(posenc, test_tool, tmp_path):
    """Train with posenc.nn, save the state dict as safetensors (the Python package's own
    save_file), load it into the C++ twin of the model (posenc::load_safetensors into C++ modules
    of the same options) and run it: the same outputs, bit for bit (the same operators and ATen
    kernels on the same inputs)."""
    safetensors_torch = pytest.importorskip("safetensors.torch", reason="the safetensors package (pip environment)")
    torch.manual_seed(2)
    batch, targets = torch.randn(4, 12, 8), torch.randn(4, 12, 4)
    model = _Model(posenc.nn)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(20):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(batch), targets).backward()
        optimizer.step()
    model.eval()
    assert not torch.equal(model.learned.weight, _Model(posenc.nn).learned.weight)  # it trained
    weights = tmp_path / "model.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    inputs = torch.randn(3, 20, 8)
    torch.save((inputs,), tmp_path / "args.pt")
    test_tool("run-trained", weights, tmp_path / "args.pt", tmp_path / "out.pt")
    out = torch.load(tmp_path / "out.pt")
    with torch.no_grad():
        expected = model(inputs)
    assert torch.equal(out, expected), (out - expected).abs().max()


# --- posenc.nn's keyword arguments are the C++ options' field tables ----------------------------

def _option_tables():
    """{module: (table names, constructor arguments, {name: (C++ type, C++ default as Python or
    ...)}, nullable names)} from
    the OptionTable specialisations and the Options structs of include/posenc/options/*.h, with
    enumerations named by their EnumNames tables (include/posenc/enums.h)."""
    import glob
    import re

    with open(os.path.join(SOURCE_ROOT, "include", "posenc", "enums.h")) as f:
        enum_names = {f"{kind}::{value}": name for name, kind, value in re.findall(r'\{"(\w+)", (\w+)::(\w+)\}', f.read())}

    def literal(text):
        text = text.strip()
        if text in enum_names:
            return enum_names[text]
        if text in ("c10::nullopt", "{}"):
            return None
        if text in ("true", "false"):
            return text == "true"
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return ...  # (no literal default: the constructor sets it)

    tables = {}
    for path in sorted(glob.glob(os.path.join(SOURCE_ROOT, "include", "posenc", "options", "*.h"))):
        with open(path) as f:
            text = f.read()
        for options, body in re.findall(r"struct OptionTable<(\w+)> \{(.*?)\n\};", text, re.S):
            struct = re.search(r"struct " + options + r" \{(.*?)\n\};", text, re.S).group(1)
            defaults = {name: (kind, literal(value)) for kind, name, value in
                        re.findall(r"TORCH_ARG\((.+?), (\w+)\)(?: = (.+?))?;", struct)}
            lines = re.findall(r"POSENC_OPTION_FIELD\(\s*O,\s*(\w+),\s*([^)]*)\)", body)
            names = [name for name, _ in lines]
            nullable = {name for name, flags in lines if "kNullable" in flags}
            count = int(re.search(r"kConstructorArguments = (\d+);", body).group(1))
            module = "Timesteps" if options == "TimestepEmbeddingOptions" else options[: -len("Options")]
            tables[module] = (names, count, defaults, nullable)
    return tables


def test_nn_keyword_arguments_are_the_option_tables(posenc):
    """Each posenc.nn module with a C++ option table (all but RotaryEmbedding) takes exactly the
    table's options: the constructor's arguments as its positional arguments, in order, the others
    as keywords, with the C++ defaults of the C++ types (a C++ default set by the constructor is
    None in Python), None only where the table line says kNullable. A C++ option without its
    posenc.nn keyword, or a Python default that differs, fails here."""
    import inspect

    tables = _option_tables()
    assert len(tables) == 12, sorted(tables)
    python_type = {"double": float, "int64_t": int, "bool": bool}
    for module, (names, count, defaults, nullable) in tables.items():
        parameters = list(inspect.signature(getattr(posenc.nn, module).__init__).parameters.values())[1:]
        assert sorted(p.name for p in parameters) == sorted(names), module
        positional = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert positional == names[:count], module
        for parameter in parameters:
            if parameter.name in names[:count]:
                assert parameter.default is inspect.Parameter.empty, (module, parameter.name)
                continue
            kind, expected = defaults[parameter.name]
            if parameter.default is None:
                assert parameter.name in nullable, (module, parameter.name, "None needs kNullable")
            if expected is ... or expected is None:
                assert parameter.default is None, (module, parameter.name, parameter.default)
                continue
            expected_type = python_type.get(kind, str)  # (an enumeration: its name)
            assert type(parameter.default) is expected_type and parameter.default == expected, (
                module, parameter.name, parameter.default, kind, expected)
