"""Times the Python reference module (test/python/reference.py, the usual PyTorch module) for the
shapes of posenc's C++ benchmark, with the torch that matches the LibTorch it was built against.
Where a CUDA GPU is present it also measures posenc's operators there against eager PyTorch,
torch.compile of the same Python formulation, and the device's copy bandwidth, plus the LLaMA-3-8B
cases of bench/cuda_benchmark.py (rows, checks and targets).

    python bench/python_benchmark.py --library build/pip/src/libposenc.so --output python.json
"""

import argparse
import json
import os
import statistics
import sys
import timeit

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "python"))
from reference import ReferencePositionalEncoding  # noqa: E402

import cuda_benchmark  # noqa: E402  (bench/, this file's folder)

SHAPES = [(1, 1, 512), (8, 2048, 1024), (64, 512, 768)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def median_time_us(call, repeats=5, budget=0.2):
    """Median over `repeats` runs of the time per call, each run looping for about `budget` s."""
    call()
    number = 1
    while timeit.timeit(call, number=number) < budget / 5:
        number *= 2
    return statistics.median(timeit.repeat(call, number=number, repeat=repeats)) / number * 1e6


def cpu_reference():
    results = []
    for batch, length, width in SHAPES:
        module = ReferencePositionalEncoding(width, 4096).eval()
        for dtype_name, dtype in DTYPES.items():
            x = torch.randn(batch, length, width).to(dtype)
            for threads in (1, 2):
                torch.set_num_threads(threads)
                with torch.no_grad():
                    time = median_time_us(lambda: module(x))
                results.append({"name": f"add/python_reference/{batch}x{length}x{width}/{dtype_name}/threads:{threads}", "real_time_us": time})
    return results


def rope_qk_inputs(device, dtype, heads_first):
    """LLaMA-3-8B's attention inputs: queries [8, 2048, 32, 128], keys [8, 2048, 8, 128] (or heads
    first), and float32 caches for 4096 positions."""
    shape = (8, 32, 2048, 128) if heads_first else (8, 2048, 32, 128)
    k_shape = (8, 8, 2048, 128) if heads_first else (8, 2048, 8, 128)
    q = torch.randn(shape, device=device).to(dtype)
    k = torch.randn(k_shape, device=device).to(dtype)
    inv = 500000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64, device=device) / 128)
    angle = torch.arange(4096, device=device, dtype=torch.float64)[:, None] * inv
    return q, k, angle.cos().float(), angle.sin().float()


def cpu_rope_qk(library):
    """Queries and keys in one call against transformers' own apply_rotary_pos_emb (HF's layout,
    heads first), on the CPU, in this process."""
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError:
        return []
    torch.ops.load_library(library)
    ops = torch.ops.posenc
    results = []
    for dtype_name, dtype in DTYPES.items():
        q, k, cos, sin = rope_qk_inputs("cpu", dtype, heads_first=True)
        length = q.size(2)
        cos2 = torch.cat([cos, cos], -1)[None, :length].to(dtype)
        sin2 = torch.cat([sin, sin], -1)[None, :length].to(dtype)
        q_out, k_out = torch.zeros_like(q), torch.zeros_like(k)  # pages faulted in before timing

        def copy():
            q_out.copy_(q)
            k_out.copy_(k)

        cases = {"hf_apply_rotary_pos_emb": lambda: apply_rotary_pos_emb(q, k, cos2, sin2),
                 "posenc_op": lambda: ops.apply_rotary_qk(q, k, cos, sin, 0, None, False, True),
                 "posenc_op_inplace": lambda: ops.apply_rotary_qk_(q, k, cos, sin, 0, None, False, True),
                 "roofline_copy": copy}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.no_grad():
                for case, call in cases.items():
                    time = median_time_us(call, repeats=3, budget=1.0)
                    results.append({"name": f"py_rope_qk/{case}/8x32q8kx2048x128/{dtype_name}/threads:{threads}", "real_time_us": time})
    return results


