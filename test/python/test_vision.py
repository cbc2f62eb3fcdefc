"""Vision and diffusion positions against the libraries' own code (pinned in scripts/setup.sh):
diffusers' `get_timestep_embedding`, `Timesteps` + `TimestepEmbedding` (DiT's embedder),
`get_2d_sincos_pos_embed`, `get_3d_sincos_pos_embed`, SD3's `PatchEmbed.cropped_pos_embed`,
`FluxPosEmbed`; timm's `build_sincos2d_pos_embed`, `RotaryEmbeddingCat` (EVA-02's RoPE, in an
EVA-02 model) and `resample_abs_pos_embed`. Plus float64 truths written here,
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
    CogVideoXPatchEmbed, PatchEmbed, TimestepEmbedding, Timesteps, get_2d_sincos_pos_embed, get_3d_sincos_pos_embed,
    get_timestep_embedding)
from diffusers.models.transformers.transformer_flux import FluxPosEmbed, apply_rotary_emb  # noqa: E402
from timm.layers.pos_embed import resample_abs_pos_embed  # noqa: E402
from timm.layers.pos_embed_sincos import (  # noqa: E402
    RotaryEmbeddingCat, apply_rot_embed_cat, build_sincos2d_pos_embed)

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
    # the module calls posenc.nn makes (composite: the operators above and ATen)
    weight = lambda *shape: torch.randn(*shape, requires_grad=True)  # noqa: E731
    torch.library.opcheck(posenc_ops.timestep_embedder_call.default,
                          (t, 8, 6, 10000, weight(8, 6), weight(8), weight(8, 8), None))
    torch.library.opcheck(posenc_ops.vision_rotary_embedding_tables.default, ([3, 4], 16, 100.0, [6, 8], 0.5, "xy"))

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



def sincos_1d_truth(coordinates, bands):
    frequency = 10000.0 ** (-torch.arange(bands, dtype=torch.float64) / bands)
    angle = coordinates.double().unsqueeze(1) * frequency
    return torch.cat([torch.sin(angle), torch.cos(angle)], 1)


@pytest.mark.parametrize("embed_dim,spatial,frames,s_scale,t_scale", [
    (1920, (45, 30), 13, 1.875, 1.0),   # CogVideoX-2B at 480 x 720 px, 49 frames
    (64, (5, 3), 4, 1.5, 2.0),          # rectangular; fractional coordinates in both scales
    (32, 4, 1, 1.0, 1.0),               # one frame, a square given as one size
], ids=str)
def test_sincos_3d_table_against_diffusers(posenc_ops, embed_dim, spatial, frames, s_scale, t_scale):
    """diffusers' get_3d_sincos_pos_embed: float32 coordinates (arange / scale rounded to float32),
    float64 frequencies and sines; posenc's coordinates are float64. spatial_size is (W, H)."""
    theirs = get_3d_sincos_pos_embed(embed_dim, spatial, frames, s_scale, t_scale)
    sizes = [spatial] if isinstance(spatial, int) else list(spatial)
    ours = posenc_ops.sincos_3d_table(embed_dim, sizes, frames, s_scale, t_scale)
    assert ours.dtype == torch.float32 and ours.shape == theirs.shape
    width, height = (spatial, spatial) if isinstance(spatial, int) else spatial
    temporal = sincos_1d_truth(torch.arange(frames, dtype=torch.float64) / t_scale, embed_dim // 8)
    rows = (torch.arange(height, dtype=torch.float64) / s_scale).repeat_interleave(width)
    columns = (torch.arange(width, dtype=torch.float64) / s_scale).repeat(height)
    spatial_truth = torch.cat([sincos_1d_truth(columns, 3 * embed_dim // 16),
                               sincos_1d_truth(rows, 3 * embed_dim // 16)], 1)
    truth = torch.cat([temporal[:, None, :].expand(frames, height * width, -1),
                       spatial_truth[None].expand(frames, -1, -1)], 2)
    assert_not_worse(ours, theirs, truth)
    assert torch.equal(posenc_ops.sincos_3d_table(embed_dim, sizes, frames, s_scale, t_scale, torch.float64).float(), ours)
    with pytest.raises(RuntimeError, match="embed_dim must be a positive multiple of 16"):
        posenc_ops.sincos_3d_table(40, sizes, frames)
    torch.library.opcheck(posenc_ops.sincos_3d_table.default, (embed_dim, sizes, frames, s_scale, t_scale, None, None))


def test_sincos_3d_table_in_cogvideox_patch_embed(posenc_ops):
    """CogVideoX's own patch embedding: its position buffer is max_text_seq_length zero rows, then
    get_3d_sincos_pos_embed of (width, height) patches and the compressed frames, flattened."""
    embed = CogVideoXPatchEmbed(patch_size=2, in_channels=4, embed_dim=64, text_embed_dim=8, sample_width=20,
                                sample_height=12, sample_frames=9, temporal_compression_ratio=4, max_text_seq_length=5,
                                use_learned_positional_embeddings=False)
    theirs = embed.pos_embedding[0]
    frames = (9 - 1) // 4 + 1
    ours = posenc_ops.sincos_3d_table(64, [20 // 2, 12 // 2], frames, embed.spatial_interpolation_scale,
                                      embed.temporal_interpolation_scale).flatten(0, 1)
    assert theirs.shape == (5 + ours.shape[0], 64)
    assert torch.equal(theirs[:5], torch.zeros(5, 64, dtype=theirs.dtype))
    # their coordinates j / 1.875 are float32; the sines float64 of those, then the buffer's dtype
    torch.testing.assert_close(ours.double(), theirs[5:].double(), rtol=0, atol=ULP32 * 10 / 1.875 + ULP32)


@pytest.mark.parametrize("max_size,latent,patch", [(12, (16, 16), 2), (12, (24, 10), 2), (9, (5, 8), 1)], ids=str)
def test_crop_position_table_against_sd3_patch_embed(posenc_ops, max_size, latent, patch):
    """diffusers' PatchEmbed with pos_embed_max_size (SD3): its cropped_pos_embed of a latent of
    `latent` pixels is a slice of its table, so posenc's crop of the same table is bitwise equal;
    posenc's own table + crop is no further from float64 than diffusers' table + crop."""
    embed = PatchEmbed(height=max_size * patch, width=max_size * patch, patch_size=patch, in_channels=4,
                       embed_dim=64, pos_embed_max_size=max_size)
    theirs = embed.cropped_pos_embed(*latent)
    new = [latent[0] // patch, latent[1] // patch]
    assert torch.equal(posenc_ops.crop_position_table(embed.pos_embed, new), theirs)
    assert torch.equal(posenc_ops.crop_position_table(embed.pos_embed[0], new), theirs[0])
    base = embed.base_size
    ours = posenc_ops.crop_position_table(posenc_ops.sincos_2d_table(64, [max_size], False, 0, 1.0, base), new)
    full = grid_truth(64, max_size, max_size, base, 1.0, 0).view(max_size, max_size, 64)
    top, left = (max_size - new[0]) // 2, (max_size - new[1]) // 2
    truth = full[top:top + new[0], left:left + new[1]].reshape(-1, 64)
    assert_not_worse(ours, theirs[0], truth)


def test_crop_position_table_prefix_errors_gradients_and_compile(posenc_ops):
    table = torch.randn(1, 2 + 36, 8, dtype=torch.float64, requires_grad=True)
    out = posenc_ops.crop_position_table(table, [3, 4], [], 2)
    assert out.shape == (1, 2 + 12, 8)
    assert torch.equal(out[0, :2], table[0, :2])
    assert torch.equal(out[0, 2:].view(3, 4, 8), table[0, 2:].view(6, 6, 8)[1:4, 1:5])
    assert torch.autograd.gradcheck(lambda t: posenc_ops.crop_position_table(t, [3, 4], [], 2), (table,))
    with pytest.raises(RuntimeError, match=r"new_size must hold sizes >= 1 within the table's grid \[6, 6\], but got \[7, 4\]"):
        posenc_ops.crop_position_table(table, [7, 4], [], 2)
    torch.library.opcheck(posenc_ops.crop_position_table.default, (table.detach().float(), [2, 3], [4, 9], 2))
    compiled = torch.compile(lambda t: posenc_ops.crop_position_table(t, [3]), fullgraph=True)
    plain = torch.randn(25, 8)
    assert torch.equal(compiled(plain), posenc_ops.crop_position_table(plain, [3]))


def grid_rotary_tables(ops, feat_shape, dim, temperature=10000.0, ref=(), offset=0.0, indexing="ij"):
    """EVA-02's tables from posenc's operators: grid_ids, then axial RoPE of {dim / 2, dim / 2}."""
    ids = ops.grid_ids(list(feat_shape), list(ref or ()), offset, indexing)
    return ops.axial_rotary_tables(ids, [dim // 2, dim // 2], float(temperature))


def grid_rotary_truth(feat_shape, dim, temperature, ref, offset, indexing):
    height, width = feat_shape
    rows = torch.arange(height, dtype=torch.float64) + offset
    columns = torch.arange(width, dtype=torch.float64) + offset
    if ref is not None:
        rows, columns = rows / height * ref[0], columns / width * ref[1]
    coordinates = [rows.repeat_interleave(width), columns.repeat(height)]
    if indexing == "xy":
        coordinates.reverse()
    bands = temperature ** (-torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))
    angle = torch.cat([c.unsqueeze(1) * bands for c in coordinates], 1)
    return torch.cos(angle), torch.sin(angle)


ROPE_CAT_CONFIGS = [
    # dim, feat_shape, temperature, ref_feat_shape, grid_offset, grid_indexing, rotate_half
    (64, (16, 16), 10000.0, None, 0.0, "ij", False),         # EVA-02 at its pretraining size
    (64, (24, 24), 10000.0, (16, 16), 0.0, "ij", False),     # EVA-02 fine-tuned at 336 px
    (32, (7, 12), 100.0, (4, 6), 0.5, "xy", True),           # every option
    (16, (3, 5), 10000.0, None, 1.0, "xy", False),
]


@pytest.mark.parametrize("config", ROPE_CAT_CONFIGS, ids=str)
def test_grid_rotary_against_timm_rotary_embedding_cat(posenc_ops, config):
    """timm's RotaryEmbeddingCat(in_pixels=False): float32 bands, coordinates and angles (error
    about |angle| * 2^-24, up to ~3e-6 for EVA-02's grids); posenc's angles are float64, rounded
    once. Then EVA's attention: prefix tokens as they are, apply_rot_embed_cat on the rest."""
    dim, shape, temperature, ref, offset, indexing, half = config
    rope = RotaryEmbeddingCat(dim, temperature=temperature, in_pixels=False, feat_shape=list(shape),
                              ref_feat_shape=None if ref is None else list(ref), grid_offset=offset,
                              grid_indexing=indexing, rotate_half=half)
    embed = rope.get_embed()
    sin_t, cos_t = embed[:, :dim], embed[:, dim:]
    cos, sin = grid_rotary_tables(posenc_ops, shape, dim, temperature, ref, offset, indexing)
    assert cos.shape == (shape[0] * shape[1], dim // 2) and cos.dtype == torch.float32

    def layout(t):
        return torch.cat([t, t], -1) if half else t.repeat_interleave(2, -1)

    cos_truth, sin_truth = grid_rotary_truth(shape, dim, temperature, ref, offset, indexing)
    assert_not_worse(layout(cos), cos_t, layout(cos_truth))
    assert_not_worse(layout(sin), sin_t, layout(sin_truth))
    torch.manual_seed(0)
    prefix = 1
    q = torch.randn(2, 3, prefix + shape[0] * shape[1], dim)  # [B, heads, N, head_dim]
    theirs = torch.cat([q[:, :, :prefix], apply_rot_embed_cat(q[:, :, prefix:], embed, half=half)], 2)
    ours = torch.cat([q[:, :, :prefix], posenc_ops.apply_rotary(q[:, :, prefix:], cos, sin, 0, None, not half, True)], 2)
    truth = torch.cat([q[:, :, :prefix].double(),
                       apply_rot_embed_cat(q[:, :, prefix:].double(),
                                           torch.cat([layout(sin_truth), layout(cos_truth)], 1), half=half)], 2)
    ours_error = (ours.double() - truth).abs().max().item()
    their_error = (theirs.double() - truth).abs().max().item()
    assert ours_error <= max(their_error, 2e-6), (ours_error, their_error)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=their_error + 4e-6)


def test_grid_rotary_in_an_eva02_model(posenc_ops):
    """The RoPE an EVA-02 model builds (timm's eva02_tiny_patch14_336: 24 x 24 patches, pretrained
    on 16 x 16, head_dim 64, one class token) from the model's own settings."""
    model = timm.create_model("eva02_tiny_patch14_336", pretrained=False)
    rope = model.rope
    embed = rope.get_embed()
    dim = rope.dim
    cos, sin = grid_rotary_tables(posenc_ops, rope.feat_shape, dim, rope.temperature, rope.ref_feat_shape,
                                  rope.grid_offset, rope.grid_indexing)
    cos_truth, sin_truth = grid_rotary_truth(rope.feat_shape, dim, rope.temperature, rope.ref_feat_shape,
                                             rope.grid_offset, rope.grid_indexing)
    assert_not_worse(cos.repeat_interleave(2, -1), embed[:, dim:], cos_truth.repeat_interleave(2, -1))
    assert_not_worse(sin.repeat_interleave(2, -1), embed[:, :dim], sin_truth.repeat_interleave(2, -1))
    assert model.num_prefix_tokens == 1


def test_grid_ids_errors_opcheck_and_compile(posenc_ops):
    ids = posenc_ops.grid_ids([2, 3], [4, 6], 0.5)
    assert ids.dtype == torch.float64
    assert torch.equal(ids, torch.tensor([[1.0, 1.0], [1.0, 3.0], [1.0, 5.0], [3.0, 1.0], [3.0, 3.0], [3.0, 5.0]],
                                         dtype=torch.float64))
    assert torch.equal(posenc_ops.grid_ids([2, 3], [4, 6], 0.5, "xy"), ids.flip(1))
    with pytest.raises(RuntimeError, match=r'grid_indexing must be "ij" \(row, column\) or "xy"'):
        posenc_ops.grid_ids([4, 4], [], 0.0, "yx")
    with pytest.raises(RuntimeError, match="ref_feat_shape must be empty or the pretraining grid"):
        posenc_ops.grid_ids([4, 4], [0, 4])
    with pytest.raises(RuntimeError, match="grid_offset must be finite"):
        posenc_ops.grid_ids([4, 4], [], math.nan)
    torch.library.opcheck(posenc_ops.grid_ids.default, ([3, 5], [2, 2], 0.5, "xy", None, None))

    def attend(q):
        cos, sin = grid_rotary_tables(posenc_ops, [3, 4], 16, 10000.0, [6, 6])
        return posenc_ops.apply_rotary(q, cos, sin, 0, None, True, True)

    q = torch.randn(1, 2, 12, 16)
    assert torch.equal(torch.compile(attend, fullgraph=True)(q), attend(q))
