"""Vision and diffusion positions against the libraries' own code (pinned in scripts/setup.sh):
diffusers' `get_timestep_embedding`, `Timesteps` + `TimestepEmbedding` (DiT's embedder),
`get_2d_sincos_pos_embed`; timm's `build_sincos2d_pos_embed`. Plus float64 truths written here,
opcheck and torch.compile of the operators.

Tolerances: diffusers' timestep frequencies and angles are float32 (exp of a float32 exponent, then
t * f rounded to float32), so its error grows with the angle (about |t f| * 2^-24: 6e-5 at
t = 1000); posenc's angles are float64, rounded once to float32 (error <= 2^-25 + the float64
sin's). Each comparison asserts posenc's error against the float64 truth is no larger than the
library's, and the two agree within the library's error plus one float32 ulp. diffusers' 2-D grid
coordinates are float32 (arange / (size / base_size) / scale), its sines float64 of those; timm's
bands and angles are float32."""

import math

import pytest
import torch

diffusers = pytest.importorskip("diffusers", reason="diffusers is installed in the pip test environment only (scripts/setup.sh)")
timm = pytest.importorskip("timm", reason="timm is installed in the pip test environment only (scripts/setup.sh)")
from diffusers.models.embeddings import (  # noqa: E402
    TimestepEmbedding, Timesteps, get_2d_sincos_pos_embed, get_timestep_embedding)
from diffusers.models.transformers.transformer_flux import FluxPosEmbed, apply_rotary_emb  # noqa: E402
from timm.layers.pos_embed import resample_abs_pos_embed  # noqa: E402
from timm.layers.pos_embed_sincos import build_sincos2d_pos_embed  # noqa: E402

ULP32 = 2.0 ** -23


def timestep_truth(t, dim, flip, shift, scale, max_period):
    half = dim // 2
    k = torch.arange(half, dtype=torch.float64)
    frequency = torch.exp(-math.log(max_period) * k / (half - shift))
    angle = t.double().unsqueeze(1) * frequency * scale
    columns = [torch.cos(angle), torch.sin(angle)] if flip else [torch.sin(angle), torch.cos(angle)]
    if dim % 2:
        columns.append(torch.zeros(len(t), 1, dtype=torch.float64))
    return torch.cat(columns, 1)


def assert_not_worse(ours, theirs, truth):
    ours_error = (ours.double() - truth).abs().max().item()
    their_error = (theirs.double() - truth).abs().max().item()
    assert ours_error <= max(their_error, 2.0 ** -24), f"posenc {ours_error} > the library's {their_error}"
    torch.testing.assert_close(ours.double(), theirs.double(), rtol=0, atol=their_error + ULP32)
    return ours_error, their_error


TIMESTEP_CONFIGS = [
    # dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period
    (320, True, 0, 1, 10000),      # Stable Diffusion's UNet
    (256, True, 0, 1, 10000),      # DiT, PixArt, SD3 (frequency_embedding_size 256)
    (128, False, 1, 1, 10000),     # DDPM's default
    (129, False, 1, 1, 10000),     # an odd width: the zero column
    (64, True, 1, 1000, 10000),    # scaled (flow-matching timesteps in [0, 1])
    (32, False, 0.5, 1, 500),
    (2, False, 0, 1, 10000),
]


@pytest.mark.parametrize("config", TIMESTEP_CONFIGS, ids=str)
def test_timestep_embedding_against_diffusers(posenc_ops, config):
    dim, flip, shift, scale, max_period = config
    timesteps = torch.cat([torch.arange(0, 1000, 37).float(), torch.tensor([0.5, 999.25, 1e-3, 123.456])])
    if scale != 1:
        timesteps = timesteps / 1000
    theirs = get_timestep_embedding(timesteps, dim, flip, shift, scale, max_period)
    ours = posenc_ops.timestep_embedding(timesteps, dim, flip, shift, scale, max_period)
    assert ours.dtype == torch.float32 and ours.shape == theirs.shape
    assert_not_worse(ours, theirs, timestep_truth(timesteps, dim, flip, shift, scale, max_period))
    # integer timesteps, as schedulers pass them
    integer = torch.arange(0, 1000, 7)
    assert_not_worse(posenc_ops.timestep_embedding(integer, dim, flip, shift, scale, max_period),
                     get_timestep_embedding(integer, dim, flip, shift, scale, max_period),
                     timestep_truth(integer, dim, flip, shift, scale, max_period))


