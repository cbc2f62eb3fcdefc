"""safetensors files both ways against Python's own safetensors package (pinned in scripts/setup.sh):
files written by posenc (posenc::write_safetensors / save_safetensors through the test tool, and
`posenc export --format safetensors`) load with safetensors.torch.load_file, and files written by
safetensors.torch.save_file load in posenc."""

import subprocess

import pytest
import torch

from reference import reference_table

st = pytest.importorskip("safetensors.torch", reason="the safetensors package is installed in the pip test environment only (scripts/setup.sh)")


def load_pickle(path):
    # What the test tool wrote with torch::pickle_save: typed dicts need torch.jit's type tags,
    # which weights_only loading refuses; the file is the test's own.
    return torch.load(str(path), weights_only=False)


def dtypes():
    # Every dtype both safetensors and this torch have (posenc's LibTorch is the same version).
    names = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool", "complex64", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"]
    return [getattr(torch, name) for name in names if hasattr(torch, name)]


def sample(dtype, shape, generator):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=torch.complex64 if dtype.is_complex else torch.float32).to(dtype)
    return torch.randint(0, 120, shape, generator=generator).to(dtype)


def same_bits(a, b):
    # Bitwise: float8 and the unsigned dtypes have no torch.equal on every version; NaN payloads count.
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.reshape(-1).contiguous().view(torch.uint8).equal(b.reshape(-1).contiguous().view(torch.uint8))


def every_dtype_tensors():
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for dtype in dtypes():
        name = str(dtype).replace("torch.", "")
        tensors[f"{name}.matrix"] = sample(dtype, (3, 5), generator)
        tensors[f"{name}.empty"] = sample(dtype, (0, 4), generator)
        tensors[f"{name}.scalar"] = sample(dtype, (), generator)
    return tensors


METADATA = {"format": "pt", "note": "written by Python, read by posenc"}


def test_python_file_reads_in_posenc_with_equal_values_and_metadata(test_tool, tmp_path):
    # The values come back through torch::pickle_save, which torch.load cannot read for float8,
    # uint16, uint32 and uint64 (no legacy storage classes); those are read by posenc in the two
    # tests below, which compare the bytes it writes again with Python's.
    unpicklable = (torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32, torch.uint64) if hasattr(torch, "uint16") else ()
    tensors = {name: tensor for name, tensor in every_dtype_tensors().items() if tensor.dtype not in unpicklable}
    st.save_file(tensors, str(tmp_path / "python.safetensors"), metadata=METADATA)
    test_tool("safetensors-to-pickle", tmp_path / "python.safetensors", tmp_path / "out.pt")
    read, metadata = load_pickle(tmp_path / "out.pt")
    assert metadata == METADATA
    assert sorted(read) == sorted(tensors)
    for name, tensor in tensors.items():
        assert same_bits(read[name], tensor), name


def test_posenc_rewrites_python_files_byte_for_byte(test_tool, tmp_path):
    # posenc lays files out as save_file does (dtype widest first, then name; __metadata__ first;
    # padding to 8 bytes), so reading and writing again gives the same bytes. One metadata key:
    # the order of several is the Rust HashMap's.
    st.save_file(every_dtype_tensors(), str(tmp_path / "python.safetensors"), metadata={"format": "pt"})
    test_tool("safetensors-copy", tmp_path / "python.safetensors", tmp_path / "posenc.safetensors")
    assert (tmp_path / "posenc.safetensors").read_bytes() == (tmp_path / "python.safetensors").read_bytes()


def test_posenc_file_loads_with_load_file(test_tool, tmp_path):
    tensors = every_dtype_tensors()
    st.save_file(tensors, str(tmp_path / "python.safetensors"), metadata=METADATA)
    test_tool("safetensors-copy", tmp_path / "python.safetensors", tmp_path / "posenc.safetensors")
    loaded = st.load_file(str(tmp_path / "posenc.safetensors"))
    assert sorted(loaded) == sorted(tensors)
    for name, tensor in tensors.items():
        assert same_bits(loaded[name], tensor), name
    with open(tmp_path / "posenc.safetensors", "rb") as handle:
        assert st.load(handle.read()).keys() == tensors.keys()
    from safetensors import safe_open

    with safe_open(str(tmp_path / "posenc.safetensors"), framework="pt") as handle:
        assert handle.metadata() == METADATA


