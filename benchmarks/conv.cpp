// Convolution throughput: times conv2d's forward pass and its two gradients (input and weight)
// through dpl's kernels for one shape, or for every distinct convolution of ResNet-50 (v1.5:
// stride on the 3x3 of each stage's first block), on cpu or cuda. Prints one key=value record per
// shape:
//   shape=N,C,H,W,O,kh,kw,stride,pad dtype=float32 layout=nchw fwd_ms=... bwd_data_ms=...
//   bwd_weight_ms=... total_ms=...
// Each figure is the median of the timed repetitions, after warm-up calls (which also let cuDNN
// choose its algorithms).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dpl/dpl.hpp"

namespace {
using namespace dpl;

struct ConvShape {
  std::int64_t c, h, w, o, k, stride, pad;
};

// Every distinct convolution of ResNet-50 at 224x224 input (torchvision's v1.5 layout).
const std::vector<ConvShape>& resnet50_shapes() {
  static const std::vector<ConvShape> shapes = {
      {3, 224, 224, 64, 7, 2, 3},  // stem
      // stage 1 (56x56, 64 -> 256)
      {64, 56, 56, 64, 1, 1, 0}, {64, 56, 56, 64, 3, 1, 1}, {64, 56, 56, 256, 1, 1, 0}, {256, 56, 56, 64, 1, 1, 0},
      // stage 2 (28x28, 128 -> 512); the first block's 3x3 and projection have stride 2
      {256, 56, 56, 128, 1, 1, 0}, {128, 56, 56, 128, 3, 2, 1}, {128, 28, 28, 512, 1, 1, 0},
      {256, 56, 56, 512, 1, 2, 0}, {512, 28, 28, 128, 1, 1, 0}, {128, 28, 28, 128, 3, 1, 1},
      // stage 3 (14x14, 256 -> 1024)
      {512, 28, 28, 256, 1, 1, 0}, {256, 28, 28, 256, 3, 2, 1}, {256, 14, 14, 1024, 1, 1, 0},
      {512, 28, 28, 1024, 1, 2, 0}, {1024, 14, 14, 256, 1, 1, 0}, {256, 14, 14, 256, 3, 1, 1},
      // stage 4 (7x7, 512 -> 2048)
      {1024, 14, 14, 512, 1, 1, 0}, {512, 14, 14, 512, 3, 2, 1}, {512, 7, 7, 2048, 1, 1, 0},
      {1024, 14, 14, 2048, 1, 2, 0}, {2048, 7, 7, 512, 1, 1, 0}, {512, 7, 7, 512, 3, 1, 1},
  };
  return shapes;
}

void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

// Median milliseconds of `reps` timings of f, after warm-up calls.
template <typename F>
double median_ms(Device d, int reps, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  sync(d);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    sync(d);
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void run_shape(const ConvShape& s, std::int64_t batch, DType dtype, bool nhwc, Device dev, int reps) {
  Generator gen(1);
  auto make = [&](const Shape& shape) {
    Tensor t = Tensor::uniform(shape, -1.f, 1.f, gen, TensorOptions(dtype, dev));
    return nhwc ? t.to_channels_last() : t;
  };
  const Tensor x = make({batch, s.c, s.h, s.w});
  const Tensor w = make({s.o, s.c, s.k, s.k});
  const Conv2dPair stride{s.stride, s.stride}, pad{s.pad, s.pad};
  const Tensor gy = make({batch, s.o, (s.h + 2 * s.pad - s.k) / s.stride + 1, (s.w + 2 * s.pad - s.k) / s.stride + 1});
  auto loss = [&](const Variable& xv, const Variable& wv) {
    return sum(mul(conv2d(xv, wv, Variable(), stride, pad), Variable(gy)));
  };
  const double fwd = median_ms(dev, reps, [&] {
    NoGradGuard no_grad;
    conv2d(Variable(x), Variable(w), Variable(), stride, pad);
  });
  const double fwd_loss = median_ms(dev, reps, [&] {
    NoGradGuard no_grad;
    loss(Variable(x), Variable(w));
  });
  // A gradient's time is a backward pass through the loss sum(y * gy) minus that loss's forward:
  // only one operand is a leaf, so backward runs one convolution kernel (plus one elementwise
  // pass over y for the product's own gradient).
  auto backward_ms = [&](bool of_input) {
    return median_ms(dev, reps, [&] { loss(Variable(x, of_input), Variable(w, !of_input)).backward(); }) - fwd_loss;
  };
  const double bwd_data = backward_ms(true);
  const double bwd_weight = backward_ms(false);
  std::printf("shape=%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld dtype=%s layout=%s fwd_ms=%.4f bwd_data_ms=%.4f "
              "bwd_weight_ms=%.4f total_ms=%.4f\n",
              static_cast<long long>(batch), static_cast<long long>(s.c), static_cast<long long>(s.h),
              static_cast<long long>(s.w), static_cast<long long>(s.o), static_cast<long long>(s.k),
              static_cast<long long>(s.k), static_cast<long long>(s.stride), static_cast<long long>(s.pad),
              dtype_name(dtype), nhwc ? "nhwc" : "nchw", fwd, bwd_data, bwd_weight, fwd + bwd_data + bwd_weight);
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conv2d forward and gradients, one shape or every convolution of ResNet-50"};
  std::string device_name = "cpu", dtype_name_arg = "float32", layout = "nchw";
  std::int64_t batch = 32;
  ConvShape shape{64, 56, 56, 64, 3, 1, 1};
  bool resnet50 = false;
  int threads = 0, reps = 9;
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", dtype_name_arg, "float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_option("--layout", layout, "nchw or nhwc (channels-last)")->check(CLI::IsMember({"nchw", "nhwc"}));
  app.add_option("-b,--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--channels", shape.c, "input channels")->check(CLI::PositiveNumber);
  app.add_option("--size", shape.h, "input height and width")->check(CLI::PositiveNumber);
  app.add_option("--out-channels", shape.o, "output channels")->check(CLI::PositiveNumber);
  app.add_option("--kernel", shape.k, "kernel height and width")->check(CLI::PositiveNumber);
  app.add_option("--stride", shape.stride, "stride")->check(CLI::PositiveNumber);
  app.add_option("--padding", shape.pad, "zero padding on each side")->check(CLI::NonNegativeNumber);
  app.add_flag("--resnet50", resnet50, "every distinct convolution of ResNet-50 instead of one shape");
  app.add_option("--threads", threads, "host threads (default: dpl's default)")->check(CLI::NonNegativeNumber);
  app.add_option("--reps", reps, "timed repetitions; the median is reported")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) set_num_threads(threads);
  shape.w = shape.h;
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();
  const DType dtype = dtype_name_arg == "bfloat16" ? kBFloat16 : dtype_name_arg == "float16" ? kFloat16 : kFloat32;
  const std::vector<ConvShape> shapes = resnet50 ? resnet50_shapes() : std::vector<ConvShape>{shape};
  for (const ConvShape& s : shapes) run_shape(s, batch, dtype, layout == "nhwc", dev, reps);
  return 0;
}
