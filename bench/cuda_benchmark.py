"""posenc's CUDA operators at LLaMA-3-8B shapes, against the memory roofline (copy_ of the same
bytes), Hugging Face transformers' own apply_rotary_pos_emb (eager and torch.compile) and the eager
PyTorch formulations, with the targets each operator is held to, met or missed.

    python bench/cuda_benchmark.py --library build/gpu/src/libposenc.so --output cuda.json [--markdown cuda.md]

scripts/gpu_check.sh runs it; bench/python_benchmark.py adds its rows to the GPU section of
scripts/bench.sh's report. Every case is built by a function of the device and the shapes, so that
test/python/test_gpu_check.py runs the same code on the CPU at tiny shapes.

Before a case set is timed, each case runs once on fresh inputs and its result is compared with the
eager formulation (posenc's rotary with HF's apply_rotary_pos_emb, within rope_bound; see there).

Timing: CUDA events around `calls` back-to-back calls (as many as make a sample last >= 200 us, at
most 100), after warm-up; the median over `samples` samples, divided by `calls`. For a small call
that is its cost as a decode loop sees it, launch and host overhead included.
"""

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time

import torch


@dataclasses.dataclass(frozen=True)
class Model:
    """The attention and embedding sizes a benchmark runs at."""
    q_heads: int
    kv_heads: int
    head_dim: int
    rope_theta: float
    hidden: int
    vocab: int


@dataclasses.dataclass(frozen=True)
class Shape:
    """`batch` sequences of `tokens` new tokens each, the first at position `offset`."""
    name: str
    batch: int
    tokens: int
    offset: int
    large: bool  # the bandwidth target (>= 90% of copy_) applies


LLAMA3_8B = Model(q_heads=32, kv_heads=8, head_dim=128, rope_theta=500000.0, hidden=4096, vocab=128256)
LLAMA3_8B_SHAPES = [
    Shape("decode_b1", batch=1, tokens=1, offset=4095, large=False),
    Shape("decode_b64", batch=64, tokens=1, offset=4095, large=False),
    Shape("prefill_b8x2048", batch=8, tokens=2048, offset=0, large=True),
]
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}

# The targets (docs/gpu_check.md, "Targets"): a large call moves its bytes at >= 90% of copy_'s bandwidth,
# a decode call costs <= 8 us, and the rotary operators are ahead of torch.compile of HF's function.
COPY_FRACTION = 0.9
DECODE_US = 8.0


@dataclasses.dataclass
class Case:
    family: str    # rope_qk, add_table or token_position
    name: str      # posenc_*, hf_eager, hf_compiled, eager, roofline_copy
    call: object   # the timed call
    outputs: object  # the tensors the last call produced
    nbytes: int    # bytes an ideal implementation reads and writes
    expected: object = None  # the tensors `outputs` must match (None: the family's eager case)
    bound: object = None     # elementwise tolerance of that match (None: exact)


def unit_roundoff(dtype):
    """The relative error of one rounding to nearest in `dtype` (2^-8 for bfloat16, 2^-24 for float32)."""
    return torch.finfo(dtype).eps / 2


def rope_bound(x, dtype):
    """Bound on |posenc - HF| for a rotated tensor, elementwise, from the unrotated `x`.

    An output element is x1*cos - x2*sin (or x2*cos + x1*sin) for its pair (x1, x2). HF's
    formulation runs in the tensor's dtype: cos and sin are rounded to it, each product and the sum
    are rounded again, each rounding within u (the unit roundoff) of its value, so HF is within
    3u(|x1| + |x2|) (|cos|, |sin| <= 1) of the exact result; posenc computes in float32 and rounds
    once, within u(|x1| + |x2|). Hence 4u(|x1| + |x2|), and a float32 u of slack for the float32
    tables both read.
    """
    half = x.size(-1) // 2
    magnitude = x[..., :half].double().abs() + x[..., half:].double().abs()
    magnitude = torch.cat([magnitude, magnitude], -1)
    return (4 * unit_roundoff(dtype) + 2 * unit_roundoff(torch.float32)) * magnitude


