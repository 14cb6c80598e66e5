// Op throughput: times each differentiable op at a size a transformer (GPT-2 small: 8 sequences
// of 1024 tokens, width 768, 12 heads) or a ResNet uses, forward alone and forward plus backward,
// on cpu or cuda. Prints one key=value record per op, the same records as
// benchmarks/torch_ops_peer.py prints for PyTorch, so that benchmarks/ops_table.py can put them
// side by side:
//   op=exp shape=8x1024x3072 dtype=bfloat16 fwd_ms=... fwd_bwd_ms=...
// Backward runs through sum(y * gy) with a fixed random gy, as the peer does. Each figure is the
// median over `--reps` timings of `--calls` calls between two device synchronisations.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "device_flags.hpp"
#include "dpl/dpl.hpp"

namespace {
using namespace dpl;

struct Case {
  std::string name;
  std::string shape;
  std::function<Variable()> run;  // builds the op's output from inputs made once
};

template <typename F>
double median_ms(Device d, int reps, int calls, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  bench::sync(d);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) f();
    bench::sync(d);
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<Case> cases(DType dtype, Device dev, std::int64_t scale) {
  Generator gen(1);
  const TensorOptions opts(dtype, dev);
  auto var = [&](const Shape& s, float lo = -1.f, float hi = 1.f) {
    return Variable(Tensor::uniform(s, lo, hi, gen, opts), true);
  };
  auto mask = [&](const Shape& s, bool causal) {
    Tensor m = Tensor::empty(s, kUInt8);
    auto* p = m.data<std::uint8_t>();
    const std::int64_t n = m.numel(), cols = s.back();
    for (std::int64_t i = 0; i < n; ++i)
      p[i] = causal ? static_cast<std::uint8_t>(i % cols > (i / cols) % s[s.size() - 2]) : static_cast<std::uint8_t>(gen.below(2));
    return m.to(dev);
  };
  auto ids = [&](const Shape& s, std::int64_t high) {
    Tensor t = Tensor::empty(s, kInt64);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<std::int64_t>()[i] = static_cast<std::int64_t>(gen.below(high));
    return t.to(dev);
  };
  const std::int64_t B = 8 / scale, T = 1024 / scale, C = 768 / scale, H = 12, F = 4 * C, V = 50257 / scale;
  const std::int64_t D = C / H;
  const std::string btf = std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(F);
  const std::string rows = std::to_string(B * T);

  std::vector<Case> out;
  // Elementwise, on an MLP's hidden activations.
  const Variable h = var({B, T, F}), pos = var({B, T, F}, 0.1f, 2.f), other = var({B, T, F}, 0.5f, 2.f);
  const Variable row = var({F}, 0.5f, 2.f);
  out.push_back({"exp", btf, [=] { return exp(h); }});
  out.push_back({"log", btf, [=] { return log(pos); }});
  out.push_back({"sqrt", btf, [=] { return sqrt(pos); }});
  out.push_back({"rsqrt", btf, [=] { return rsqrt(pos); }});
  out.push_back({"pow_scalar", btf, [=] { return pow(h, 2.f); }});
  out.push_back({"clamp", btf, [=] { return clamp(h, -0.5f, 0.5f); }});
  out.push_back({"abs", btf, [=] { return abs(h); }});
  out.push_back({"div", btf, [=] { return div(h, other); }});
  out.push_back({"div_row", btf, [=] { return div(h, row); }});
  out.push_back({"pow_tensor", btf, [=] { return pow(pos, other); }});
  const Tensor cond = mask({B, T, F}, false);
  out.push_back({"where", btf, [=] { return where(cond, h, other); }});
  // Attention: causal masking of the scores, the score and value products.
  const Variable scores = var({B, H, T, T});
  const Tensor causal = mask({1, 1, T, T}, true);
  const std::string bhtt = std::to_string(B) + "x" + std::to_string(H) + "x" + std::to_string(T) + "x" + std::to_string(T);
  out.push_back({"masked_fill", bhtt, [=] { return masked_fill(scores, causal, -1e4f); }});
  const Variable q = var({B, H, T, D}), k = var({B, H, T, D});
  const std::string bhtd = std::to_string(B) + "x" + std::to_string(H) + "x" + std::to_string(T) + "x" + std::to_string(D);
  out.push_back({"matmul_qkT", bhtd, [=] { return matmul(q, transpose(k, -2, -1)); }});
  out.push_back({"matmul_pv", bhtt, [=] { return matmul(scores, k); }});
  const Variable qb = var({B * H, T, D}), kb = var({B * H, D, T});
  out.push_back({"bmm", std::to_string(B * H) + "x" + std::to_string(T) + "x" + std::to_string(D), [=] { return bmm(qb, kb); }});
  // Reductions.
  const Variable x2 = var({B * T, F});
  const std::string x2s = rows + "x" + std::to_string(F);
  out.push_back({"sum_last", x2s, [=] { return sum(x2, {-1}, true); }});
  out.push_back({"mean_first", x2s, [=] { return mean(x2, {0}); }});
  out.push_back({"max_last", x2s, [=] { return max(x2, -1).values; }});
  // Losses, on a classifier's outputs.
  const std::int64_t classes = 1000;
  const Variable logits = var({B * T, classes});
  const Tensor labels = ids({B * T}, classes);
  const std::string lg = rows + "x" + std::to_string(classes);
  out.push_back({"nll_loss", lg, [=] { return nll_loss(log_softmax(logits), labels); }});
  const Tensor targets = Tensor::uniform({B * T, C}, 0.f, 1.f, gen, opts);
  const Variable z = var({B * T, C}), zt = var({B * T, C});
  const std::string zs = rows + "x" + std::to_string(C);
  out.push_back({"bce_with_logits", zs, [=] { return binary_cross_entropy_with_logits(z, targets); }});
  out.push_back({"l1_loss", zs, [=] { return l1_loss(z, zt); }});
  out.push_back({"smooth_l1_loss", zs, [=] { return smooth_l1_loss(z, zt); }});
  // Shape and indexing.
  const Variable a = var({B, T, C}), b = var({B, T, C}), c = var({B, T, C});
  const std::string btc = std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(C);
  out.push_back({"cat_last", btc, [=] { return cat({a, b, c}, -1); }});
  out.push_back({"stack", btc, [=] { return stack({a, b, c}, 0); }});
  const Variable heads = var({B, T, H, D});
  out.push_back({"permute_contiguous", btc, [=] { return contiguous(permute(heads, {0, 2, 1, 3})); }});
  const Variable img = var({32 / scale, 64, 56, 56});
  out.push_back({"pad", std::to_string(32 / scale) + "x64x56x56", [=] { return pad(img, {1, 1, 1, 1}); }});
  const Variable table = var({V, C});
  const Tensor tokens = ids({B, T}, V);
  const std::string vc = std::to_string(V) + "x" + std::to_string(C);
  out.push_back({"embedding", vc, [=] { return embedding(tokens, table); }});
  out.push_back({"index_select", vc, [=] { return index_select(table, 0, tokens.flatten()); }});
  const Tensor picks = ids({B * T, 1}, classes);
  out.push_back({"gather", lg, [=] { return gather(logits, 1, picks); }});
  // Normalization: a transformer's LayerNorm, a GroupNorm of a convolutional network.
  const Variable ln_w = var({C}), ln_b = var({C});
  out.push_back({"layer_norm", zs, [=] { return layer_norm(z, {C}, ln_w, ln_b); }});
  const Variable feat = var({32 / scale, 256, 28, 28}), gn_w = var({256}), gn_b = var({256});
  out.push_back({"group_norm", std::to_string(32 / scale) + "x256x28x28", [=] { return group_norm(feat, 32, gn_w, gn_b); }});
  // Attention: GPT-2 small's causal self-attention in one op (cuDNN's fused kernels for 16-bit
  // heads where the build has its frontend).
  const Variable aq = var({B, H, T, D}), ak = var({B, H, T, D}), av = var({B, H, T, D});
  out.push_back({"sdpa_causal", bhtd, [=] { return scaled_dot_product_attention(aq, ak, av, true); }});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times dpl's ops forward and forward+backward at transformer and ResNet sizes"};
  bench::DeviceFlags flags;
  flags.add_to(app);
  std::string dtype_name = "bfloat16", filter;
  int reps = 10, calls = 10;
  std::int64_t scale = 1;
  app.add_option("--dtype", dtype_name, "float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_option("--reps", reps, "timings per figure (the median is printed)")->check(CLI::PositiveNumber);
  app.add_option("--calls", calls, "calls per timing")->check(CLI::PositiveNumber);
  app.add_option("--scale", scale, "divide the sizes by this (a quick run on a CPU)")->check(CLI::PositiveNumber);
  app.add_option("--filter", filter, "only the ops whose name contains this");
  CLI11_PARSE(app, argc, argv);
  Device dev;
  if (!flags.resolve("bench_ops", dev)) return 1;
  const DType dtype = dtype_name == "float32" ? kFloat32 : dtype_name == "float16" ? kFloat16 : kBFloat16;

  for (const Case& c : cases(dtype, dev, scale)) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    try {
      const double fwd = median_ms(dev, reps, calls, [&] {
        NoGradGuard no_grad;
        c.run();
      });
      Generator gen(2);
      Variable probe = c.run();
      const Variable gy(Tensor::uniform(probe.shape(), -1.f, 1.f, gen, TensorOptions(probe.data().dtype(), dev)));
      probe = Variable();
      const double fwd_bwd = median_ms(dev, reps, calls, [&] { sum(mul(c.run(), gy)).backward(); });
      std::printf("op=%s shape=%s dtype=%s fwd_ms=%.4f fwd_bwd_ms=%.4f\n", c.name.c_str(), c.shape.c_str(),
                  dtype_name.c_str(), fwd, fwd_bwd);
    } catch (const std::exception& e) {
      std::printf("op=%s shape=%s dtype=%s error=\"%s\"\n", c.name.c_str(), c.shape.c_str(), dtype_name.c_str(),
                  e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}