def cpu_rope_heads_first(library):
    """q+k in place in transformers' layout, heads first [B, H, L, D], against copy_ of q and k, at
    prefill (2 x 2048 tokens) and decode (batch 1 and 64), both through torch.ops in this process;
    and the host side of one decoding step: a PyTorch operator's call as the floor, posenc's
    operator by its packet and its overload, and posenc.nn's module."""
    torch.ops.load_library(library)
    ops = torch.ops.posenc
    inv = 500000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    angle = torch.arange(8192, dtype=torch.float64)[:, None] * inv
    cos, sin = angle.cos().float(), angle.sin().float()
    results = []
    with torch.no_grad():
        for dtype_name, dtype in DTYPES.items():
            for batch, length, offset in ((2, 2048, 0), (1, 1, 4000), (64, 1, 4000)):
                q = torch.randn(batch, 32, length, 128).to(dtype)
                k = torch.randn(batch, 8, length, 128).to(dtype)
                q_out, k_out = torch.zeros_like(q), torch.zeros_like(k)
                cases = {"posenc_op_inplace": lambda: ops.apply_rotary_qk_(q, k, cos, sin, offset, None, False, True),
                         "roofline_copy": lambda: (q_out.copy_(q), k_out.copy_(k))}
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    for case, call in cases.items():
                        time = median_time_us(call, repeats=5, budget=0.3)
                        results.append({"name": f"py_rope_heads_first/{case}/{batch}x32q8kx{length}x128/{dtype_name}/threads:{threads}",
                                        "real_time_us": time})
        torch.set_num_threads(1)
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
        import posenc.nn  # noqa: E402  (the library is loaded above)
        module = posenc.nn.RotaryEmbedding(128, 8192, base=500000.0)
        q, k = torch.randn(1, 1, 32, 128), torch.randn(1, 1, 8, 128)
        overload = ops.apply_rotary_qk.default
        cos, sin = module.cos, module.sin
        cases = {"aten_add_inplace": lambda: torch.ops.aten.add_.Tensor(q, q),
                 "op_overload": lambda: overload(q, k, cos, sin, 4000, None, False, False),
                 "op_packet": lambda: ops.apply_rotary_qk(q, k, cos, sin, 4000, None, False, False),
                 "posenc_nn_forward_qk": lambda: module.forward_qk(q, k, 4000)}
        for case, call in cases.items():
            time = median_time_us(call, repeats=7, budget=0.3)
            results.append({"name": f"py_decode_host/{case}/1x32q8kx1x128/float32/threads:1", "real_time_us": time})
    return results


def gpu_time_us(call, repeats=50):
    """Median of CUDA-event timings of `call`, after warm-up."""
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def gpu_benchmarks(library):
    torch.ops.load_library(library)
    ops = torch.ops.posenc
    results = []
    for batch, length, width in [(8, 2048, 1024), (64, 512, 768), (32, 4096, 4096)]:
        table = ops.sinusoidal_table(4096, width, device="cuda")
        reference = ReferencePositionalEncoding(width, 4096).cuda().eval()
        compiled = torch.compile(reference)
        for dtype_name, dtype in DTYPES.items():
            x = torch.randn(batch, length, width, device="cuda").to(dtype)
            out = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            tag = f"{batch}x{length}x{width}/{dtype_name}"
            with torch.no_grad():
                cases = {
                    "roofline_copy": lambda: out.copy_(x),
                    "posenc_op": lambda: ops.add_position_table(x, table),
                    "posenc_out": lambda: ops.add_position_table_out(x, table, out=out),
                    "posenc_inplace": lambda: ops.add_position_table_(out, table),
                    "python_eager": lambda: reference(x),
                    "python_compiled": lambda: compiled(x),
                }
                for case, call in cases.items():
                    time = gpu_time_us(call)
                    results.append({"name": f"gpu_add/{case}/{tag}", "real_time_us": time, "gbps": nbytes / time / 1e3})
    # Rotary: posenc's fused kernel against HF's rotate_half formulation, eager and compiled.
    for dtype_name, dtype in DTYPES.items():
        q = torch.randn(8, 2048, 16, 64, device="cuda").to(dtype)
        inv = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64, device="cuda") / 64)
        angle = torch.arange(4096, device="cuda", dtype=torch.float64)[:, None] * inv
        cos, sin = angle.cos().float(), angle.sin().float()
        cos2 = torch.cat([cos, cos], -1)[:2048, None, :].to(dtype)
        sin2 = torch.cat([sin, sin], -1)[:2048, None, :].to(dtype)

        def eager(q=q, cos2=cos2, sin2=sin2):
            return q * cos2 + torch.cat([-q[..., 32:], q[..., :32]], -1) * sin2

        compiled_rope = torch.compile(eager)
        for case, call in {"posenc_fused": lambda: ops.apply_rotary(q, cos, sin), "eager_rotate_half": eager, "compiled_rotate_half": compiled_rope,
                           "roofline_copy": lambda: torch.empty_like(q).copy_(q)}.items():
            results.append({"name": f"gpu_rope/{case}/8x2048x16x64/{dtype_name}", "real_time_us": gpu_time_us(call)})
    # Queries and keys in one call: the fused operator (out of place, in place) against the eager
    # and compiled rotate_half formulation and copy_ of the same bytes.
    for dtype_name, dtype in DTYPES.items():
        q, k, cos, sin = rope_qk_inputs("cuda", dtype, heads_first=False)
        cos2 = torch.cat([cos, cos], -1)[:2048, None, :].to(dtype)
        sin2 = torch.cat([sin, sin], -1)[:2048, None, :].to(dtype)

        def eager_qk(q=q, k=k, cos2=cos2, sin2=sin2):
            return (q * cos2 + torch.cat([-q[..., 64:], q[..., :64]], -1) * sin2,
                    k * cos2 + torch.cat([-k[..., 64:], k[..., :64]], -1) * sin2)

        compiled_qk = torch.compile(eager_qk)
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        nbytes = 2 * (q.numel() + k.numel()) * q.element_size()

        def copy_qk(q=q, k=k, q_out=q_out, k_out=k_out):
            q_out.copy_(q)
            k_out.copy_(k)

        for case, call in {"posenc_qk": lambda: ops.apply_rotary_qk(q, k, cos, sin), "posenc_qk_inplace": lambda: ops.apply_rotary_qk_(q, k, cos, sin),
                           "eager_rotate_half": eager_qk, "compiled_rotate_half": compiled_qk, "roofline_copy": copy_qk}.items():
            time = gpu_time_us(call)
            results.append({"name": f"gpu_rope_qk/{case}/8x2048x32q8kx128/{dtype_name}", "real_time_us": time, "gbps": nbytes / time / 1e3})
    return results


