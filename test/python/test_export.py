"""The TorchScript file written by ``posenc export`` (posenc::to_torchscript) in plain PyTorch, and
the TorchScript sources of the export (src/export/torchscript/*.py): their form, their scripting by
torch.jit.script, and the names the exported code uses."""

import ast
import math
import builtins
import importlib.util
import inspect
import itertools
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

import torch

from reference import ReferencePositionalEncoding, assert_within_bound, expected_exact, max_error

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def exported(posenc_cli, tmp_path_factory):
    """Exports for both layouts: {batch_first: path}."""
    files = {}
    for batch_first in (True, False):
        path = tmp_path_factory.mktemp("export") / f"pe_{batch_first}.pt"
        args = [posenc_cli, "export", "--max-len", "1024", "--d-model", "64", "-o", str(path)]
        if not batch_first:
            args.append("--seq-first")
        subprocess.run(args, check=True, capture_output=True)
        files[batch_first] = path
    return files


def test_loads_without_posenc(exported):
    """A fresh interpreter that never loads libposenc runs the file."""
    script = textwrap.dedent(f"""
        import torch
        module = torch.jit.load({str(exported[True])!r})
        y = module(torch.zeros(1, 3, 64), 5)
        assert y.shape == (1, 3, 64)
        assert not any("posenc" in name for name in torch.ops.loaded_libraries)
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0, 7, 1000])
def test_matches_double_precision_reference(exported, batch_first, dtype, offset):
    torch.manual_seed(0)
    module = torch.jit.load(str(exported[batch_first]))
    shape = (3, 24, 64) if batch_first else (24, 3, 64)
    x = torch.randn(shape).to(dtype)
    y = module(x, offset)
    assert y.dtype == dtype and y.shape == x.shape
    assert_within_bound(y, expected_exact(x, offset, batch_first), dtype)


@pytest.mark.parametrize("batch_first", [True, False])
def test_equals_python_module_given_the_same_table(exported, batch_first):
    """Same table, same arithmetic: bit-identical to a Python module holding posenc's table."""
    module = torch.jit.load(str(exported[batch_first]))
    python = ReferencePositionalEncoding(64, 1024, batch_first=batch_first)
    python.pe.copy_(module.pe)
    x = torch.randn(4, 10, 64) if batch_first else torch.randn(10, 4, 64)
    for dtype in DTYPES:
        assert torch.equal(module(x.to(dtype), 3), python(x.to(dtype), 3))


def test_state_dict_matches_python_reference_layout(exported):
    module = torch.jit.load(str(exported[True]))
    state = module.state_dict()
    assert list(state) == ["pe"]
    assert state["pe"].shape == (1, 1024, 64) and state["pe"].dtype == torch.float32
    python = ReferencePositionalEncoding(64, 1024)
    python.load_state_dict(state)  # the keys and shapes line up


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m(torch.zeros(5, 64)), "expected a 3-D input of shape [B, L, D] (batch_first=true), but got a 2-D tensor of shape [5, 64]"),
        (lambda m: m(torch.zeros(1, 5, 32)), "expected the last dimension of the input to be d_model = 64, but got 32"),
        (lambda m: m(torch.zeros(1, 5, 64, dtype=torch.long)), "expected a floating-point input (float16, bfloat16, float32 or float64), but got Long"),
        (lambda m: m(torch.zeros(1, 5, 64), -1), "offset must be >= 0, but got -1"),
        (lambda m: m(torch.zeros(1, 5, 64), 1020), "offset + L <= max_len (1024), but got L = 5 and offset = 1020 (offset + L = 1025)"),
        (lambda m: m(torch.zeros(1, 5, 64, device="meta")), "expected the input on the device of the encoding table (cpu), but got an input on meta"),
    ],
)
def test_raises_the_modules_errors(exported, call, message):
    module = torch.jit.load(str(exported[True]))
    with pytest.raises(torch.jit.Error) as error:
        call(module)
    assert message in str(error.value)


def test_report_errors_against_both_references(exported, report_dir):
    """Measures, at several positions, the error of posenc's export and of a table built in
    float32 (as most Python code does), both against the float64 formula."""
    module = torch.jit.load(str(exported[True]))
    float32_python = ReferencePositionalEncoding(64, 1024, table_dtype=torch.float32)
    lines = ["| positions | posenc (float32 table from float64) | Python table built in float32 |", "|---|---|---|"]
    for offset in (0, 100, 500, 1000):
        x = torch.zeros(1, 24, 64)
        exact = expected_exact(x, offset, True)
        ours = max_error(module(x, offset), exact)
        theirs = max_error(float32_python(x, offset), exact)
        assert ours <= 2.0 ** -25 * 1.01
        lines.append(f"| {offset}..{offset + 23} | {ours:.2e} | {theirs:.2e} |")
    report = "\n".join(lines)
    print(f"\nmax |error| vs float64, torch {torch.__version__}, d_model 64:\n{report}")
    if report_dir:
        with open(f"{report_dir}/python_parity_torch{torch.__version__.split('+')[0]}.md", "w") as out:
            out.write(f"max |error| vs the float64 formula, torch {torch.__version__}, d_model 64\n\n{report}\n")


# --- the TorchScript sources: src/export/torchscript/*.py ----------------------------------------

SOURCE_DIR = Path(__file__).resolve().parents[2] / "src" / "export" / "torchscript"
SOURCES = sorted(SOURCE_DIR.glob("*.py"))
IMPORTS = ["import torch", "from torch import Tensor", "from typing import List, Optional, Tuple"]
# The names the methods may use besides their arguments and locals.
ALLOWED_NAMES = {"self", "torch", "Tensor", "List", "Optional", "Tuple", "RuntimeError", "str", "int", "float", "bool", "len", "getattr"}

# The files each exported module is made of (what src/export/torchscript.cpp passes to define).
COMPOSITION = {
    "PositionalEncoding": ["common", "offset", "sequence", "sinusoidal"],
    "LearnedPositionalEmbedding": ["common", "offset", "sequence", "learned"],
    "RotaryEmbedding": ["common", "offset", "rotation", "rotary"],
    "TokenEmbedding": ["common", "token_embedding"],
    "TokenAndPositionEmbedding": ["common", "token_and_position"],
    "ALiBi": ["common", "alibi"],
    "AttentionTemperature": ["common", "attention_temperature"],
    "RelativePositionBias": ["common", "t5_bias"],
    "RelPositionalEncoding": ["common", "relative_encoding"],
    "RelPositionMultiheadAttention": ["common", "relative_attention"],
    "Timesteps": ["common", "timestep", "timesteps"],
    "TimestepEmbedder": ["common", "timestep", "timestep_embedder"],
    "AxialRotaryEmbedding": ["common", "rotation", "axial", "axial_rotary"],
    "VisionRotaryEmbedding": ["common", "rotation", "axial", "vision_rotary"],
}


def test_every_source_is_embedded():
    """The folder holds the files the modules are made of, and the build embeds each of them."""
    stems = {path.stem for path in SOURCES}
    assert stems == set(itertools.chain.from_iterable(COMPOSITION.values()))
    listed = re.findall(r"^\s*([\w]+\.py)\s*$", (SOURCE_DIR.parent / "CMakeLists.txt").read_text(), re.MULTILINE)
    assert sorted(listed) == sorted(path.name for path in SOURCES)


