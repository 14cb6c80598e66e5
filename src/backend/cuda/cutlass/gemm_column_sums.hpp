#pragma once
// The matrix product with per-column sums in its epilogue (gemm_column_sums_sm90.cu), as the rest
// of the CUDA backend sees it: plain pointers and sizes, no CUTLASS header. Built only where
// CUTLASS's headers were found and sm_90 is among the build's architectures
// (DPL_HAVE_CUTLASS_SM90); conv1x1.cpp is its one caller.

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/cutlass/gemm_status.hpp"

namespace dpl::backend::cuda_detail {

/// The element type of x, w and y.
enum class GemmElement { kBFloat16, kFloat16, kFloat32 };

/// Two sets of per-tile column partials that a product's epilogue writes (a and b, each
/// gemm_column_sums_layout(m, n) floats: rows × pitch) and the fold's rows for each (fold_a and
/// fold_b, splits × pitch floats, unused when splits is 1), through which they become column sums.
struct ColumnPartials {
  float* a = nullptr;
  float* b = nullptr;
  float* fold_a = nullptr;
  float* fold_b = nullptr;
  /// Zeroed counters, one per 32 columns ((n + 31) / 32), that let the fold run in one launch (its
  /// last block per column block adds the fold's rows, then zeroes its counter again); null: two
  /// launches. Folds that share counters must not overlap (the device's one compute stream).
  unsigned* arrivals = nullptr;
};

/// y (m × n, row-major) = x (m × k, row-major) · wᵀ (w: n × k, row-major), all bfloat16, all
/// float16 or all float32 (multiplied as TF32), with float accumulation; k and n multiples of 8,
/// pointers 16-byte aligned. Per 128-row tile of y the epilogue writes the sums of each column of
/// y (as rounded to its dtype) and of its square into partials.a and partials.b, which are then
/// folded into the column sums.
struct GemmColumnSums {
  GemmElement element = GemmElement::kBFloat16;
  int device = 0;
  int multiprocessors = 0;  // the device's, for the persistent tile schedule
  int m = 0, n = 0, k = 0;
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  ColumnPartials partials;  // a: the sums, b: the squares
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

/// The kernel's tile: rows of y (pixels) per partial, and the columns (channels) the partials'
/// pitch is rounded to.
inline constexpr int kColumnSumsTileRows = 128, kColumnSumsTileColumns = 128;

struct GemmSumsLayout {
  int rows = 0;    // partials: one per 128 rows of y
  int pitch = 0;   // floats between rows: n rounded up to the tile's columns
  int splits = 1;  // rows of the intermediate fold
};
GemmSumsLayout gemm_column_sums_layout(int m, int n);

/// Scratch the kernel asks for beyond the partials (0 for the data-parallel tile schedule).
std::size_t gemm_column_sums_workspace(const GemmColumnSums& g);

/// Adds each set of partials, in a fixed order, into its n column sums (out_a, out_b) on `stream`.
GemmStatus fold_column_partials(const ColumnPartials& p, int m, int n, float* out_a, float* out_b,
                                cudaStream_t stream);

/// Runs the product and then adds the partials, in a fixed order (through the fold when there are
/// many), into sum and squares (n floats each) on `stream`.
GemmStatus gemm_column_sums(const GemmColumnSums& g, float* sum, float* squares, cudaStream_t stream);

}  // namespace dpl::backend::cuda_detail
