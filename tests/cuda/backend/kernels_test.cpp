// CPU-vs-CUDA agreement of every kernel of the backend (src/backend/kernels.hpp), in float32 and,
// in the second half, bfloat16 and float16.
// Each test runs the same fresh random inputs through both backends; device outputs start as
// NaN so that an element the kernel does not write fails the comparison.
//
// Tolerances: elementwise maps and optimizer updates rtol 1e-5 (the GPU contracts a*b+c into one
// rounding, the CPU does not); sums rtol 1e-5 plus an absolute term for cancellation; matrix
// products atol 1e-6*K + rtol 1e-5 (different summation orders over K terms; TF32 would miss
// this by two orders of magnitude); comparisons and copies exact.
#include <array>
#include <cmath>
#include <cstring>
#include <tuple>

#include "backend/cuda/cast.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "cuda_test_util.hpp"

namespace dpl::test {
namespace {

using backend::Broadcast;
using backend::BinaryOp;

class KernelsTest : public CudaTest {};

// --- matrix products ------------------------------------------------------------------------

void check_gemm(KernelsTest& t, bool ta, bool tb, float beta, std::int64_t m, std::int64_t k, std::int64_t n) {
  const Tensor a = ta ? t.rand({k, m}) : t.rand({m, k});
  const Tensor b = tb ? t.rand({n, k}) : t.rand({k, n});
  const Tensor c0 = t.rand({m, n});
  Tensor want = c0.clone();
  backend::gemm(ta, tb, 0.75f, a, b, beta, want);
  Tensor got = beta == 0.f ? poisoned({m, n}) : on_gpu(c0);
  backend::gemm(ta, tb, 0.75f, on_gpu(a), on_gpu(b), beta, got);
  expect_close(got, want, 1e-5f, 1e-6f * static_cast<float>(k),
               "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta) +
                   " m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
}

TEST_F(KernelsTest, GemmAllTransposesAndBetas) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 1.f}) check_gemm(*this, ta, tb, beta, 37, 53, 29);
}

TEST_F(KernelsTest, GemmMlpShapes) {
  // The three products of a Linear(784, 1000) layer at batch 100: forward, grad input, grad weight.
  check_gemm(*this, false, true, 0.f, 100, 784, 1000);
  check_gemm(*this, false, false, 0.f, 100, 1000, 784);
  check_gemm(*this, true, false, 1.f, 1000, 100, 784);
  check_gemm(*this, false, true, 0.f, 1, 1, 1);
}

// --- elementwise ----------------------------------------------------------------------------

TEST_F(KernelsTest, BinaryEveryOpBroadcastAndBeta) {
  // (7,13) takes the scalar path, (8,16) the float4 path.
  for (const Shape& s : {Shape{7, 13}, Shape{8, 16}}) {
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
      for (Broadcast bc : {Broadcast::kNone, Broadcast::kRow, Broadcast::kScalar}) {
        for (float beta : {0.f, 1.f}) {
          const Shape bs = bc == Broadcast::kNone ? s : bc == Broadcast::kRow ? Shape{s[1]} : Shape{};
          const Tensor a = rand(s), b = rand(bs), o0 = rand(s);
          Tensor want = o0.clone();
          backend::binary(op, bc, a, b, beta, want);
          Tensor got = beta == 0.f ? poisoned(s) : on_gpu(o0);
          backend::binary(op, bc, on_gpu(a), on_gpu(b), beta, got);
          expect_close(got, want, 1e-6f, 0.f,
                       "binary op=" + std::to_string(static_cast<int>(op)) + " bc=" +
                           std::to_string(static_cast<int>(bc)) + " beta=" + std::to_string(beta) + " shape=" +
                           shape_str(s));
        }
      }
    }
  }
}

TEST_F(KernelsTest, BinaryInPlaceAndMisaligned) {
  // linear adds its bias in place (out aliases a); a view one element into a buffer is not
  // 16-byte aligned and must take the scalar path.
  const Tensor a = rand({8, 16}), b = rand({16});
  Tensor want = a.clone();
  backend::binary(BinaryOp::kAdd, Broadcast::kRow, want, b, 0.f, want);
  Tensor got = on_gpu(a);
  backend::binary(BinaryOp::kAdd, Broadcast::kRow, got, on_gpu(b), 0.f, got);
  expect_close(got, want, 1e-6f, 0.f, "binary in place");

  const Tensor big = rand({129});
  const Tensor x = big.view_range(1, {128}), y = rand({128});
  Tensor want2 = Tensor::empty({128});
  backend::binary(BinaryOp::kMul, Broadcast::kNone, x, y, 0.f, want2);
  Tensor got2 = poisoned({129}).view_range(1, {128});
  backend::binary(BinaryOp::kMul, Broadcast::kNone, on_gpu(big).view_range(1, {128}), on_gpu(y), 0.f, got2);
  expect_close(got2, want2, 1e-6f, 0.f, "binary misaligned");
}

TEST_F(KernelsTest, Axpby) {
  for (std::int64_t n : {1, 13, 4096, 100003}) {
    for (float beta : {0.f, 1.f, 0.5f}) {
      const Tensor x = rand({n}), y0 = rand({n});
      Tensor want = y0.clone();
      backend::axpby(0.7f, x, beta, want);
      Tensor got = beta == 0.f ? poisoned({n}) : on_gpu(y0);
      backend::axpby(0.7f, on_gpu(x), beta, got);
      expect_close(got, want, 1e-5f, 1e-7f, "axpby n=" + std::to_string(n) + " beta=" + std::to_string(beta));
    }
  }
}

TEST_F(KernelsTest, FillScaledReadsItsScaleOnTheDevice) {
  for (std::int64_t n : {1, 10, 4096, 1001}) {
    for (float beta : {0.f, 1.f}) {
      const Tensor s = rand({}), o0 = rand({n});
      Tensor want = o0.clone();
      backend::fill_scaled(0.5f, s, beta, want);
      Tensor got = beta == 0.f ? poisoned({n}) : on_gpu(o0);
      backend::fill_scaled(0.5f, on_gpu(s), beta, got);
      expect_close(got, want, 1e-6f, 1e-7f, "fill_scaled n=" + std::to_string(n) + " beta=" + std::to_string(beta));
    }
  }
}

TEST_F(KernelsTest, ReluAndBackward) {
  for (std::int64_t n : {7, 1000, 65537}) {
    Tensor x = rand({n});
    x.set<float>({0}, 0.f);  // the boundary: relu(0) = 0 and no gradient passes
    Tensor want = Tensor::empty({n});
    backend::relu(x, want);
    Tensor got = poisoned({n});
    backend::relu(on_gpu(x), got);
    expect_equal<float>(got, want, "relu n=" + std::to_string(n));

    for (float beta : {0.f, 1.f}) {
      const Tensor gy = rand({n}), g0 = rand({n});
      Tensor wg = g0.clone();
      backend::relu_backward(want, gy, beta, wg);
      Tensor gg = beta == 0.f ? poisoned({n}) : on_gpu(g0);
      backend::relu_backward(got, on_gpu(gy), beta, gg);
      expect_close(gg, wg, 1e-6f, 0.f, "relu_backward n=" + std::to_string(n) + " beta=" + std::to_string(beta));
    }
  }
}

// --- reductions -----------------------------------------------------------------------------