def _class_of(tree):
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert len(classes) == 1, "one class per file"
    return classes[0]


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
def test_source_form(path):
    """The imports, then one class whose body is `def`s and comments only (it is what
    torch::jit::Module::define compiles): no docstrings, decorators or bases; every line of the body
    indented by at least 4 spaces; the class line the only line that starts with `class `."""
    text = path.read_text()
    tree = ast.parse(text, filename=str(path))
    statements = [ast.get_source_segment(text, node) for node in tree.body]
    assert statements[: len(IMPORTS)] == IMPORTS, "the imports come first"
    assert len(tree.body) == len(IMPORTS) + 1 and isinstance(tree.body[-1], ast.ClassDef), "then the class, and nothing else"
    cls = _class_of(tree)
    assert not cls.bases and not cls.keywords and not cls.decorator_list
    for node in cls.body:
        assert isinstance(node, ast.FunctionDef), f"line {node.lineno}: only `def`s in the class (no docstrings)"
        assert not node.decorator_list, f"{node.name}: no decorators"
        assert node.args.args and node.args.args[0].arg == "self", f"{node.name}: a method"
        assert ast.get_docstring(node) is None, f"{node.name}: no docstrings (comments instead)"
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("class ")] == [lines[cls.lineno - 1]]
    assert "\t" not in text
    for number, line in enumerate(lines[cls.lineno :], start=cls.lineno + 1):
        assert not line.strip() or line.startswith("    "), f"line {number}: the class body is indented by 4 spaces"
    assert ")posenc_ts\"" not in text  # the delimiter of the embedded raw string literal


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
def test_source_uses_only_torch_builtins(path):
    """The methods name only their arguments and locals, self, and torch (with attributes that
    exist), Tensor, List, Tuple, RuntimeError and a few Python built-ins."""
    cls = _class_of(ast.parse(path.read_text()))
    for method in cls.body:
        local = {argument.arg for argument in method.args.args}
        for node in ast.walk(method):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                local.add(node.id)
        for node in ast.walk(method):
            if isinstance(node, ast.Name):
                assert node.id in local or node.id in ALLOWED_NAMES, f"{method.name}, line {node.lineno}: the name {node.id}"
                assert node.id in local or node.id in dir(builtins) or node.id in {"self", "torch", "Tensor", "List", "Optional", "Tuple"}
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
                assert hasattr(torch, node.attr), f"{method.name}, line {node.lineno}: torch.{node.attr}"


def test_refusals_go_through_one_helper():
    """Every refusal is a call of common.py's _fail, which holds the sources' one `raise` and puts
    the module's name in front of the message; and no message is written out twice (a check that
    several modules share is a method of common.py, axial.py or rotation.py)."""
    raises, messages = [], {}
    for path in SOURCES:
        for method in _class_of(ast.parse(path.read_text())).body:
            for node in ast.walk(method):
                if isinstance(node, ast.Raise):
                    raises.append((path.name, method.name, ast.unparse(node)))
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "_fail":
                    [message] = node.args
                    text = ast.unparse(message)
                    assert "self.who" not in text, f"{path.name}, line {node.lineno}: _fail adds the module's name"
                    assert text not in messages, f"{path.name}, line {node.lineno}: the message of {messages.get(text)}, written again"
                    messages[text] = f"{path.name}, line {node.lineno}"
    assert raises == [("common.py", "_fail", "raise RuntimeError(self.who + ': ' + message)")]
    assert len(messages) > 60  # the refusals of the fourteen modules


_loaded_classes = {}


def source_class(stem):
    """The class of src/export/torchscript/<stem>.py, imported from the file (so that
    torch.jit.script finds the source of its methods)."""
    if stem not in _loaded_classes:
        spec = importlib.util.spec_from_file_location(f"posenc_torchscript_{stem}", SOURCE_DIR / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        [cls] = [value for value in vars(module).values() if inspect.isclass(value) and value.__module__ == module.__name__]
        _loaded_classes[stem] = cls
    return _loaded_classes[stem]


def module_class(kind):
    """An nn.Module class holding copies of the methods of the files `kind` is made of; every
    method but forward is marked torch.jit.export, so that scripting compiles all of them."""
    methods = {}
    for stem in COMPOSITION[kind]:
        for name, value in vars(source_class(stem)).items():
            if inspect.isfunction(value):
                assert name not in methods, f"{kind}: {name} is defined twice"
                methods[name] = value if name == "forward" else torch.jit.export(value)

    def __init__(self, attributes):
        torch.nn.Module.__init__(self)
        for name, value in attributes.items():
            setattr(self, name, value)

    # Attributes whose type an empty value does not tell (the exports register them typed).
    annotations = {"mrope_axes": typing.List[int], "axes_dim": typing.List[int], "ref_feat_shape": typing.List[int]}
    return type(f"Scripted{kind}", (torch.nn.Module,), {"__init__": __init__, "__annotations__": annotations, **methods})


def scripted_like(kind, exported, who, scalars, tensors=(), buffers=(), parameters=(), submodules=None):
    """torch.jit.script of module_class(kind) with the attributes the methods read: `who`, the
    scalars (checked against the export's), and the export's tensors."""
    attributes = {"who": who}
    assert exported.who == who
    for name, value in scalars.items():
        assert getattr(exported, name) == value, name
        attributes[name] = value
    for name in tensors:
        attributes[name] = getattr(exported, name).clone()
    for name in parameters:
        attributes[name] = torch.nn.Parameter(getattr(exported, name).detach().clone())
    attributes.update(submodules or {})
    module = module_class(kind)(attributes)
    for name in buffers:
        module.register_buffer(name, getattr(exported, name).clone())
    return torch.jit.script(module).eval()


def error_message(error):
    """The message of a TorchScript exception, without the traceback and the exception names
    (written differently by code compiled from C++ and from Python)."""
    line = [line for line in str(error).splitlines() if line.strip()][-1].strip()
    return re.sub(r"^((builtins\.)?RuntimeError: )+", "", line)


def outcome(call):
    try:
        return call()
    except (RuntimeError, torch.jit.Error) as error:
        return error_message(error)


def assert_same_outcomes(scripted, exported, calls):
    assert calls
    for description, call in calls:
        ours, theirs = outcome(lambda: call(scripted)), outcome(lambda: call(exported))
        if isinstance(theirs, str):
            assert ours == theirs, description
        else:
            assert isinstance(ours, torch.Tensor), f"{description}: {ours}"
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, description
            assert torch.equal(ours, theirs), description


def assert_same_methods(scripted, exported):
    """The export has the methods of the files it is made of, and scripting compiled them all."""
    for name, module in exported.named_modules():
        ours = dict(scripted.named_modules())[name]
        assert sorted(module._c._method_names()) == sorted(ours._c._method_names()), name or "the module"


def sequence_calls(batch, length, d_model, max_len, batch_first):
    generator = torch.Generator().manual_seed(0)
    shape = (batch, length, d_model) if batch_first else (length, batch, d_model)
    each = (batch, length) if batch_first else (length, batch)
    x = torch.randn(shape, generator=generator)
    calls = []
    for dtype in DTYPES + [torch.long]:
        for offset in (0, 3, max_len - length, max_len - length + 1, max_len + 5, -1):
            calls.append((f"forward {dtype} offset {offset}", lambda m, dtype=dtype, offset=offset: m(x.to(dtype), offset)))
    calls.append(("forward default offset", lambda m: m(x)))
    positions = [
        torch.arange(length) * 3 - 1,
        torch.randint(-1, max_len + 10, each, generator=generator),
        torch.randint(-1, max_len, each, generator=generator).int(),
        torch.randint(-1, max_len, each, generator=generator).float(),
        torch.full((length,), -2),
        torch.zeros(length + 1, dtype=torch.long),
    ]
    for index, p in enumerate(positions):
        calls.append((f"forward_positions {index}", lambda m, p=p: m.forward_positions(x, p)))
    mask = torch.rand(each, generator=generator) < 0.3
    calls += [
        ("forward_padded", lambda m: m.forward_padded(x, mask)),
        ("forward_padded, an integer mask", lambda m: m.forward_padded(x, mask.long())),
        ("a 2-D input", lambda m: m(torch.zeros(2, 3))),
        ("a wrong width", lambda m: m(torch.zeros(2, 3, d_model + 1))),
        ("an input on meta", lambda m: m(torch.zeros(shape, device="meta"))),
        ("positions on meta", lambda m: m.forward_positions(x, positions[0].to("meta"))),
    ]
    return calls


SINUSOIDAL_CASES = {
    "default": ([], dict(d_model=8, batch_first=True, scale=1.0, extrapolate=False)),
    "seq_first_extrapolate_scale_concatenated": (
        ["--seq-first", "--extrapolate", "--scale", "2.5", "--layout", "concatenated"],
        dict(d_model=8, batch_first=False, scale=2.5, extrapolate=True),
    ),
    "odd_width_tensor2tensor_extrapolate": (
        ["--spacing", "tensor2tensor", "--extrapolate", "--layout", "concatenated"],
        dict(d_model=7, batch_first=True, scale=1.0, extrapolate=True),
    ),
}


def sinusoidal_scripted(exported, scalars):
    return scripted_like("PositionalEncoding", exported, "PositionalEncoding", scalars, tensors=["column_frequency", "column_kind"], buffers=["pe"])


@pytest.mark.parametrize("case", SINUSOIDAL_CASES)
def test_sinusoidal_source_scripts_like_the_export(posenc_cli, tmp_path, case):
    flags, scalars = SINUSOIDAL_CASES[case]
    scalars = dict(scalars, max_len=20)
    path = tmp_path / "pe.pt"
    args = [posenc_cli, "export", "--max-len", "20", "--d-model", str(scalars["d_model"]), "-o", str(path), *flags]
    subprocess.run(args, check=True, capture_output=True)
    exported = torch.jit.load(str(path))
    scripted = sinusoidal_scripted(exported, scalars)
    assert_same_methods(scripted, exported)
    assert_same_outcomes(scripted, exported, sequence_calls(3, 6, scalars["d_model"], 20, scalars["batch_first"]))


def test_sinusoidal_export_carries_the_paper_frequencies(exported):
    """The column plan the export carries: frequency base^(-(c - c % 2) / D), sine on even columns."""
    module = torch.jit.load(str(exported[True]))
    column = torch.arange(64)
    expected = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -(column - column % 2).double() / 64)
    assert module.column_frequency.dtype == torch.float64
    assert torch.allclose(module.column_frequency, expected, rtol=1e-14, atol=0)
    assert torch.equal(module.column_kind, column % 2)


