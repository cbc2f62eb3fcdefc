"""posenc's Python front doors under bad input, threads and failure (issue 61): `import posenc`
with POSENC_LIBRARY naming what it must not load, the transformers drop-in given what is not a
model and patched from many threads, and the ONNX export (Python and `posenc export --format
onnx`) failing, or given what it cannot export. Each case is a clean error that names the problem
and what to do, never an abort, a silent wrong value or a lost file.

`import posenc` runs in a fresh process per case (what it refuses is what would abort a process,
or a library loaded once per process).
"""

import os
import pickle
import shutil
import subprocess
import sys
import threading

import pytest
import torch

from conftest import TORCH_VERSION

PYTHON_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, PYTHON_DIR)


# --- import posenc: POSENC_LIBRARY ---------------------------------------------------------------


@pytest.fixture(scope="module")
def library(posenc_ops):  # (the fixture checks POSENC_LIBRARY is set)
    return os.path.realpath(os.environ["POSENC_LIBRARY"])


def import_posenc(library, before="", io_library=None):
    """`import posenc` in a fresh process with POSENC_LIBRARY=library, after the code `before`: what
    it printed, "imported ..." or the exception's type and message."""
    code = f"""
import os, sys, torch
sys.path.insert(0, {PYTHON_DIR!r})
{before}
try:
    import posenc
except BaseException as error:
    print(f"{{type(error).__name__}}: {{error}}")
    sys.exit(3)
print("imported", posenc.ops.sinusoidal_table(2, 4).shape == (2, 4))
"""
    env = {**os.environ, "POSENC_LIBRARY": str(library)}
    env.pop("POSENC_IO_LIBRARY", None)
    if io_library:
        env["POSENC_IO_LIBRARY"] = io_library
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    # An abort (a second registration of posenc's operators) is a negative code, not a message.
    assert result.returncode in (0, 3), f"import posenc ended with {result.returncode}:\n{result.stderr[-3000:]}"
    return result.stdout.strip().splitlines()[-1]


def test_a_second_libposenc_is_refused_before_it_is_loaded(library, tmp_path):
    """A copy of libposenc (another file) after one is loaded: an ImportError naming both, not the
    abort of the process that registering the operators twice is."""
    copy = tmp_path / "copy" / "libposenc.so"
    copy.parent.mkdir()
    shutil.copy(library, copy)
    for first, second in ((library, copy), (copy, library)):
        said = import_posenc(second, before=f"torch.ops.load_library({str(first)!r})")
        assert said.startswith(f"ImportError: posenc: POSENC_LIBRARY={second}: posenc's operators are registered "
                               f"in this process already by {first}"), said
        assert "would register them again, which aborts the process" in said and "fresh process" in said, said
    # The one loaded, named again (through a link too), is no second library.
    link = tmp_path / "link" / "libposenc.so"
    link.parent.mkdir()
    link.symlink_to(library)
    for named in (library, link):
        assert import_posenc(named, before=f"torch.ops.load_library({library!r})") == "imported True"
    assert import_posenc(copy) == "imported True"  # (alone in its process, a copy is a libposenc)


def mapped_library(prefix):
    """The path of a system library this process has loaded (libm, libc)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(None, 5)[-1].strip()
            if os.path.basename(path).startswith(prefix) and os.path.isfile(path):
                return path
    pytest.skip(f"no {prefix}* is mapped in this process")


def test_posenc_library_naming_no_libposenc_says_so(library, tmp_path):
    """POSENC_LIBRARY naming no file, a folder, a text file or another library: an ImportError
    naming POSENC_LIBRARY, the path and what to do (not "Could not load this library" or "operator
    ... does not exist")."""
    text = tmp_path / "libposenc.so"
    text.write_text("not a library\n")
    io_library = os.path.join(os.path.dirname(library), "io", "libposenc_io.so")
    cases = {
        "missing": (tmp_path / "missing.so", "names no library"),
        "folder": (tmp_path, "names no library"),
        "text file": (text, "could not be loaded"),
        "libm": (mapped_library("libm.so"), "registered no posenc operator"),
        "libc": (mapped_library("libc.so"), "registered no posenc operator"),
    }
    if os.path.exists(io_library):
        cases["libposenc_io"] = (io_library, "is posenc's config reader (libposenc_io), not its operator library")
    for case, (path, message) in cases.items():
        said = import_posenc(path)
        assert said.startswith(f"ImportError: posenc: POSENC_LIBRARY={path}"), (case, said)
        assert message in said, (case, said)
        if case == "libposenc_io":
            assert "point POSENC_LIBRARY at the libposenc.so of the same build" in said, said
        else:
            assert "set POSENC_LIBRARY to the libposenc.so of a posenc build against this torch" in said, (case, said)


# --- posenc.integrations.transformers ------------------------------------------------------------

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)