def test_timesteps_module_and_dit_embedder_against_diffusers(posenc_ops):
    """diffusers' Timesteps + TimestepEmbedding (DiT's t_embedder) with the same weights: the
    embedding is the only difference, and it is the closer one to the truth."""
    torch.manual_seed(0)
    projection = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
    embedder = TimestepEmbedding(256, 64)
    t = torch.tensor([0.0, 1.0, 250.5, 999.0])
    with torch.no_grad():
        theirs = embedder(projection(t))
        ours = embedder(posenc_ops.timestep_embedding(t, 256, True, 0.0))
        truth = embedder.double()(timestep_truth(t, 256, True, 0, 1, 10000))
    assert_not_worse(ours, theirs, truth)


def test_timestep_embedding_in_float64_and_16_bit(posenc_ops):
    t = torch.tensor([3.0, 999.5])
    truth = timestep_truth(t, 64, False, 1, 1, 10000)
    # Both float64, with frequencies from different formulas (pow vs exp of a log, a few ulp
    # apart, and torch's exp differs by CPU kernel): at angles up to ~1000 rad that is <~ 5e-13.
    assert torch.allclose(posenc_ops.timestep_embedding(t, 64, dtype=torch.float64), truth, rtol=0, atol=1e-12)
    for dtype in (torch.bfloat16, torch.float16):
        assert torch.equal(posenc_ops.timestep_embedding(t, 64, dtype=dtype), truth.to(dtype))


def grid_truth(embed_dim, height, width, base_size, scale, extra):
    bands = embed_dim // 4
    frequency = 10000.0 ** (-torch.arange(bands, dtype=torch.float64) / bands)
    rows = (torch.arange(height, dtype=torch.float64) * base_size / height / scale).repeat_interleave(width)
    columns = (torch.arange(width, dtype=torch.float64) * base_size / width / scale).repeat(height)
    parts = []
    for coordinate in (columns, rows):  # diffusers: the first half encodes the column coordinate
        angle = coordinate.unsqueeze(1) * frequency
        parts += [torch.sin(angle), torch.cos(angle)]
    return torch.cat([torch.zeros(extra, embed_dim, dtype=torch.float64), torch.cat(parts, 1)])


GRID_CONFIGS = [
    # embed_dim, grid_size, cls_token, extra_tokens, interpolation_scale, base_size
    (1152, 16, False, 0, 1.0, 16),         # DiT-XL/2 at 256 px
    (1152, 32, False, 0, 2.0, 32),         # PixArt-alpha at 512 px
    (64, (6, 10), False, 0, 1.0, 16),      # a rectangular grid
    (1536, 24, False, 0, 1.0, 64),         # SD3's pos_embed_max_size table is cropped from this kind
    (768, 14, True, 1, 1.0, 14),           # MAE (ViT-B/16 at 224 px: integer coordinates, a class row)
    (128, (3, 5), True, 4, 0.5, 8),        # register tokens
    (128, 4, True, 0, 1.0, 16),            # diffusers' rule: cls_token without extra_tokens adds nothing
]


@pytest.mark.parametrize("config", GRID_CONFIGS, ids=str)
def test_sincos_2d_table_against_diffusers(posenc_ops, config):
    embed_dim, grid, cls_token, extra, scale, base_size = config
    theirs = get_2d_sincos_pos_embed(embed_dim, grid, cls_token, extra, scale, base_size)
    sizes = [grid, grid] if isinstance(grid, int) else list(grid)
    ours = posenc_ops.sincos_2d_table(embed_dim, sizes, cls_token, extra, scale, base_size)
    assert ours.dtype == torch.float32 and ours.shape == theirs.shape
    height, width = sizes
    truth = grid_truth(embed_dim, height, width, base_size, scale, extra if cls_token else 0)
    assert_not_worse(ours, theirs, truth)
    if isinstance(grid, int):
        assert torch.equal(posenc_ops.sincos_2d_table(embed_dim, [grid], cls_token, extra, scale, base_size), ours)


