#include "backend/cpu/dnnl/dnnl_runtime.hpp"

#include "dpl/core/error.hpp"

namespace dpl::backend::cpu_detail {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

void dnnl_call(const char* op, const std::function<void()>& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    DPL_FAIL(op, ": oneDNN failed: ", e.what(), " (status ", static_cast<int>(e.status), ")");
  }
}

}  // namespace dpl::backend::cpu_detail
