"""posenc's front doors called from 8 Python threads at once (issue 61, item 3).

* Modules, operators and patched transformers models, each thread with options of its own: every
  result equals, bit for bit, what the same call gave single-threaded beforehand, and every error
  message equals its single-threaded message, which names the thread's own module or operator
  (posenc names the caller through a thread-local scope: a message naming another thread's module
  would mean the scope leaked across threads). Threads also build modules with fresh options on
  every iteration, so that the option-text cache of the rotary operators (256 entries, cleared when
  full) is filled and cleared while other threads read it.
* The transformers drop-in: 8 threads patching 8 fresh models at once give one patched class per
  attention class (an unlocked check-then-create can make two, and the model holding the orphan
  then fails to pickle) and outputs equal to a model patched single-threaded.
* The option-text cache stays bounded: nothing exposes its size, so the process's resident memory
  is measured around 6,000 distinct option texts of ~20 KB each (an unbounded cache would keep
  well over 100 MiB of them; a bounded one 256).

Every wait is bounded: threads start together at a Barrier with a timeout, are joined with a
deadline and the test fails (rather than hangs) if one is still running.
"""

import gc
import json
import os
import pickle
import re
import sys
import threading
import time
import traceback

import pytest
import torch

from conftest import TORCH_VERSION

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

pytestmark = pytest.mark.skipif(TORCH_VERSION < (2, 4), reason="the concurrency tests run with torch >= 2.4 (the pip environment)")

THREADS = 8
ITERATIONS = 12
TIMEOUT = 60.0  # seconds a group of threads may take before the test fails
ROUNDS = 24  # rounds of 8 threads patching at once (without a lock, a round makes two classes now and then)


@pytest.fixture(scope="module")
def posenc(posenc_ops):  # the fixture checks POSENC_LIBRARY is set (the package reads it)
    import posenc as package

    return package


def run_threads(target, count=THREADS, timeout=TIMEOUT):
    """target(i) in `count` threads started together; their results, or the first failure with its
    thread's traceback. Fails if a thread is still running after `timeout` seconds."""
    barrier = threading.Barrier(count, timeout=timeout)
    results, failures = [None] * count, [None] * count

    def body(i):
        try:
            barrier.wait()
            results[i] = target(i)
        except BaseException:  # noqa: BLE001 (reported below)
            failures[i] = traceback.format_exc()

    threads = [threading.Thread(target=body, args=(i,), name=f"posenc-test-{i}", daemon=True) for i in range(count)]
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [thread.name for thread in threads if thread.is_alive()]
    assert not alive, f"threads still running after {timeout} s (a deadlock or a hang): {alive}"
    for i, failure in enumerate(failures):
        assert failure is None, f"thread {i} failed:\n{failure}"
    return results


def message_of(call):
    """The exception a call raises: its type and the first part of its message (without the C++
    backtrace), which must name the caller."""
    try:
        call()
    except (RuntimeError, ValueError) as error:
        return f"{type(error).__name__}: {str(error).split(chr(10) + 'Exception raised from')[0]}"
    raise AssertionError("the call did not raise")


# --- the workloads: one per thread, each with options of its own ---------------------------------

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
MODEL_TYPES = ["llama", "mistral", "qwen2", "qwen3", "olmo", "gpt_neox", "phi3", "cohere"]


