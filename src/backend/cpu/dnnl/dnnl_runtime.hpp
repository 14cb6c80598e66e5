#pragma once
// oneDNN on the CPU backend: the engine and a stream per thread, and the error translation for
// oneDNN calls. Internal: includes dnnl.hpp; compiled only in builds with oneDNN (DPL_WITH_DNNL).

#include <dnnl.hpp>

#include <functional>

namespace dpl::backend::cpu_detail {

/// The CPU engine every oneDNN primitive of dpl runs on (created on first use).
dnnl::engine& dnnl_engine();
/// The calling thread's stream on dnnl_engine(): oneDNN streams are not shared between threads.
dnnl::stream& dnnl_stream();

/// Runs f (which creates or executes oneDNN primitives for op) and turns a dnnl::error into a
/// dpl::Error naming op and oneDNN's message.
void dnnl_call(const char* op, const std::function<void()>& f);

}  // namespace dpl::backend::cpu_detail
