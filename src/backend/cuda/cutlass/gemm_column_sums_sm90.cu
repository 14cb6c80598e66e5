// gemm_column_sums.hpp: picks the dtype's instantiation (gemm_column_sums_{bf16,f16,f32}_sm90.cu),
// then adds the kernel's per-tile partials into the column sums in a fixed order.
#include <algorithm>

#include "backend/cuda/cutlass/gemm_column_sums.hpp"

namespace dpl::backend::cuda_detail {
namespace column_sums_sm90 {

GemmStatus run_bf16(const GemmColumnSums& g, cudaStream_t stream);
GemmStatus run_f16(const GemmColumnSums& g, cudaStream_t stream);
GemmStatus run_f32(const GemmColumnSums& g, cudaStream_t stream);
std::size_t workspace_bf16(const GemmColumnSums& g);
std::size_t workspace_f16(const GemmColumnSums& g);
std::size_t workspace_f32(const GemmColumnSums& g);

}  // namespace column_sums_sm90

namespace {

// out[s·pitch + c] = Σ in[r·pitch + c] over block row s's share of the rows (rows/gridDim.y of them,
// rounded up), for the sums and the squares together: 32 columns × 8 lanes a block, each lane adding
// every 8th row of the share, then the lanes in order. A fixed order throughout, so the result is
// the same from run to run. Run twice, it first folds the many per-tile partials into a few per
// column with enough blocks to keep the machine busy, then those few into the sums.
__global__ void column_partials_kernel(const float* in_sum, const float* in_squares, int rows, int pitch, int n,
                                       float* out_sum, float* out_squares) {
  __shared__ float s[2][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int share = (rows + gridDim.y - 1) / gridDim.y;
  const int first = blockIdx.y * share, last = min(rows, first + share);
  float a = 0.f, b = 0.f;
  if (c < n)
    for (int r = first + threadIdx.y; r < last; r += 8) {
      a += in_sum[static_cast<std::size_t>(r) * pitch + c];
      b += in_squares[static_cast<std::size_t>(r) * pitch + c];
    }
  s[0][threadIdx.y][threadIdx.x] = a;
  s[1][threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    float ta = 0.f, tb = 0.f;
    for (int l = 0; l < 8; ++l) ta += s[0][l][threadIdx.x], tb += s[1][l][threadIdx.x];
    out_sum[static_cast<std::size_t>(blockIdx.y) * pitch + c] = ta;
    out_squares[static_cast<std::size_t>(blockIdx.y) * pitch + c] = tb;
  }
}

}  // namespace

GemmSumsLayout gemm_column_sums_layout(int m, int n) {
  GemmSumsLayout l;
  l.rows = (m + kColumnSumsTileRows - 1) / kColumnSumsTileRows;
  l.pitch = (n + kColumnSumsTileColumns - 1) / kColumnSumsTileColumns * kColumnSumsTileColumns;
  // About 64 partials a block in the first fold (8 a lane), at most 64 blocks a column.
  l.splits = l.rows <= 64 ? 1 : std::min(64, (l.rows + 63) / 64);
  return l;
}

std::size_t gemm_column_sums_workspace(const GemmColumnSums& g) {
  switch (g.element) {
    case GemmElement::kBFloat16: return column_sums_sm90::workspace_bf16(g);
    case GemmElement::kFloat16: return column_sums_sm90::workspace_f16(g);
    default: return column_sums_sm90::workspace_f32(g);
  }
}

GemmStatus fold_column_partials(const ColumnPartials& p, int m, int n, float* out_a, float* out_b,
                                cudaStream_t stream) {
  const GemmSumsLayout layout = gemm_column_sums_layout(m, n);
  const dim3 block(32, 8);
  const unsigned columns = static_cast<unsigned>((n + 31) / 32);
  if (layout.splits == 1) {
    column_partials_kernel<<<dim3(columns, 1), block, 0, stream>>>(p.a, p.b, layout.rows, layout.pitch, n, out_a,
                                                                   out_b);
  } else {
    column_partials_kernel<<<dim3(columns, static_cast<unsigned>(layout.splits)), block, 0, stream>>>(
        p.a, p.b, layout.rows, layout.pitch, n, p.fold_a, p.fold_b);
    column_partials_kernel<<<dim3(columns, 1), block, 0, stream>>>(p.fold_a, p.fold_b, layout.splits, layout.pitch,
                                                                   n, out_a, out_b);
  }
  return cudaGetLastError() == cudaSuccess ? GemmStatus::kDone : GemmStatus::kFailed;
}

GemmStatus gemm_column_sums(const GemmColumnSums& g, float* sum, float* squares, cudaStream_t stream) {
  const GemmStatus s = g.element == GemmElement::kBFloat16  ? column_sums_sm90::run_bf16(g, stream)
                       : g.element == GemmElement::kFloat16 ? column_sums_sm90::run_f16(g, stream)
                                                            : column_sums_sm90::run_f32(g, stream);
  if (s != GemmStatus::kDone) return s;
  return fold_column_partials(g.partials, g.m, g.n, sum, squares, stream);
}

}  // namespace dpl::backend::cuda_detail
