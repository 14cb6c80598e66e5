#include "dpl/core/shape.hpp"

#include <sstream>

namespace dpl {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  std::int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ',';
  os << ')';
  return os.str();
}

}  // namespace dpl