@pytest.mark.parametrize("shape", [(14, 14), (7, 12), (1, 5)])
@pytest.mark.parametrize("reverse_coord", [False, True])
@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("temperature", [10000.0, 100.0])
def test_sincos_2d_grid_table_against_timm(posenc_ops, shape, reverse_coord, interleave, temperature):
    dim = 64
    theirs = build_sincos2d_pos_embed(list(shape), dim, temperature, reverse_coord, interleave)
    ours = posenc_ops.sincos_2d_grid_table(list(shape), dim, temperature, reverse_coord, interleave)
    # float64 truth in timm's layout
    bands = dim // 4
    frequency = temperature ** (-torch.arange(bands, dtype=torch.float64) / bands)
    sizes = shape[::-1] if reverse_coord else shape
    first = torch.arange(sizes[0], dtype=torch.float64).repeat_interleave(sizes[1])
    second = torch.arange(sizes[1], dtype=torch.float64).repeat(sizes[0])
    a, b = first.unsqueeze(1) * frequency, second.unsqueeze(1) * frequency
    blocks = [a.sin(), a.cos(), b.sin(), b.cos()] if interleave else [a.sin(), b.sin(), a.cos(), b.cos()]
    assert_not_worse(ours, theirs, torch.cat(blocks, 1))


def test_errors(posenc_ops):
    t = torch.tensor([1.0, 2.0])
    cases = [
        (lambda: posenc_ops.timestep_embedding(torch.tensor([1.0, float("nan")]), 8), "NaN or infinite timesteps"),
        (lambda: posenc_ops.timestep_embedding(torch.tensor([float("inf")]), 8), "NaN or infinite timesteps"),
        (lambda: posenc_ops.timestep_embedding(torch.tensor([1e308], dtype=torch.float64), 8, scale=1e10), "angles overflow"),
        (lambda: posenc_ops.timestep_embedding(t.view(2, 1), 8), "timesteps must be a 1-D tensor"),
        (lambda: posenc_ops.timestep_embedding(t, 1), "embedding_dim must be in [2, 2^28]"),
        (lambda: posenc_ops.timestep_embedding(t, 8, downscale_freq_shift=4.0), "must be finite and differ from embedding_dim / 2 = 4"),
        (lambda: posenc_ops.timestep_embedding(t, 8, max_period=0), "max_period must be >= 1"),
        (lambda: posenc_ops.timestep_embedding(t.bool(), 8), "real or integer tensor"),
        (lambda: posenc_ops.timestep_embedding(t, 8, dtype=torch.long), "dtype must be float16, bfloat16, float32 or float64"),
        (lambda: posenc_ops.sincos_2d_table(30, [4, 4]), "embed_dim must be a positive multiple of 4"),
        (lambda: posenc_ops.sincos_2d_table(32, [4, 0]), "grid_size must hold sizes in [1, 2^28]"),
        (lambda: posenc_ops.sincos_2d_table(32, [2, 3, 4]), "grid_size must be [H, W]"),
        (lambda: posenc_ops.sincos_2d_table(32, [4, 4], interpolation_scale=0.0), "interpolation_scale must be finite and > 0"),
        (lambda: posenc_ops.sincos_2d_table(32, [4, 4], base_size=0), "base_size must be >= 1"),
        (lambda: posenc_ops.sincos_2d_table(32, [4, 4], True, -1), "extra_tokens must be in"),
        (lambda: posenc_ops.sincos_2d_table(32, [2 ** 20, 2 ** 20]), "has over 2^28 positions"),
        (lambda: posenc_ops.sincos_2d_grid_table([4, 4], 30), "dim must be a positive multiple of 4"),
        (lambda: posenc_ops.sincos_2d_grid_table([4], 32), "feat_shape must be [H, W]"),
        (lambda: posenc_ops.sincos_2d_grid_table([4, 4], 32, float("nan")), "temperature must be finite and > 0"),
    ]
    for call, message in cases:
        with pytest.raises(RuntimeError, match=message.replace("[", r"\[").replace("]", r"\]").replace("^", r"\^")):
            call()


