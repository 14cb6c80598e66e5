#include "dpl/tensor/storage.hpp"

#include "backend/kernels.hpp"
#include "dpl/core/error.hpp"

namespace dpl {

Storage::Storage(void* data, std::size_t nbytes, Device device, Deleter deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_ && data_) deleter_(data_);
}

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, Device device) {
  void* p = backend::allocate(device, nbytes);
  return std::make_shared<Storage>(p, nbytes, device, [device](void* q) { backend::deallocate(device, q); });
}

}  // namespace dpl