TEST_F(KernelsTest, SumRows) {
  // Few rows (one chunk), and many rows over few columns (a bias gradient: chunks of rows summed
  // in a second pass), with and without 16-byte packs.
  for (const Shape& s : {Shape{100, 1000}, Shape{3, 10}, Shape{1000, 7}, Shape{1, 33}, Shape{4097, 64},
                         Shape{16384, 768}, Shape{9001, 35}}) {
    for (float beta : {0.f, 1.f}) {
      const Tensor x = rand(s), o0 = rand({s[1]});
      Tensor want = o0.clone();
      backend::sum_rows(0.5f, x, beta, want);
      Tensor got = beta == 0.f ? poisoned({s[1]}) : on_gpu(o0);
      backend::sum_rows(0.5f, on_gpu(x), beta, got);
      expect_close(got, want, 1e-5f, 1e-6f * static_cast<float>(s[0]),
                   "sum_rows shape=" + shape_str(s) + " beta=" + std::to_string(beta));
    }
  }
}

TEST_F(KernelsTest, SumAll) {
  for (std::int64_t n : {1, 13, 4096, (1 << 20) + 3, 1 << 22}) {
    const Tensor x = rand({n});
    Tensor want = Tensor::empty({});
    backend::sum_all(0.25f, x, want);
    Tensor got = poisoned({});
    backend::sum_all(0.25f, on_gpu(x), got);
    // Both sides sum in double; only the final rounding to float differs.
    expect_close(got, want, 1e-6f, 1e-6f, "sum_all n=" + std::to_string(n));
  }
  // Repeated launches reuse the reduction scratch; each must start from a clean counter.
  const Tensor x = rand({5000});
  Tensor want = Tensor::empty({});
  backend::sum_all(1.f, x, want);
  const Tensor xg = on_gpu(x);
  for (int i = 0; i < 5; ++i) {
    Tensor got = poisoned({});
    backend::sum_all(1.f, xg, got);
    expect_close(got, want, 1e-6f, 1e-6f, "sum_all repeated");
  }
}

// --- loss and accuracy ----------------------------------------------------------------------

TEST_F(KernelsTest, SoftmaxCrossEntropyForwardAndBackward) {
  // Short rows, rows whose length is no multiple of a 16-byte pack, and vocabulary-long ones.
  for (const Shape& s :
       {Shape{100, 10}, Shape{3, 1000}, Shape{257, 33}, Shape{1, 1}, Shape{5000, 10}, Shape{7, 50304}}) {
    for (float scale : {1.f, 30.f}) {  // large logits test the max subtraction
      const Tensor logits = rand(s, -scale, scale), y = labels(s[0], s[1]);
      Tensor wlse = Tensor::empty({s[0]}), wl = Tensor::empty({});
      backend::softmax_xent(logits, y, 0.f, wlse, wl);
      Tensor glse = poisoned({s[0]}), gl = poisoned({});
      backend::softmax_xent(on_gpu(logits), on_gpu(y), 0.f, glse, gl);
      const std::string what = " shape=" + shape_str(s) + " scale=" + std::to_string(scale);
      expect_close(glse, wlse, 1e-6f, 1e-6f, "softmax_xent log-sum-exp" + what);
      expect_close(gl, wl, 1e-5f, 1e-6f, "softmax_xent loss" + what);

      for (float beta : {0.f, 1.f}) {
        const Tensor gloss = rand({}, 0.5f, 2.f), g0 = rand(s);
        Tensor want = g0.clone();
        backend::softmax_xent_backward(logits, y, wlse, 0.f, gloss, beta, want);
        Tensor got = beta == 0.f ? poisoned(s) : on_gpu(g0);
        backend::softmax_xent_backward(on_gpu(logits), on_gpu(y), on_gpu(wlse), 0.f, on_gpu(gloss), beta, got);
        expect_close(got, want, 1e-5f, 1e-7f, "softmax_xent_backward beta=" + std::to_string(beta) + what);
      }
      // In place: the gradient written over the logits.
      const Tensor gloss = rand({}, 0.5f, 2.f);
      Tensor want = Tensor::empty(s), in_place = on_gpu(logits);
      backend::softmax_xent_backward(logits, y, wlse, 0.f, gloss, 0.f, want);
      backend::softmax_xent_backward(in_place, on_gpu(y), on_gpu(wlse), 0.f, on_gpu(gloss), 0.f, in_place);
      expect_close(in_place, want, 1e-5f, 1e-7f, "softmax_xent_backward in place" + what);
    }
  }
}

TEST_F(KernelsTest, AccuracyIncludingTies) {
  for (const Shape& s : {Shape{100, 10}, Shape{3, 1000}, Shape{4099, 7}}) {
    const Tensor logits = rand(s), y = labels(s[0], s[1]);
    Tensor want = Tensor::empty({});
    backend::accuracy(logits, y, want);
    Tensor got = poisoned({});
    backend::accuracy(on_gpu(logits), on_gpu(y), got);
    expect_equal<float>(got, want, "accuracy shape=" + shape_str(s));
  }
  // Ties: the first index of the maximum wins, also when the tied entries sit in different lanes.
  std::vector<float> v(4 * 40, 0.f);
  std::vector<std::int32_t> lab = {3, 35, 0, 39};
  v[0 * 40 + 3] = 2.f;
  v[0 * 40 + 35] = 2.f;  // row 0: max at 3 and 35, label 3 -> correct
  v[1 * 40 + 3] = 2.f;
  v[1 * 40 + 35] = 2.f;  // row 1: label 35 -> wrong
  // row 2: all zero, label 0 -> correct; row 3: all zero, label 39 -> wrong
  const Tensor logits = Tensor::from_vector(v, {4, 40});
  const Tensor y = Tensor::from_vector(lab, {4});
  Tensor want = Tensor::empty({});
  backend::accuracy(logits, y, want);
  EXPECT_EQ(want.item(), 0.5f);
  Tensor got = poisoned({});
  backend::accuracy(on_gpu(logits), on_gpu(y), got);
  EXPECT_EQ(got.item(), 0.5f);
}

// --- memory, copies and fills ----------------------------------------------------------------

TEST_F(KernelsTest, CopyBytesAndRoundTrip) {
  const Tensor x = rand({1000, 3});
  const Tensor xg = on_gpu(x);
  Tensor yg = poisoned({1000, 3});
  backend::copy_bytes(gpu(), yg.raw_data(), xg.raw_data(), xg.nbytes());
  expect_equal<float>(yg, x, "copy_bytes");
  expect_equal<float>(xg.to(Device::cpu()), x, "host -> device -> host");
  const Tensor li = Tensor::from_vector<std::int64_t>({1, -2, std::int64_t{1} << 40}, {3});
  expect_equal<std::int64_t>(li.to(gpu()).to(Device::cpu()), li, "int64 round trip");
}

