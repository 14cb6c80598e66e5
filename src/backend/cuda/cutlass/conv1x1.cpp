// A 1×1 stride-1 convolution of channels-last images is a matrix product: the N·H·W pixels are the
// rows of x (N·H·W × C, C contiguous) and of y (N·H·W × O), and the weight (O, C, 1, 1) is O × C.
// So its forward pass runs on gemm_column_sums, whose epilogue also gives the batch norm after it
// its statistics. Everything else is left to cuDNN.
#include "backend/cuda/cutlass/conv1x1.hpp"

#include <initializer_list>
#include <limits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cutlass/gemm_column_sums.hpp"
#include "backend/cuda/cutlass/gemm_masked_grad.hpp"
#include "backend/cuda_api.hpp"
#include "dpl/core/settings.hpp"

namespace dpl::backend::cuda_detail {
namespace {

// NHWC strides, packed (is_channels_last), and a start TMA can load from.
bool packed_channels_last(const Tensor& t) { return t.is_channels_last() && aligned16(t.raw_data()); }

// What the product needs: x (N, C, H, W) and the output y (N, O, H, W) packed channels-last in one
// dtype (16-bit, or float32 where `tf32` says the product may multiply it as TF32), a 1×1 stride-1
// unpadded ungrouped weight shape (O, C, 1, 1), channel counts that are multiples of 8, rows that
// fit an int, and a device it runs on.
bool fits(const Tensor& x, const Tensor& y, const Shape& w, const Conv2dParams& p, bool tf32) {
  const DType t = x.dtype();
  if ((t != kBFloat16 && t != kFloat16 && !(t == kFloat32 && tf32)) || y.dtype() != t) return false;
  if (w.size() != 4 || w[2] != 1 || w[3] != 1 || p.stride[0] != 1 || p.stride[1] != 1 || p.padding[0] != 0 ||
      p.padding[1] != 0 || p.groups != 1)
    return false;
  const std::int64_t rows = x.size(0) * x.size(2) * x.size(3), c = x.size(1), o = w[0];
  if (c % 8 != 0 || o % 8 != 0 || rows == 0 || rows > std::numeric_limits<int>::max() / 2) return false;
  if (!packed_channels_last(x) || !packed_channels_last(y)) return false;
  return conv1x1_cutlass_runs_on(x.device().index);
}

// `bytes` bytes on `device` (none for 0), their start in *start; the caller keeps the tensor until
// the launch that uses them is queued (the allocator orders reuse on the stream).
Tensor device_bytes(std::size_t bytes, const Device& device, void** start) {
  if (bytes == 0) return Tensor();
  Tensor t = Tensor::empty({static_cast<std::int64_t>(bytes)}, TensorOptions(kUInt8, device));
  *start = t.raw_data();
  return t;
}

// Scratch for the per-tile partials of an m × n product and the fold's rows, with their starts in p,
// and how the fold may run.
Tensor partials_scratch(int m, int n, const Device& device, ColumnPartials& p) {
  const GemmSumsLayout layout = gemm_column_sums_layout(m, n);
  const std::int64_t tile_floats = static_cast<std::int64_t>(layout.rows) * layout.pitch;
  const std::int64_t fold_floats = layout.splits > 1 ? static_cast<std::int64_t>(layout.splits) * layout.pitch : 0;
  Tensor scratch = Tensor::empty({2 * (tile_floats + fold_floats)}, TensorOptions(kFloat32, device));
  p.a = scratch.data<float>();
  p.b = p.a + tile_floats;
  p.fold_a = p.b + tile_floats;
  p.fold_b = p.fold_a + fold_floats;
  // The fold's counters are the compute stream's: a thread routed to a side stream folds in two.
  const CudaDevice& d = CudaDevice::get(device.index);
  if (!d.routed_here() && (n + 31) / 32 <= CudaDevice::kFoldCounters) p.arrivals = d.scratch().fold_counters;
  return scratch;
}

// The product's element type for a dtype fits() accepted.
GemmElement gemm_element(DType t) {
  return t == kBFloat16 ? GemmElement::kBFloat16 : t == kFloat16 ? GemmElement::kFloat16 : GemmElement::kFloat32;
}

}  // namespace

bool conv1x1_cutlass_runs_on(int device) {
  static const bool enabled = settings().cutlass;  // DPL_CUTLASS=0: cuDNN only
  return enabled && compute_capability(device) == 90;
}

bool conv1x1_forward_sums(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& y, Tensor& sum,
                          Tensor& sum_of_squares) {
  // float32 as cuDNN runs it: multiplied as TF32 only where dpl::cuda::allow_tf32() is on.
  if (w.dtype() != x.dtype() || !packed_channels_last(w) || !fits(x, y, w.shape(), p, cuda_api::allow_tf32()))
    return false;
  const std::int64_t rows = x.size(0) * x.size(2) * x.size(3), c = x.size(1), o = w.size(0);
  const int device = x.device().index;

  GemmColumnSums g;
  g.element = gemm_element(x.dtype());
  g.device = device;
  g.multiprocessors = sm_count(device);
  g.m = static_cast<int>(rows);
  g.n = static_cast<int>(o);
  g.k = static_cast<int>(c);
  g.x = x.raw_data();
  g.w = w.raw_data();  // (O, C, 1, 1): O × C row-major in either format
  g.y = y.raw_data();
  const Tensor scratch = partials_scratch(g.m, g.n, x.device(), g.partials);
  g.workspace_bytes = gemm_column_sums_workspace(g);
  const Tensor workspace = device_bytes(g.workspace_bytes, x.device(), &g.workspace);
  DeviceGuard guard(device);
  const GemmStatus s =
      gemm_column_sums(g, sum.data<float>(), sum_of_squares.data<float>(), CudaDevice::get(device).stream());
  DPL_CHECK(s != GemmStatus::kFailed, "conv2d_forward_sums: the CUTLASS 1x1 convolution of ", shape_str(x.shape()),
            " with ", shape_str(w.shape()), " failed to launch");
  return s == GemmStatus::kDone;
}

bool conv1x1_backward_data_masked_sums(const Tensor& gy, const Tensor& w, const Conv2dParams& p, const Tensor& y,
                                       const Tensor& x, const Tensor& mean, Tensor& g, Tensor& sum_g,
                                       Tensor& sum_gx) {
  // float32 as cuDNN's data gradient runs it: multiplied as TF32 only where allowed.
  if (w.dtype() != y.dtype() || !packed_channels_last(w) || !fits(y, gy, w.shape(), p, cuda_api::allow_tf32()))
    return false;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &g})
    if (t->shape() != y.shape() || t->dtype() != y.dtype() || t->strides() != y.strides() ||
        !aligned16(t->raw_data()))
      return false;
  const std::int64_t c = y.size(1);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&mean, &sum_g, &sum_gx})
    if (t->dtype() != kFloat32 || t->numel() != c || !t->is_contiguous()) return false;
  const int device = y.device().index;
  GemmMaskedGrad m;
  const DType t = y.dtype();
  m.element = gemm_element(t);
  m.device = device;
  m.multiprocessors = sm_count(device);
  m.rows = static_cast<int>(y.size(0) * y.size(2) * y.size(3));
  m.o = static_cast<int>(gy.size(1));
  m.c = static_cast<int>(c);
  m.gy = gy.raw_data();
  // TF32's operands must be K-major: float32 gets wᵀ (c × o row-major), the O × C matrix viewed as
  // a (1, O, C, 1) image whose channels-last copy puts O innermost.
  const Tensor w_t = t == kFloat32 ? w.reshape({1, gy.size(1), c, 1}).to_channels_last() : Tensor();
  m.w = t == kFloat32 ? w_t.raw_data() : w.raw_data();
  m.g = g.raw_data();
  m.y = y.raw_data();
  m.x = x.raw_data();
  m.mean = mean.data<float>();
  const Tensor scratch = partials_scratch(m.rows, m.c, y.device(), m.partials);
  m.workspace_bytes = gemm_masked_grad_workspace(m);
  const Tensor workspace = device_bytes(m.workspace_bytes, y.device(), &m.workspace);
  DeviceGuard guard(device);
  const GemmStatus s = gemm_masked_grad(m, sum_g.data<float>(), sum_gx.data<float>(), CudaDevice::get(device).stream());
  DPL_CHECK(s != GemmStatus::kFailed, "conv2d backward: the CUTLASS 1x1 data gradient of ", shape_str(gy.shape()),
            " with ", shape_str(w.shape()), " and its batch-norm reductions failed to launch");
  return s == GemmStatus::kDone;
}

}  // namespace dpl::backend::cuda_detail