def test_opcheck_and_compile(posenc_ops):
    t = torch.tensor([1.0, 500.5, 999.0])
    torch.library.opcheck(posenc_ops.timestep_embedding.default, (t, 64, True, 0.0, 1.0, 10000, None))
    torch.library.opcheck(posenc_ops.sincos_2d_table.default, (64, [4, 6], True, 1, 1.0, 16, None, None))
    torch.library.opcheck(posenc_ops.sincos_2d_grid_table.default, ([4, 6], 32, 10000.0, False, True, None, None))

    def condition(t, x):
        return x + posenc_ops.timestep_embedding(t, 64, True, 0.0).unsqueeze(1) + posenc_ops.sincos_2d_table(64, [2, 3])

    compiled = torch.compile(condition, fullgraph=True)
    x = torch.randn(3, 6, 64)
    assert torch.equal(compiled(t, x), condition(t, x))


def flux_ids(text, height, width, step=1.0):
    """Flux's ids: text tokens at (0, 0, 0), image tokens at (0, row, column) (times `step`:
    fractional coordinates)."""
    image = torch.zeros(height, width, 3)
    image[..., 1] = torch.arange(height)[:, None] * step
    image[..., 2] = torch.arange(width)[None, :] * step
    return torch.cat([torch.zeros(text, 3), image.reshape(-1, 3)])


@pytest.mark.parametrize("axes_dim,theta,step", [([16, 56, 56], 10000, 1.0), ([16, 56, 56], 10000, 0.375),
                                                 ([8, 12, 12], 256, 1.0)], ids=str)
def test_axial_rotary_against_flux(posenc_ops, axes_dim, theta, step):
    """diffusers' FluxPosEmbed (float64 angles on CPU, cos/sin rounded once to float32, each
    repeated for its interleaved pair) and apply_rotary_emb (use_real_unbind_dim=-1)."""
    ids = flux_ids(7, 6, 5, step)
    cos_d, sin_d = FluxPosEmbed(theta=theta, axes_dim=axes_dim)(ids)
    cos, sin = posenc_ops.axial_rotary_tables(ids, axes_dim, float(theta))
    assert cos.shape == (ids.shape[0], sum(axes_dim) // 2) and cos.dtype == torch.float32
    # both round float64 values once: equal up to a last-bit difference of the float64 angle
    torch.testing.assert_close(cos, cos_d[:, 0::2], rtol=0, atol=ULP32 / 2)
    torch.testing.assert_close(sin, sin_d[:, 0::2], rtol=0, atol=ULP32 / 2)
    torch.manual_seed(0)
    q = torch.randn(2, 4, ids.shape[0], sum(axes_dim))  # [B, H, S, D], Flux's attention layout
    theirs = apply_rotary_emb(q, (cos_d, sin_d), use_real=True, use_real_unbind_dim=-1, sequence_dim=2)
    ours = posenc_ops.apply_rotary(q, cos, sin, 0, None, True, True)
    truth = apply_rotary_emb(q.double(), (cos_d.double(), sin_d.double()), use_real=True, use_real_unbind_dim=-1,
                             sequence_dim=2)
    # same cos/sin; each side rounds the float32 products and sum (<= ~2 ulp of |x| <~ 5)
    ours_error = (ours.double() - truth).abs().max().item()
    their_error = (theirs.double() - truth).abs().max().item()
    assert ours_error <= max(their_error, 2e-6), (ours_error, their_error)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=4e-6)