def test_learned_source_scripts_like_the_export(test_tool, tmp_path):
    test_tool("export-learned", "--d-model", 6, "--max-len", 20, "--seed", 3, tmp_path / "learned.pt")
    exported = torch.jit.load(str(tmp_path / "learned.pt"))
    scalars = dict(d_model=6, max_len=20, batch_first=True, scale=1.0, extrapolate=False)
    scripted = scripted_like("LearnedPositionalEmbedding", exported, "LearnedPositionalEmbedding", scalars, parameters=["weight"])
    assert_same_methods(scripted, exported)
    assert_same_outcomes(scripted, exported, sequence_calls(3, 6, 6, 20, True))


ROTARY_CASES = {
    "default": ([], dict(rotary_dim=8, interleaved=False, deinterleave=False, inverse=False, rotate_last=False, heads_first=False, extrapolate=False)),
    "extrapolate": (["--extrapolate"], dict(rotary_dim=8, interleaved=False, deinterleave=False, inverse=False, rotate_last=False, heads_first=False, extrapolate=True)),
    "interleaved_heads_first_partial_extrapolate": (
        ["--pairing", "interleaved", "--heads-first", "--rotary-dim", "6", "--extrapolate"],
        dict(rotary_dim=6, interleaved=True, deinterleave=False, inverse=False, rotate_last=False, heads_first=True, extrapolate=True),
    ),
    # DeepSeek-V3's rope_interleave: pairs (2i, 2i + 1) read, halves written
    "deinterleave_partial": (
        ["--deinterleave", "--rotary-dim", "6"],
        dict(rotary_dim=6, interleaved=False, deinterleave=True, inverse=False, rotate_last=False, heads_first=False, extrapolate=False),
    ),
    # DeepSeek-V4: the last rotary_dim channels turn, pairs (2i, 2i + 1)
    "rotate_last_interleaved_partial": (
        ["--rotate-last-channels", "--pairing", "interleaved", "--rotary-dim", "6"],
        dict(rotary_dim=6, interleaved=True, deinterleave=False, inverse=False, rotate_last=True, heads_first=False, extrapolate=False),
    ),
    # NanoChat: turned by -theta
    "inverse_interleaved": (
        ["--inverse", "--pairing", "interleaved", "--extrapolate"],
        dict(rotary_dim=8, interleaved=True, deinterleave=False, inverse=True, rotate_last=False, heads_first=False, extrapolate=True),
    ),
}


@pytest.mark.parametrize("case", ROTARY_CASES)
def test_rotary_source_scripts_like_the_export(posenc_cli, tmp_path, case):
    flags, scalars = ROTARY_CASES[case]
    scalars = dict(scalars, max_len=16, head_dim=8, attention_factor=1.0, switch_len=-1, ntk_base=10000.0, ntk_factor=1.0, mrope_axes=[])
    path = tmp_path / "rotary.pt"
    args = [posenc_cli, "export", "--module", "rotary", "--max-len", "16", "--head-dim", "8", "-o", str(path), *flags]
    subprocess.run(args, check=True, capture_output=True)
    exported = torch.jit.load(str(path))
    half = scalars["rotary_dim"] // 2
    expected = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -torch.arange(half, dtype=torch.float64) * 2 / scalars["rotary_dim"])
    assert exported.inv_freq.dtype == torch.float64
    assert torch.allclose(exported.inv_freq, expected, rtol=1e-14, atol=0)
    scripted = scripted_like("RotaryEmbedding", exported, "RotaryEmbedding", scalars, tensors=["inv_freq", "long_inv_freq", "freq_divisors"], buffers=["cos", "sin"])
    assert_same_methods(scripted, exported)

    generator = torch.Generator().manual_seed(1)
    batch, heads, length = 2, 3, 5
    x = torch.randn((batch, heads, length, 8) if scalars["heads_first"] else (batch, length, heads, 8), generator=generator)
    calls = [
        (f"forward {dtype} offset {offset}", lambda m, dtype=dtype, offset=offset: m(x.to(dtype), offset))
        for dtype in DTYPES + [torch.long]
        for offset in (0, 11, 12, 30, -1)
    ]
    positions = [
        torch.arange(length) * 5 - 1,
        torch.randint(-1, 40, (batch, length), generator=generator),
        torch.full((length,), -2),
        torch.zeros(length, dtype=torch.bool),
    ]
    calls += [(f"forward_positions {index}", lambda m, p=p: m.forward_positions(x, p)) for index, p in enumerate(positions)]
    calls += [("a narrow head", lambda m: m(torch.zeros(1, 2, 3, 2))), ("a 3-D input", lambda m: m(torch.zeros(1, 2, 3)))]
    assert_same_outcomes(scripted, exported, calls)

    # With an attention factor (1 for posenc's plain RoPE), rows computed past the caches carry it.
    if scalars["extrapolate"]:
        scripted.attention_factor = 0.5
        past = torch.arange(16, 16 + length)
        c, s = scripted._tables(past)
        angle = past.double().unsqueeze(1) * exported.inv_freq.unsqueeze(0)
        assert torch.equal(c, (torch.cos(angle) * 0.5).to(c.dtype))
        assert torch.equal(s, (torch.sin(angle) * 0.5).to(s.dtype))