@pytest.fixture(scope="module")
def hf(posenc_ops):
    pytest.importorskip("transformers")
    if TORCH_VERSION < (2, 4):
        pytest.skip("transformers 5 needs torch >= 2.4")
    import posenc.integrations.transformers as integration

    return integration


def small_model(model_type, seed=0, **extra):
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **{**SMALL, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def test_remove_and_is_patched_refuse_what_is_not_a_model(hf):
    for given in (None, "model", 3):
        for function in (hf.remove_posenc_rope, hf.is_patched):
            with pytest.raises(TypeError, match=f"posenc: {function.__name__} takes a model \\(a torch.nn.Module\\), "
                               f"but got {type(given).__name__}"):
                function(given)


def test_a_model_type_that_is_no_string_is_refused_unchanged(hf):
    model = small_model("llama")
    original = type(model.model.layers[0].self_attn)
    for model_type in (["llama"], {"llama": 1}, 7):
        model.config.model_type = model_type
        with pytest.raises(ValueError, match="config.model_type, which must be a string .* but this LlamaForCausalLM's "
                           f"is {type(model_type).__name__}"):
            hf.apply_posenc_rope(model)
        assert not hf.is_patched(model) and type(model.model.layers[0].self_attn) is original


def test_threads_patching_fresh_models_share_one_class(hf, monkeypatch):
    """Eight threads patching eight fresh models at once, each time the first to patch their model
    type in the process: one patched module and class, the one pickle finds by name. The window
    between looking for the patched module and making it is held open (each thread waits there
    for the others, or half a second) so that every thread that looked finds it empty."""
    import types

    models = [small_model("mistral", seed=i) for i in range(8)]
    name = hf.PATCHED_MODULE_PREFIX + "modeling_mistral"
    for trial in range(2):
        sys.modules.pop(name, None)  # (no patched module or class yet)
        for model in models:
            hf.remove_posenc_rope(model)
        start, window = threading.Barrier(len(models)), threading.Barrier(len(models), timeout=0.5)

        def module_type(*args):
            try:
                window.wait()
            except threading.BrokenBarrierError:  # (threads that wait their turn never meet here)
                pass
            return types.ModuleType(*args)

        monkeypatch.setattr(hf, "types", types.SimpleNamespace(**{**vars(types), "ModuleType": module_type}))
        errors = []

        def patch(model):
            try:
                start.wait()
                hf.apply_posenc_rope(model)
            except BaseException as error:  # noqa: B036  (reported below)
                errors.append(error)

        threads = [threading.Thread(target=patch, args=(model,)) for model in models]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        monkeypatch.undo()
        assert not errors, errors
        classes = {type(layer.self_attn) for model in models for layer in model.model.layers}
        assert classes == {sys.modules[name].PosencMistralAttention}, (trial, classes)
    for model in models:
        assert hf.is_patched(pickle.loads(pickle.dumps(model)))


def test_cos_and_sin_of_odd_width_are_refused(hf):
    """cos/sin of odd width R: transformers' Phi-3 rotation turns R channels (rotate_half splits
    them 2 + 3); posenc turns pairs, so it refuses rather than turn R - 1."""
    model = hf.apply_posenc_rope(small_model("phi3", partial_rotary_factor=0.5))
    attention = model.model.layers[0].self_attn
    hidden = torch.randn(1, 6, SMALL["hidden_size"])
    cos, sin = torch.randn(1, 6, 5), torch.randn(1, 6, 5)
    with torch.no_grad(), pytest.raises(ValueError, match="cos and sin must have an even width R .* but got 5"):
        attention(hidden, (cos, sin), None)
    import importlib

    q, k = torch.randn(1, 4, 6, 5), torch.randn(1, 2, 6, 5)
    for folder in ("llama", "phi3", "cohere", "glm"):
        modeling = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        with pytest.raises(ValueError, match="must have an even width"):
            hf.replacement_for(modeling.apply_rotary_pos_emb)(q, k, cos, sin)


# --- posenc.onnx ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_export(posenc_ops):
    if TORCH_VERSION < (2, 9):
        pytest.skip("torch.onnx.export(dynamo=True) with opset 23 needs torch >= 2.9")
    pytest.importorskip("onnxscript")
    import posenc.onnx

    return posenc.onnx


def failing_save(self, destination, **options):
    """ONNXProgram.save that fails halfway (a full disk): part of the model written, then an error."""
    with open(destination, "wb") as f:
        f.write(b"\x08\x0a")
    raise OSError(28, "No space left on device (a test's failure)")


PREVIOUS = b"the previous model, which a failed export must leave as it was\n"


def test_a_failed_export_leaves_the_file_as_it_was(onnx_export, tmp_path, monkeypatch):
    import posenc

    rope = posenc.nn.RotaryEmbedding(64, 128).eval()
    path = tmp_path / "rope.onnx"
    path.write_bytes(PREVIOUS)
    with monkeypatch.context() as patch:
        patch.setattr(torch.onnx.ONNXProgram, "save", failing_save)
        with pytest.raises(OSError, match="No space left on device"):
            onnx_export.export(rope, (torch.randn(1, 4, 2, 64),), str(path))
    assert path.read_bytes() == PREVIOUS and os.listdir(tmp_path) == ["rope.onnx"]
    # A refused export leaves it too; a successful one replaces it (its external data beside it).
    with pytest.raises(onnx_export.ExportUnsupported):
        onnx_export.export(posenc.nn.RotaryEmbedding(64, 128, beyond_max_len="extrapolate").eval(),
                           (torch.randn(1, 4, 2, 64),), str(path))
    assert path.read_bytes() == PREVIOUS and os.listdir(tmp_path) == ["rope.onnx"]
    onnx_export.export(rope, (torch.randn(1, 4, 2, 64),), path)
    assert sorted(os.listdir(tmp_path)) == ["rope.onnx", "rope.onnx.data"]
    onnxruntime = pytest.importorskip("onnxruntime")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(1, 4, 2, 64)
    out = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    assert (out - rope(x)).abs().max() <= 2.0**-22 * x.abs().max()  # (test_onnx.py's tolerance)


def cli_environment(tmp_path, fail_saving=False):
    """The environment `posenc export --format onnx` runs posenc.onnx in (this interpreter, this
    source tree); fail_saving: its ONNXProgram.save fails halfway (a sitecustomize)."""
    paths = [PYTHON_DIR, os.environ.get("PYTHONPATH", "")]
    if fail_saving:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "import torch.onnx\n\n\n"
            "def save(self, destination, **options):\n"
            "    with open(destination, 'wb') as f:\n"
            "        f.write(b'\\x08\\x0a')\n"
            "    raise OSError(28, \"No space left on device (a test's failure)\")\n\n\n"
            "torch.onnx.ONNXProgram.save = save\n")
        paths.insert(0, str(site))
    return dict(os.environ, POSENC_PYTHON=sys.executable, PYTHONPATH=os.pathsep.join(paths))


