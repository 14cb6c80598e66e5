#include "dpl/nn/conv.hpp"

#include <cmath>

namespace dpl::nn {

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, Conv2dPair kernel_size, Conv2dPair stride,
               Conv2dPair padding, Conv2dPair dilation, std::int64_t groups, bool bias, Generator& gen)
    : stride_(stride), padding_(padding), dilation_(dilation), groups_(groups) {
  DPL_CHECK(in_channels > 0 && out_channels > 0, "Conv2d: expected positive channel counts, got in_channels=",
            in_channels, " out_channels=", out_channels);
  DPL_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0,
            "Conv2d: expected groups > 0 dividing in_channels=", in_channels, " and out_channels=", out_channels,
            ", got groups=", groups);
  DPL_CHECK(kernel_size[0] > 0 && kernel_size[1] > 0, "Conv2d: expected a positive kernel size, got (",
            kernel_size[0], ", ", kernel_size[1], ")");
  for (int i = 0; i < 2; ++i)
    DPL_CHECK(stride[i] > 0 && dilation[i] > 0 && padding[i] >= 0, "Conv2d: expected positive strides and dilations "
              "and non-negative padding, got stride (", stride[0], ", ", stride[1], "), padding (", padding[0], ", ",
              padding[1], "), dilation (", dilation[0], ", ", dilation[1], ")");
  const std::int64_t fan_in = in_channels / groups * kernel_size[0] * kernel_size[1];
  // Kaiming-uniform with a = sqrt(5): gain sqrt(2 / (1 + 5)) times sqrt(3 / fan_in) is 1/sqrt(fan_in).
  const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  weight_ = register_parameter(
      "weight", Tensor::uniform({out_channels, in_channels / groups, kernel_size[0], kernel_size[1]}, -bound, bound, gen));
  if (bias) bias_ = register_parameter("bias", Tensor::uniform({out_channels}, -bound, bound, gen));
}

Variable Conv2d::forward(const Variable& x) {
  return conv2d(x, weight_, bias_, stride_, padding_, dilation_, groups_);
}

void to_channels_last(Module& module) {
  for (auto& [name, var] : module.named_parameters())
    if (var.data().dim() == 4) var.set_data(var.data().to_channels_last());
  for (auto& [name, var] : module.named_buffers())
    if (var.data().dim() == 4) var.set_data(var.data().to_channels_last());
}

}  // namespace dpl::nn