def tiny(model_type, seed, **extra):
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **{**SMALL, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


class Workload:
    """What one thread calls: ``call(iteration)`` returns (tensors, messages). ``names``: the
    modules or operators its messages must name (and no other thread's)."""

    def __init__(self, names, call):
        self.names, self.call = names, call


def workloads(posenc, hf):
    nn, o = posenc.nn, posenc.ops
    g = torch.Generator().manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def cmo(module, options):
        return lambda: o.check_module_options(module, json.dumps(options))

    def model_call(index):
        model = hf.apply_posenc_rope(tiny(MODEL_TYPES[index], index))
        tokens = torch.randint(3, SMALL["vocab_size"], (2, 7 + index), generator=g)

        def run():
            with torch.no_grad():
                return model(tokens).logits

        return run

    result = []

    # 0: the sinusoidal encoding, concatenated channels, base 1000
    pe = nn.PositionalEncoding(24, 64, base=1000.0, layout="concatenated")
    x0, p0 = randn(2, 9, 24), torch.tensor([[0, 5, 63, 2, -1, 7, 8, 9, 1], [4, 4, 4, 4, 4, 4, 4, 4, 4]])
    m0 = model_call(0)
    result.append(Workload(["PositionalEncoding"], lambda it: (
        [pe(x0, 5), pe.forward_positions(x0, p0), nn.PositionalEncoding(8, 16 + it, base=100.0 + it).pe, m0()],
        [message_of(lambda: pe(x0, 60)), message_of(cmo("PositionalEncoding", {"d_model": 0, "max_len": 8}))])))

    # 1: a learned table
    torch.manual_seed(1)
    lpe = nn.LearnedPositionalEmbedding(16, 32, scale=2.0)
    x1 = randn(3, 4, 16)
    m1 = model_call(1)
    result.append(Workload(["LearnedPositionalEmbedding"], lambda it: (
        [lpe(x1, 3), lpe.forward_padded(x1, torch.tensor([[True, False, False, False]] * 3)), m1()],
        [message_of(lambda: lpe(x1, 30)), message_of(cmo("LearnedPositionalEmbedding", {"d_model": 4, "max_len": 8, "init_std": -1.0}))])))

    # 2: Llama 3.1's RoPE, heads first, GQA
    rope2 = nn.RotaryEmbedding(32, 128, base=500000.0, heads_first=True, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    q2, k2 = randn(1, 8, 10, 32), randn(1, 2, 10, 32)
    m2 = model_call(2)
    result.append(Workload(["RotaryEmbedding"], lambda it: (
        [*rope2.forward_qk(q2, k2, 100), nn.RotaryEmbedding(16, 64, base=2000.0 + it, heads_first=True).inv_freq, m2()],
        [message_of(lambda: rope2(q2, 120)), message_of(lambda: o.rotary_embedding_frequencies('{"max_len": 8}'))])))

    # 3: YaRN, a partial rotation
    rope3 = nn.RotaryEmbedding(64, 256, rotary_dim=32, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    x3 = randn(2, 6, 3, 64)
    m3 = model_call(3)
    result.append(Workload(["RotaryEmbedding"], lambda it: (
        [rope3(x3, 250), rope3.forward_positions(x3, torch.tensor([0, 255, 17, 3, 3, 9])), nn.RotaryEmbedding(32, 64, rotary_dim=16, base=3000.0 + it).cos, m3()],
        [message_of(lambda: rope3(x3[..., :16])), message_of(lambda: nn.RotaryEmbedding(64, 256, rotary_dim=66))])))

    # 4: dynamic NTK, interleaved pairs, past its original context (the frequencies of each call)
    rope4 = nn.RotaryEmbedding(8, 64, pairing="interleaved", rope_scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16})
    x4 = randn(1, 40, 2, 8)
    m4 = model_call(4)
    result.append(Workload(["RotaryEmbedding"], lambda it: (
        [rope4(x4), rope4(x4[:, :8], 3), nn.RotaryEmbedding(8, 32, pairing="interleaved", base=4000.0 + it).sin, m4()],
        [message_of(lambda: rope4.forward_positions(x4[:, :2], torch.tensor([0, 64]))),
         message_of(lambda: nn.RotaryEmbedding(8, 64, rope_scaling={"rope_type": "dynamic"}))])))

    # 5: attention biases
    alibi = nn.ALiBi(12, max_bias=16.0, first_head=2, heads=6)
    torch.manual_seed(5)
    t5 = nn.RelativePositionBias(6, num_buckets=16, max_distance=32)
    m5 = model_call(5)
    result.append(Workload(["ALiBi", "RelativePositionBias", "posenc::alibi_bias"], lambda it: (
        [alibi(7, 9), alibi.forward_causal(9, torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1]])), t5(5, 7, 2),
         nn.ALiBi(4 + it % 5).slopes, m5()],
        [message_of(lambda: alibi(0, 4)), message_of(cmo("ALiBi", {"num_heads": 4, "first_head": 4})),
         message_of(cmo("RelativePositionBias", {"num_heads": 2, "num_buckets": 64, "max_distance": 8}))])))

    # 6: query temperatures
    llama4 = nn.AttentionTemperature(floor_scale=4.0, attn_scale=0.25)
    ministral = nn.AttentionTemperature(floor_scale=16.0, attn_scale=0.5, form="ministral3", heads_first=True)
    q6 = randn(2, 5, 3, 8)
    m6 = model_call(6)
    result.append(Workload(["AttentionTemperature", "posenc::attention_temperature"], lambda it: (
        [llama4(q6, 100), ministral.forward_positions(q6.transpose(1, 2), torch.tensor([0, 15, 16, 1000, 2**40])),
         nn.AttentionTemperature(floor_scale=1.0 + it)(q6), m6()],
        [message_of(cmo("AttentionTemperature", {"floor_scale": 0.0})), message_of(lambda: o.attention_temperature(q6[0]))])))

    # 7: the operators directly
    tokens7, grid7 = torch.tensor([[0, 1, 1, 1, 1, 0, 2, 2, 2, 2, 0]]), torch.tensor([[1, 4, 4]])
    t7 = torch.tensor([0.0, 1.5, 999.0])
    m7 = model_call(7)
    result.append(Workload(["Timesteps", "TokenAndPositionEmbedding", "posenc::mrope_position_ids", "posenc::rope_frequencies"], lambda it: (
        [o.sinusoidal_table(32, 10, 500.0), *o.rope_frequencies(16, 10000.0, '{"rope_type": "linear", "factor": 3.0}'),
         *o.mrope_position_ids(tokens7, grid7, grid7), o.timestep_embedding(t7, 16, True), nn.Timesteps(8 + 2 * (it % 4))(t7), m7()],
        [message_of(cmo("Timesteps", {"embedding_dim": 8, "max_period": 0})),
         message_of(cmo("TokenAndPositionEmbedding", {"vocab_size": 4, "d_model": 4, "max_len": 4, "padding_idx": 9})),
         message_of(lambda: o.mrope_position_ids(tokens7, None, grid7)),
         message_of(lambda: o.rope_frequencies(16, 10000.0, '{"rope_type": "linear"}'))])))
    return result


