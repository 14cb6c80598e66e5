#pragma once
// The kernel behind gemm_masked_grad.hpp, a template over the dtype. As the forward product
// (gemm_column_sums_sm90.cuh) it computes the transpose, gᵀ (c × rows, column-major: the bytes of
// the channels-last g) = wᵀ · gyᵀ, so that a channel is a row of the product and its sums are
// CUTLASS's column reduction, which keeps them in registers. The epilogue, a visitor graph:
//   s = acc + C (the gradient gathered so far, the product's source operand), masked by y > 0 and
//   rounded to T; its sum per channel; (s · (x − mean)) and its sum per channel; s stored.
// y and x come in through two auxiliary TMA loads of the output's layout, mean as a per-channel
// broadcast.
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "backend/cuda/cutlass/gemm_masked_grad.hpp"

namespace dpl::backend::cuda_detail {
namespace masked_grad_sm90 {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;

// K steps of 128 bytes of the element type, as the forward product's.
template <class T>
using TileShape = Shape<Int<kColumnSumsTileColumns>, Int<kColumnSumsTileRows>, Int<128 / sizeof(T)>>;
// wᵀ as operand A: channel-major (M-major) for the 16-bit types; TF32's tensor-core operands must
// be K-major, so float32 reads wᵀ stored c × o row-major (GemmMaskedGrad::w).
template <class T>
using LayoutA = std::conditional_t<sizeof(T) == 4, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
using ClusterShape = Shape<_1, _1, _1>;
using Schedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// The epilogue's element-wise nodes (Sm90Compute), each called on fragments A of float.
// (acc + c) where y > 0, else 0: the gradient completed and passed through the ReLU.
template <class A>
struct MaskedSum {
  CUTLASS_HOST_DEVICE A operator()(A const& acc, A const& c, A const& y) const {
    A r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < A::kElements; ++i) r[i] = y[i] > 0.f ? acc[i] + c[i] : 0.f;
    return r;
  }
};

// g · (x − mean).
template <class A>
struct CenteredProduct {
  CUTLASS_HOST_DEVICE A operator()(A const& g, A const& x, A const& mean) const {
    A r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < A::kElements; ++i) r[i] = g[i] * (x[i] - mean[i]);
    return r;
  }
};

// The first of two operands: the stored value after the reductions that pass it on.
template <class A>
struct TakeFirst {
  template <class X, class Y>
  CUTLASS_HOST_DEVICE X operator()(X const& x, Y const&) const {
    return x;
  }
};

// The epilogue's sub-tile: CUTLASS's choice (128 × 32) for the 16-bit types; for float32 half as
// wide, because four float32 operands staged through shared memory (C, y, x, D) at the automatic
// size would leave the main loop a single stage.
template <class T>
using EpilogueTile =
    std::conditional_t<sizeof(T) == 4, Shape<_128, _16>, cutlass::epilogue::collective::EpilogueTileAuto>;