@pytest.mark.parametrize("kind", ["learned", "t5", "token", "conformer"])
def test_module_saved_by_posenc_loads_with_load_file(test_tool, tmp_path, kind):
    test_tool("save-module-safetensors", kind, "--seed", 3, tmp_path / "module.safetensors", tmp_path / "state.pt")
    expected = load_pickle(tmp_path / "state.pt")
    loaded = st.load_file(str(tmp_path / "module.safetensors"))
    assert list(sorted(loaded)) == list(sorted(expected))
    for name in expected:
        assert torch.equal(loaded[name], expected[name]), name


@pytest.mark.parametrize("kind", ["learned", "t5", "token", "conformer"])
def test_module_loads_a_file_from_save_file(test_tool, tmp_path, kind):
    # The keys and shapes come from posenc's own state dict; the values are new, from Python.
    test_tool("save-module-safetensors", kind, tmp_path / "template.safetensors", tmp_path / "template.pt")
    template = load_pickle(tmp_path / "template.pt")
    generator = torch.Generator().manual_seed(1)
    state = {name: torch.randn(tensor.shape, generator=generator).to(tensor.dtype) for name, tensor in template.items()}
    st.save_file({f"encoder.{name}": tensor for name, tensor in state.items()}, str(tmp_path / "python.safetensors"))
    test_tool("load-module-safetensors", kind, "--prefix", "encoder.", tmp_path / "python.safetensors", tmp_path / "loaded.pt")
    loaded = load_pickle(tmp_path / "loaded.pt")
    assert sorted(loaded) == sorted(state)
    for name in state:
        assert torch.equal(loaded[name], state[name]), name


def test_module_load_of_a_mismatching_python_file_fails(test_tool, tmp_path):
    st.save_file({"weight": torch.zeros(4, 6)}, str(tmp_path / "python.safetensors"))
    result = test_tool("load-module-safetensors", "learned", tmp_path / "python.safetensors", tmp_path / "out.pt", expect_failure=True)
    assert "load_safetensors: size mismatch for 'weight': the file has shape [4, 6], the module has [10, 6]" in result.stderr
    assert not (tmp_path / "out.pt").exists()


def test_file_python_rejects_is_rejected_by_posenc(test_tool, tmp_path):
    st.save_file({"x": torch.arange(4.0)}, str(tmp_path / "good.safetensors"))
    data = (tmp_path / "good.safetensors").read_bytes()
    (tmp_path / "trailing.safetensors").write_bytes(data + b"\0")
    with pytest.raises(Exception):
        st.load_file(str(tmp_path / "trailing.safetensors"))
    result = test_tool("safetensors-to-pickle", tmp_path / "trailing.safetensors", tmp_path / "out.pt", expect_failure=True)
    assert "the last 1 of the 17 data bytes belong to no tensor" in result.stderr


def test_cli_exports_the_sinusoidal_table(posenc_cli, tmp_path):
    path = tmp_path / "pe.safetensors"
    args = [posenc_cli, "export", "--format", "safetensors", "--max-len", 16, "--d-model", 8, "-o", path]
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "safetensors state dict of posenc::PositionalEncoding(d_model=8, max_len=16" in result.stdout
    loaded = st.load_file(str(path))
    assert list(loaded) == ["pe"]
    # posenc's table is computed in float64 and rounded once: within float32 rounding of the
    # float64 reference.
    torch.testing.assert_close(loaded["pe"], reference_table(16, 8, 10000.0, dtype=torch.float64).float().unsqueeze(0), rtol=0, atol=1e-7)
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    assert metadata["format"] == "pt"
    assert metadata["posenc.module"].startswith("posenc::PositionalEncoding(d_model=8, max_len=16")


def test_cli_exports_the_rotary_tables(posenc_cli, tmp_path):
    path = tmp_path / "rope.safetensors"
    args = [posenc_cli, "export", "--module", "rotary", "--format", "safetensors", "--max-len", 12, "--head-dim", 8, "-o", path]
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded = st.load_file(str(path))
    assert sorted(loaded) == ["cos", "sin"]
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angles = torch.arange(12, dtype=torch.float64)[:, None] * inv_freq[None, :]
    # The caches [max_len, head_dim / 2], computed in float64 and rounded once.
    torch.testing.assert_close(loaded["cos"], angles.cos().float(), rtol=0, atol=1e-7)
    torch.testing.assert_close(loaded["sin"], angles.sin().float(), rtol=0, atol=1e-7)
