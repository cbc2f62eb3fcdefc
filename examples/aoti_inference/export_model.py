"""Exports a small attention encoder that uses posenc's operators with torch.export (batch size and
sequence length dynamic) and compiles it with AOTInductor into a package that C++ loads with
torch::inductor::AOTIModelPackageLoader (main.cpp). Also writes two example inputs (of different
lengths) and the eager model's outputs, for main.cpp to compare against.

    python export_model.py --output-dir OUT     # with the posenc package installed
    python export_model.py --library build/pip/src/libposenc.so --output-dir OUT  # from a build tree
    # OUT/encoder.pt2, OUT/examples.pt

Needs torch >= 2.6 (torch._inductor.aoti_compile_and_package) and a C++ compiler.
"""

import argparse
import os
import sys

import torch


def import_posenc(library):
    """The Python package (pip install --no-build-isolation . from the repository root); from a
    build tree, python/ and the built library (--library) serve as well."""
    if library:
        os.environ["POSENC_LIBRARY"] = os.path.abspath(library)
    try:
        import posenc
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
        import posenc
    return posenc


def make_encoder(posenc, d_model=64, heads=4, max_len=256):
    class Encoder(torch.nn.Module):
        """Token features [B, L, D] -> one attention layer: posenc.nn's sinusoidal encoding added
        to the input, its rotary embedding (a cos/sin cache of `max_len` positions) on the queries
        and keys in one call, and an ALiBi bias built at the input's length (a symbol of the
        exported program: alibi_bias takes SymInt lengths)."""

        def __init__(self):
            super().__init__()
            self.heads = heads
            self.inp = torch.nn.Linear(d_model, d_model)
            self.positions = posenc.nn.PositionalEncoding(d_model, max_len)
            self.qkv = torch.nn.Linear(d_model, 3 * d_model)
            self.rope = posenc.nn.RotaryEmbedding(d_model // heads, max_len)
            self.alibi = posenc.nn.ALiBi(heads)
            self.out = torch.nn.Linear(d_model, d_model)

        def forward(self, x):
            batch, length, width = x.shape
            h = self.positions(self.inp(x))
            q, k, v = self.qkv(h).view(batch, length, 3, self.heads, width // self.heads).unbind(2)
            q, k = self.rope.forward_qk(q, k)
            attention = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=self.alibi(length, length))
            return self.out(attention.transpose(1, 2).reshape(batch, length, width))

    return Encoder()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", help="libposenc.so of a build tree (default: the installed package's)")
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()
    posenc = import_posenc(args.library)
    torch.manual_seed(0)
    model = make_encoder(posenc).eval()
    example = torch.randn(2, 16, 64)
    batch = torch.export.Dim("batch", min=1, max=1024)
    length = torch.export.Dim("length", min=1, max=256)  # the rotary cache holds 256 positions
    program = torch.export.export(model, (example,), dynamic_shapes={"x": {0: batch, 1: length}})
    os.makedirs(args.output_dir, exist_ok=True)
    package = torch._inductor.aoti_compile_and_package(
        program, package_path=os.path.join(args.output_dir, "encoder.pt2"))
    inputs = [torch.randn(2, 7, 64), torch.randn(3, 200, 64)]
    with torch.no_grad():
        outputs = [model(x) for x in inputs]
    # the same package run from Python, as a check of the export itself
    compiled = torch._inductor.aoti_load_package(package)
    for x, y in zip(inputs, outputs):
        torch.testing.assert_close(compiled(x), y, rtol=1e-5, atol=1e-5)
    torch.save({"inputs": inputs, "outputs": outputs}, os.path.join(args.output_dir, "examples.pt"))
    print(f"wrote {package}")


if __name__ == "__main__":
    main()