TEST_F(KernelsTest, CopyStridedSourceAndDestination) {
  const Tensor src = rand({6, 10, 4});
  const Tensor sview = src.narrow(1, 2, 5);  // (6,5,4), not contiguous
  Tensor want = Tensor::empty({6, 5, 4});
  backend::copy_strided(sview, want);
  Tensor got = poisoned({6, 5, 4});
  backend::copy_strided(on_gpu(src).narrow(1, 2, 5), got);
  expect_equal<float>(got, want, "copy_strided strided -> contiguous");

  // Into a strided destination: the elements outside the view must stay untouched (NaN).
  Tensor dst = poisoned({6, 10, 4});
  Tensor dview = dst.narrow(1, 3, 5);
  backend::copy_strided(on_gpu(want), dview);
  expect_equal<float>(dview.contiguous(), want, "copy_strided contiguous -> strided");
  std::size_t nan_count = 0;
  for (float v : dst.to_vector<float>()) nan_count += std::isnan(v) ? 1 : 0;
  EXPECT_EQ(nan_count, static_cast<std::size_t>(6 * 5 * 4)) << "copy_strided wrote outside its view";

  // Integer dtypes take the same path by element width.
  std::vector<std::int32_t> iv(60);
  for (std::size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<std::int32_t>(i * 7 - 100);
  const Tensor it = Tensor::from_vector(iv, {6, 10});
  Tensor iwant = Tensor::empty({6, 3}, kInt32);
  backend::copy_strided(it.narrow(1, 4, 3), iwant);
  Tensor igot = Tensor::full({6, 3}, -1, TensorOptions(kInt32, gpu()));
  backend::copy_strided(it.to(gpu()).narrow(1, 4, 3), igot);
  expect_equal<std::int32_t>(igot, iwant, "copy_strided int32");
}

TEST_F(KernelsTest, FillEveryDtypeContiguousAndStrided) {
  for (double value : {0.0, 3.5, -7.0}) {
    Tensor f = poisoned({33});
    backend::fill(f, value);
    expect_equal<float>(f, Tensor::full({33}, value), "fill float32 " + std::to_string(value));
    Tensor i = Tensor::empty({33}, TensorOptions(kInt32, gpu()));
    backend::fill(i, value);
    expect_equal<std::int32_t>(i, Tensor::full({33}, value, kInt32), "fill int32 " + std::to_string(value));
  }
  Tensor l = Tensor::empty({5}, TensorOptions(kInt64, gpu()));
  backend::fill(l, static_cast<double>(std::int64_t{1} << 40));
  expect_equal<std::int64_t>(l, Tensor::full({5}, static_cast<double>(std::int64_t{1} << 40), kInt64), "fill int64");

  // 16-bit types: 1.5 is 0x3FC0 in bfloat16 and 0x3E00 in float16.
  const std::pair<DType, std::uint16_t> cases[] = {{kBFloat16, 0x3FC0}, {kFloat16, 0x3E00}};
  for (const auto& [dt, bits] : cases) {
    Tensor h = Tensor::empty({9}, TensorOptions(dt, gpu()));
    backend::fill(h, 1.5);
    Tensor back = Tensor::empty({9}, dt);
    backend::copy_between_devices(h, back);
    const auto* p = static_cast<const std::uint16_t*>(back.raw_data());
    for (int k = 0; k < 9; ++k) EXPECT_EQ(p[k], bits) << dtype_name(dt) << " element " << k;
  }

  // A strided fill leaves the rest alone.
  Tensor base = Tensor::zeros({4, 6}, gpu());
  Tensor view = base.narrow(1, 1, 2);
  backend::fill(view, 2.0);
  Tensor expect = Tensor::zeros({4, 6});
  Tensor ev = expect.narrow(1, 1, 2);
  backend::fill(ev, 2.0);
  expect_equal<float>(base, expect, "strided fill");
}

// --- bfloat16 and float16 -------------------------------------------------------------------
// Both backends compute in float on the same 16-bit inputs and round once, so their 16-bit
// outputs agree to one 16-bit ulp (2^-7 relative for bfloat16, 2^-10 for float16): the float
// results may differ in their last float32 bits and straddle a rounding boundary.

constexpr DType kHalfTypes[] = {kBFloat16, kFloat16};

float ulp_of(DType t) { return t == kBFloat16 ? 1.f / 128.f : 1.f / 1024.f; }

/// Random values in [lo, hi) as a host tensor of dtype t.
Tensor rand_as(KernelsTest& t, DType dt, const Shape& s, float lo = -1.f, float hi = 1.f) {
  return t.rand(s, lo, hi).to(dt);
}

/// A device tensor of dtype dt full of NaN.
Tensor poisoned_as(DType dt, const Shape& s) { return poisoned(s).to(dt); }

void expect_close_half(const Tensor& got, const Tensor& want, float atol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  expect_close(got.to(kFloat32), want.to(kFloat32), ulp_of(want.dtype()), atol,
               what + " " + dtype_name(want.dtype()));
}

TEST_F(KernelsTest, HalfGemm) {
  // Into a 16-bit output, and into a float32 one (cublasGemmEx with a 32-bit C: an accumulator
  // over calls with beta 1, not rounded to 16 bits), against the CPU's product of the same values.
  for (DType dt : kHalfTypes) {
    for (DType out : {dt, kFloat32}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (float beta : {0.f, 1.f}) {
            const std::int64_t m = 37, k = 53, n = 29;
            const Tensor a = rand_as(*this, dt, ta ? Shape{k, m} : Shape{m, k});
            const Tensor b = rand_as(*this, dt, tb ? Shape{n, k} : Shape{k, n});
            const Tensor c0 = rand_as(*this, out, {m, n});
            Tensor want = c0.clone();
            backend::gemm(ta, tb, 0.75f, a, b, beta, want);
            Tensor got = beta == 0.f ? poisoned_as(out, {m, n}) : on_gpu(c0);
            backend::gemm(ta, tb, 0.75f, on_gpu(a), on_gpu(b), beta, got);
            const std::string what = std::string("gemm into ") + dtype_name(out) + " ta=" + std::to_string(ta) +
                                     " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta);
            if (out == kFloat32) expect_close(got, want, 1e-5f, 1e-6f * static_cast<float>(k), what);
            else expect_close_half(got, want, 1e-5f * static_cast<float>(k), what);
          }
        }
      }
    }
  }
}

TEST_F(KernelsTest, ScaleByEveryDtypeTripleReadsItsScaleOnTheDevice) {
  // out = beta*out + s[0] * x with each operand of its own dtype, against the CPU: within one unit
  // in the last place of out's dtype (both round float32 results once; one may fuse the multiply-add).
  const DType all[] = {kFloat32, kBFloat16, kFloat16};
  for (DType tx : all) {
    for (DType ts : all) {
      for (DType to : all) {
        for (float beta : {0.f, 1.f}) {
          const Tensor x = rand({1003}).to(tx), s = rand({}, 0.5f, 2.f).to(ts), o0 = rand({1003}).to(to);
          Tensor want = o0.clone();
          backend::scale_by(x, s, beta, want);
          Tensor got = beta == 0.f ? poisoned_as(to, {1003}) : on_gpu(o0);
          backend::scale_by(on_gpu(x), on_gpu(s), beta, got);
          ASSERT_EQ(got.dtype(), to);
          expect_close(got.to(kFloat32), want.to(kFloat32), to == kFloat32 ? 1e-6f : ulp_of(to), 1e-7f,
                       std::string("scale_by x ") + dtype_name(tx) + " s " + dtype_name(ts) + " out " +
                           dtype_name(to) + " beta " + std::to_string(beta));
        }
      }
    }
  }
  Tensor in_place = on_gpu(rand({64}).to(kBFloat16));  // out may be x
  const Tensor before = in_place.to(kFloat32).to(Device::cpu());
  backend::scale_by(in_place, on_gpu(Tensor::full({}, 2.0)), 0.f, in_place);
  expect_close(in_place.to(kFloat32), before.to(kFloat32).to(gpu()) * 2.f, 0.f, 0.f, "scale_by in place");
}