@pytest.mark.parametrize("learned", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_token_and_position_sources_script_like_the_export(test_tool, tmp_path, learned, padding_idx):
    args = ["export-token", "--vocab", 30, "--d-model", 8, "--max-len", 16, "--seed", 2]
    args += ([] if padding_idx is None else ["--padding-idx", padding_idx]) + (["--learned"] if learned else [])
    test_tool(*args, tmp_path / "token.pt")
    exported = torch.jit.load(str(tmp_path / "token.pt"))
    padding = -1 if padding_idx is None else padding_idx
    tokens = scripted_like("TokenEmbedding", exported.tokens, "TokenAndPositionEmbedding", dict(batch_first=True, padding_idx=padding), parameters=["weight"])
    # The paper's scaling of token embeddings, sqrt(d_model), is the scale of the positions module.
    scalars = dict(d_model=8, max_len=16, batch_first=True, scale=math.sqrt(8), extrapolate=False)
    if learned:
        positions = scripted_like("LearnedPositionalEmbedding", exported.positions, "LearnedPositionalEmbedding", scalars, parameters=["weight"])
    else:
        positions = sinusoidal_scripted(exported.positions, scalars)
    scripted = scripted_like(
        "TokenAndPositionEmbedding", exported, "TokenAndPositionEmbedding", dict(batch_first=True, padding_idx=padding), submodules={"tokens": tokens, "positions": positions}
    )
    assert_same_methods(scripted, exported)

    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 30, (3, 7), generator=generator)
    ids[0, :2] = 0
    calls = [(f"forward offset {offset}", lambda m, offset=offset: m(ids, offset)) for offset in (0, 5, 9, 10, -1)]
    calls += [
        ("int32 ids", lambda m: m(ids.int())),
        ("float ids", lambda m: m(ids.float())),
        ("ids out of range", lambda m: m(ids + 25)),
        ("negative ids", lambda m: m(ids - 40)),
        ("1-D ids", lambda m: m(ids[0])),
        ("forward_positions", lambda m: m.forward_positions(ids, torch.arange(7))),
        ("forward_positions past max_len", lambda m: m.forward_positions(ids, torch.arange(7) + 15)),
    ]
    assert_same_outcomes(scripted, exported, calls)


# --- the exported code calls nothing but torch built-ins ------------------------------------------

ALLOWED_PRIM = {
    "prim::Constant", "prim::GetAttr", "prim::If", "prim::Loop", "prim::ListConstruct", "prim::ListUnpack", "prim::TupleConstruct",
    "prim::TupleUnpack", "prim::TupleIndex", "prim::RaiseException", "prim::device", "prim::dtype", "prim::CallMethod", "prim::Uninitialized",
    "prim::unchecked_cast", "prim::NumToTensor", "prim::min", "prim::max",
}


def assert_builtin_code(module):
    """Every node of every method of the module and its submodules is an operator of aten (with a
    schema: a built-in) or one of the structural prim nodes above; calls go to the methods of the
    exported modules only (no functions, no Python, no other operator namespace such as posenc)."""
    methods = set()
    for _, submodule in module.named_modules():
        methods.update(submodule._c._method_names())
    kinds = set()

    def walk(block):
        for node in block.nodes():
            kind = node.kind()
            kinds.add(kind)
            if kind == "prim::CallMethod":
                assert node.s("name") in methods
            for inner in node.blocks():
                walk(inner)

    for _, submodule in module.named_modules():
        for name in submodule._c._method_names():
            walk(submodule._c._get_method(name).graph)
    assert kinds
    for kind in kinds:
        namespace = kind.split("::")[0]
        assert namespace in ("aten", "prim"), kind
        if namespace == "aten":
            assert torch._C._jit_get_schemas_for_operator(kind), f"{kind} is not a built-in operator"
        else:
            assert kind in ALLOWED_PRIM, kind
    # The printed code names no module besides torch's (`ops.prim` is how RaiseException prints).
    for _, submodule in module.named_modules():
        for name in submodule._c._method_names():
            code = submodule._c._get_method(name).code
            assert set(re.findall(r"\bops\.(\w+)\.", code)) <= {"prim", "aten"}, code


def test_exported_code_uses_only_builtins(posenc_cli, test_tool, tmp_path):
    files = []
    for index, flags in enumerate([["--d-model", "8", "--extrapolate"], ["--module", "rotary", "--head-dim", "8", "--extrapolate"]]):
        path = tmp_path / f"module{index}.pt"
        subprocess.run([posenc_cli, "export", "--max-len", "16", "-o", str(path), *flags], check=True, capture_output=True)
        files.append(path)
    test_tool("export-learned", "--d-model", 6, "--max-len", 20, tmp_path / "learned.pt")
    test_tool("export-token", "--vocab", 30, "--d-model", 8, "--max-len", 16, "--padding-idx", 0, tmp_path / "token.pt")
    files += [tmp_path / "learned.pt", tmp_path / "token.pt"]
    for kind, flags in ATTENTION_EXPORTS.items():
        test_tool("export-attention", kind, *flags, tmp_path / f"{kind}.pt")
        files.append(tmp_path / f"{kind}.pt")
    for case, (kind, flags, _) in VISION_CASES.items():
        test_tool("export-vision", kind, *flags, tmp_path / f"{case}.pt")
        files.append(tmp_path / f"{case}.pt")
    for path in files:
        assert_builtin_code(torch.jit.load(str(path)))


def _helper(x: torch.Tensor) -> torch.Tensor:
    return x + 1


