#include "backend/cuda/cudnn/graph_plan.hpp"

#include <algorithm>

namespace dpl::backend::cuda_detail {

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::kFloat16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

std::int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::int64_t align = 16;
  while (align > 1 && a % static_cast<std::uintptr_t>(align) != 0) align /= 2;
  return align;
}

Descriptor tensor_descriptor(std::int64_t uid, const Shape& shape, const Strides& strides, std::int64_t alignment,
                             DType dtype) {
  Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = cudnn_type(dtype);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, shape.data(), static_cast<std::int64_t>(shape.size()))
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), static_cast<std::int64_t>(strides.size()))
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
  d.finalize();
  return d;
}

std::vector<Descriptor> engine_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (!heur.try_finalize()) return {};
  std::int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS)
    return {};
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  std::int64_t returned = 0;
  if (count == 0 || cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                             count, &returned, raw.data()) != CUDNN_STATUS_SUCCESS)
    return {};
  configs.erase(configs.begin() + std::min(returned, count), configs.end());
  return configs;
}

bool acceptable(const Descriptor& config, DType dtype, bool tf32, bool benchmark) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  std::int64_t got = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                               &e) != CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  std::int64_t n = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (std::int64_t i = 0; i < n; ++i) {
    if (dtype == kFloat32 && !tf32 &&
        (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
      return false;
    if (!benchmark && notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
  }
  return true;
}

std::unique_ptr<Descriptor> finalize_plan(const Descriptor& config, cudnnHandle_t handle, std::int64_t* workspace) {
  auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  cudnnBackendDescriptor_t c = config.get();
  plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle)
      .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &c);
  if (!plan->try_finalize()) return nullptr;
  std::int64_t got = 0;
  if (cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                               workspace) != CUDNN_STATUS_SUCCESS)
    return nullptr;
  return plan;
}

bool execute(cudnnHandle_t handle, const Descriptor& plan, const std::int64_t* uids, void** pointers, int count,
             void* workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers, count)
      .set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, count)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
  if (!pack.try_finalize()) return false;
  return cudnnBackendExecute(handle, plan.get(), pack.get()) == CUDNN_STATUS_SUCCESS;
}

}  // namespace dpl::backend::cuda_detail