def sum_bound(expected, dtype):
    """Bound for x + row (and embedding + row): both sides round one float32 sum to `dtype`; a
    different float32 rounding of the sum can move the result by at most one more rounding."""
    return (2 * unit_roundoff(dtype) + 2 * unit_roundoff(torch.float32)) * expected.double().abs()


def hf_apply_rotary_pos_emb():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return apply_rotary_pos_emb


def compiled(function, compile_options):
    """torch.compile of `function`, a fresh static compilation (dynamo's caches reset, so that every
    shape is compiled for itself and no recompilation limit is reached)."""
    torch._dynamo.reset()
    return torch.compile(function, dynamic=False, **compile_options)


def rope_cases(ops, model, shape, dtype, device, compile_options):
    """Queries and keys as a LLaMA attention layer holds them after its projections,
    [batch, tokens, heads, head_dim] (contiguous), rotated for positions offset..offset+tokens-1:
    posenc in place and out of place (float32 tables), HF's apply_rotary_pos_emb (with
    unsqueeze_dim=2 for that layout; cos and sin [batch, tokens, head_dim] in the tensors' dtype,
    as LlamaRotaryEmbedding returns them, gathered from the same float32 tables) eager and
    compiled, and copy_ of the same bytes."""
    apply_rotary_pos_emb = hf_apply_rotary_pos_emb()
    q = torch.randn(shape.batch, shape.tokens, model.q_heads, model.head_dim, device=device).to(dtype)
    k = torch.randn(shape.batch, shape.tokens, model.kv_heads, model.head_dim, device=device).to(dtype)
    inv_freq, attention_factor = ops.rope_frequencies(model.head_dim, model.rope_theta)
    cos, sin = ops.rotary_tables(shape.offset + shape.tokens, inv_freq, float(attention_factor), device=device)
    rows = torch.arange(shape.offset, shape.offset + shape.tokens, device=device)
    hf_cos = torch.cat([cos, cos], -1)[rows].expand(shape.batch, -1, -1).contiguous().to(dtype)
    hf_sin = torch.cat([sin, sin], -1)[rows].expand(shape.batch, -1, -1).contiguous().to(dtype)
    nbytes = 2 * (q.nbytes + k.nbytes)
    expected = apply_rotary_pos_emb(q, k, hf_cos, hf_sin, unsqueeze_dim=2)
    bound = (rope_bound(q, dtype), rope_bound(k, dtype))

    q_inplace, k_inplace = q.clone(), k.clone()
    q_copy, k_copy = torch.empty_like(q), torch.empty_like(k)
    last = {}

    def posenc_qk():
        last["posenc_qk"] = ops.apply_rotary_qk(q, k, cos, sin, shape.offset)

    def posenc_qk_inplace():
        ops.apply_rotary_qk_(q_inplace, k_inplace, cos, sin, shape.offset)

    def hf_eager():
        last["hf_eager"] = apply_rotary_pos_emb(q, k, hf_cos, hf_sin, unsqueeze_dim=2)

    hf_function = compiled(apply_rotary_pos_emb, compile_options)

    def hf_compiled():
        last["hf_compiled"] = hf_function(q, k, hf_cos, hf_sin, unsqueeze_dim=2)

    def roofline_copy():
        q_copy.copy_(q)
        k_copy.copy_(k)

    family = "rope_qk"
    return [
        Case(family, "posenc_qk", posenc_qk, lambda: last["posenc_qk"], nbytes, expected, bound),
        Case(family, "posenc_qk_inplace", posenc_qk_inplace, lambda: (q_inplace, k_inplace), nbytes, expected, bound),
        Case(family, "hf_eager", hf_eager, lambda: last["hf_eager"], nbytes, expected, None),
        Case(family, "hf_compiled", hf_compiled, lambda: last["hf_compiled"], nbytes, expected, bound),
        Case(family, "roofline_copy", roofline_copy, lambda: (q_copy, k_copy), nbytes, (q, k), None),
    ]