def names_only_own(message, own, others):
    """The message names one of `own` and none of `others` (whole names)."""
    assert any(name in message for name in own), f"the message names none of {own}: {message}"
    for name in others:
        if name not in own and re.search(rf"(?<![A-Za-z_:]){re.escape(name)}(?![A-Za-z_])", message):
            raise AssertionError(f"the message names another thread's {name}: {message}")


def test_threads_get_their_own_results_and_messages(posenc):
    """8 threads, each with modules, operators and a patched model of its own options, called
    ITERATIONS times at once: results bit-identical to the single-threaded ones, messages equal to
    theirs and naming the thread's own module or operator."""
    import posenc.integrations.transformers as hf

    pytest.importorskip("transformers")
    work = workloads(posenc, hf)
    assert len(work) == THREADS
    expected = [[w.call(it) for it in range(ITERATIONS)] for w in work]  # single-threaded, first
    every_name = sorted({name for w in work for name in w.names})
    for w, runs in zip(work, expected):
        for message in runs[0][1]:
            names_only_own(message, w.names, every_name)

    def thread(i):
        for it in range(ITERATIONS):
            tensors, messages = work[i].call(it)
            want_tensors, want_messages = expected[i][it]
            assert len(tensors) == len(want_tensors)
            for k, (got, want) in enumerate(zip(tensors, want_tensors)):
                assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), \
                    f"thread {i} iteration {it}: result {k} differs from the single-threaded one"
            assert messages == want_messages, f"thread {i} iteration {it}: {messages} != {want_messages}"
        return ITERATIONS

    assert run_threads(thread) == [ITERATIONS] * THREADS


