#include "dpl/nn/conv.hpp"

#include <cmath>

namespace dpl::nn {

namespace {
Conv2dPair pair(Size2d s) { return {s.h, s.w}; }
}  // namespace

Conv2d::Conv2d(const Conv2dOptions& options, Generator& gen)
    : options_(options),
      stride_(pair(options.stride())),
      padding_(pair(options.padding())),
      dilation_(pair(options.dilation())) {
  const std::int64_t in_channels = options.in_channels(), out_channels = options.out_channels();
  const std::int64_t groups = options.groups();
  const Size2d kernel = options.kernel_size();
  DPL_CHECK(in_channels > 0 && out_channels > 0, "Conv2d: expected positive channel counts, got in_channels=",
            in_channels, " out_channels=", out_channels);
  DPL_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0,
            "Conv2d: expected groups > 0 dividing in_channels=", in_channels, " and out_channels=", out_channels,
            ", got groups=", groups);
  DPL_CHECK(kernel.h > 0 && kernel.w > 0, "Conv2d: expected a positive kernel size, got (", kernel.h, ", ", kernel.w,
            ")");
  for (int i = 0; i < 2; ++i)
    DPL_CHECK(stride_[i] > 0 && dilation_[i] > 0 && padding_[i] >= 0, "Conv2d: expected positive strides and "
              "dilations and non-negative padding, got stride (", stride_[0], ", ", stride_[1], "), padding (",
              padding_[0], ", ", padding_[1], "), dilation (", dilation_[0], ", ", dilation_[1], ")");
  const std::int64_t fan_in = in_channels / groups * kernel.h * kernel.w;
  // Kaiming-uniform with a = sqrt(5): gain sqrt(2 / (1 + 5)) times sqrt(3 / fan_in) is 1/sqrt(fan_in).
  const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  weight_ = register_parameter(
      "weight", Tensor::uniform({out_channels, in_channels / groups, kernel.h, kernel.w}, -bound, bound, gen));
  if (options.bias()) bias_ = register_parameter("bias", Tensor::uniform({out_channels}, -bound, bound, gen));
}

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, Conv2dPair kernel_size, Conv2dPair stride,
               Conv2dPair padding, Conv2dPair dilation, std::int64_t groups, bool bias, Generator& gen)
    : Conv2d(Conv2dOptions(in_channels, out_channels, {kernel_size[0], kernel_size[1]})
                 .stride({stride[0], stride[1]})
                 .padding({padding[0], padding[1]})
                 .dilation({dilation[0], dilation[1]})
                 .groups(groups)
                 .bias(bias),
             gen) {}

Variable Conv2d::forward(const Variable& x) {
  return conv2d(x, weight_, bias_, stride_, padding_, dilation_, options_.groups());
}

Variable Conv2d::forward_with_sums(const Variable& x, ChannelSums& sums) {
  if (bias_.defined()) {
    sums = ChannelSums{};
    return forward(x);
  }
  return conv2d_with_sums(x, weight_, sums, stride_, padding_, dilation_, options_.groups());
}

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& options, Generator& gen) : options_(options) {
  const std::int64_t in_channels = options.in_channels(), out_channels = options.out_channels();
  const std::int64_t groups = options.groups();
  const Size2d kernel = options.kernel_size(), stride = options.stride(), padding = options.padding();
  const Size2d output_padding = options.output_padding(), dilation = options.dilation();
  const char* name = "ConvTranspose2d";
  DPL_CHECK(in_channels > 0 && out_channels > 0, name, ": expected positive channel counts, got in_channels=",
            in_channels, " out_channels=", out_channels);
  DPL_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0, name,
            ": expected groups > 0 dividing in_channels=", in_channels, " and out_channels=", out_channels,
            ", got groups=", groups);
  DPL_CHECK(kernel.h > 0 && kernel.w > 0, name, ": expected a positive kernel size, got (", kernel.h, ", ", kernel.w,
            ")");
  DPL_CHECK(stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0 && padding.h >= 0 && padding.w >= 0,
            name, ": expected positive strides and dilations and non-negative padding, got stride (", stride.h, ", ",
            stride.w, "), padding (", padding.h, ", ", padding.w, "), dilation (", dilation.h, ", ", dilation.w, ")");
  DPL_CHECK(output_padding.h >= 0 && output_padding.w >= 0 && output_padding.h < stride.h &&
                output_padding.w < stride.w,
            name, ": expected 0 <= output_padding < stride, got output_padding (", output_padding.h, ", ",
            output_padding.w, ") with stride (", stride.h, ", ", stride.w, ")");
  // PyTorch's fan_in of a (in, out/groups, kh, kw) weight is its second dimension times the kernel.
  const std::int64_t fan_in = out_channels / groups * kernel.h * kernel.w;
  const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  weight_ = register_parameter(
      "weight", Tensor::uniform({in_channels, out_channels / groups, kernel.h, kernel.w}, -bound, bound, gen));
  if (options.bias()) bias_ = register_parameter("bias", Tensor::uniform({out_channels}, -bound, bound, gen));
}

Variable ConvTranspose2d::forward(const Variable& x) {
  const ConvTranspose2dOptions& o = options_;
  return conv_transpose2d(x, weight_, bias_, pair(o.stride()), pair(o.padding()), pair(o.output_padding()),
                          o.groups(), pair(o.dilation()));
}

void to_channels_last(Module& module) {
  for (auto& [name, var] : module.named_parameters())
    if (var.data().dim() == 4) var.set_data(var.data().to_channels_last());
  for (auto& [name, var] : module.named_buffers())
    if (var.data().dim() == 4) var.set_data(var.data().to_channels_last());
}

}  // namespace dpl::nn