def add_table_cases(ops, model, shape, dtype, device):
    """Activations [batch, tokens, hidden] plus the float32 sinusoidal table's rows
    offset..offset+tokens-1: posenc out of place and in place, the eager formulation
    ((x + rows).to(dtype), rows from the same table) and copy_ of the same bytes."""
    x = torch.randn(shape.batch, shape.tokens, model.hidden, device=device).to(dtype)
    table = ops.sinusoidal_table(shape.offset + shape.tokens, model.hidden, device=device)
    nbytes = 2 * x.nbytes

    def eager_add():
        return (x + table[shape.offset:shape.offset + shape.tokens]).to(dtype)

    expected = eager_add()
    bound = sum_bound(expected, dtype)
    x_inplace, x_copy = x.clone(), torch.empty_like(x)
    last = {}

    def posenc_add():
        last["posenc_add"] = ops.add_position_table(x, table, shape.offset)

    def posenc_add_inplace():
        ops.add_position_table_(x_inplace, table, shape.offset)

    def eager():
        last["eager"] = eager_add()

    family = "add_table"
    return [
        Case(family, "posenc_add", posenc_add, lambda: (last["posenc_add"],), nbytes, (expected,), (bound,)),
        Case(family, "posenc_add_inplace", posenc_add_inplace, lambda: (x_inplace,), nbytes, (expected,), (bound,)),
        Case(family, "eager", eager, lambda: (last["eager"],), nbytes, (expected,), None),
        Case(family, "roofline_copy", lambda: x_copy.copy_(x), lambda: (x_copy,), nbytes, (x,), None),
    ]


def token_position_cases(ops, model, shape, dtype, device):
    """Token ids [batch, tokens] into a [vocab, hidden] embedding of `dtype`, plus the float32
    sinusoidal table's rows: posenc's fused operator, the eager formulation
    ((embedding(ids, weight) + rows).to(dtype)) and copy_ of the bytes an ideal kernel moves (the
    gathered rows read, the output written)."""
    weight = torch.randn(model.vocab, model.hidden, device=device).to(dtype)
    ids = torch.randint(0, model.vocab, (shape.batch, shape.tokens), device=device)
    table = ops.sinusoidal_table(shape.offset + shape.tokens, model.hidden, device=device)
    gathered = torch.randn(shape.batch, shape.tokens, model.hidden, device=device).to(dtype)
    nbytes = 2 * gathered.nbytes

    def eager_embedding():
        return (torch.nn.functional.embedding(ids, weight) + table[shape.offset:shape.offset + shape.tokens]).to(dtype)

    expected = eager_embedding()
    out = torch.empty_like(gathered)
    last = {}

    def posenc_fused():
        last["posenc_fused"] = ops.token_and_position_embedding(ids, weight, table, shape.offset)[0]

    def eager():
        last["eager"] = eager_embedding()

    family = "token_position"
    return [
        Case(family, "posenc_fused", posenc_fused, lambda: (last["posenc_fused"],), nbytes, (expected,), (sum_bound(expected, dtype),)),
        Case(family, "eager", eager, lambda: (last["eager"],), nbytes, (expected,), None),
        Case(family, "roofline_copy", lambda: out.copy_(gathered), lambda: (out,), nbytes, (gathered,), None),
    ]


@dataclasses.dataclass(frozen=True)
class KvShape:
    """A packed batch for the fused KV-cache write: `prefill` tokens of one sequence from position 0
    and `decode` sequences of one token each at position `past` (vLLM's mixed batches)."""
    name: str
    prefill: int
    decode: int
    past: int
    large: bool  # the roofline target (<= KV_ROOFLINE x copy_) applies


KV_SHAPES = [
    KvShape("decode_b1", prefill=0, decode=1, past=4095, large=False),
    KvShape("decode_b64", prefill=0, decode=64, past=4095, large=False),
    KvShape("decode_b256", prefill=0, decode=256, past=4095, large=False),
    KvShape("mixed_4096", prefill=3840, decode=256, past=4095, large=True),
]
KV_BLOCK = 16  # tokens per page of the paged cache
# The targets of the fused write (issue 64): ahead of posenc's rotation followed by the cache
# write by KV_SPEEDUP at every shape, and within KV_ROOFLINE x copy_ of its bytes at the large ones.
KV_SPEEDUP = 1.3
KV_ROOFLINE = 1.2


