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

// Sums, for the 32 columns of this block (threadIdx.x), rows [first, last) of in_sum and
// in_squares at `pitch`: each of 8 lanes adds every 8th row, then the lanes in order; the totals
// land in lane 0's threads. A fixed order throughout, so the result is the same from run to run.
__device__ __forceinline__ float2 fold_rows(const float* in_sum, const float* in_squares, int first, int last,
                                            int pitch, int n) {
  __shared__ float s[2][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float a = 0.f, b = 0.f;
  if (c < n)
    for (int r = first + threadIdx.y; r < last; r += 8) {
      // __ldcg: through L2, where the other blocks' rows of a one-launch fold are.
      a += __ldcg(in_sum + static_cast<std::size_t>(r) * pitch + c);
      b += __ldcg(in_squares + static_cast<std::size_t>(r) * pitch + c);
    }
  s[0][threadIdx.y][threadIdx.x] = a;
  s[1][threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  float2 t = make_float2(0.f, 0.f);
  if (threadIdx.y == 0)
    for (int l = 0; l < 8; ++l) t.x += s[0][l][threadIdx.x], t.y += s[1][l][threadIdx.x];
  __syncthreads();  // s may be used again by the caller's next fold_rows
  return t;
}

// out[s·pitch + c] = Σ in[r·pitch + c] over block row s's share of the rows (rows/gridDim.y of them,
// rounded up), for the sums and the squares together, 32 columns × 8 lanes a block. With
// gridDim.y > 1 the shares go to mid_sum and mid_squares (gridDim.y × pitch), and with `arrivals`
// (a zeroed counter per column block) the last block of each column block to finish then adds
// those gridDim.y rows, in order, into out_sum and out_squares, and zeroes its counter again;
// without them the caller launches the kernel again over mid (one block row) to do so. Either way
// the same additions in the same order: the sums do not depend on the path.
__global__ void column_partials_kernel(const float* in_sum, const float* in_squares, int rows, int pitch, int n,
                                       float* mid_sum, float* mid_squares, unsigned* arrivals, float* out_sum,
                                       float* out_squares) {
  __shared__ bool last_block;
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int share = (rows + gridDim.y - 1) / gridDim.y;
  const int first = blockIdx.y * share, last = min(rows, first + share);
  const float2 t = fold_rows(in_sum, in_squares, first, last, pitch, n);
  const bool direct = gridDim.y == 1;
  if (threadIdx.y == 0 && c < n) {
    (direct ? out_sum : mid_sum)[static_cast<std::size_t>(blockIdx.y) * pitch + c] = t.x;
    (direct ? out_squares : mid_squares)[static_cast<std::size_t>(blockIdx.y) * pitch + c] = t.y;
  }
  if (direct || arrivals == nullptr) return;
  // Publish this block's row before counting it (the threadfence reduction of CUDA's guide).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const unsigned arrived = atomicAdd(arrivals + blockIdx.x, 1u);
    last_block = arrived == gridDim.y - 1;
    if (last_block) arrivals[blockIdx.x] = 0;  // every block of this fold has counted
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  const float2 total = fold_rows(mid_sum, mid_squares, 0, static_cast<int>(gridDim.y), pitch, n);
  if (threadIdx.y == 0 && c < n) {
    out_sum[c] = total.x;
    out_squares[c] = total.y;
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
  const unsigned splits = static_cast<unsigned>(layout.splits);
  column_partials_kernel<<<dim3(columns, splits), block, 0, stream>>>(
      p.a, p.b, layout.rows, layout.pitch, n, p.fold_a, p.fold_b, p.arrivals, out_a, out_b);
  if (splits > 1 && p.arrivals == nullptr)
    column_partials_kernel<<<dim3(columns, 1), block, 0, stream>>>(p.fold_a, p.fold_b, layout.splits, layout.pitch, n,
                                                                   nullptr, nullptr, nullptr, out_a, out_b);
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
