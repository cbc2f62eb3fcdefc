"""State dicts saved by Python's torch.save, loaded in C++ with posenc::load_state_dict."""

import pytest
import torch

from reference import ReferencePositionalEncoding


class PythonModel(torch.nn.Module):
    def __init__(self, d_model=12, max_len=40):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, d_model)
        self.pos_encoder = ReferencePositionalEncoding(d_model, max_len)


def test_loads_python_buffer(test_tool, tmp_path):
    python = ReferencePositionalEncoding(12, 40)
    torch.save(python.state_dict(), str(tmp_path / "pe.pt"))
    test_tool("load-pe", "--d-model", 12, "--max-len", 40, tmp_path / "pe.pt", tmp_path / "out.pt")
    assert torch.equal(torch.load(str(tmp_path / "out.pt")), python.pe)


def test_loads_with_prefix_from_a_larger_model(test_tool, tmp_path):
    model = PythonModel()
    torch.save(model.state_dict(), str(tmp_path / "model.pt"))
    test_tool("load-pe", "--d-model", 12, "--max-len", 40, "--prefix", "pos_encoder.", tmp_path / "model.pt", tmp_path / "out.pt")
    assert torch.equal(torch.load(str(tmp_path / "out.pt")), model.pos_encoder.pe)


def test_float64_checkpoint_is_converted(test_tool, tmp_path):
    python = ReferencePositionalEncoding(6, 10, table_dtype=torch.float64)
    torch.save(python.state_dict(), str(tmp_path / "pe.pt"))
    test_tool("load-pe", "--d-model", 6, "--max-len", 10, tmp_path / "pe.pt", tmp_path / "out.pt")
    assert torch.equal(torch.load(str(tmp_path / "out.pt")), python.pe.float())


@pytest.mark.parametrize(
    "state, args, message",
    [
        ({"pe": torch.zeros(1, 30, 12)}, [], "size mismatch for 'pe': the file has shape [1, 30, 12], the module has [1, 40, 12]"),
        ({"other": torch.zeros(3)}, [], "lacks 'pe'"),
        ({"pe": torch.zeros(1, 40, 12), "extra": torch.zeros(1)}, [], "has entries the module does not: 'extra'"),
        ({"pe": torch.zeros(1, 40, 12, dtype=torch.int32)}, [], "dtype mismatch for 'pe': the file has Int"),
        ({"pe": torch.full((1, 40, 12), float("nan"))}, [], "'pe' holds NaN or infinite values"),
        ({"x.pe": torch.zeros(1, 40, 12)}, ["--prefix", "y."], "lacks 'y.pe'"),
        # a view repeating one element into 2^40 (a 1.5 KB file): refused before it is copied
        ({"pe": torch.zeros(1).expand(2 ** 20, 2 ** 20)}, [],
         "repeats the 1 elements of its storage into 1099511627776, over posenc's limit of 2^28"),
    ],
)
def test_rejects_bad_checkpoints(test_tool, tmp_path, state, args, message):
    torch.save(state, str(tmp_path / "bad.pt"))
    result = test_tool("load-pe", "--d-model", 12, "--max-len", 40, *args, tmp_path / "bad.pt", tmp_path / "out.pt", expect_failure=True)
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "out.pt").exists()


def test_non_strict_ignores_unknown_and_missing(test_tool, tmp_path):
    torch.save({"extra": torch.zeros(2)}, str(tmp_path / "partial.pt"))
    test_tool("load-pe", "--d-model", 4, "--max-len", 5, "--non-strict", tmp_path / "partial.pt", tmp_path / "out.pt")
    assert torch.equal(torch.load(str(tmp_path / "out.pt")), torch.full((1, 5, 4), -7.0))


def test_rejects_files_that_are_not_state_dicts(test_tool, tmp_path):
    torch.save([torch.zeros(2)], str(tmp_path / "list.pt"))
    result = test_tool("load-pe", "--d-model", 4, "--max-len", 5, tmp_path / "list.pt", tmp_path / "out.pt", expect_failure=True)
    assert "not a state dict" in result.stderr
    (tmp_path / "junk.pt").write_bytes(b"this is not a checkpoint")
    result = test_tool("load-pe", "--d-model", 4, "--max-len", 5, tmp_path / "junk.pt", tmp_path / "out.pt", expect_failure=True)
    assert "is not a readable torch.save file" in result.stderr