TEST_F(KernelsTest, HalfSoftmaxCrossEntropyBackwardWithAFloat32Scale) {
  // gloss float32 beside 16-bit logits: 2^15 times the rows, which no 16-bit type holds exactly,
  // so the gradient comes out times 2^15: the CPU's float32 result rounded once (one ulp apart).
  for (DType dt : kHalfTypes) {
    const Tensor logits = rand_as(*this, dt, {77, 1000}), y = labels(77, 1000);
    Tensor lse = Tensor::empty({77}), l = Tensor::empty({});
    backend::softmax_xent(logits.to(kFloat32), y, 0.f, lse, l);
    const Tensor big = Tensor::full({}, 32768.0 * 77);
    Tensor want = Tensor::empty({77, 1000}, dt);
    backend::softmax_xent_backward(logits, y, lse, 0.f, big, 0.f, want);
    Tensor got = poisoned_as(dt, {77, 1000});
    backend::softmax_xent_backward(on_gpu(logits), on_gpu(y), on_gpu(lse), 0.f, on_gpu(big), 0.f, got);
    expect_close_half(got, want, 1e-3f, "softmax_xent_backward with a float32 gloss");
  }
}

TEST_F(KernelsTest, SoftmaxCrossEntropyAndGradInOnePassIsTheTwoKernelsBitForBit) {
  // Every dtype, a float32 or logits-dtype loss and gloss, label smoothing, rows whose length is no
  // multiple of a pack, and vocabulary-long ones: the one-pass kernel's loss, log-sum-exp and
  // gradient against softmax_xent followed by softmax_xent_backward in place, on the GPU.
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    for (const Shape& s : {Shape{257, 33}, Shape{1, 1}, Shape{64, 1000}, Shape{7, 50304}}) {
      for (float smoothing : {0.f, 0.1f}) {
        for (bool f32 : {true, false}) {
          const std::string what = std::string(" dtype=") + dtype_name(dt) + " shape=" + shape_str(s) +
                                   " smoothing=" + std::to_string(smoothing) + (f32 ? " float32" : " own dtype");
          const Tensor logits = on_gpu(rand_as(*this, dt, s)), y = on_gpu(labels(s[0], s[1]));
          const DType side = f32 ? kFloat32 : dt;
          const Tensor gloss = on_gpu(Tensor::full({}, 3.0 * static_cast<double>(s[0])).to(side));
          Tensor want = logits.clone(), wlse = poisoned({s[0]}), wl = poisoned_as(side, {});
          backend::softmax_xent(want, y, smoothing, wlse, wl);
          backend::softmax_xent_backward(want, y, wlse, smoothing, gloss, 0.f, want);
          Tensor got = logits.clone(), glse = poisoned({s[0]}), gl = poisoned_as(side, {});
          backend::softmax_xent_and_grad(got, y, smoothing, gloss, glse, gl);
          EXPECT_EQ(glse.to(Device::cpu()).to_vector<float>(), wlse.to(Device::cpu()).to_vector<float>()) << "log-sum-exp" << what;
          EXPECT_EQ(gl.to(Device::cpu()).to(kFloat32).item(), wl.to(Device::cpu()).to(kFloat32).item()) << "loss" << what;
          EXPECT_EQ(got.to(Device::cpu()).to(kFloat32).to_vector<float>(), want.to(Device::cpu()).to(kFloat32).to_vector<float>())
              << "gradient" << what;
        }
      }
    }
  }
}

TEST_F(KernelsTest, HalfSoftmaxCrossEntropyIntoAFloat32Loss) {
  // A 16-bit cross-entropy's mean into a float32 loss: not rounded to 16 bits (which would move it
  // by up to 2^-9 of itself, far beyond 1e-5).
  for (DType dt : kHalfTypes) {
    const Tensor logits = rand_as(*this, dt, {300, 1000}), y = labels(300, 1000);
    Tensor wlse = Tensor::empty({300}), wl = Tensor::empty({});
    backend::softmax_xent(logits.to(kFloat32), y, 0.f, wlse, wl);
    Tensor glse = poisoned({300}), gl = poisoned({});
    backend::softmax_xent(on_gpu(logits), on_gpu(y), 0.f, glse, gl);
    expect_close(gl, wl, 1e-5f, 0.f, std::string("softmax_xent float32 loss of ") + dtype_name(dt) + " logits");
  }
}

TEST_F(KernelsTest, HalfElementwiseNd) {
  for (DType dt : kHalfTypes) {
    // (2,3,8) takes the four-element path, (3,5,7) the one-element path.
    for (const Shape& s : {Shape{2, 3, 8}, Shape{3, 5, 7}}) {
      const std::string what = " shape=" + shape_str(s);
      for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
        for (Broadcast bc : {Broadcast::kNone, Broadcast::kRow, Broadcast::kScalar}) {
          for (float beta : {0.f, 1.f}) {
            const Shape bs = bc == Broadcast::kNone ? s : bc == Broadcast::kRow ? Shape{s.back()} : Shape{};
            const Tensor a = rand_as(*this, dt, s), b = rand_as(*this, dt, bs), o0 = rand_as(*this, dt, s);
            Tensor want = o0.clone();
            backend::binary(op, bc, a, b, beta, want);
            Tensor got = beta == 0.f ? poisoned_as(dt, s) : on_gpu(o0);
            backend::binary(op, bc, on_gpu(a), on_gpu(b), beta, got);
            expect_close_half(got, want, 1e-6f, "binary" + what);
          }
        }
      }
      const Tensor x = rand_as(*this, dt, s), y0 = rand_as(*this, dt, s), gy = rand_as(*this, dt, s);
      const Tensor sc = rand_as(*this, dt, {});
      for (float beta : {0.f, 1.f}) {
        Tensor want = y0.clone(), got = beta == 0.f ? poisoned_as(dt, s) : on_gpu(y0);
        backend::axpby(0.7f, x, beta, want);
        backend::axpby(0.7f, on_gpu(x), beta, got);
        expect_close_half(got, want, 1e-6f, "axpby" + what);

        want = y0.clone();
        got = beta == 0.f ? poisoned_as(dt, s) : on_gpu(y0);
        backend::fill_scaled(0.5f, sc, beta, want);
        backend::fill_scaled(0.5f, on_gpu(sc), beta, got);
        expect_close_half(got, want, 1e-6f, "fill_scaled" + what);

        want = y0.clone();
        got = beta == 0.f ? poisoned_as(dt, s) : on_gpu(y0);
        backend::relu_backward(x, gy, beta, want);
        backend::relu_backward(on_gpu(x), on_gpu(gy), beta, got);
        expect_close_half(got, want, 0.f, "relu_backward" + what);
      }
      Tensor want = Tensor::empty(s, dt), got = poisoned_as(dt, s);
      backend::relu(x, want);
      backend::relu(on_gpu(x), got);
      expect_close_half(got, want, 0.f, "relu" + what);
    }
  }
}