def llama_gpu_benchmarks():
    """bench/cuda_benchmark.py: posenc at LLaMA-3-8B shapes against copy_, transformers'
    apply_rotary_pos_emb (eager and torch.compile) and eager PyTorch; its rows join the GPU section,
    its checks and targets are reported beside them. None without transformers."""
    try:
        cuda_benchmark.hf_apply_rotary_pos_emb()
    except ImportError:
        return None
    return cuda_benchmark.run(torch.ops.posenc, "cuda")


def cpu_attention_bias(library):
    """posenc's attention-bias operators against transformers' eager functions (BLOOM's
    build_alibi_tensor, MPT's build_mpt_alibi_tensor, T5Attention.compute_bias) and the eager
    formulation of the full ALiBi bias, 2 threads; plus the memory of both ALiBi forms at
    L = 8192, 32 heads (float32)."""
    try:
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor
        from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor
        from transformers.models.t5.configuration_t5 import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError:
        return []
    torch.ops.load_library(library)
    ops = torch.ops.posenc
    torch.set_num_threads(2)
    heads, length = 32, 2048
    slopes = ops.alibi_slopes(heads)
    mask = torch.ones(8, length, dtype=torch.long)
    mask[:, :100] = 0
    eager_full = lambda: -(slopes.view(heads, 1, 1) * (torch.arange(length).view(1, -1) - torch.arange(length).view(-1, 1)).abs())  # noqa: E731
    layer = T5Attention(T5Config(d_model=512, d_kv=64, num_heads=8), has_relative_attention_bias=True)
    weight = layer.relative_attention_bias.weight.detach()
    cases = {
        f"alibi_full/{heads}x{length}x{length}/eager": eager_full,
        f"alibi_full/{heads}x{length}x{length}/posenc": lambda: ops.alibi_bias(slopes, length, length),
        f"alibi_full_causal/{heads}x{length}x{length}/posenc": lambda: ops.alibi_bias(slopes, length, length, causal=True),
        f"alibi_mpt/{heads}x1x{length}/transformers": lambda: build_mpt_alibi_tensor(heads, length),
        f"alibi_mpt/{heads}x1x{length}/posenc": lambda: ops.alibi_bias(slopes, 1, length),
        f"alibi_bloom_padded/8x{heads}x1x{length}/transformers": lambda: build_alibi_tensor(mask, heads, torch.float32),
        f"alibi_bloom_padded/8x{heads}x1x{length}/posenc": lambda: ops.alibi_causal_bias(slopes, length, mask),
        "t5_bias/8x512x512/transformers": lambda: layer.compute_bias(512, 512),
        "t5_bias/8x512x512/posenc": lambda: ops.relative_position_bias(weight, 512, 512),
        "t5_bias_decode/8x1x512/transformers": lambda: layer.compute_bias(1, 512, past_seen_tokens=511),
        "t5_bias_decode/8x1x512/posenc": lambda: ops.relative_position_bias(weight, 1, 512, True, 128, 511),
    }
    # Applied: Transformer-XL's zero-pad shift against posenc's rel_shift; causal ALiBi attention
    # [4, 32, 512, 64] as BLOOM writes it (the compact bias through baddbmm, masked_fill, softmax,
    # bmm) against SDPA with posenc's full causal bias.
    scores = torch.randn(8, 4, 512, 1023)

    def zero_pad_shift():
        padded = torch.nn.functional.pad(scores, (1, 0)).view(8, 4, 1024, 512)
        return padded[:, :, 1:].reshape(8, 4, 512, 1023)[..., :512]

    batch, attn_len, depth = 4, 512, 64
    q, k, v = (torch.randn(batch, heads, attn_len, depth) for _ in range(3))
    future = torch.ones(attn_len, attn_len, dtype=torch.bool).triu(1)

    def bloom_eager_attention():
        alibi = ops.alibi_causal_bias(slopes, attn_len).expand(heads, 1, attn_len).repeat(batch, 1, 1)
        scores = alibi.baddbmm(q.reshape(-1, attn_len, depth), k.reshape(-1, attn_len, depth).transpose(1, 2), beta=1.0, alpha=depth ** -0.5)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
        return torch.bmm(weights, v.reshape(-1, attn_len, depth))

    cases.update({
        "rel_shift/8x4x512x1023/zero_pad": zero_pad_shift,
        "rel_shift/8x4x512x1023/posenc": lambda: ops.rel_shift(scores),
        f"alibi_attention/{batch}x{heads}x{attn_len}x{depth}/compact_bias_baddbmm": bloom_eager_attention,
        f"alibi_attention/{batch}x{heads}x{attn_len}x{depth}/full_bias_sdpa":
            lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=ops.alibi_bias(slopes, attn_len, attn_len, causal=True)),
    })
    results = []
    with torch.no_grad():
        for name, call in cases.items():
            results.append({"name": f"py_attention_bias/{name}/threads:2", "real_time_us": median_time_us(call, repeats=3)})
    full = torch.empty(0).element_size() * heads * 8192 * 8192
    compact = ops.alibi_causal_bias(slopes, 8192)
    results.append({"name": "py_attention_bias/alibi_memory_L8192/full_bytes", "bytes": full})
    results.append({"name": "py_attention_bias/alibi_memory_L8192/compact_bytes", "bytes": compact.numel() * compact.element_size()})
    return results


