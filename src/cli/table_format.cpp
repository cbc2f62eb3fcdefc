#include "cli/table_format.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

namespace posenc {
namespace cli {

namespace {

std::string format_value(const char* spec, int digits, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), spec, digits, value);
  return buffer;
}

std::vector<double> values_of(const at::Tensor& table) {
  TORCH_CHECK(table.dim() == 2, "format: expected a 2-D table, but got ", table.dim(), "-D");
  const at::Tensor t = table.to(at::kDouble).contiguous();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

} // namespace

std::string format_python(const at::Tensor& table, int decimals) {
  const std::vector<double> values = values_of(table);
  const int64_t rows = table.size(0);
  const int64_t cols = table.size(1);
  std::vector<std::string> cells;
  cells.reserve(values.size());
  size_t width = 0;
  for (const double v : values) {
    cells.push_back(format_value("%.*f", decimals, v));
    width = std::max(width, cells.back().size());
  }
  std::ostringstream out;
  out << "tensor([";
  for (int64_t r = 0; r < rows; ++r) {
    out << (r == 0 ? "[" : ",\n        [");
    for (int64_t c = 0; c < cols; ++c) {
      const std::string& cell = cells[static_cast<size_t>(r * cols + c)];
      out << (c == 0 ? "" : ", ") << std::string(width - cell.size(), ' ') << cell;
    }
    out << "]";
  }
  out << "])";
  return out.str();
}

std::string format_csv(const at::Tensor& table, int significant) {
  const std::vector<double> values = values_of(table);
  const int64_t cols = table.size(1);
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) {
    out << format_value("%.*g", significant, values[i])
        << ((static_cast<int64_t>(i) + 1) % cols == 0 ? "\n" : ",");
  }
  return out.str();
}

} // namespace cli
} // namespace posenc