def kv_cache_cases(ops, model, shape, dtype, device, compile_options):
    """One layer's decode (or mixed) step of a paged-cache server: q [T, 32, 128], k and v
    [T, 8, 128] as the projections leave them, each token written to its slot of a paged cache
    (pages of KV_BLOCK tokens at random blocks of a pool twice the pages used). Cases: posenc's fused rotary_paged_kv_cache_; (a) posenc's apply_rotary_qk_
    then index_copy_ of k and v into the flattened caches; (b) transformers' apply_rotary_pos_emb
    (cos/sin [T, D] in the dtype, gathered beforehand as LlamaRotaryEmbedding returns them) then the
    same index_copy_, eager and compiled; (c) copy_ of the bytes the step reads and writes (q read
    and written, k and v read, their cache rows written)."""
    apply_rotary_pos_emb = hf_apply_rotary_pos_emb()
    tokens = shape.prefill + shape.decode
    generator = torch.Generator().manual_seed(tokens)
    q = torch.randn(tokens, model.q_heads, model.head_dim, generator=generator).to(device, dtype)
    k = torch.randn(tokens, model.kv_heads, model.head_dim, generator=generator).to(device, dtype)
    v = torch.randn(tokens, model.kv_heads, model.head_dim, generator=generator).to(device, dtype)
    positions = torch.cat([torch.arange(shape.prefill), torch.full((shape.decode,), shape.past)])
    sequence = torch.cat([torch.zeros(shape.prefill, dtype=torch.long), 1 + torch.arange(shape.decode)])
    # the pages the tokens touch, each at a random block of a pool twice their number (a server's
    # cache holds other sequences' pages between them)
    pages, page = torch.unique(sequence * (shape.past + KV_BLOCK) + positions // KV_BLOCK, return_inverse=True)
    blocks = 2 * pages.numel()
    block_of_page = torch.randperm(blocks, generator=generator)[:pages.numel()]
    slots = (block_of_page[page] * KV_BLOCK + positions % KV_BLOCK).to(device)
    positions = positions.to(device)
    k_cache = torch.zeros(blocks, KV_BLOCK, model.kv_heads, model.head_dim, device=device, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    inv_freq, attention_factor = ops.rope_frequencies(model.head_dim, model.rope_theta)
    cos, sin = ops.rotary_tables(shape.past + 1, inv_freq, float(attention_factor), device=device)
    hf_cos = torch.cat([cos, cos], -1)[positions].to(dtype)
    hf_sin = torch.cat([sin, sin], -1)[positions].to(dtype)
    q_rot, k_rot = apply_rotary_pos_emb(q, k, hf_cos, hf_sin, unsqueeze_dim=1)
    flat = (-1, model.kv_heads, model.head_dim)
    expected_k = k_cache.clone()
    expected_k.view(flat).index_copy_(0, slots, k_rot)
    expected_v = v_cache.clone()
    expected_v.view(flat).index_copy_(0, slots, v)
    cache_bound = torch.zeros_like(expected_k, dtype=torch.float64)
    cache_bound.view(flat).index_copy_(0, slots, rope_bound(k, dtype))
    bound = (rope_bound(q, dtype), cache_bound, torch.zeros_like(cache_bound))
    nbytes = 2 * q.nbytes + 2 * k.nbytes + 2 * v.nbytes

    state = {name: q.clone() for name in ("fused", "split", "hf", "compiled")}
    caches = {name: (k_cache.clone(), v_cache.clone()) for name in ("fused", "split", "hf", "compiled")}
    k_work = k.clone()

    def fused():
        kc, vc = caches["fused"]
        ops.rotary_paged_kv_cache_(state["fused"], k, v, kc, vc, cos, sin, positions, slots)

    def split():
        kc, vc = caches["split"]
        ops.apply_rotary_qk_(state["split"].unsqueeze(0), k_work.unsqueeze(0), cos, sin, 0, positions)
        kc.view(flat).index_copy_(0, slots, k_work)
        vc.view(flat).index_copy_(0, slots, v)

    def hf_step(q_in, k_cache_, v_cache_):
        q_out, k_out = apply_rotary_pos_emb(q_in, k, hf_cos, hf_sin, unsqueeze_dim=1)
        k_cache_.view(flat).index_copy_(0, slots, k_out)
        v_cache_.view(flat).index_copy_(0, slots, v)
        return q_out

    def hf_eager():
        state["hf"] = hf_step(q, *caches["hf"])

    hf_function = compiled(hf_step, compile_options)

    def hf_compiled():
        state["compiled"] = hf_function(q, *caches["compiled"])

    q_copy, k_rows, v_rows = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def roofline_copy():
        q_copy.copy_(q)
        k_rows.copy_(k)
        v_rows.copy_(v)

    def outputs(name):
        return lambda: (state[name], *caches[name])

    family = "kv_cache"
    expected = (q_rot, expected_k, expected_v)
    # (the split case rotates its own k again on every call, so it is checked after its first
    # call only: check() runs each case once on fresh inputs)
    return [
        Case(family, "posenc_fused", fused, outputs("fused"), nbytes, expected, bound),
        Case(family, "posenc_rotate_then_write", split, outputs("split"), nbytes, expected, bound),
        Case(family, "hf_eager", hf_eager, outputs("hf"), nbytes, expected, None),
        Case(family, "hf_compiled", hf_compiled, outputs("compiled"), nbytes, expected, bound),
        Case(family, "roofline_copy", roofline_copy, lambda: (q_copy, k_rows, v_rows), nbytes, (q, k, v), None),
    ]


def run_kv_cache(ops, device="cuda", model=LLAMA3_8B, shapes=KV_SHAPES, dtypes=DTYPES, samples=30,
                 compile_options=None, prefix="gpu_llama3_8b"):
    """The fused KV-cache write's cases at every shape: rows, checks and its targets (KV_SPEEDUP
    over posenc's rotation then write everywhere, KV_ROOFLINE x copy_ at the large shapes)."""
    compile_options = compile_options or {}
    rows, checks = [], []
    for shape in shapes:
        for dtype_name, dtype in dtypes.items():
            cases = kv_cache_cases(ops, model, shape, dtype, device, compile_options)
            measure(cases, shape, shape.prefill == 0, dtype_name, device, samples, prefix, rows, checks)
            del cases
    by_key = {(r["case"], r["shape"], r["dtype"]): r["real_time_us"] for r in rows}
    result = []
    for row in (r for r in rows if r["case"] == "posenc_fused"):
        name = f"kv_cache/posenc_fused/{row['shape']}/{row['dtype']}"
        speedup = by_key[("posenc_rotate_then_write", row["shape"], row["dtype"])] / row["real_time_us"]
        result.append({"target": f">= {KV_SPEEDUP:g}x posenc's rotation then write", "case": name, "value": speedup,
                       "shown": f"{speedup:.2f}x", "met": speedup >= KV_SPEEDUP})
        if row["large"]:
            ratio = row["real_time_us"] / by_key[("roofline_copy", row["shape"], row["dtype"])]
            result.append({"target": f"<= {KV_ROOFLINE:g}x copy_ of its bytes", "case": name, "value": ratio,
                           "shown": f"{ratio:.2f}x", "met": ratio <= KV_ROOFLINE})
    return {"benchmarks": rows, "checks": checks, "targets": result}


def check(case):
    """Runs the case once and compares what it produced with its expected tensors: the largest
    |difference| / bound (<= 1 passes; exact cases pass only at 0)."""
    with torch.no_grad():
        case.call()
    worst = 0.0
    for index, (actual, expected) in enumerate(zip(case.outputs(), case.expected)):
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            return math.inf
        difference = (actual.double() - expected.double()).abs()
        if case.bound is None:
            worst = max(worst, math.inf if difference.max().item() > 0 else 0.0)
        else:
            bound = case.bound[index].clamp_min(torch.finfo(torch.float64).tiny)
            worst = max(worst, (difference / bound).max().item())
    return worst


def synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_us(call, device, samples, warmup=3, sample_us=200.0, max_calls=100):
    """Median time per call in microseconds: CUDA events on a GPU, the wall clock elsewhere."""
    cuda = torch.device(device).type == "cuda"

    def timed(calls):
        synchronize(device)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            begin = time.perf_counter()
        for _ in range(calls):
            call()
        if cuda:
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / calls
        return (time.perf_counter() - begin) * 1e6 / calls

    with torch.no_grad():
        for _ in range(warmup):
            call()
        calls = max(1, min(max_calls, math.ceil(sample_us / max(timed(1), 1e-3))))
        return statistics.median(timed(calls) for _ in range(samples))


def case_sets(ops, model, shape, dtype, device, compile_options):
    yield rope_cases(ops, model, shape, dtype, device, compile_options)
    yield add_table_cases(ops, model, shape, dtype, device)
    yield token_position_cases(ops, model, shape, dtype, device)


def run(ops, device="cuda", model=LLAMA3_8B, shapes=LLAMA3_8B_SHAPES, dtypes=DTYPES, samples=30,
        compile_options=None, prefix="gpu_llama3_8b"):
    """Checks and times every case; returns the rows (bench/python_benchmark.py's format: name,
    real_time_us, gbps), the checks and the targets."""
    compile_options = compile_options or {}
    rows, checks = [], []
    for shape in shapes:
        for dtype_name, dtype in dtypes.items():
            for cases in case_sets(ops, model, shape, dtype, device, compile_options):
                measure(cases, shape, shape.tokens == 1, dtype_name, device, samples, prefix, rows, checks)
                del cases
    return {"benchmarks": rows, "checks": checks, "targets": targets(rows)}


def measure(cases, shape, decode, dtype_name, device, samples, prefix, rows, checks):
    """Checks and times each case of one case set, appending its row and its check."""
    for case in cases:
        tag = f"{case.family}/{case.name}/{shape.name}/{dtype_name}"
        error = check(case)
        checks.append({"name": tag, "error_over_bound": error, "passed": error <= 1.0})
        us = time_us(case.call, device, samples)
        rows.append({"name": f"{prefix}_{tag}", "family": case.family, "case": case.name, "shape": shape.name,
                     "large": shape.large, "decode": decode, "dtype": dtype_name,
                     "real_time_us": us, "gbps": case.nbytes / us / 1e3})


def profile(ops, device="cuda", model=LLAMA3_8B, shapes=LLAMA3_8B_SHAPES, dtypes=DTYPES):
    """Runs each posenc case and copy_ once at the large shapes, each between cudaProfilerStart and
    cudaProfilerStop after a warm-up call, for Nsight Compute (scripts/gpu_check.sh's profile step:
    ncu --profile-from-start off). Returns the profiled cases in the order their kernels ran."""
    profiler = torch.cuda.profiler if torch.device(device).type == "cuda" else None
    profiled = []
    for shape in (s for s in shapes if s.large):
        for dtype_name, dtype in dtypes.items():
            for cases in case_sets(ops, model, shape, dtype, device, {}):
                for case in cases:
                    if not (case.name.startswith("posenc") or case.name == "roofline_copy"):
                        continue
                    case.call()
                    synchronize(device)
                    if profiler:
                        profiler.start()
                    case.call()
                    synchronize(device)
                    if profiler:
                        profiler.stop()
                    profiled.append(f"{case.family}/{case.name}/{shape.name}/{dtype_name}")
                del cases
    return profiled


def targets(rows):
    """Each target for each posenc case it applies to, met or missed."""
    by_key = {(r["family"], r["case"], r["shape"], r["dtype"]): r for r in rows}
    result = []
    for row in rows:
        if not row["case"].startswith("posenc"):
            continue
        key = (row["family"], row["shape"], row["dtype"])
        name = f"{row['family']}/{row['case']}/{row['shape']}/{row['dtype']}"
        if row["large"]:
            copy = by_key[(key[0], "roofline_copy", key[1], key[2])]["real_time_us"]
            fraction = copy / row["real_time_us"]
            result.append({"target": f">= {COPY_FRACTION:.0%} of copy_ bandwidth", "case": name, "value": fraction,
                           "shown": f"{fraction:.0%}", "met": fraction >= COPY_FRACTION})
        if row["decode"]:
            result.append({"target": f"decode call <= {DECODE_US:g} us", "case": name, "value": row["real_time_us"],
                           "shown": f"{row['real_time_us']:.2f} us", "met": row["real_time_us"] <= DECODE_US})
        if row["family"] == "rope_qk":
            compiled_us = by_key[(key[0], "hf_compiled", key[1], key[2])]["real_time_us"]
            speedup = compiled_us / row["real_time_us"]
            result.append({"target": "ahead of torch.compile (HF)", "case": name, "value": speedup,
                           "shown": f"{speedup:.2f}x", "met": speedup > 1.0})
    return result


def markdown(report):
    """The report as Markdown: the environment, the checks, one table per family, the targets."""
    lines = [f"Device: {report.get('device', '?')}; torch {report.get('torch', '?')}, transformers "
             f"{report.get('transformers', '?')}. Times are medians per call (CUDA events); GB/s counts the bytes an "
             "ideal kernel reads and writes; '% copy' is copy_'s time over the case's for the same bytes.", ""]
    failed = [c for c in report["checks"] if not c["passed"]]
    lines.append(f"Results checked against the eager formulations before timing: {len(report['checks']) - len(failed)} "
                 f"of {len(report['checks'])} agree within their bounds.")
    lines += [f"- MISMATCH {c['name']}: error/bound {c['error_over_bound']:.3g}" for c in failed]
    rows = report["benchmarks"]
    copy = {(r["family"], r["shape"], r["dtype"]): r["real_time_us"] for r in rows if r["case"] == "roofline_copy"}
    for family in dict.fromkeys(r["family"] for r in rows):
        lines += ["", f"### {family}", "", "| shape | dtype | case | time | GB/s | % copy |", "|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["family"] == family):
            share = copy[(r["family"], r["shape"], r["dtype"])] / r["real_time_us"]
            lines.append(f"| {r['shape']} | {r['dtype']} | {r['case']} | {r['real_time_us']:.2f} us | {r['gbps']:.0f} | {share:.0%} |")
    met = sum(t["met"] for t in report["targets"])
    lines += ["", f"### Targets: {met} of {len(report['targets'])} met", "", "| target | case | measured | |", "|---|---|---|---|"]
    lines += [f"| {t['target']} | {t['case']} | {t['shown']} | {'met' if t['met'] else 'MISSED'} |" for t in report["targets"]]
    return "\n".join(lines) + "\n"


def environment(device):
    info = {"torch": torch.__version__}
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if torch.device(device).type == "cuda":
        info["device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    else:
        info["device"] = "cpu"
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True, help="libposenc.so")
    parser.add_argument("--output", required=True, help="the JSON report")
    parser.add_argument("--markdown", help="the report as Markdown too")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--device", default="cuda", help="cuda (every family), or cpu (the KV-cache family alone)")
    parser.add_argument("--kv-cache-only", action="store_true", help="only the fused KV-cache write's cases")
    parser.add_argument("--profile", action="store_true",
                        help="run each posenc case and copy_ once at the large shapes for a profiler "
                             "(ncu --profile-from-start off); --output lists them in the order they ran")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("cuda_benchmark: no CUDA device", file=sys.stderr)
        return 2
    torch.ops.load_library(args.library)
    if args.profile:
        with open(args.output, "w") as out:
            json.dump(profile(torch.ops.posenc, "cuda"), out, indent=1)
        return 0
    report = environment(args.device)
    prefix = "gpu_llama3_8b" if args.device == "cuda" else "cpu_llama3_8b"
    parts = [run_kv_cache(torch.ops.posenc, args.device, samples=args.samples, prefix=prefix)]
    if args.device == "cuda" and not args.kv_cache_only:
        parts.insert(0, run(torch.ops.posenc, "cuda", samples=args.samples))
    report.update({key: [item for part in parts for item in part[key]] for key in ("benchmarks", "checks", "targets")})
    with open(args.output, "w") as out:
        json.dump(report, out, indent=1)
    text = markdown(report)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text)
    print(text)
    return 0 if all(c["passed"] for c in report["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