// pow_backward on the GPU against the CPU: 16 bytes per thread when aligned, element by element
// for an offset view, a length that is no multiple of the pack, either output alone.
TEST_F(KernelsTest, PowBackwardMatchesCpuEveryDtype) {
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    for (const std::int64_t n : {std::int64_t{4099}, std::int64_t{64}}) {
      for (const bool offset : {false, true}) {
        for (float beta : {0.f, 1.f}) {
          for (int wanted : {1, 2, 3}) {
            const std::int64_t start = offset ? 1 : 0;
            const Tensor a = rand_as(*this, dt, {n + start}, 0.25f, 2.f).narrow(0, start, n);
            const Tensor b = rand_as(*this, dt, {n}, -1.5f, 1.5f), g = rand_as(*this, dt, {n});
            const Tensor ga0 = rand_as(*this, dt, {n}), gb0 = rand_as(*this, dt, {n});
            Tensor want_a = ga0.clone(), want_b = gb0.clone();
            Tensor* wa = (wanted & 1) != 0 ? &want_a : nullptr;
            Tensor* wb = (wanted & 2) != 0 ? &want_b : nullptr;
            backend::pow_backward(a.contiguous(), b, g, beta, wa, beta, wb);
            Tensor got_a = on_gpu(ga0), got_b = on_gpu(gb0);
            Tensor* pa = (wanted & 1) != 0 ? &got_a : nullptr;
            Tensor* pb = (wanted & 2) != 0 ? &got_b : nullptr;
            // a on the GPU `start` elements into its storage: misaligned for 16-byte access.
            Tensor a_gpu = on_gpu(Tensor::zeros({n + start}, TensorOptions(dt))).narrow(0, start, n);
            a_gpu.copy_(on_gpu(a.contiguous()));
            backend::pow_backward(a_gpu, on_gpu(b), on_gpu(g), beta, pa, beta, pb);
            const std::string what = std::string(" ") + dtype_name(dt) + " n=" + std::to_string(n) +
                                     " offset=" + std::to_string(offset) + " beta=" + std::to_string(beta) +
                                     " wanted=" + std::to_string(wanted);
            if (dt == kFloat32) {
              expect_close(got_a, want_a, 1e-5f, 1e-6f, "pow_backward base" + what);
              expect_close(got_b, want_b, 1e-5f, 1e-6f, "pow_backward exponent" + what);
            } else {
              expect_close_half(got_a, want_a, 1e-5f, "pow_backward base" + what);
              expect_close_half(got_b, want_b, 1e-5f, "pow_backward exponent" + what);
            }
          }
        }
      }
    }
  }
}

// Operands that broadcast over leading dimensions only (same shape, a row, a scalar, a causal
// mask's (1, 1, T, T)) take the GPU's periodic path, 16 bytes per thread where extents and
// alignment allow; (3,5,7) and the misaligned view take it element by element, and (2,1,16) the
// general broadcast index.
TEST_F(KernelsTest, BinaryAndWhereBroadcastOverLeadingDimensionsEveryDtype) {
  const std::vector<std::pair<Shape, Shape>> pairs = {
      {{2, 3, 16}, {2, 3, 16}}, {{2, 3, 16}, {1, 1, 16}}, {{2, 3, 16}, {1, 3, 16}}, {{1, 1, 16}, {2, 3, 16}},
      {{2, 3, 16}, {1, 1, 1}},  {{3, 5, 7}, {1, 5, 7}},   {{3, 5, 7}, {3, 5, 7}},   {{2, 3, 16}, {2, 1, 16}}};
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    // float32 takes an absolute 1e-6 too: with beta 1 the sum o0 + a / b can cancel to a value
    // near 0, where the GPU's division (within 2 ulp of |a / b| <= 2) is far from 1e-6 relative.
    const auto close = [&](const Tensor& got, const Tensor& want, const std::string& what) {
      if (dt == kFloat32) expect_close(got, want, 1e-6f, 1e-6f, what);
      else expect_close_half(got, want, 1e-6f, what);
    };
    for (const auto& [sa, sb] : pairs) {
      Shape so(sa.size());
      for (std::size_t k = 0; k < sa.size(); ++k) so[k] = std::max(sa[k], sb[k]);
      const std::string what = std::string(" ") + dtype_name(dt) + " " + shape_str(sa) + " and " + shape_str(sb);
      for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kMul, BinaryOp::kDiv}) {
        for (float beta : {0.f, 1.f}) {
          const Tensor a = rand_as(*this, dt, sa), b = rand_as(*this, dt, sb, 0.5f, 2.f), o0 = rand_as(*this, dt, so);
          Tensor want = o0.clone();
          backend::binary(op, Broadcast::kShape, a, b, beta, want);
          Tensor got = beta == 0.f ? poisoned_as(dt, so) : on_gpu(o0);
          backend::binary(op, Broadcast::kShape, on_gpu(a), on_gpu(b), beta, got);
          close(got, want, "binary op=" + std::to_string(static_cast<int>(op)) + " beta=" + std::to_string(beta) + what);
        }
      }
      // where with the condition shaped as b, a as a, and the other value a scalar or out-shaped.
      std::vector<std::uint8_t> bits(static_cast<std::size_t>(shape_numel(sb)));
      for (auto& bit : bits) bit = static_cast<std::uint8_t>(gen_.below(2));
      const Tensor cond = Tensor::from_vector(bits, sb);
      for (const Shape& sc : {Shape(so.size(), 1), so}) {
        const Tensor a = rand_as(*this, dt, sa), c = rand_as(*this, dt, sc);
        Tensor want = Tensor::empty(so, dt), got = poisoned_as(dt, so);
        backend::where(cond, a, c, want);
        backend::where(on_gpu(cond), on_gpu(a), on_gpu(c), got);
        close(got, want, "where other=" + shape_str(sc) + what);
      }
    }
    // A view one element into its buffer is not 16-byte aligned: the element-by-element path.
    const Tensor big = rand_as(*this, dt, {1 + 4 * 16}), b = rand_as(*this, dt, {1, 16}, 0.5f, 2.f);
    const Tensor a = big.view_range(1, {4, 16});
    Tensor want = Tensor::empty({4, 16}, dt), got = poisoned_as(dt, {4, 16});
    backend::binary(BinaryOp::kDiv, Broadcast::kShape, a, b, 0.f, want);
    backend::binary(BinaryOp::kDiv, Broadcast::kShape, on_gpu(big).view_range(1, {4, 16}), on_gpu(b), 0.f, got);
    close(got, want, std::string("binary misaligned ") + dtype_name(dt));
  }
}

TEST_F(KernelsTest, HalfReductions) {
  for (DType dt : kHalfTypes) {
    for (const Shape& s : {Shape{4, 25, 40}, Shape{1000, 7}, Shape{3, 33}}) {
      const std::int64_t rows = shape_numel(s) / s.back();
      const Tensor x = rand_as(*this, dt, s), o0 = rand_as(*this, dt, {s.back()});
      for (float beta : {0.f, 1.f}) {
        Tensor want = o0.clone(), got = beta == 0.f ? poisoned_as(dt, {s.back()}) : on_gpu(o0);
        backend::sum_rows(0.5f, x, beta, want);
        backend::sum_rows(0.5f, on_gpu(x), beta, got);
        expect_close_half(got, want, 1e-5f * static_cast<float>(rows), "sum_rows shape=" + shape_str(s));
      }
      Tensor want = Tensor::empty({}, dt), got = poisoned_as(dt, {});
      backend::sum_all(0.25f, x, want);
      backend::sum_all(0.25f, on_gpu(x), got);
      expect_close_half(got, want, 1e-5f, "sum_all shape=" + shape_str(s));
    }
    // 16384 ones: a sum kept in 16 bits would stop at 256 (bfloat16) or 2048 (float16); the
    // result itself is exact in both (65536 would overflow float16, whose largest is 65504).
    Tensor total = poisoned_as(dt, {});
    backend::sum_all(1.f, Tensor::ones({128, 128}, TensorOptions(dt, gpu())), total);
    EXPECT_EQ(total.item(), 16384.f) << dtype_name(dt);
  }
}