def test_axial_rotary_errors_opcheck_and_compile(posenc_ops):
    with pytest.raises(RuntimeError, match=r"ids must be \[N, 3\] \(one coordinate per token and axis of axes_dim\), but got shape \[4, 2\]"):
        posenc_ops.axial_rotary_tables(torch.zeros(4, 2), [4, 4, 4])
    with pytest.raises(RuntimeError, match="every axes_dim must be even and >= 2"):
        posenc_ops.axial_rotary_tables(torch.zeros(4, 2), [4, 3])
    with pytest.raises(RuntimeError, match="ids must be finite"):
        posenc_ops.axial_rotary_tables(torch.tensor([[0.0, math.inf]]), [4, 4])
    ids = flux_ids(2, 3, 4, 0.5)
    torch.library.opcheck(posenc_ops.axial_rotary_tables.default, (ids, [4, 6, 6], 10000.0, None))
    torch.library.opcheck(posenc_ops.axial_rotary_tables.default, (ids.long(), [4, 6, 6], 500.0, torch.float64))

    def attention_input(q, ids):
        cos, sin = posenc_ops.axial_rotary_tables(ids, [4, 6, 6])
        return posenc_ops.apply_rotary(q, cos, sin, 0, None, True, True)

    q = torch.randn(1, 2, ids.shape[0], 16)
    compiled = torch.compile(attention_input, fullgraph=True)
    assert torch.equal(compiled(q, ids), attention_input(q, ids))


@pytest.mark.parametrize("interpolation,antialias", [("bicubic", True), ("bicubic", False), ("bilinear", True),
                                                     ("bilinear", False), ("nearest", False)])
@pytest.mark.parametrize("old,new,prefix", [((14, 14), (24, 24), 1),   # ViT-B/16 224 -> 384 px
                                            ((24, 24), (14, 14), 1),   # down: antialiasing matters
                                            ((16, 16), (12, 20), 5),   # 1 class + 4 register tokens
                                            ((7, 9), (7, 9), 0)], ids=str)
def test_resample_position_table_against_timm(posenc_ops, old, new, prefix, interpolation, antialias):
    """timm's resample_abs_pos_embed itself: the same ATen interpolation kernels on the same float32
    values, so the results are bitwise equal (bfloat16 tables: both compute in float32 and round
    once)."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        posemb = (torch.randn(1, prefix + old[0] * old[1], 48) * 0.02).to(dtype)
        theirs = resample_abs_pos_embed(posemb, list(new), list(old), num_prefix_tokens=prefix,
                                        interpolation=interpolation, antialias=antialias)
        ours = posenc_ops.resample_position_table(posemb, list(new), list(old), prefix, interpolation, antialias)
        assert ours.dtype == dtype
        assert torch.equal(ours, theirs)
    # [N, D] tables and square defaults
    if old[0] == old[1] and new[0] == new[1]:
        posemb = torch.randn(prefix + old[0] * old[1], 16)
        theirs = resample_abs_pos_embed(posemb[None], [new[0], new[0]], num_prefix_tokens=prefix,
                                        interpolation=interpolation, antialias=antialias)[0]
        assert torch.equal(posenc_ops.resample_position_table(posemb, [new[0]], [], prefix, interpolation, antialias), theirs)


def test_resample_position_table_opcheck_gradients_and_compile(posenc_ops):
    posemb = torch.randn(1, 1 + 36, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: posenc_ops.resample_position_table(t, [4, 5]), (posemb,))
    torch.library.opcheck(posenc_ops.resample_position_table.default, (posemb.detach().float(), [4, 5], [], 1, "bicubic", True, False))
    with pytest.raises(RuntimeError, match=r"are not a square grid; pass old_size \{H, W\}"):
        posenc_ops.resample_position_table(torch.randn(1, 11, 4), [4])

    def resize(table):
        return posenc_ops.resample_position_table(table, [8, 8], [6, 6], 1, "bilinear", True)

    table = torch.randn(1, 37, 8)
    assert torch.equal(torch.compile(resize, fullgraph=True)(table), resize(table))