def cpu_vision(library):
    """The timestep embedding of a batch of 1024 (and 4096) timesteps, 2-D and 3-D table builds, resampling a
    ViT table and timm's EVA-02 RoPE against diffusers' get_timestep_embedding /
    get_2d_sincos_pos_embed / get_3d_sincos_pos_embed and timm's build_sincos2d_pos_embed /
    resample_abs_pos_embed / RotaryEmbeddingCat, 2 threads."""
    try:
        from diffusers.models.embeddings import get_2d_sincos_pos_embed, get_3d_sincos_pos_embed, get_timestep_embedding
        from timm.layers.pos_embed import resample_abs_pos_embed
        from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, build_sincos2d_pos_embed
    except ImportError:
        return []
    torch.ops.load_library(library)
    ops = torch.ops.posenc
    torch.set_num_threads(2)
    timesteps = torch.rand(1024) * 1000
    timesteps_4096 = torch.rand(4096) * 1000
    posemb = torch.randn(1, 1 + 14 * 14, 768) * 0.02
    eva_rope = RotaryEmbeddingCat(64, in_pixels=False, ref_feat_shape=[16, 16])
    cases = {
        "timestep_embedding/1024x256/diffusers": lambda: get_timestep_embedding(timesteps, 256, True, 0),
        "timestep_embedding/1024x256/posenc": lambda: ops.timestep_embedding(timesteps, 256, True, 0.0),
        "sincos_2d_table/64x64x1152/diffusers": lambda: get_2d_sincos_pos_embed(1152, 64, base_size=64),
        "sincos_2d_table/64x64x1152/posenc": lambda: ops.sincos_2d_table(1152, [64, 64], base_size=64),
        "sincos_2d_grid_table/64x64x1152/timm": lambda: build_sincos2d_pos_embed([64, 64], 1152),
        "sincos_2d_grid_table/64x64x1152/posenc": lambda: ops.sincos_2d_grid_table([64, 64], 1152),
        # CogVideoX-2B at 480 x 720 px, 49 frames
        "sincos_3d_table/13x30x45x1920/diffusers": lambda: get_3d_sincos_pos_embed(1920, (45, 30), 13, 1.875),
        "sincos_3d_table/13x30x45x1920/posenc": lambda: ops.sincos_3d_table(1920, [45, 30], 13, 1.875),
        # a ViT-B/16 table (class token + 14 x 14) to 384 px (24 x 24), bicubic with antialias
        "resample_position_table/14to24x768/timm": lambda: resample_abs_pos_embed(posemb, [24, 24], num_prefix_tokens=1),
        "resample_position_table/14to24x768/posenc": lambda: ops.resample_position_table(posemb, [24, 24]),
        # EVA-02-B/14 at 448 px (32 x 32 patches, pretrained on 16 x 16), head_dim 64
        "grid_rotary_tables/32x32x64/timm": lambda: eva_rope.get_embed([32, 32]),
        "grid_rotary_tables/32x32x64/posenc": lambda: ops.axial_rotary_tables(ops.grid_ids([32, 32], [16, 16]), [32, 32]),
        # beyond the models' shapes: 4096 timesteps, 256 x 256 grids
        "timestep_embedding/4096x256/diffusers": lambda: get_timestep_embedding(timesteps_4096, 256, True, 0),
        "timestep_embedding/4096x256/posenc": lambda: ops.timestep_embedding(timesteps_4096, 256, True, 0.0),
        "sincos_2d_grid_table/256x256x768/timm": lambda: build_sincos2d_pos_embed([256, 256], 768),
        "sincos_2d_grid_table/256x256x768/posenc": lambda: ops.sincos_2d_grid_table([256, 256], 768),
        "grid_rotary_tables/256x256x64/timm": lambda: eva_rope.get_embed([256, 256]),
        "grid_rotary_tables/256x256x64/posenc": lambda: ops.axial_rotary_tables(ops.grid_ids([256, 256], [16, 16]), [32, 32]),
    }
    with torch.no_grad():
        return [{"name": f"py_vision/{name}/threads:2", "real_time_us": median_time_us(call, repeats=3)} for name, call in cases.items()]