class CallsAFunction(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _helper(x)


class CallsPosencOperator(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.posenc.sinusoidal_table(x.size(0), x.size(1), 10000.0, 0)


def test_builtin_check_rejects_functions():
    """The check above fails for code that calls something else: a function ..."""
    with pytest.raises(AssertionError, match="prim::CallFunction"):
        assert_builtin_code(torch.jit.script(CallsAFunction()))


def test_builtin_check_rejects_other_operators(posenc_ops):
    """... or an operator outside aten, here posenc's own."""
    with pytest.raises(AssertionError, match="posenc::"):
        assert_builtin_code(torch.jit.script(CallsPosencOperator()))


# --- offsets at the ends of int64 and scales past float32, as the C++ modules check them -----------

INT64_MAX = 2**63 - 1


def export_with(posenc_cli, path, *args):
    subprocess.run([posenc_cli, "export", "--max-len", "16", *map(str, args), "-o", str(path)], check=True, capture_output=True)
    return torch.jit.load(str(path))


@pytest.mark.parametrize("extrapolate", [False, True])
@pytest.mark.parametrize("module", ["sinusoidal", "rotary"])
def test_offsets_that_overflow_int64_are_rejected(posenc_cli, tmp_path, module, extrapolate):
    flags = ["--module", module] + (["--head-dim", 8] if module == "rotary" else ["--d-model", 8]) + (["--extrapolate"] if extrapolate else [])
    exported = export_with(posenc_cli, tmp_path / "m.pt", *flags)
    x = torch.zeros(1, 5, 2, 8) if module == "rotary" else torch.zeros(1, 5, 8)
    for offset in (INT64_MAX, INT64_MAX - 4):  # offset + 5 wraps around to a negative number
        with pytest.raises(torch.jit.Error, match=f"offset \\+ L must fit in int64, but got offset = {offset} and L = 5"):
            exported(x, offset)
    # The largest offset that fits: past the table, an error or, extrapolated, numbers.
    if extrapolate:
        y = exported(x, INT64_MAX - 5)
        assert y.shape == x.shape and torch.isfinite(y).all()
    else:
        with pytest.raises(torch.jit.Error, match="must lie in the table"):
            exported(x, INT64_MAX - 5)


@pytest.mark.parametrize("learned", [False, True])
def test_token_and_position_offsets_that_overflow_int64_are_rejected(test_tool, tmp_path, learned):
    args = ["export-token", "--vocab", 30, "--d-model", 8, "--max-len", 16, "--padding-idx", 0] + (["--learned"] if learned else [])
    test_tool(*args, tmp_path / "token.pt")
    exported = torch.jit.load(str(tmp_path / "token.pt"))
    ids = torch.tensor([[0, 3, 4, 5]])
    with pytest.raises(torch.jit.Error, match=f"offset \\+ L must fit in int64, but got offset = {INT64_MAX - 2} and L = 4"):
        exported(ids, INT64_MAX - 2)


def test_scales_past_float32_are_rejected_for_float32_inputs(posenc_cli, tmp_path):
    exported = export_with(posenc_cli, tmp_path / "pe.pt", "--d-model", 8, "--scale", "1e300")
    with pytest.raises(torch.jit.Error, match=r"scale must lie in \[-3.4028e38, 3.4028e38\] for Float inputs"):
        exported(torch.zeros(1, 3, 8))
    # float64 inputs are computed in float64: 0 * 1e300 + pe is pe, not NaN
    y = exported(torch.zeros(1, 3, 8, dtype=torch.float64))
    assert torch.equal(y[0], exported.pe[0, :3].double())


# --- the attention-bias modules: ALiBi, RelativePositionBias, RelPositionalEncoding,
# RelPositionMultiheadAttention ----------------------------------------------------------------

ATTENTION_EXPORTS = {
    "alibi": ["--num-heads", 12, "--first-head", 4, "--heads", 6],
    "t5": ["--num-heads", 3, "--num-buckets", 8, "--max-distance", 20, "--seed", 4],
    "rel-encoding": ["--d-model", 8, "--max-len", 12],
    "rel-attention": ["--d-model", 8, "--num-heads", 2, "--seed", 5],
}


def export_attention(test_tool, path, kind, *flags):
    test_tool("export-attention", kind, *flags, path)
    return torch.jit.load(str(path))


class Parameters(torch.nn.Module):
    """A submodule holding copies of the parameters of an exported one (the exports register
    Embedding's and Linear's parameters without their methods)."""

    def __init__(self, exported):
        super().__init__()
        for name, value in exported.named_parameters(recurse=False):
            setattr(self, name, torch.nn.Parameter(value.detach().clone()))


def test_alibi_export(posenc_ops, test_tool, tmp_path):
    exported = export_attention(test_tool, tmp_path / "alibi.pt", "alibi", *ATTENTION_EXPORTS["alibi"])
    assert torch.equal(exported.slopes, posenc_ops.alibi_slopes(12, first_head=4, heads=6))
    assert [name for name, _ in exported.named_buffers()] == ["slopes"]
    scripted = scripted_like("ALiBi", exported, "ALiBi", {}, buffers=["slopes"])
    assert_same_methods(scripted, exported)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    calls = []
    for queries, keys, offset, causal in itertools.product([1, 3, 5], [5, 9], [None, 0, 4], [False, True]):
        def call(m, queries=queries, keys=keys, offset=offset, causal=causal):
            return m(queries, keys, offset, causal)
        calls.append((f"forward {queries} {keys} {offset} {causal}", call))
        expected = posenc_ops.alibi_bias(exported.slopes, queries, keys, offset, causal)
        assert torch.equal(call(exported), expected)
    calls += [
        ("forward_causal", lambda m: m.forward_causal(5)),
        ("forward_causal, a mask", lambda m: m.forward_causal(5, mask)),
        ("forward_causal, a bool mask", lambda m: m.forward_causal(5, mask.bool())),
        ("forward_causal, a float mask", lambda m: m.forward_causal(5, mask.float())),
        ("forward_causal, a wrong mask", lambda m: m.forward_causal(4, mask)),
        ("forward_causal, no keys", lambda m: m.forward_causal(0)),
        ("more queries than keys", lambda m: m(6, 5)),
        ("a negative offset", lambda m: m(2, 5, -1)),
        ("an offset past int64", lambda m: m(2, 5, 2 ** 63 - 1)),
        ("no queries", lambda m: m(0, 5)),
    ]
    assert_same_outcomes(scripted, exported, calls)
    assert torch.equal(exported.forward_causal(5, mask), posenc_ops.alibi_causal_bias(exported.slopes, 5, mask))
    assert torch.equal(exported.forward_causal(5), posenc_ops.alibi_causal_bias(exported.slopes, 5))
    # float64 slopes (a module moved with .double()) give float64 biases, as the operator does
    exported.double()
    assert torch.equal(exported(3, 7), posenc_ops.alibi_bias(exported.slopes, 3, 7))
    assert exported(3, 7).dtype == torch.float64


@pytest.mark.parametrize("causal", [False, True])
def test_t5_bias_export(posenc_ops, test_tool, tmp_path, causal):
    flags = ATTENTION_EXPORTS["t5"] + (["--causal"] if causal else [])
    exported = export_attention(test_tool, tmp_path / "t5.pt", "t5", *flags)
    assert list(exported.state_dict()) == ["relative_attention_bias.weight"]
    weight = exported.relative_attention_bias.weight
    assert weight.shape == (8, 3)
    # the lookup table the export carries: the buckets of -max_distance .. max_distance
    relative = torch.arange(-20, 21)
    assert torch.equal(exported.bucket_of, posenc_ops.relative_position_bucket(relative, not causal, 8, 20))
    scripted = scripted_like("RelativePositionBias", exported, "RelativePositionBias", {"max_distance": 20}, tensors=["bucket_of"],
                             submodules={"relative_attention_bias": Parameters(exported.relative_attention_bias)})
    assert_same_methods(scripted, exported)
    calls = []
    for queries, keys, offset in [(1, 1, 0), (6, 40, 0), (1, 60, 59), (7, 7, 3), (30, 90, 0), (4, 8, 10 ** 12)]:
        def call(m, queries=queries, keys=keys, offset=offset):
            return m(queries, keys, offset)
        calls.append((f"forward {queries} {keys} {offset}", call))
        expected = posenc_ops.relative_position_bias(weight, queries, keys, not causal, 20, offset)
        assert torch.equal(call(exported), expected)
    calls += [
        ("default offset", lambda m: m(5, 5)),
        ("a negative offset", lambda m: m(2, 2, -1)),
        ("no queries", lambda m: m(0, 2)),
        ("no keys", lambda m: m(2, 0)),
        ("an offset past int64", lambda m: m(2, 2, 2 ** 63 - 1)),
    ]
    assert_same_outcomes(scripted, exported, calls)


@pytest.mark.parametrize("legacy", [False, True])
def test_relative_encoding_export(posenc_ops, test_tool, tmp_path, legacy):
    flags = ATTENTION_EXPORTS["rel-encoding"] + (["--legacy"] if legacy else [])
    exported = export_attention(test_tool, tmp_path / "rel.pt", "rel-encoding", *flags)
    assert list(exported.state_dict()) == ["pe"]
    if not legacy:
        assert torch.equal(exported.pe, posenc_ops.relative_sinusoidal_table(12, 8))
    scalars = dict(d_model=8, max_len=12, legacy=legacy, scale=math.sqrt(8))
    scripted = scripted_like("RelPositionalEncoding", exported, "RelPositionalEncoding", scalars, buffers=["pe"])
    assert_same_methods(scripted, exported)
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(3))
    calls = [(f"forward {dtype} {offset}", lambda m, dtype=dtype, offset=offset: m(x.to(dtype), offset))
             for dtype in DTYPES + [torch.long] for offset in (0, 4, 7, 8, -1)]
    calls += [
        ("default offset", lambda m: m(x)),
        ("a 2-D input", lambda m: m(x[0])),
        ("a wrong width", lambda m: m(torch.zeros(2, 5, 9))),
        ("an input on meta", lambda m: m(x.to("meta"))),
        ("an offset past int64", lambda m: m(x, 2 ** 63 - 1)),
    ]
    assert_same_outcomes(scripted, exported, [(d, lambda m, c=c: c(m)[0]) for d, c in calls] + [(d + " (pos_emb)", lambda m, c=c: c(m)[1]) for d, c in calls])
    # the scaled input, and the table rows of relative positions offset + L - 1 .. -(L - 1)
    scaled, pos_emb = exported(x, 4)
    assert torch.equal(scaled, x * math.sqrt(8))
    if legacy:
        assert torch.equal(pos_emb[0], exported.pe[4:9])
    else:
        assert torch.equal(pos_emb[0], posenc_ops.relative_sinusoidal_table(5, 8, key_length=9))


def test_relative_attention_export(posenc_ops, test_tool, tmp_path):
    exported = export_attention(test_tool, tmp_path / "attn.pt", "rel-attention", *ATTENTION_EXPORTS["rel-attention"])
    names = ["pos_bias_u", "pos_bias_v"] + [f"linear_{n}.{p}" for n in "qkv" for p in ("weight", "bias")]
    names += ["linear_out.weight", "linear_out.bias", "linear_pos.weight"]
    assert sorted(exported.state_dict()) == sorted(names)
    submodules = {name: Parameters(getattr(exported, name)) for name in ("linear_q", "linear_k", "linear_v", "linear_out", "linear_pos")}
    scalars = dict(embed_dim=8, num_heads=2, score_scale=1 / math.sqrt(4))
    scripted = scripted_like("RelPositionMultiheadAttention", exported, "RelPositionMultiheadAttention", scalars,
                             parameters=["pos_bias_u", "pos_bias_v"], submodules=submodules)
    assert_same_methods(scripted, exported)
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 6, 8, generator=generator)
    table = posenc_ops.relative_sinusoidal_table(6, 8).unsqueeze(0)
    chunk_table = posenc_ops.relative_sinusoidal_table(2, 8, key_length=6).unsqueeze(0)
    keep = torch.tensor([True] * 4 + [False] * 2).view(1, 1, 1, 6)
    calls = [
        ("self-attention", lambda m: m(x, x, x, table)),
        ("a padding mask", lambda m: m(x, x, x, table, keep)),
        ("an additive mask", lambda m: m(x, x, x, table, torch.randn(2, 1, 6, 6, generator=torch.Generator().manual_seed(1)))),
        ("the last two queries", lambda m: m(x[:, 4:], x, x, chunk_table)),
        ("a wrong table", lambda m: m(x, x, x, table[:, :10])),
        ("a wrong width", lambda m: m(x, x[..., :4], x, table)),
        ("key and value differ", lambda m: m(x, x, x[:, :5], table)),
    ]
    assert_same_outcomes(scripted, exported, calls)
    # Streaming: the last two queries against all keys are the whole sequence's last two rows
    torch.testing.assert_close(exported(x[:, 4:], x, x, chunk_table), exported(x, x, x, table)[:, 4:], rtol=1e-5, atol=1e-6)


