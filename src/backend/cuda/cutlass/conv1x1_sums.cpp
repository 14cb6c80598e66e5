// A 1×1 stride-1 convolution of channels-last images is a matrix product: the N·H·W pixels are the
// rows of x (N·H·W × C, C contiguous) and of y (N·H·W × O), and the weight (O, C, 1, 1) is O × C.
// So it runs on gemm_column_sums, whose epilogue also gives the batch norm after it its
// statistics. Everything else is left to cuDNN.
#include "backend/cuda/cutlass/conv1x1_sums.hpp"

#include <limits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cutlass/gemm_column_sums.hpp"

namespace dpl::backend::cuda_detail {
namespace {

// NHWC strides, packed (is_channels_last), and a start TMA can load from.
bool packed_channels_last(const Tensor& t) { return t.is_channels_last() && aligned16(t.raw_data()); }

}  // namespace

bool conv1x1_forward_sums(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& y, Tensor& sum,
                          Tensor& sum_of_squares) {
  const DType t = x.dtype();
  if ((t != kBFloat16 && t != kFloat16) || w.dtype() != t || y.dtype() != t) return false;
  if (w.size(2) != 1 || w.size(3) != 1 || p.stride[0] != 1 || p.stride[1] != 1 || p.padding[0] != 0 ||
      p.padding[1] != 0 || p.groups != 1)
    return false;
  const std::int64_t rows = x.size(0) * x.size(2) * x.size(3), c = x.size(1), o = w.size(0);
  if (c % 8 != 0 || o % 8 != 0 || rows == 0 || rows > std::numeric_limits<int>::max() / 2) return false;
  if (!packed_channels_last(x) || !packed_channels_last(y) || !packed_channels_last(w)) return false;
  const int device = x.device().index;
  if (compute_capability(device) != 90) return false;  // sm_90a code runs on 9.0 only

  GemmColumnSums g;
  g.dtype_is_bfloat16 = t == kBFloat16;
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
  Tensor workspace;
  g.workspace_bytes = gemm_column_sums_workspace(g);
  if (g.workspace_bytes > 0) {
    workspace = Tensor::empty({static_cast<std::int64_t>(g.workspace_bytes)}, TensorOptions(kUInt8, x.device()));
    g.workspace = workspace.raw_data();
  }
  DeviceGuard guard(device);
  const GemmSumsStatus s = gemm_column_sums(g, sum.data<float>(), sum_of_squares.data<float>(),
                                            CudaDevice::get(device).stream());
  DPL_CHECK(s != GemmSumsStatus::kFailed, "conv2d_forward_sums: the CUTLASS 1x1 convolution of ", shape_str(x.shape()),
            " with ", shape_str(w.shape()), " failed to launch");
  return s == GemmSumsStatus::kDone;
}

}  // namespace dpl::backend::cuda_detail