def compiled_time(function, *args, budget=0.2, fullgraph_required=False):
    """(steady-state time per call in us, compile time in s) of torch.compile(function): the first
    call compiles (and runs once); the steady state is timed after it."""
    import tempfile
    import time

    # A cold compile: a fresh Inductor cache directory, so that no kernel built by an earlier
    # compile (this run's or another's) is reused.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="posenc_bench_inductor_")
    torch._dynamo.reset()
    compiled = torch.compile(function, fullgraph=True)
    start = time.perf_counter()
    try:
        compiled(*args)
    except Exception:  # a reference formulation with a graph break: compiled in pieces
        if fullgraph_required:
            raise
        torch._dynamo.reset()
        compiled = torch.compile(function)
        start = time.perf_counter()
        compiled(*args)
    compile_s = time.perf_counter() - start
    return median_time_us(lambda: compiled(*args), repeats=5, budget=budget), compile_s


def cpu_compiled(library):
    """torch.compile (Inductor, CPU, fullgraph) as a peer: the reference formulation of every path
    the other comparisons time (C++ tables and Python ones alike) compiled, next to posenc's operator eager and posenc's operator inside a compiled function (no
    graph break: fullgraph), 2 threads. Rows py_compiled/<case>/<impl>: impl compiled_reference,
    posenc, posenc_compiled; compile times in rows with compile_s."""
    try:
        from diffusers.models.embeddings import get_2d_sincos_pos_embed, get_3d_sincos_pos_embed, get_timestep_embedding
        from timm.layers.pos_embed import resample_abs_pos_embed
        from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, build_sincos2d_pos_embed
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor
        from transformers.models.t5.configuration_t5 import T5Config
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError:
        return []
    torch.ops.load_library(library)
    ops = torch.ops.posenc
    torch.set_num_threads(2)
    # Cold compile times: no graph reused from Inductor's on-disk caches of an earlier run.
    torch._inductor.config.fx_graph_cache = False
    if hasattr(torch._functorch.config, "enable_autograd_cache"):
        torch._functorch.config.enable_autograd_cache = False
    cases = {}

    # The seed's module, x + pe[:, :L], against posenc's add (out of place, like the module).
    for shape in [(1, 1, 512), (8, 2048, 1024), (64, 512, 768)]:
        table = torch.ops.posenc.sinusoidal_table(4096, shape[2])
        for dtype_name, dtype in DTYPES.items():
            x = torch.randn(shape).to(dtype)
            pe = table.unsqueeze(0)
            cases[f"add/{'x'.join(map(str, shape))}/{dtype_name}"] = (
                lambda x, pe: x + pe[:, :x.size(1)], (x, pe),
                lambda x, table: ops.add_position_table(x, table, 0, True, None, 1.0), (x, table))

    # The token-embedding chain (embedding, scale, add, dropout) against posenc's fused operator,
    # eval and train (dropout 0.1), at the C++ table's 8x2048x1024 with a 32000-row vocabulary.
    ids = torch.randint(0, 32000, (8, 2048))
    table = ops.sinusoidal_table(4096, 1024)
    for dtype_name, dtype in DTYPES.items():
        weight = torch.randn(32000, 1024).to(dtype)
        for train in (False, True):
            cases[f"token_embedding/8x2048x1024/{dtype_name}/{'train' if train else 'eval'}"] = (
                lambda ids, w, pe, train=train: torch.nn.functional.dropout(
                    (torch.nn.functional.embedding(ids, w) * 32.0 + pe[:ids.size(1)]).to(w.dtype), 0.1, train), (ids, weight, table),
                lambda ids, w, pe, train=train: ops.token_and_position_embedding(ids, w, pe, 0, True, None, 32.0, -1, 0.1, train)[0],
                (ids, weight, table))

    # One tensor: transformers' LLaMA formulation x * cos + rotate_half(x) * sin against posenc's
    # apply_rotary, at the C++ table's [8, 2048, 16, 64] (tokens first).
    rope_inv = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    rope_angle = torch.arange(4096, dtype=torch.float64)[:, None] * rope_inv
    rope_cos, rope_sin = rope_angle.cos().float(), rope_angle.sin().float()

    def rotate_half_rope(x, cos, sin):
        cos = cos[:x.size(1)].view(1, x.size(1), 1, -1).to(x.dtype)
        sin = sin[:x.size(1)].view(1, x.size(1), 1, -1).to(x.dtype)
        half = x.size(-1) // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    for dtype_name, dtype in DTYPES.items():
        x = torch.randn(8, 2048, 16, 64).to(dtype)
        cases[f"rope/8x2048x16x64/{dtype_name}"] = (
            rotate_half_rope, (x, torch.cat([rope_cos, rope_cos], -1), torch.cat([rope_sin, rope_sin], -1)),
            lambda x, cos, sin: ops.apply_rotary(x, cos, sin), (x, rope_cos, rope_sin))

    # q+k: transformers' apply_rotary_pos_emb against posenc's apply_rotary_qk, prefill
    # (LLaMA-3-8B, batch 8) and decode (one token, batch 1 and 64), heads first.
    for batch, length in [(8, 2048), (1, 1), (64, 1)]:
        inv = 500000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
        angle = (torch.arange(4096, dtype=torch.float64)[:, None] * inv)
        cos, sin = angle.cos().float(), angle.sin().float()
        for dtype_name, dtype in DTYPES.items():
            q = torch.randn(batch, 32, length, 128).to(dtype)
            k = torch.randn(batch, 8, length, 128).to(dtype)
            offset = 1000 if length == 1 else 0
            cos2 = torch.cat([cos, cos], -1)[None, offset:offset + length].to(dtype)
            sin2 = torch.cat([sin, sin], -1)[None, offset:offset + length].to(dtype)
            cases[f"rope_qk/{batch}x32q8kx{length}x128/{dtype_name}"] = (
                apply_rotary_pos_emb, (q, k, cos2, sin2),
                lambda q, k, cos, sin, offset=offset: ops.apply_rotary_qk(q, k, cos, sin, offset, None, False, True), (q, k, cos, sin))

    # diffusers' timestep embedding and timm's 2-D sin-cos table.
    timesteps = torch.rand(1024) * 1000
    cases["timestep_embedding/1024x256/float32"] = (
        lambda t: get_timestep_embedding(t, 256, True, 0), (timesteps,),
        lambda t: ops.timestep_embedding(t, 256, True, 0.0), (timesteps,))
    timesteps = torch.rand(4096) * 1000
    cases["timestep_embedding/4096x256/float32"] = (
        lambda t: get_timestep_embedding(t, 256, True, 0), (timesteps,),
        lambda t: ops.timestep_embedding(t, 256, True, 0.0), (timesteps,))
    anchor = torch.zeros(1)  # (a tensor argument: the table builders take only sizes)
    for grid, width in [(64, 1152), (256, 768)]:
        cases[f"sincos_2d_grid_table/{grid}x{grid}x{width}/float32"] = (
            lambda a, grid=grid, width=width: build_sincos2d_pos_embed([grid, grid], width) + a, (anchor,),
            lambda a, grid=grid, width=width: ops.sincos_2d_grid_table([grid, grid], width) + a, (anchor,))

    # The other vision tables of the library comparisons: diffusers' 2-D and 3-D tables, timm's
    # EVA-02 grid rotary tables and its resampling of a ViT table (the shapes of cpu_vision).
    cases["sincos_2d_table/64x64x1152/float32"] = (
        lambda a: get_2d_sincos_pos_embed(1152, 64, base_size=64) + a, (anchor,),
        lambda a: ops.sincos_2d_table(1152, [64, 64], base_size=64) + a, (anchor,))
    cases["sincos_3d_table/13x30x45x1920/float32"] = (
        lambda a: get_3d_sincos_pos_embed(1920, (45, 30), 13, 1.875) + a, (anchor,),
        lambda a: ops.sincos_3d_table(1920, [45, 30], 13, 1.875) + a, (anchor,))
    eva_rope = RotaryEmbeddingCat(64, in_pixels=False, ref_feat_shape=[16, 16])
    for grid in (32, 256):
        cases[f"grid_rotary_tables/{grid}x{grid}x64/float32"] = (
            lambda a, grid=grid: eva_rope.get_embed([grid, grid]) + a, (anchor,),
            lambda a, grid=grid: [t + a for t in ops.axial_rotary_tables(ops.grid_ids([grid, grid], [16, 16]), [32, 32])], (anchor,))
    posemb = torch.randn(1, 1 + 14 * 14, 768) * 0.02
    cases["resample_position_table/14to24x768/float32"] = (
        lambda p: resample_abs_pos_embed(p, [24, 24], num_prefix_tokens=1), (posemb,),
        lambda p: ops.resample_position_table(p, [24, 24]), (posemb,))

    # ALiBi's full bias (the eager formulation) and T5's bias (transformers' compute_bias).
    slopes = ops.alibi_slopes(32)
    cases["alibi_full/32x2048x2048/float32"] = (
        lambda m: -(m.view(32, 1, 1) * (torch.arange(2048).view(1, -1) - torch.arange(2048).view(-1, 1)).abs()), (slopes,),
        lambda m: ops.alibi_bias(m, 2048, 2048), (slopes,))
    # The decoding builders: MPT's bias row [H, 1, L] and BLOOM's padded [B * H, 1, L] from a mask.
    cases["alibi_mpt/32x1x2048/float32"] = (
        lambda a: build_mpt_alibi_tensor(32, 2048) + a, (anchor,),
        lambda m: ops.alibi_bias(m, 1, 2048), (slopes,))
    mask = torch.ones(8, 2048, dtype=torch.long)
    mask[:, :100] = 0
    cases["alibi_bloom_padded/8x32x1x2048/float32"] = (
        lambda mask: build_alibi_tensor(mask, 32, torch.float32), (mask,),
        lambda mask: ops.alibi_causal_bias(slopes, 2048, mask), (mask,))
    # Transformer-XL's relative shift: the zero-pad formulation against posenc's rel_shift.
    scores = torch.randn(8, 4, 512, 1023)

    def zero_pad_shift(scores):
        padded = torch.nn.functional.pad(scores, (1, 0)).view(8, 4, 1024, 512)
        return padded[:, :, 1:].reshape(8, 4, 512, 1023)[..., :512]

    cases["rel_shift/8x4x512x1023/float32"] = (zero_pad_shift, (scores,), lambda s: ops.rel_shift(s), (scores,))
    # Causal ALiBi attention [4, 32, 512, 64] as BLOOM writes it (the compact bias through baddbmm,
    # masked_fill, softmax, bmm): with transformers' bias builder compiled whole, against the same
    # attention with posenc's compact bias (eager, and compiled whole: posenc inside a model).
    q_att, k_att, v_att = (torch.randn(4, 32, 512, 64) for _ in range(3))
    future = torch.ones(512, 512, dtype=torch.bool).triu(1)
    batch_mask = torch.ones(4, 512, dtype=torch.long)

    def bloom_attention(q, k, v, alibi):
        scores = alibi.baddbmm(q.reshape(-1, 512, 64), k.reshape(-1, 512, 64).transpose(1, 2), beta=1.0, alpha=64 ** -0.5)
        return torch.bmm(torch.softmax(scores.masked_fill(future, float("-inf")), -1), v.reshape(-1, 512, 64))

    cases["alibi_attention/4x32x512x64/float32"] = (
        lambda q, k, v, mask: bloom_attention(q, k, v, build_alibi_tensor(mask, 32, torch.float32)), (q_att, k_att, v_att, batch_mask),
        lambda q, k, v, mask: bloom_attention(q, k, v, ops.alibi_causal_bias(slopes, 512, mask).view(-1, 1, 512)),
        (q_att, k_att, v_att, batch_mask))
    layer = T5Attention(T5Config(d_model=512, d_kv=64, num_heads=8), has_relative_attention_bias=True).eval()
    weight = layer.relative_attention_bias.weight.detach()
    cases["t5_bias/8x512x512/float32"] = (
        lambda w: layer.compute_bias(512, 512), (weight,),
        lambda w: ops.relative_position_bias(w, 512, 512), (weight,))
    cases["t5_bias_decode/8x1x512/float32"] = (
        lambda w: layer.compute_bias(1, 512, past_seen_tokens=511), (weight,),
        lambda w: ops.relative_position_bias(w, 1, 512, True, 128, 511), (weight,))

    results = []
    with torch.no_grad():
        for name, (reference, reference_args, ours, our_args) in cases.items():
            # (5 repetitions: the large cases' fresh outputs make single runs vary by tens of percent)
            reference_us, reference_compile = compiled_time(reference, *reference_args)
            posenc_compiled_us, posenc_compile = compiled_time(ours, *our_args, fullgraph_required=True)
            posenc_us = median_time_us(lambda: ours(*our_args), repeats=5)
            results += [
                {"name": f"py_compiled/{name}/compiled_reference", "real_time_us": reference_us, "compile_s": reference_compile},
                {"name": f"py_compiled/{name}/posenc", "real_time_us": posenc_us},
                {"name": f"py_compiled/{name}/posenc_compiled", "real_time_us": posenc_compiled_us, "compile_s": posenc_compile},
            ]
            print(f"{name}: compiled reference {reference_us:.1f} us (compile {reference_compile:.1f} s), posenc {posenc_us:.1f} us, "
                  f"posenc compiled {posenc_compiled_us:.1f} us", file=sys.stderr, flush=True)
    torch._dynamo.reset()
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--only", choices=["vision", "rope_qk", "rope_heads_first", "compiled"], help="run one family's rows only (e.g. to refresh the figures of docs/vision.md and docs/rope.md)")
    args = parser.parse_args()
    if args.only is not None:
        rows = {"vision": cpu_vision, "rope_qk": cpu_rope_qk, "rope_heads_first": cpu_rope_heads_first,
                "compiled": cpu_compiled}[args.only](args.library)
        report = {"torch": torch.__version__, "benchmarks": rows}
        with open(args.output, "w") as out:
            json.dump(report, out, indent=1)
        return
    report = {"torch": torch.__version__, "benchmarks": cpu_reference() + cpu_rope_qk(args.library) + cpu_rope_heads_first(args.library) + cpu_attention_bias(args.library) + cpu_vision(args.library) + cpu_compiled(args.library)}
    if torch.cuda.is_available():
        report["device"] = torch.cuda.get_device_name()
        report["benchmarks"] += gpu_benchmarks(args.library)
        llama = llama_gpu_benchmarks()
        if llama is not None:
            report["benchmarks"] += llama["benchmarks"]
            report["gpu_checks"], report["gpu_targets"] = llama["checks"], llama["targets"]
    with open(args.output, "w") as out:
        json.dump(report, out, indent=1)


if __name__ == "__main__":
    main()
