#include "dpl/nn/pooling.hpp"

namespace dpl::nn {

MaxPool2d::MaxPool2d(Size2d kernel, Size2d stride, Size2d padding)
    : MaxPool2d(MaxPool2dOptions(kernel).stride(stride).padding(padding)) {}

Variable MaxPool2d::forward(const Variable& x) {
  return max_pool2d(x, options_.kernel_size(), options_.stride(), options_.padding());
}

AvgPool2d::AvgPool2d(Size2d kernel, Size2d stride, Size2d padding, bool count_include_pad)
    : AvgPool2d(AvgPool2dOptions(kernel).stride(stride).padding(padding).count_include_pad(count_include_pad)) {}

Variable AvgPool2d::forward(const Variable& x) {
  return avg_pool2d(x, options_.kernel_size(), options_.stride(), options_.padding(), options_.count_include_pad());
}

Variable GlobalAvgPool2d::forward(const Variable& x) { return global_avg_pool2d(x); }

Variable AdaptiveAvgPool2d::forward(const Variable& x) { return adaptive_avg_pool2d(x, options_.output_size()); }

}  // namespace dpl::nn