TEST_F(KernelsTest, SumSquaresAndClipToNormEveryDtype) {
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    for (const Shape& s : {Shape{1000}, Shape{1003}, Shape{3, 100000}}) {
      const std::string what = std::string(" ") + dtype_name(dt) + " shape=" + shape_str(s);
      const Tensor x = rand_as(*this, dt, s);
      Tensor want = Tensor::empty({}), got = poisoned({});
      backend::sum_squares(x, want);
      backend::sum_squares(on_gpu(x), got);
      expect_close(got, want, 1e-5f, 0.f, "sum_squares" + what);
      const float norm = std::sqrt(want.item());
      // Above the norm nothing changes, bit for bit; below it every element scales by max / norm.
      for (float max_norm : {2.f * norm, 0.5f * norm}) {
        Tensor cpu = x.clone(), gpu_x = on_gpu(x);
        backend::clip_to_norm(cpu, want, max_norm);
        backend::clip_to_norm(gpu_x, on_gpu(want), max_norm);
        if (max_norm > norm) {
          EXPECT_EQ(gpu_x.to(kFloat32).to_vector<float>(), x.to(kFloat32).to_vector<float>()) << what;
        }
        if (dt == kFloat32) expect_close(gpu_x, cpu, 1e-6f, 0.f, "clip_to_norm" + what);
        else expect_close_half(gpu_x, cpu, 0.f, "clip_to_norm" + what);
      }
    }
  }
}

TEST_F(KernelsTest, LinearBiasEveryDtypeWithAndWithoutTheEpilogue) {
  // (m, k, n): GPT-2's projections, and shapes whose rows break 16-byte alignment (the two-pass
  // path the epilogue falls back to).
  const std::vector<std::array<std::int64_t, 3>> problems{{64, 96, 80}, {1024, 768, 2304}, {7, 5, 3}, {33, 17, 9}};
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    for (const auto& [m, k, n] : problems) {
      const Tensor x = rand_as(*this, dt, {m, k}), w = rand_as(*this, dt, {n, k}), b = rand_as(*this, dt, {n});
      // The reference in float32 from the same (16-bit-exact) values. A 16-bit result is off by
      // its rounding: half an ulp of the result, or, on the two-pass path, also of the product
      // before the bias (whose size grows as sqrt(k) for these uniform operands).
      Tensor want = Tensor::empty({m, n}), got = poisoned_as(dt, {m, n});
      backend::linear_bias(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32), want);
      backend::linear_bias(on_gpu(x), on_gpu(w), on_gpu(b), got);
      const std::string what = std::string("linear_bias ") + dtype_name(dt) + " m=" + std::to_string(m) +
                               " k=" + std::to_string(k) + " n=" + std::to_string(n);
      const float kf = static_cast<float>(k);
      if (dt == kFloat32) expect_close(got, want, 1e-5f, 1e-6f * kf, what);  // as the other products
      else expect_close(got.to(kFloat32), want, ulp_of(dt), ulp_of(dt) * std::sqrt(kf), what);
    }
  }
}

// The GELU epilogues: forward (pre and gelu_tanh(pre)) and the activation's backward with and
// without the bias gradient, fresh and accumulated, against the CPU's float32 kernels on the same
// 16-bit-exact values. (m, k, n): shapes the epilogue takes (n a multiple of 8), GPT-2's c_fc, and
// one whose rows break alignment (the unfused path, which rounds in between as well).
TEST_F(KernelsTest, LinearBiasGeluAndItsBackwardEveryDtypeWithAndWithoutTheEpilogue) {
  const std::vector<std::array<std::int64_t, 3>> problems{{64, 96, 128}, {1024, 768, 3072}, {33, 17, 9}};
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    for (const auto& [m, k, n] : problems) {
      const std::string what = std::string(" ") + dtype_name(dt) + " m=" + std::to_string(m) +
                               " k=" + std::to_string(k) + " n=" + std::to_string(n);
      const float kf = static_cast<float>(k), mf = static_cast<float>(m);
      const auto close = [&](const Tensor& got, const Tensor& want, float scale, const std::string& name) {
        if (dt == kFloat32) expect_close(got, want, 1e-5f, 1e-6f * scale, name + what);
        else expect_close(got.to(kFloat32), want, 2.f * ulp_of(dt), ulp_of(dt) * scale, name + what);
      };
      const Tensor x = rand_as(*this, dt, {m, k}), w = rand_as(*this, dt, {n, k}), b = rand_as(*this, dt, {n});
      Tensor pre = Tensor::empty({m, n}), out = Tensor::empty({m, n});
      Tensor gpre = poisoned_as(dt, {m, n}), gout = poisoned_as(dt, {m, n});
      backend::linear_bias_gelu(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32), out, pre);
      backend::linear_bias_gelu(on_gpu(x), on_gpu(w), on_gpu(b), gout, gpre);
      close(gpre, pre, std::sqrt(kf), "linear_bias_gelu pre");
      close(gout, out, std::sqrt(kf), "linear_bias_gelu out");
      // Backward from the GPU's own (rounded) pre-activation, so both sides read the same values.
      const Tensor pre_h = gpre.to(Device::cpu()), gy = rand_as(*this, dt, {m, k}), w2 = rand_as(*this, dt, {k, n});
      const Tensor prior = rand_as(*this, dt, {n});
      for (bool with_bias : {false, true}) {
        for (float beta : {0.f, 1.f}) {
          if (!with_bias && beta != 0.f) continue;
          Tensor dpre = Tensor::empty({m, n}), db = prior.to(kFloat32).clone();
          Tensor gdpre = poisoned_as(dt, {m, n}), gdb = on_gpu(prior);
          backend::gemm_dgelu_bgrad(gy.to(kFloat32), w2.to(kFloat32), pre_h.to(kFloat32), dpre, beta,
                                    with_bias ? &db : nullptr);
          backend::gemm_dgelu_bgrad(on_gpu(gy), on_gpu(w2), on_gpu(pre_h), gdpre, beta, with_bias ? &gdb : nullptr);
          const std::string how = std::string(with_bias ? " with the bias gradient" : "") + (beta ? " accumulated" : "");
          close(gdpre, dpre, std::sqrt(kf), "gemm_dgelu_bgrad dpre" + how);
          if (with_bias) close(gdb, db, std::sqrt(kf * mf), "gemm_dgelu_bgrad dbias" + how);
        }
      }
    }
  }
}