# --- the vision and diffusion modules: Timesteps, TimestepEmbedder, AxialRotaryEmbedding,
# VisionRotaryEmbedding (test_tool export-vision) -------------------------------------------------
#
# Tolerances. The timestep embeddings are computed as posenc computes them (float64 angles from the
# same float64 frequencies, ATen's sin/cos, one rounding): bit-identical. The axial and grid tables
# take the same float64 angles, but ATen's float64 cos/sin (SLEEF, <= 1 ulp) where posenc's
# operators call the C library's: within one float64 ulp (2^-52 allowed for |value| <= 1), so
# float32 tables within one float32 ulp (2^-24), and rotated values a c - b s within
# 2 max|x| (table tolerance + one ulp of the result). TimestepEmbedder's SiLU is x * sigmoid(x)
# (aten::silu has no name in torch's Python namespace), a couple of float32 ulps from aten::silu,
# summed by the second Linear (bound below).

VISION_CASES = {
    # case: (kind, test_tool flags, the attributes the export carries)
    "timesteps_default": ("timesteps", ["--dim", 64], dict(embedding_dim=64, flip_sin_to_cos=False, downscale_freq_shift=1.0, scale=1.0, max_period=10000)),
    "timesteps_odd_flip_shift_scale": (
        "timesteps",
        ["--dim", 33, "--flip-sin-to-cos", "--shift", 0.5, "--scale", 2.5, "--max-period", 500],
        dict(embedding_dim=33, flip_sin_to_cos=True, downscale_freq_shift=0.5, scale=2.5, max_period=500),
    ),
    "embedder": (
        "embedder",
        ["--dim", 24, "--frequency-size", 17, "--seed", 3],
        dict(hidden_size=24, embedding_dim=17, flip_sin_to_cos=True, downscale_freq_shift=0.0, scale=1.0, max_period=10000),
    ),
    "axial_flux": ("axial", ["--axes-dim", 4, 6, 2, "--theta", 10000], dict(axes_dim=[4, 6, 2], theta=10000.0, interleaved=True, deinterleave=False, inverse=False, rotate_last=False, heads_first=False)),
    "axial_half_split_heads_first": (
        "axial",
        ["--axes-dim", 4, 6, 2, "--theta", 500, "--half-split", "--heads-first"],
        dict(axes_dim=[4, 6, 2], theta=500.0, interleaved=False, deinterleave=False, inverse=False, rotate_last=False, heads_first=True),
    ),
    "vision_eva02": (
        "vision",
        ["--dim", 16],
        dict(dim=16, temperature=10000.0, ref_feat_shape=[], grid_offset=0.0, grid_indexing="ij", num_prefix_tokens=1, interleaved=True, deinterleave=False, inverse=False, rotate_last=False, heads_first=True, axes_dim=[8, 8]),
    ),
    "vision_every_option": (
        "vision",
        ["--dim", 16, "--theta", 100, "--ref-feat-shape", 4, 6, "--grid-offset", 0.5, "--xy", "--half-split", "--tokens-first", "--prefix", 2],
        dict(dim=16, temperature=100.0, ref_feat_shape=[4, 6], grid_offset=0.5, grid_indexing="xy", num_prefix_tokens=2, interleaved=False, deinterleave=False, inverse=False, rotate_last=False, heads_first=False, axes_dim=[8, 8]),
    ),
    "vision_no_prefix": (
        "vision",
        ["--dim", 12, "--ref-feat-shape", 7, 3, "--prefix", 0],
        dict(dim=12, temperature=10000.0, ref_feat_shape=[7, 3], grid_offset=0.0, grid_indexing="ij", num_prefix_tokens=0, interleaved=True, deinterleave=False, inverse=False, rotate_last=False, heads_first=True, axes_dim=[6, 6]),
    ),
}
VISION_KINDS = {"timesteps": "Timesteps", "embedder": "TimestepEmbedder", "axial": "AxialRotaryEmbedding", "vision": "VisionRotaryEmbedding"}
ULP32 = 2.0 ** -24


def export_vision(test_tool, tmp_path, case):
    kind, flags, _ = VISION_CASES[case]
    path = tmp_path / f"{case}.pt"
    test_tool("export-vision", kind, *flags, path)
    return torch.jit.load(str(path))


def table_tolerance(dtype):
    return 2.0 ** -52 if dtype == torch.float64 else ULP32


def rotation_tolerance(x):
    ulp = 2.0 ** -53 if x.dtype == torch.float64 else ULP32
    return 2.0 * x.abs().max().item() * (table_tolerance(x.dtype) + ulp)


def assert_within(ours, theirs, tolerance):
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert (ours.double() - theirs.double()).abs().max().item() <= tolerance


class Mlp(torch.nn.Module):
    """The exported TimestepEmbedder's `mlp`: submodules 0 and 2 holding Linear parameters."""

    def __init__(self, exported):
        super().__init__()
        self.add_module("0", Parameters(getattr(exported, "0")))
        self.add_module("2", Parameters(getattr(exported, "2")))