# --- the transformers drop-in: 8 threads patching 8 fresh models at once -------------------------


def test_threads_patching_fresh_models_share_one_class(posenc):
    """8 threads patch 8 fresh Llama models at once, several rounds, each round from a process
    state where the patched class was never made: every model's attention layers get the one
    class registered in posenc's module (so every model pickles), and each model's outputs equal
    those of the same model patched single-threaded."""
    import posenc.integrations.transformers as hf

    pytest.importorskip("transformers")
    models = [tiny("llama", 100 + i, num_hidden_layers=1) for i in range(THREADS)]
    tokens = torch.randint(3, SMALL["vocab_size"], (1, 6), generator=torch.Generator().manual_seed(7))
    expected = []
    for model in models:  # single-threaded: patched, its logits, unpatched again
        hf.apply_posenc_rope(model)
        with torch.no_grad():
            expected.append(model(tokens).logits)
        hf.remove_posenc_rope(model)
    module_name = hf.PATCHED_MODULE_PREFIX + "modeling_llama"
    interval = sys.getswitchinterval()
    try:
        for attempt in range(ROUNDS):
            for model in models:
                hf.remove_posenc_rope(model)
            sys.modules.pop(module_name, None)  # (as in a process that never patched a Llama model)
            sys.setswitchinterval(1e-6)  # threads switch as often as they can: races show
            try:
                run_threads(lambda i: hf.apply_posenc_rope(models[i]))
            finally:
                sys.setswitchinterval(interval)
            classes = {type(layer.self_attn) for model in models for layer in model.model.layers}
            assert len(classes) == 1, f"round {attempt}: {len(classes)} patched classes: {classes}"
            (patched,) = classes
            registered = getattr(sys.modules.get(module_name), "PosencLlamaAttention", None)
            assert patched is registered, f"round {attempt}: the models' class is not the one posenc's module holds"
            for i, model in enumerate(models):
                pickle.dumps(model)
                with torch.no_grad():
                    assert torch.equal(model(tokens).logits, expected[i]), f"round {attempt}: model {i} differs"
    finally:
        sys.setswitchinterval(interval)


# --- the option-text cache stays bounded --------------------------------------------------------


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_option_text_cache_stays_bounded(posenc):
    """6,000 distinct RotaryEmbedding option texts of ~20 KB (8 threads at once) through the
    operator that caches each text's reading: the resident memory grows by far less than the
    texts would hold (an unbounded cache: over 100 MiB), and each call's frequencies are right."""
    o = posenc.ops
    half = 1024
    factors = [1.0 + j / 4096 for j in range(half)]
    body = json.dumps({"head_dim": 2 * half, "max_len": 4, "freq_factors": factors})[:-1]
    exponents = torch.arange(0, 2 * half, 2, dtype=torch.float64) / (2 * half)
    divisors = torch.tensor(factors, dtype=torch.float64)

    def base(k):
        return 10000.0 + k * 1e-6

    def text(k):
        return f'{body}, "base": {base(k)!r}}}'

    def frequencies(start, count):
        for k in range(start, start + count):
            inv_freq, _, _ = o.rotary_embedding_frequencies(text(k))
            if k % 250 == 0:  # (against the float64 formula: base^(-2j / R) / factor_j)
                torch.testing.assert_close(inv_freq, torch.pow(base(k), -exponents) / divisors, rtol=1e-13, atol=0)
        return count

    frequencies(0, 600)  # the cache filled (and cleared) twice; the allocator warmed up
    run_threads(lambda i: frequencies(600 + 75 * i, 75))
    gc.collect()
    before = resident_bytes()
    per_thread = 750
    assert run_threads(lambda i: frequencies(10_000 + per_thread * i, per_thread)) == [per_thread] * THREADS
    gc.collect()
    grown = resident_bytes() - before
    texts = THREADS * per_thread * len(text(0))
    assert grown < 64 * 2**20, (f"resident memory grew by {grown / 2**20:.0f} MiB over {THREADS * per_thread} "
                                f"distinct option texts ({texts / 2**20:.0f} MiB of text): the cache is not bounded")
