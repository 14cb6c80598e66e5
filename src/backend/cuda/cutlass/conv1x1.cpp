// A 1×1 stride-1 convolution of channels-last images is a matrix product: the N·H·W pixels are the
// rows of x (N·H·W × C, C contiguous) and of y (N·H·W × O), and the weight (O, C, 1, 1) is O × C.
// So its forward pass runs on gemm_column_sums, whose epilogue also gives the batch norm after it
// its statistics. Everything else is left to cuDNN.
#include "backend/cuda/cutlass/conv1x1.hpp"

#include <limits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cutlass/gemm_column_sums.hpp"
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
  const DType t = x.dtype();

  GemmColumnSums g;
  g.element = t == kBFloat16 ? GemmElement::kBFloat16 : t == kFloat16 ? GemmElement::kFloat16 : GemmElement::kFloat32;
  g.device = device;
  g.multiprocessors = sm_count(device);
  g.m = static_cast<int>(rows);
  g.n = static_cast<int>(o);
  g.k = static_cast<int>(c);
  g.x = x.raw_data();
  g.w = w.raw_data();  // (O, C, 1, 1): O × C row-major in either format
  g.y = y.raw_data();
  const GemmSumsLayout layout = gemm_column_sums_layout(g.m, g.n);
  const TensorOptions floats(kFloat32, x.device());
  // The per-tile partials of the sums and of the squares, then the fold's rows of each.
  const std::int64_t tile_floats = static_cast<std::int64_t>(layout.rows) * layout.pitch;
  const std::int64_t fold_floats = layout.splits > 1 ? static_cast<std::int64_t>(layout.splits) * layout.pitch : 0;
  Tensor scratch = Tensor::empty({2 * (tile_floats + fold_floats)}, floats);
  g.partial_sum = scratch.data<float>();
  g.partial_squares = g.partial_sum + tile_floats;
  g.fold_sum = g.partial_squares + tile_floats;
  g.fold_squares = g.fold_sum + fold_floats;
  g.workspace_bytes = gemm_column_sums_workspace(g);
  const Tensor workspace = device_bytes(g.workspace_bytes, x.device(), &g.workspace);
  DeviceGuard guard(device);
  const GemmStatus s =
      gemm_column_sums(g, sum.data<float>(), sum_of_squares.data<float>(), CudaDevice::get(device).stream());
  DPL_CHECK(s != GemmStatus::kFailed, "conv2d_forward_sums: the CUTLASS 1x1 convolution of ", shape_str(x.shape()),
            " with ", shape_str(w.shape()), " failed to launch");
  return s == GemmStatus::kDone;
}

}  // namespace dpl::backend::cuda_detail
