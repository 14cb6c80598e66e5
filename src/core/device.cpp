#include "dpl/core/device.hpp"

namespace dpl {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

bool cuda_is_available() { return cuda_device_count() > 0; }

}  // namespace dpl
