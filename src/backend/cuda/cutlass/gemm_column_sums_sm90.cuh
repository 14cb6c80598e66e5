#pragma once
// The kernel behind gemm_column_sums.hpp, a template over the dtype: y = x · wᵀ on Hopper's tensor
// cores (CUTLASS's TMA warp-specialised cooperative kernel, 128×128 tiles; float32 operands are
// multiplied as TF32, as cuDNN multiplies them when TF32 is allowed) whose
// epilogue also sums each channel (column of y) and its square. Included only by the *_sm90.cu
// files, compiled for sm_90a (wgmma and TMA) in an object library of their own
// (src/CMakeLists.txt); each dtype is instantiated in a file of its own so that they, each a
// minute or more of compile time, build in parallel.
//
// The kernel computes the transpose, yᵀ = w · xᵀ, stored column-major: the same bytes as y
// row-major, with a channel as a row of the product. Its sums are then CUTLASS's column
// reduction (over N, the pixels), which keeps its per-thread sums in registers; the row reduction
// the untransposed product would need keeps them in local memory (its conditional swaps between
// lanes defeat register allocation: 688 bytes of stack a thread, which the 200 KB of shared
// memory the main loop takes leaves no L1 to hold).
//
// The epilogue is a visitor tree: the accumulator is rounded to the output dtype, then two column
// reductions add the rounded values and their squares (in float) into per-tile partials, passing
// the values on to the store. So the statistics are those of the y that is written, as the
// separate pass would see it. The partials (one row of channels per 128 pixels) are added in a
// fixed order afterwards (gemm_column_sums_sm90.cu): the result is the same from run to run,
// unlike the atomics of an in-kernel final reduction.
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "backend/cuda/cutlass/gemm_column_sums.hpp"

namespace dpl::backend::cuda_detail {
namespace column_sums_sm90 {

using namespace cute;

// M of the (transposed) product is the channels, N the pixels; K steps of 128 bytes of T (64
// 16-bit values, 32 float32 ones: the widest step of TF32's shared-memory layouts).
template <class T>
using TileShape = Shape<Int<kColumnSumsTileColumns>, Int<kColumnSumsTileRows>, Int<128 / sizeof(T)>>;
using ClusterShape = Shape<_1, _1, _1>;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

template <class T>
using ToOutput =
    cutlass::epilogue::fusion::Sm90EVT<cutlass::epilogue::fusion::Sm90Compute<cutlass::epilogue::thread::Identity, T,
                                                                              float, kRound>,
                                       cutlass::epilogue::fusion::Sm90AccFetch>;

// Per 128-pixel tile, Fn(partial, value) over its pixels for each channel, in float;
// FinalReduction = false leaves the partials to gemm_column_sums_sm90.cu.
template <template <class> class Fn, class T>
using ChannelPartials =
    cutlass::epilogue::fusion::Sm90ColReduction<Fn, cutlass::plus, cutlass::plus, 0, TileShape<T>, float, float, kRound,
                                                Stride<_1, _0, _0>, 4, /*EnableNullptr=*/false,
                                                /*FinalReduction=*/false>;

template <class T>
using Callbacks = cutlass::epilogue::fusion::Sm90EVT<
    ChannelPartials<cutlass::square_and_plus, T>,
    cutlass::epilogue::fusion::Sm90EVT<ChannelPartials<cutlass::plus, T>, ToOutput<T>>>;

template <class T>
struct Gemm {
  static constexpr int kAlign = 16 / sizeof(T);
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape<T>, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor, kAlign, T,
      cutlass::layout::ColumnMajor, kAlign, cutlass::epilogue::TmaWarpSpecializedCooperative, Callbacks<T>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, cutlass::layout::RowMajor, kAlign, T,
      cutlass::layout::ColumnMajor, kAlign, float, TileShape<T>, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

template <class T>
GemmStatus run(const GemmColumnSums& g, cudaStream_t stream) {
  using G = Gemm<T>;
  using StrideA = typename G::Kernel::StrideA;
  using StrideB = typename G::Kernel::StrideB;
  using StrideD = typename G::Kernel::StrideD;
  // Transposed: the product is yᵀ (O × rows, O contiguous) = w (O × C) · xᵀ, so that a channel is
  // a row of the product and its sums a column reduction (see above).
  const StrideA stride_a = make_stride(static_cast<std::int64_t>(g.k), _1{}, static_cast<std::int64_t>(g.n) * g.k);
  const StrideB stride_b = make_stride(static_cast<std::int64_t>(g.k), _1{}, static_cast<std::int64_t>(g.m) * g.k);
  const StrideD stride_d = make_stride(_1{}, static_cast<std::int64_t>(g.n), static_cast<std::int64_t>(g.m) * g.n);

  typename G::Adapter::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {g.n, g.m, g.k, 1};
  args.mainloop = {static_cast<const T*>(g.w), stride_a, static_cast<const T*>(g.x), stride_b};
  auto& fusion = args.epilogue.thread;
  // Children's arguments first, the node's last (Sm90TreeVisitor).
  fusion = {{{{}, {}}, {g.partials.a, 0.f, {}}}, {g.partials.b, 0.f, {}}};
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = stride_d;
  args.epilogue.ptr_D = static_cast<T*>(g.y);
  args.epilogue.dD = stride_d;
  args.hw_info.device_id = g.device;
  args.hw_info.sm_count = g.multiprocessors;

  typename G::Adapter gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return GemmStatus::kRefused;
  if (G::Adapter::get_workspace_size(args) > g.workspace_bytes) return GemmStatus::kRefused;
  if (gemm.initialize(args, g.workspace, stream) != cutlass::Status::kSuccess) return GemmStatus::kFailed;
  if (gemm.run(stream) != cutlass::Status::kSuccess) return GemmStatus::kFailed;
  return GemmStatus::kDone;
}

template <class T>
std::size_t workspace(const GemmColumnSums& g) {
  typename Gemm<T>::Adapter::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {g.n, g.m, g.k, 1};
  args.hw_info.device_id = g.device;
  args.hw_info.sm_count = g.multiprocessors;
  return Gemm<T>::Adapter::get_workspace_size(args);
}

}  // namespace column_sums_sm90
}  // namespace dpl::backend::cuda_detail
