"""The TorchScript file written by ``posenc export`` (posenc::to_torchscript) in plain PyTorch."""

import subprocess
import sys
import textwrap

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
