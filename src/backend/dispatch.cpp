#include "backend/dispatch.hpp"

#include <cctype>
#include <string>
#include <vector>

#include "backend/cuda_api.hpp"
#include "dpl/config.hpp"
#include "dpl/core/error.hpp"

namespace dpl::backend::dispatch_detail {

namespace {

// The parameter names of a declared signature such as "void(const Tensor& x, Tensor& y)", so
// that messages name the arguments as the declaration does. Only reached when a call fails.
std::vector<std::string> parameter_names(const char* signature) {
  std::vector<std::string> names;
  const std::string s(signature);
  const std::size_t open = s.find('(');
  const std::size_t close = s.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close <= open) return names;
  std::size_t pos = open + 1;
  while (pos <= close) {
    std::size_t end = s.find(',', pos);
    if (end == std::string::npos || end > close) end = close;
    std::size_t last = end;
    while (last > pos && s[last - 1] == ' ') --last;
    std::size_t first = last;
    while (first > pos && (std::isalnum(static_cast<unsigned char>(s[first - 1])) || s[first - 1] == '_')) --first;
    names.push_back(s.substr(first, last - first));
    pos = end + 1;
  }
  return names;
}

std::string arg_name(const char* signature, int position) {
  const std::vector<std::string> names = parameter_names(signature);
  if (position >= 0 && static_cast<std::size_t>(position) < names.size() && !names[position].empty()) {
    return names[static_cast<std::size_t>(position)];
  }
  return "argument " + std::to_string(position + 1);
}


void check_dtypes(const char* kernel, const char* signature, DTypeRule rule, const TensorArg* ts, int nt) {
  const TensorArg* first = nullptr;  // the first tensor the rule applies to
  for (int i = 0; i < nt; ++i) {
    const Tensor& t = *ts[i].tensor;
    if (rule.int32_tensors & (std::uint32_t{1} << i)) {
      DPL_CHECK(t.dtype() == kInt32, kernel, ": expected ", arg_name(signature, ts[i].position),
                " of dtype int32, got ", t.dtype());
      continue;
    }
    if (rule.int64_tensors & (std::uint32_t{1} << i)) {
      DPL_CHECK(t.dtype() == kInt64, kernel, ": expected ", arg_name(signature, ts[i].position),
                " of dtype int64, got ", t.dtype());
      continue;
    }
    if (rule.float32_tensors & (std::uint32_t{1} << i)) {
      DPL_CHECK(t.dtype() == kFloat32, kernel, ": expected ", arg_name(signature, ts[i].position),
                " of dtype float32, got ", t.dtype());
      continue;
    }
    // A widened tensor that is float32 is left out of the rule (and is not the first it compares with).
    if ((rule.widened_tensors & (std::uint32_t{1} << i)) && t.dtype() == kFloat32) continue;
    switch (rule.kind) {
      case DTypeRule::Kind::kAny: break;
      case DTypeRule::Kind::kFloat32:
        DPL_CHECK(t.dtype() == kFloat32, kernel, ": expected ", arg_name(signature, ts[i].position),
                  " of dtype float32, got ", t.dtype());
        break;
      case DTypeRule::Kind::kFloating:
      case DTypeRule::Kind::kFloatingEach:
        DPL_CHECK(is_float_dtype(t.dtype()), kernel, ": expected ", arg_name(signature, ts[i].position),
                  " of dtype float32, bfloat16 or float16, got ", t.dtype());
        [[fallthrough]];
      case DTypeRule::Kind::kSame:
        if (rule.kind == DTypeRule::Kind::kFloatingEach) break;
        if (first == nullptr) {
          first = &ts[i];
        } else {
          DPL_CHECK(t.dtype() == first->tensor->dtype(), kernel, ": expected ", arg_name(signature, ts[i].position),
                    " of dtype ", first->tensor->dtype(), " like ", arg_name(signature, first->position), ", got ",
                    t.dtype());
        }
        break;
    }
  }
}

}  // namespace

Device check_call(const char* kernel, const char* signature, DTypeRule rule, const TensorArg* ts, int nt,
                  const Device* ds, int nd) {
  for (int i = 0; i < nt; ++i) {
    DPL_CHECK(ts[i].tensor->defined(), kernel, ": ", arg_name(signature, ts[i].position), " is undefined");
  }
  const Device device = nt > 0 ? ts[0].tensor->device() : ds[0];
  for (int i = 1; i < nt; ++i) {
    const Device d = ts[i].tensor->device();
    DPL_CHECK(d == device, kernel, ": expected every tensor on one device, got ", arg_name(signature, ts[0].position),
              " on ", device, " and ", arg_name(signature, ts[i].position), " on ", d);
  }
  for (int i = 0; i < nd; ++i) {
    DPL_CHECK(ds[i] == device, kernel, ": expected the tensors on the device the call names, ", ds[i], ", got ",
              device);
  }
  if (rule.kind != DTypeRule::Kind::kAny || rule.int32_tensors != 0 || rule.float32_tensors != 0 ||
      rule.int64_tensors != 0)
    check_dtypes(kernel, signature, rule, ts, nt);
  return device;
}

void no_implementation(const char* kernel, Device device) {
  if (device.is_cuda() && !DPL_WITH_CUDA) DPL_FAIL(kernel, ": device ", device, " was requested, but ", kNoCudaBackend);
  DPL_FAIL(kernel, ": no implementation for ", device, " is registered in this build");
}

}  // namespace dpl::backend::dispatch_detail