TEST_F(KernelsTest, HalfSoftmaxCrossEntropyAndAccuracy) {
  for (DType dt : kHalfTypes) {
    for (const Shape& s : {Shape{100, 10}, Shape{3, 1000}, Shape{257, 33}}) {
      const std::string what = " shape=" + shape_str(s);
      const Tensor logits = rand_as(*this, dt, s, -8.f, 8.f), y = labels(s[0], s[1]);
      Tensor wlse = Tensor::empty({s[0]}), wl = Tensor::empty({}, dt);
      backend::softmax_xent(logits, y, 0.f, wlse, wl);
      Tensor glse = poisoned({s[0]}), gl = poisoned_as(dt, {});
      backend::softmax_xent(on_gpu(logits), on_gpu(y), 0.f, glse, gl);
      expect_close(glse, wlse, 1e-6f, 1e-6f, "softmax_xent log-sum-exp" + what);
      expect_close_half(gl, wl, 1e-5f, "softmax_xent loss" + what);

      for (float beta : {0.f, 1.f}) {
        const Tensor gloss = rand_as(*this, dt, {}, 0.5f, 2.f), g0 = rand_as(*this, dt, s);
        Tensor want = g0.clone(), got = beta == 0.f ? poisoned_as(dt, s) : on_gpu(g0);
        backend::softmax_xent_backward(logits, y, wlse, 0.f, gloss, beta, want);
        backend::softmax_xent_backward(on_gpu(logits), on_gpu(y), on_gpu(wlse), 0.f, on_gpu(gloss), beta, got);
        expect_close_half(got, want, 1e-6f, "softmax_xent_backward" + what);
      }

      Tensor wa = Tensor::empty({}, dt), ga = poisoned_as(dt, {});
      backend::accuracy(logits, y, wa);
      backend::accuracy(on_gpu(logits), on_gpu(y), ga);
      EXPECT_EQ(ga.item(), wa.item()) << "accuracy" << what << " " << dtype_name(dt);
    }
  }
}

TEST_F(KernelsTest, CastsEveryDirectionAndTheDividingLauncher) {
  const DType types[] = {kFloat32, kBFloat16, kFloat16};
  Tensor x = rand({3, 4, 97}, -300.f, 300.f);
  x.set<float>({0, 0, 0}, std::nan(""));
  x.set<float>({0, 0, 1}, 1e6f);  // beyond float16: infinity
  for (DType from : types) {
    const Tensor src = x.to(from);
    for (DType to : types) {
      Tensor want = Tensor::empty(src.shape(), to);
      backend::cast(src, want);
      Tensor got = poisoned_as(to, src.shape());
      backend::cast(on_gpu(src), got);
      // Both sides round the same float to nearest even: equal values, NaN where NaN. (NaN's
      // bits may differ: the device writes the canonical NaN, the host keeps the payload.)
      const std::vector<float> g = got.to(kFloat32).to_vector<float>(), w = want.to(kFloat32).to_vector<float>();
      for (std::size_t i = 0; i < g.size(); ++i) {
        if (!(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])))) {
          ADD_FAILURE() << "cast " << dtype_name(from) << " -> " << dtype_name(to) << ": element " << i << " is "
                        << g[i] << ", expected " << w[i];
          break;
        }
      }
    }
  }
  // launch_cast divides on the way (the mean of a 16-bit gradient reduction), on any stream.
  const Tensor h = x.to(kBFloat16);
  const Tensor hg = on_gpu(h);
  Tensor got = poisoned({3, 4, 97});
  backend::cuda_detail::launch_cast(hg.raw_data(), kBFloat16, got.raw_data(), kFloat32, hg.numel(), 3.f, 0,
                                    backend::cuda_stream(0));
  const std::vector<float> g = got.to_vector<float>(), w = h.to(kFloat32).to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i]));
    } else {
      EXPECT_EQ(g[i], w[i] / 3.f) << "element " << i;
    }
  }
  // In place: float32 divided by a number.
  Tensor inplace = on_gpu(x);
  backend::cuda_detail::launch_cast(inplace.raw_data(), kFloat32, inplace.raw_data(), kFloat32, inplace.numel(), 2.f,
                                    0, backend::cuda_stream(0));
  const std::vector<float> ip = inplace.to_vector<float>(), xv = x.to_vector<float>();
  for (std::size_t i = 1; i < ip.size(); ++i) EXPECT_EQ(ip[i], xv[i] / 2.f) << "element " << i;
}

// --- the dispatcher ----------------------------------------------------------------------------

TEST_F(KernelsTest, DispatcherRejectsTensorsOnTwoDevices) {
  const Tensor x = rand({4});
  Tensor y = poisoned({4});
  try {
    backend::relu(x, y);
    ADD_FAILURE() << "relu accepted a host input and a device output";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("relu"), std::string::npos) << m;
    EXPECT_NE(m.find("x on cpu"), std::string::npos) << m;
    EXPECT_NE(m.find("y on cuda:0"), std::string::npos) << m;
  }
}

// --- optimizer updates ----------------------------------------------------------------------

TEST_F(KernelsTest, OptimizerUpdatesOverSeveralSteps) {
  for (std::int64_t n : {1000, 1001}) {  // float4 path, scalar path
    for (float wd : {0.f, 0.01f}) {
      const std::string what = " n=" + std::to_string(n) + " wd=" + std::to_string(wd);
      const Tensor p0 = rand({n});
      Tensor pc = p0.clone(), pg = on_gpu(p0);
      Tensor vc = Tensor::zeros({n}), vg = Tensor::zeros({n}, gpu());
      Tensor mc = Tensor::zeros({n}), mg = Tensor::zeros({n}, gpu());
      Tensor sc = Tensor::zeros({n}), sg = Tensor::zeros({n}, gpu());
      Tensor qc = p0.clone(), qg = on_gpu(p0);
      Tensor rc = p0.clone(), rg = on_gpu(p0);
      for (int step = 1; step <= 4; ++step) {
        const Tensor g = rand({n});
        const Tensor gg = on_gpu(g);
        backend::sgd_update(pc, g, {0.1f, wd}, {});
        backend::sgd_update(pg, gg, {0.1f, wd}, {});
        backend::momentum_update(qc, g, vc, {0.1f, 0.9f, wd}, {});
        backend::momentum_update(qg, gg, vg, {0.1f, 0.9f, wd}, {});
        const float lr_t = 1e-2f * std::sqrt(1.f - std::pow(0.999f, step)) / (1.f - std::pow(0.9f, step));
        backend::adam_update(rc, g, mc, sc, {lr_t, 0.9f, 0.999f, 1e-8f, wd}, {});
        backend::adam_update(rg, gg, mg, sg, {lr_t, 0.9f, 0.999f, 1e-8f, wd}, {});
      }
      expect_close(pg, pc, 1e-5f, 1e-6f, "sgd" + what);
      expect_close(qg, qc, 1e-5f, 1e-6f, "momentum param" + what);
      expect_close(vg, vc, 1e-5f, 1e-6f, "momentum velocity" + what);
      expect_close(rg, rc, 1e-5f, 1e-6f, "adam param" + what);
      expect_close(mg, mc, 1e-5f, 1e-7f, "adam m" + what);
      expect_close(sg, sc, 1e-5f, 1e-8f, "adam v" + what);
    }
  }
}

// --- activations, dropout, softmax, argmax, mean squared error (every dtype) ------------------------

TEST_F(KernelsTest, ReluPropagatesNaN) {
  Tensor x = rand({3, 5});
  x.set<float>({0, 0}, std::nan(""));
  x.set<float>({1, 2}, -std::nan(""));
  Tensor want = Tensor::empty({3, 5}), got = poisoned({3, 5});
  backend::relu(x, want);
  backend::relu(on_gpu(x), got);
  const Tensor back = got.to(Device::cpu());
  EXPECT_TRUE(std::isnan(back.at<float>({0, 0})) && std::isnan(back.at<float>({1, 2})));
  EXPECT_TRUE(std::isnan(want.at<float>({0, 0})) && std::isnan(want.at<float>({1, 2})));
}

