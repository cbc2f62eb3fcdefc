// Uses the installed posenc package: builds a module, runs it, and checks one value against the
// formula. Exits non-zero on any mismatch.

#include <posenc/posenc.h>

#include <cmath>
#include <iostream>

int main() {
  posenc::PositionalEncoding pe(posenc::PositionalEncodingOptions(6, 8));
  const at::Tensor y = pe(at::zeros({1, 8, 6}));
  const double value = y[0][3][1].item<double>();
  const double expected = std::cos(3.0);
  std::cout << "posenc " << POSENC_VERSION << ": " << *pe << "\nPE(3, 1) = " << value << "\n";
  if (std::fabs(value - expected) > 1e-7) {
    std::cerr << "expected cos(3) = " << expected << "\n";
    return 1;
  }
  return 0;
}
