// Uses the installed posenc package: builds a module, runs it, and checks one value against the
// formula; then calls posenc::load_state_dict from the package's second library, posenc::io, and
// checks its error for a missing file. Exits non-zero on any mismatch.

#include <posenc/io/state_dict.h>
#include <posenc/posenc.h>

#include <c10/util/Exception.h>

#include <cmath>
#include <iostream>
#include <string>

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
  // posenc::io: a file that does not exist is a c10::Error that names it, and the module keeps
  // its table.
  const at::Tensor before = pe->pe.clone();
  const std::string missing = "/nonexistent/posenc_consumer_state.pt";
  try {
    posenc::load_state_dict(*pe, missing, posenc::LoadStateDictOptions().strict(false));
    std::cerr << "load_state_dict of a missing file did not throw\n";
    return 1;
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    if (message.find("load_state_dict: cannot open '" + missing + "'") == std::string::npos) {
      std::cerr << "unexpected load_state_dict error: " << message << "\n";
      return 1;
    }
    std::cout << "posenc::io: " << message << "\n";
  }
  if (!pe->pe.equal(before)) {
    std::cerr << "a failed load_state_dict changed the module\n";
    return 1;
  }
  return 0;
}