def test_a_failed_cli_export_leaves_the_file_as_it_was(onnx_export, posenc_cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    path = out / "table.onnx"
    path.write_bytes(PREVIOUS)
    arguments = [posenc_cli, "export", "--d-model", "8", "--max-len", "10", "--format", "onnx", "-o", str(path)]
    failed = subprocess.run(arguments, capture_output=True, text=True, env=cli_environment(tmp_path, True), timeout=600)
    assert failed.returncode > 0 and "No space left on device" in failed.stderr, failed.stderr[-3000:]
    assert path.read_bytes() == PREVIOUS and os.listdir(out) == ["table.onnx"]
    written = subprocess.run(arguments, capture_output=True, text=True, env=cli_environment(tmp_path), timeout=600)
    assert written.returncode == 0 and "wrote" in written.stdout, written.stderr[-3000:]
    assert path.read_bytes() != PREVIOUS and os.listdir(out) == ["table.onnx"]


LONGROPE = dict(rope_type="longrope", original_max_position_embeddings=64, short_factor=[1.0] * 32,
                long_factor=[1.0 + i / 8 for i in range(32)])


@pytest.mark.parametrize("scaling", [dict(rope_type="dynamic", factor=2.0, max_position_embeddings=64), LONGROPE],
                         ids=["dynamic", "longrope"])
def test_length_dependent_rope_types_are_refused(onnx_export, tmp_path, scaling):
    """Dynamic NTK and LongRoPE switch their frequencies with each call's length: a graph of fixed
    tables would rotate every length with the example's, so the export is refused (as the docs
    say), whole or inside another module, and nothing is written."""
    import posenc

    rope = posenc.nn.RotaryEmbedding(64, 256, rope_scaling=scaling).eval()
    x = torch.randn(1, 8, 2, 64)
    past = "original_max_position_embeddings" if scaling["rope_type"] == "longrope" else "max_position_embeddings"
    for module, args in ((rope, (x,)), (onnx_export.Method(rope, "forward_qk"), (x, x))):
        with pytest.raises(onnx_export.ExportUnsupported,
                           match=f"\\(RotaryEmbedding, rope_type '{scaling['rope_type']}'\\) cannot be exported to "
                           f"ONNX: its frequencies depend on each call's length \\(they switch once a call passes "
                           f"{past}\\)"):
            onnx_export.export(module, args, str(tmp_path / "rope.onnx"),
                               dynamic_shapes=tuple({1: torch.export.Dim("length", min=1, max=256)} for _ in args))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("rope_type", ["dynamic", "longrope"])
def test_cli_refuses_length_dependent_rope_types(onnx_export, posenc_cli, tmp_path, rope_type):
    import json

    rope = {"rope_type": "dynamic", "factor": 2.0} if rope_type == "dynamic" else {
        "rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [1.0 + i / 8 for i in range(32)],
        "original_max_position_embeddings": 64}
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                                  "max_position_embeddings": 256, "rope_theta": 10000.0, "rope_scaling": rope}))
    path = tmp_path / "rope.onnx"
    result = subprocess.run([posenc_cli, "export", "--module", "rotary", "--hf-config", str(config), "--format", "onnx",
                             "-o", str(path)], capture_output=True, text=True, env=cli_environment(tmp_path),
                            timeout=600)
    assert result.returncode > 0, result.stdout + result.stderr[-3000:]
    assert f"rope_type '{rope_type}') cannot be exported to ONNX: its frequencies depend on each call's length" \
        in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "wrote" not in result.stdout and not path.exists()


def test_fractional_rotary_positions_are_refused_as_such(onnx_export):
    """Fractional positions: the refusal says so (not extrapolation, which was not asked for)."""
    import posenc

    rope = posenc.nn.RotaryEmbedding(64, 128).eval()
    positions = torch.arange(8, dtype=torch.float32) * 0.5
    with pytest.raises(onnx_export.ExportUnsupported, match="with fractional positions") as refused:
        onnx_export.export(onnx_export.Method(rope, "forward_positions"), (torch.randn(1, 8, 2, 64), positions))
    assert "extrapolate" not in str(refused.value) and "integer positions" in str(refused.value)