template <class T>
struct Gemm {
  static constexpr int kAlign = 16 / sizeof(T);
  using Tile = TileShape<T>;
  using EpilogueDescriptor = cutlass::epilogue::collective::detail::EpilogueDescriptor<
      Tile, EpilogueTile<T>, T, T, Schedule>;
  using AuxDescriptor =
      cutlass::epilogue::collective::detail::AuxLoadDescriptor<EpilogueDescriptor, cutlass::layout::ColumnMajor, T>;
  using AuxLoad = fusion::Sm90AuxLoad<AuxDescriptor::Stages, typename EpilogueDescriptor::EpilogueTile, T,
                                      typename AuxDescriptor::Stride, typename AuxDescriptor::SmemLayoutAtom,
                                      typename AuxDescriptor::CopyOpS2R>;
  using Mean = fusion::Sm90ColBroadcast<0, Tile, float>;
  template <template <class> class Fn>
  using ChannelPartials = fusion::Sm90ColReduction<Fn, cutlass::plus, cutlass::plus, 0, Tile, float, float,
                                                   kRound, Stride<_1, _0, _0>, 4, false, false>;
  // Nodes: 0 acc, 1 C, 2 y, 3 x, 4 mean, 5 masked sum (rounded to T), 6 its channel sums,
  // 7 (5)·(x − mean), 8 its channel sums, 9 the stored value.
  using Callbacks = fusion::Sm90TopologicalVisitor<
      float,
      cute::tuple<cute::seq<>, cute::seq<>, cute::seq<>, cute::seq<>, cute::seq<>, cute::seq<0, 1, 2>,
                  cute::seq<5>, cute::seq<5, 3, 4>, cute::seq<7>, cute::seq<6, 8>>,
      fusion::Sm90AccFetch, fusion::Sm90SrcFetch<T>, AuxLoad, AuxLoad, Mean,
      fusion::Sm90Compute<MaskedSum, T, float, kRound>, ChannelPartials<cutlass::plus>,
      fusion::Sm90Compute<CenteredProduct, float, float, kRound>, ChannelPartials<cutlass::plus>,
      fusion::Sm90Compute<TakeFirst, T, float, kRound>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, ClusterShape, EpilogueTile<T>, float, float, T,
      cutlass::layout::ColumnMajor, kAlign, T, cutlass::layout::ColumnMajor, kAlign, Schedule, Callbacks>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, LayoutA<T>, kAlign, T,
      cutlass::layout::ColumnMajor, kAlign, float, Tile, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

template <class T>
typename Gemm<T>::Adapter::Arguments arguments(const GemmMaskedGrad& g) {
  using G = Gemm<T>;
  const std::int64_t rows = g.rows, o = g.o, c = g.c;
  typename G::Adapter::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  // Transposed: M = channels of g, N = rows, K = the convolution's output channels.
  args.problem_shape = {g.c, g.rows, g.o, 1};
  typename G::Kernel::StrideA stride_a;
  if constexpr (sizeof(T) == 4)
    stride_a = make_stride(o, _1{}, c * o);  // wᵀ stored c × o: K-major
  else
    stride_a = make_stride(_1{}, c, c * o);  // w read as wᵀ: channel-major
  const typename G::Kernel::StrideB stride_b = make_stride(o, _1{}, rows * o);  // gyᵀ, K-major
  const typename G::Kernel::StrideD stride_d = make_stride(_1{}, c, rows * c);  // gᵀ, the bytes of g
  args.mainloop = {static_cast<const T*>(g.w), stride_a, static_cast<const T*>(g.gy), stride_b};
  const auto aux_stride = make_stride(_1{}, c, rows * c);
  // Children's arguments in node order (Sm90TopologicalVisitor).
  args.epilogue.thread = {{},
                          {},
                          {static_cast<const T*>(g.y), T(0), aux_stride},
                          {static_cast<const T*>(g.x), T(0), aux_stride},
                          {g.mean},
                          {},
                          {g.partials.a, 0.f, {}},
                          {},
                          {g.partials.b, 0.f, {}},
                          {}};
  args.epilogue.ptr_C = static_cast<const T*>(g.g);
  args.epilogue.dC = stride_d;
  args.epilogue.ptr_D = static_cast<T*>(g.g);
  args.epilogue.dD = stride_d;
  args.hw_info.device_id = g.device;
  args.hw_info.sm_count = g.multiprocessors;
  return args;
}

template <class T>
GemmStatus run(const GemmMaskedGrad& g, cudaStream_t stream) {
  using Adapter = typename Gemm<T>::Adapter;
  const auto args = arguments<T>(g);
  Adapter gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return GemmStatus::kRefused;
  if (Adapter::get_workspace_size(args) > g.workspace_bytes) return GemmStatus::kRefused;
  if (gemm.initialize(args, g.workspace, stream) != cutlass::Status::kSuccess) return GemmStatus::kFailed;
  if (gemm.run(stream) != cutlass::Status::kSuccess) return GemmStatus::kFailed;
  return GemmStatus::kDone;
}

template <class T>
std::size_t workspace(const GemmMaskedGrad& g) {
  return Gemm<T>::Adapter::get_workspace_size(arguments<T>(g));
}

}  // namespace masked_grad_sm90
}  // namespace dpl::backend::cuda_detail