def vision_calls(kind, scalars):
    generator = torch.Generator().manual_seed(5)
    if kind in ("timesteps", "embedder"):
        t = torch.tensor([0.0, 0.5, 1.0, 250.25, 999.0])
        calls = [(f"timesteps {dtype}", lambda m, dtype=dtype: m(t.to(dtype))) for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.long)]
        calls += [
            ("no timesteps", lambda m: m(torch.zeros(0))),
            ("2-D timesteps", lambda m: m(torch.zeros(2, 3))),
            ("bool timesteps", lambda m: m(torch.zeros(3, dtype=torch.bool))),
            ("complex timesteps", lambda m: m(torch.zeros(3, dtype=torch.complex64))),
            ("NaN", lambda m: m(torch.tensor([1.0, math.nan]))),
            ("large timesteps (angles that overflow with a scale > 1)", lambda m: m(torch.tensor([1.7e308], dtype=torch.float64))),
            ("timesteps on meta", lambda m: m(torch.zeros(3, device="meta"))),
        ]
        return calls
    if kind == "axial":
        length = 5
        shape = (2, 3, length, 16) if scalars["heads_first"] else (2, length, 3, 16)
        x = torch.randn(shape, generator=generator)
        ids = [torch.randint(-20, 64, (length, 3), generator=generator), torch.randn(length, 3, generator=generator, dtype=torch.float64) * 50]
        calls = [(f"forward {dtype} ids {i}", lambda m, dtype=dtype, p=p: m(x.to(dtype), p))
                 for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16) for i, p in enumerate(ids)]
        calls += [(f"tables {dtype}", lambda m, dtype=dtype: torch.stack(m.tables(ids[1], dtype))) for dtype in (torch.float32, torch.float64, torch.float16)]
        calls += [
            ("tables, default dtype", lambda m: torch.stack(m.tables(ids[0]))),
            ("tables, int32 ids", lambda m: torch.stack(m.tables(ids[0].int()))),
            ("tables, a long dtype", lambda m: torch.stack(m.tables(ids[0], torch.long))),
            ("a long input", lambda m: m(x.long(), ids[0])),
            ("a 3-D input", lambda m: m(x[0], ids[0])),
            ("ids of another length", lambda m: m(x, ids[0][:4])),
            ("ids of two axes", lambda m: m(x, ids[0][:, :2])),
            ("bool ids", lambda m: m(x, ids[0].bool())),
            ("NaN ids", lambda m: m(x, torch.full((length, 3), math.nan))),
            ("ids on meta", lambda m: m(x, ids[0].to("meta"))),
            ("a narrow head", lambda m: m(x[..., :8], ids[0])),
        ]
        return calls
    prefix, dim = scalars["num_prefix_tokens"], scalars["dim"]

    def query(grid, width=dim + 4):
        tokens = prefix + grid[0] * grid[1]
        return torch.randn((2, 3, tokens, width) if scalars["heads_first"] else (2, tokens, 3, width), generator=generator)

    calls = []
    for grid in ([2, 3], [5, 5], [1, 7]):
        x = query(grid)
        calls += [(f"forward {grid} {dtype}", lambda m, x=x, grid=grid, dtype=dtype: m(x.to(dtype), grid)) for dtype in (torch.float32, torch.float64, torch.bfloat16)]
        calls += [(f"tables {grid} {dtype}", lambda m, grid=grid, dtype=dtype: torch.stack(m.tables(grid, dtype))) for dtype in (torch.float32, torch.float64)]
        calls.append((f"grid ids {grid}", lambda m, grid=grid: m._grid_ids(grid, torch.device("cpu"))))
    x = query([2, 2])
    calls += [
        ("tables, default dtype and device", lambda m: torch.stack(m.tables([3, 4]))),
        ("tables, a long dtype", lambda m: torch.stack(m.tables([3, 4], torch.long))),
        ("tables, one size", lambda m: torch.stack(m.tables([4]))),
        ("tables, a zero size", lambda m: torch.stack(m.tables([0, 4]))),
        ("tables, too large a grid", lambda m: torch.stack(m.tables([2 ** 20, 2 ** 10]))),
        ("the wrong grid", lambda m: m(x, [2, 3])),
        ("a long input", lambda m: m(x.long(), [2, 2])),
        ("a 3-D input", lambda m: m(x[0], [2, 2])),
        ("a narrow head", lambda m: m(x[..., : dim - 4], [2, 2])),
    ]
    return calls


@pytest.mark.parametrize("case", VISION_CASES)
def test_vision_sources_script_like_the_export(test_tool, tmp_path, case):
    kind, _, scalars = VISION_CASES[case]
    exported = export_vision(test_tool, tmp_path, case)
    name = VISION_KINDS[kind]
    tensors = ["frequencies"] if kind in ("timesteps", "embedder") else ["axial_inv_freq", "axial_axis"]
    submodules = {"mlp": Mlp(exported.mlp)} if kind == "embedder" else None
    scripted = scripted_like(name, exported, name, scalars, tensors=tensors, submodules=submodules)
    assert_same_methods(scripted, exported)
    assert_same_outcomes(scripted, exported, vision_calls(kind, scalars))
    # the state dict of the C++ module: DiT's names for the embedder, nothing for the others
    expected = ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"] if kind == "embedder" else []
    assert sorted(exported.state_dict()) == sorted(expected)


def timestep_truth(t, dim, flip, shift, scale, max_period):
    half = dim // 2
    frequency = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / (half - shift))
    angle = t.double().unsqueeze(1) * frequency * scale
    columns = [torch.cos(angle), torch.sin(angle)] if flip else [torch.sin(angle), torch.cos(angle)]
    if dim % 2:
        columns.append(torch.zeros(len(t), 1, dtype=torch.float64))
    return torch.cat(columns, 1)


TIMESTEPS = torch.cat([torch.arange(0, 1000, 37).float(), torch.tensor([0.5, 999.25, 1e-3, 123.456])])


@pytest.mark.parametrize("case", ["timesteps_default", "timesteps_odd_flip_shift_scale"])
def test_timesteps_export_equals_posenc_operator(posenc_ops, test_tool, tmp_path, case):
    exported = export_vision(test_tool, tmp_path, case)
    s = VISION_CASES[case][2]
    args = (s["embedding_dim"], s["flip_sin_to_cos"], s["downscale_freq_shift"], s["scale"], s["max_period"])
    for t in (TIMESTEPS, TIMESTEPS.double(), torch.arange(0, 1000, 7), torch.arange(0, 1000, 7).int()):
        assert torch.equal(exported(t), posenc_ops.timestep_embedding(t, *args))


@pytest.mark.parametrize("case", ["timesteps_default", "timesteps_odd_flip_shift_scale"])
def test_timesteps_export_against_diffusers(test_tool, tmp_path, case):
    """diffusers' get_timestep_embedding computes its frequencies and angles in float32 (error
    about |angle| 2^-24); the export's are float64, rounded once: no further from the float64 truth,
    and within diffusers' error plus one float32 ulp of it."""
    pytest.importorskip("diffusers", reason="diffusers is installed in the pip test environment only")
    from diffusers.models.embeddings import get_timestep_embedding

    exported = export_vision(test_tool, tmp_path, case)
    s = VISION_CASES[case][2]
    args = (s["embedding_dim"], s["flip_sin_to_cos"], s["downscale_freq_shift"], s["scale"], s["max_period"])
    for t in (TIMESTEPS, torch.arange(0, 1000, 7)):
        ours, theirs, truth = exported(t), get_timestep_embedding(t, *args), timestep_truth(t, *args)
        ours_error = (ours.double() - truth).abs().max().item()
        their_error = (theirs.double() - truth).abs().max().item()
        assert ours_error <= max(their_error, ULP32)
        torch.testing.assert_close(ours.double(), theirs.double(), rtol=0, atol=their_error + 2 * ULP32)


def test_embedder_export_against_posenc_and_diffusers(posenc_ops, test_tool, tmp_path):
    """DiT's TimestepEmbedder: posenc's embedding (bit for bit) through the exported MLP, and
    diffusers' Timesteps + TimestepEmbedding holding the export's weights."""
    exported = export_vision(test_tool, tmp_path, "embedder")
    t = torch.tensor([0.0, 1.0, 250.5, 999.0])
    frequencies = posenc_ops.timestep_embedding(t, 17, True, 0.0)
    assert torch.equal(exported._timestep_embedding(t), frequencies)
    first, second = getattr(exported.mlp, "0"), getattr(exported.mlp, "2")
    with torch.no_grad():
        hidden = torch.nn.functional.silu(torch.nn.functional.linear(frequencies, first.weight, first.bias))
        expected = torch.nn.functional.linear(hidden, second.weight, second.bias)
        # SiLU as x * sigmoid(x): each hidden value within 2^-22 relative, summed by the Linear
        bound = (hidden.abs() @ second.weight.abs().t() * 2.0 ** -22).max().item() + expected.abs().max().item() * 2.0 ** -23
        assert_within(exported(t), expected, bound)
    diffusers = pytest.importorskip("diffusers", reason="diffusers is installed in the pip test environment only")
    projection = diffusers.models.embeddings.Timesteps(17, flip_sin_to_cos=True, downscale_freq_shift=0)
    embedder = diffusers.models.embeddings.TimestepEmbedding(17, 24)
    with torch.no_grad():
        embedder.linear_1.weight.copy_(first.weight)
        embedder.linear_1.bias.copy_(first.bias)
        embedder.linear_2.weight.copy_(second.weight)
        embedder.linear_2.bias.copy_(second.bias)
        theirs = embedder(projection(t))
        truth = embedder.double()(timestep_truth(t, 17, True, 0, 1, 10000))
        ours = exported(t)
    ours_error = (ours.double() - truth).abs().max().item()
    their_error = (theirs.double() - truth).abs().max().item()
    assert ours_error <= max(their_error, 1e-6)
    torch.testing.assert_close(ours.double(), theirs.double(), rtol=0, atol=their_error + 1e-6)


