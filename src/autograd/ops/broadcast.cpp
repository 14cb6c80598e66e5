// Broadcast shapes and sums over dimensions (broadcast.hpp).
#include "autograd/ops/broadcast.hpp"

#include <algorithm>
#include <sstream>

namespace dpl::ops_detail {

std::optional<Shape> try_broadcast_shapes(std::initializer_list<const Shape*> shapes) {
  std::size_t rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->size());
  Shape out(rank, 1);
  for (const Shape* s : shapes) {
    const Shape p = padded_shape(*s, rank);
    for (std::size_t d = 0; d < rank; ++d) {
      if (p[d] == out[d] || p[d] == 1) continue;
      if (out[d] != 1) return std::nullopt;
      out[d] = p[d];
    }
  }
  return out;
}

Shape broadcast_shapes(const char* op, std::initializer_list<const Shape*> shapes) {
  std::optional<Shape> out = try_broadcast_shapes(shapes);
  if (!out) {
    std::ostringstream all;
    for (const Shape* t : shapes) all << (t == *shapes.begin() ? "" : " and ") << shape_str(*t);
    DPL_FAIL(op, ": shapes ", all.str(),
             " do not broadcast: aligned at their last dimension, each pair of extents must be equal or one of them 1");
  }
  return *out;
}

Shape padded_shape(const Shape& s, std::size_t rank) {
  Shape p(rank - s.size(), 1);
  p.insert(p.end(), s.begin(), s.end());
  return p;
}

Tensor sum_dims_keep(const Tensor& x, const std::vector<bool>& reduced, float alpha) {
  Tensor cur = dense(x);
  const auto rank = static_cast<std::int64_t>(cur.dim());
  // Runs from the last to the first: reducing a run leaves the extents before it unchanged.
  for (std::int64_t end = rank; end > 0;) {
    if (!reduced[static_cast<std::size_t>(end - 1)]) {
      --end;
      continue;
    }
    std::int64_t begin = end - 1;
    while (begin > 0 && reduced[static_cast<std::size_t>(begin - 1)]) --begin;
    Shape s = cur.shape();
    std::int64_t outer = 1, n = 1, inner = 1;
    for (std::int64_t d = 0; d < rank; ++d) (d < begin ? outer : d < end ? n : inner) *= s[static_cast<std::size_t>(d)];
    for (std::int64_t d = begin; d < end; ++d) s[static_cast<std::size_t>(d)] = 1;
    Tensor out = empty_on(s, cur);
    Tensor out2 = out.reshape({outer, inner});
    backend::reduce_dim(backend::ReduceKind::kSum, alpha, cur.reshape({outer, n, inner}), out2, nullptr);
    alpha = 1.f;
    cur = out;
    end = begin;
  }
  if (alpha != 1.f) {  // nothing was reduced: the scale still applies
    Tensor out = empty_on(cur.shape(), cur);
    backend::axpby(alpha, cur, 0.f, out);
    cur = out;
  }
  return cur;
}

void reduce_to_target(const Tensor& g, float alpha, GradTarget& target) {
  const Shape& want = target.tensor->shape();
  const Shape p = padded_shape(want, g.shape().size());
  std::vector<bool> reduced(p.size());
  for (std::size_t d = 0; d < p.size(); ++d) reduced[d] = p[d] == 1 && g.shape()[d] != 1;
  const Tensor r = sum_dims_keep(g, reduced, 1.f);
  write_in(target, MemoryFormat::kContiguous,
           [&](float beta, Tensor& buf) { backend::axpby(alpha, r.reshape(buf.shape()), beta, buf); });
}

}  // namespace dpl::ops_detail
