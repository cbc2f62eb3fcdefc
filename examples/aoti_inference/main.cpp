// Runs an AOTInductor package of a model that uses posenc's operators (export_model.py) from C++:
// torch::inductor::AOTIModelPackageLoader loads the compiled model; its posenc calls are
// dispatched to libposenc, which this program links (including <posenc/ops.h> keeps it linked).
// Compares the outputs with the eager model's, saved by export_model.py.
//
//   aoti_inference encoder.pt2 examples.pt

#include <posenc/ops.h>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt2 EXAMPLES.pt\n";
    return 2;
  }
  try {
    torch::inductor::AOTIModelPackageLoader model(argv[1]);
    std::ifstream file(argv[2], std::ios::binary);
    if (!file) {
      std::cerr << "cannot open " << argv[2] << "\n";
      return 2;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                  std::istreambuf_iterator<char>());
    const c10::Dict<c10::IValue, c10::IValue> examples = torch::jit::pickle_load(bytes).toGenericDict();
    const c10::List<c10::IValue> inputs = examples.at("inputs").toList();
    const c10::List<c10::IValue> outputs = examples.at("outputs").toList();
    bool all_close = true;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor x = inputs.get(i).toTensor();
      const at::Tensor expected = outputs.get(i).toTensor();
      const at::Tensor y = model.run({x}).at(0);
      // The compiled model fuses and reorders float32 arithmetic: agreement to float32 rounding.
      const bool close = y.sizes() == expected.sizes() && y.allclose(expected, 1e-5, 1e-5);
      std::cout << "input " << x.sizes() << " -> output " << y.sizes() << ", max |aoti - eager| = "
                << (y.sizes() == expected.sizes() ? (y - expected).abs().max().item<double>() : -1.0)
                << (close ? "" : "  MISMATCH") << "\n";
      all_close = all_close && close;
    }
    return all_close ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n";
    return 1;
  }
}