@pytest.mark.parametrize("case", ["axial_flux", "axial_half_split_heads_first"])
def test_axial_export_against_posenc_operators(posenc_ops, test_tool, tmp_path, case):
    exported = export_vision(test_tool, tmp_path, case)
    s = VISION_CASES[case][2]
    generator = torch.Generator().manual_seed(6)
    length = 7
    for ids in (torch.randint(-30, 100, (length, 3), generator=generator), torch.randn(length, 3, generator=generator, dtype=torch.float64) * 100):
        for dtype in (torch.float32, torch.float64):
            cos, sin = posenc_ops.axial_rotary_tables(ids, s["axes_dim"], s["theta"], dtype)
            ours = exported.tables(ids, dtype)
            assert_within(ours[0], cos, table_tolerance(dtype))
            assert_within(ours[1], sin, table_tolerance(dtype))
            shape = (2, 4, length, 16) if s["heads_first"] else (2, length, 4, 16)
            x = torch.randn(shape, generator=generator, dtype=dtype)
            expected = posenc_ops.apply_rotary(x, cos, sin, 0, None, s["interleaved"], s["heads_first"])
            assert_within(exported(x, ids), expected, rotation_tolerance(x))


def vision_reference(posenc_ops, s, x, grid, dtype):
    """posenc's operators as VisionRotaryEmbedding composes them: grid_ids, axial_rotary_tables
    of {dim / 2, dim / 2}, apply_rotary on the tokens after the prefix."""
    ids = posenc_ops.grid_ids(grid, s["ref_feat_shape"], s["grid_offset"], s["grid_indexing"])
    cos, sin = posenc_ops.axial_rotary_tables(ids, s["axes_dim"], s["temperature"], dtype)
    along = 2 if s["heads_first"] else 1
    prefix = s["num_prefix_tokens"]
    rotated = posenc_ops.apply_rotary(x.narrow(along, prefix, grid[0] * grid[1]), cos, sin, 0, None, s["interleaved"], s["heads_first"])
    return ids, (cos, sin), torch.cat([x.narrow(along, 0, prefix), rotated], along)


@pytest.mark.parametrize("case", ["vision_eva02", "vision_every_option", "vision_no_prefix"])
def test_vision_export_against_posenc_operators(posenc_ops, test_tool, tmp_path, case):
    exported = export_vision(test_tool, tmp_path, case)
    s = VISION_CASES[case][2]
    generator = torch.Generator().manual_seed(7)
    for grid in ([3, 5], [6, 4], [1, 1]):
        tokens = s["num_prefix_tokens"] + grid[0] * grid[1]
        for dtype in (torch.float32, torch.float64):
            shape = (2, 3, tokens, s["dim"] + 2) if s["heads_first"] else (2, tokens, 3, s["dim"] + 2)
            x = torch.randn(shape, generator=generator, dtype=dtype)
            ids, (cos, sin), expected = vision_reference(posenc_ops, s, x, grid, dtype)
            assert torch.equal(exported._grid_ids(grid, torch.device("cpu")), ids)
            ours = exported.tables(grid, dtype)
            assert_within(ours[0], cos, table_tolerance(dtype))
            assert_within(ours[1], sin, table_tolerance(dtype))
            assert_within(exported(x, grid), expected, rotation_tolerance(x))


@pytest.mark.parametrize("case", ["vision_eva02", "vision_every_option"])
def test_vision_export_against_timm_rotary_embedding_cat(test_tool, tmp_path, case):
    """timm's RotaryEmbeddingCat(in_pixels=False) with apply_rot_embed_cat on the patch tokens, as
    EVA-02's attention uses it (see test_vision.py): float32 bands and angles in timm (error about
    |angle| 2^-24), float64 ones rounded once in the export."""
    pytest.importorskip("timm", reason="timm is installed in the pip test environment only")
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, apply_rot_embed_cat

    exported = export_vision(test_tool, tmp_path, case)
    s = VISION_CASES[case][2]
    dim, prefix, half = s["dim"], s["num_prefix_tokens"], not s["interleaved"]
    for grid in ([7, 12], [16, 16]):
        rope = RotaryEmbeddingCat(dim, temperature=s["temperature"], in_pixels=False, feat_shape=grid, ref_feat_shape=s["ref_feat_shape"] or None,
                                  grid_offset=s["grid_offset"], grid_indexing=s["grid_indexing"], rotate_half=half)
        embed = rope.get_embed()
        cos, sin = exported.tables(grid)
        cos64, sin64 = exported.tables(grid, torch.float64)

        def layout(t):
            return torch.cat([t, t], -1) if half else t.repeat_interleave(2, -1)

        for ours, theirs, truth in ((cos, embed[:, dim:], cos64), (sin, embed[:, :dim], sin64)):
            ours_error = (layout(ours).double() - layout(truth)).abs().max().item()
            their_error = (theirs.double() - layout(truth)).abs().max().item()
            assert ours_error <= max(their_error, ULP32)
            torch.testing.assert_close(layout(ours).double(), theirs.double(), rtol=0, atol=their_error + ULP32)
        q = torch.randn(2, 3, prefix + grid[0] * grid[1], dim, generator=torch.Generator().manual_seed(8))  # [B, heads, N, head_dim]
        theirs = torch.cat([q[:, :, :prefix], apply_rot_embed_cat(q[:, :, prefix:], embed, half=half)], 2)
        truth = torch.cat([q[:, :, :prefix].double(), apply_rot_embed_cat(q[:, :, prefix:].double(), torch.cat([layout(sin64), layout(cos64)], 1), half=half)], 2)
        ours = exported(q, grid) if s["heads_first"] else exported(q.transpose(1, 2), grid).transpose(1, 2)
        ours_error = (ours.double() - truth).abs().max().item()
        their_error = (theirs.double() - truth).abs().max().item()
        assert ours_error <= max(their_error, 2e-6), (ours_error, their_error)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=their_error + 4e-6)


def test_vision_exports_load_without_posenc(test_tool, tmp_path):
    """A fresh interpreter that never loads libposenc runs the four exports."""
    paths = {case: tmp_path / f"{case}.pt" for case in ("timesteps_default", "embedder", "axial_flux", "vision_every_option")}
    for case, path in paths.items():
        kind, flags, _ = VISION_CASES[case]
        test_tool("export-vision", kind, *flags, path)
    script = textwrap.dedent(f"""
        import torch
        paths = {({case: str(path) for case, path in paths.items()})!r}
        t = torch.tensor([0.0, 999.0])
        assert torch.jit.load(paths["timesteps_default"])(t).shape == (2, 64)
        assert torch.jit.load(paths["embedder"])(t).shape == (2, 24)
        axial = torch.jit.load(paths["axial_flux"])
        assert axial(torch.randn(1, 4, 2, 12), torch.zeros(4, 3, dtype=torch.long)).shape == (1, 4, 2, 12)
        assert axial.tables(torch.zeros(4, 3), torch.float64)[0].dtype == torch.float64
        vision = torch.jit.load(paths["vision_every_option"])
        assert vision(torch.randn(1, 2 + 6, 2, 16), [2, 3]).shape == (1, 8, 2, 16)
        assert vision.tables([2, 3])[0].shape == (6, 8)
        assert not any("posenc" in name for name in torch.ops.loaded_libraries)
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