TEST_F(KernelsTest, ActivationsDropoutSoftmaxArgmaxAndMseEveryDtype) {
  using backend::Activation;
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    const auto close = [&](const Tensor& got, const Tensor& want, const std::string& what) {
      if (dt == kFloat32) expect_close(got, want, 1e-5f, 1e-6f, what);
      else expect_close_half(got, want, 1e-5f, what);
    };
    for (const Shape& s : {Shape{7, 13}, Shape{2, 3, 64}, Shape{3, 1000}}) {
      const std::string where = std::string(" ") + dtype_name(dt) + " shape=" + shape_str(s);
      const Tensor x = rand_as(*this, dt, s, -4.f, 4.f), gy = rand_as(*this, dt, s), g0 = rand_as(*this, dt, s);
      // (f, slope, upper): pow's exponents with a special case on the GPU (and 1.5, which has
      // none) on positive inputs, and clamp with both bounds in one pass.
      const Tensor xpos = rand_as(*this, dt, s, 0.25f, 4.f);
      const std::vector<std::tuple<Activation, float, float, const Tensor*>> cases = {
          {Activation::kLeakyRelu, 0.1f, 0.f, &x},  {Activation::kSigmoid, 0.1f, 0.f, &x},
          {Activation::kTanh, 0.1f, 0.f, &x},       {Activation::kGelu, 0.1f, 0.f, &x},
          {Activation::kGeluTanh, 0.1f, 0.f, &x},
          {Activation::kPow, 2.f, 0.f, &x},         {Activation::kPow, 3.f, 0.f, &x},
          {Activation::kPow, 1.f, 0.f, &x},         {Activation::kPow, 0.5f, 0.f, &xpos},
          {Activation::kPow, -1.f, 0.f, &xpos},     {Activation::kPow, -0.5f, 0.f, &xpos},
          {Activation::kPow, 1.5f, 0.f, &xpos},     {Activation::kClamp, -1.5f, 2.f, &x},
          {Activation::kClampMin, -1.5f, 0.f, &x},  {Activation::kClampMax, 2.f, 0.f, &x}};
      for (const auto& [f, slope, upper, in] : cases) {
        const std::string what = "activation " + std::to_string(static_cast<int>(f)) + " slope " +
                                 std::to_string(slope) + " upper " + std::to_string(upper) + where;
        Tensor want = Tensor::empty(s, dt), got = poisoned_as(dt, s);
        backend::activation(f, slope, upper, *in, want);
        backend::activation(f, slope, upper, on_gpu(*in), got);
        close(got, want, what);
        const Tensor saved = backend::backward_reads_output(f) ? want : *in;
        for (float beta : {0.f, 1.f}) {
          Tensor wg = g0.clone(), gg = beta == 0.f ? poisoned_as(dt, s) : on_gpu(g0);
          backend::activation_backward(f, slope, upper, saved, gy, beta, wg);
          backend::activation_backward(f, slope, upper, on_gpu(saved), on_gpu(gy), beta, gg);
          close(gg, wg, what + " backward");
        }
      }
      for (float beta : {0.f, 1.f}) {
        // The mask is a hash of (seed, index): the same on both devices, element for element.
        Tensor want = g0.clone(), got = beta == 0.f ? poisoned_as(dt, s) : on_gpu(g0);
        backend::dropout(0.3f, 99, x, beta, want);
        backend::dropout(0.3f, 99, on_gpu(x), beta, got);
        close(got, want, "dropout" + where);
      }
      for (bool log : {false, true}) {
        const std::string what = (log ? "log_softmax" : "softmax") + where;
        Tensor want = Tensor::empty(s, dt), got = poisoned_as(dt, s);
        backend::softmax(log, x, want);
        backend::softmax(log, on_gpu(x), got);
        close(got, want, what);
        for (float beta : {0.f, 1.f}) {
          Tensor wg = g0.clone(), gg = beta == 0.f ? poisoned_as(dt, s) : on_gpu(g0);
          backend::softmax_backward(log, want, gy, beta, wg);
          backend::softmax_backward(log, on_gpu(want), on_gpu(gy), beta, gg);
          close(gg, wg, what + " backward");
        }
      }
      Shape rows = s;
      rows.pop_back();
      Tensor wa = Tensor::empty(rows, kInt64), ga = Tensor::empty(rows, TensorOptions(kInt64, gpu()));
      backend::argmax(x, wa);
      backend::argmax(on_gpu(x), ga);
      EXPECT_EQ(ga.to(Device::cpu()).to_vector<std::int64_t>(), wa.to_vector<std::int64_t>()) << "argmax" << where;

      const Tensor t = rand_as(*this, dt, s), gloss = rand_as(*this, dt, {}, 0.5f, 2.f);
      Tensor wl = Tensor::empty({}, dt), gl = poisoned_as(dt, {});
      backend::mse(x, t, wl);
      backend::mse(on_gpu(x), on_gpu(t), gl);
      close(gl, wl, "mse" + where);
      for (float alpha : {1.f, -1.f}) {
        Tensor wg = Tensor::empty(s, dt), gg = poisoned_as(dt, s);
        backend::mse_backward(x, t, gloss, alpha, 0.f, wg);
        backend::mse_backward(on_gpu(x), on_gpu(t), on_gpu(gloss), alpha, 0.f, gg);
        close(gg, wg, "mse_backward" + where);
      }
    }
  }
}

TEST_F(KernelsTest, ArgmaxTiesAndNaN) {
  const float nan = std::nan("");
  const Tensor x = Tensor::from_vector<float>({1.f, 3.f, 3.f, 0.f, nan, 5.f, nan, 2.f, nan}, {3, 3});
  Tensor got = Tensor::empty({3}, TensorOptions(kInt64, gpu()));
  backend::argmax(on_gpu(x), got);
  EXPECT_EQ(got.to(Device::cpu()).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 1, 0}));
}

TEST_F(KernelsTest, SoftmaxCrossEntropyWithLabelSmoothing) {
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    const Shape s{37, 11};
    const Tensor logits = rand_as(*this, dt, s, -5.f, 5.f), y = labels(s[0], s[1]);
    Tensor wlse = Tensor::empty({s[0]}), wl = Tensor::empty({}, dt);
    backend::softmax_xent(logits, y, 0.1f, wlse, wl);
    Tensor glse = poisoned({s[0]}), gl = poisoned_as(dt, {});
    backend::softmax_xent(on_gpu(logits), on_gpu(y), 0.1f, glse, gl);
    expect_close_half(gl, wl, 1e-5f, std::string("smoothed loss ") + dtype_name(dt));
    const Tensor gloss = rand_as(*this, dt, {}, 0.5f, 2.f);
    Tensor want = Tensor::empty(s, dt), got = poisoned_as(dt, s);
    backend::softmax_xent_backward(logits, y, wlse, 0.1f, gloss, 0.f, want);
    backend::softmax_xent_backward(on_gpu(logits), on_gpu(y), on_gpu(wlse), 0.1f, on_gpu(gloss), 0.f, got);
    expect_close_half(got, want, 1e-6f, std::string("smoothed backward ") + dtype_name(dt));
  }
}

}  // namespace
}  // namespace dpl::test
