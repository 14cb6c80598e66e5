#include "dpl/nn/pooling.hpp"

namespace dpl::nn {

MaxPool2d::MaxPool2d(Size2d kernel, Size2d stride, Size2d padding)
    : kernel_(kernel), stride_(stride), padding_(padding) {}

Variable MaxPool2d::forward(const Variable& x) { return max_pool2d(x, kernel_, stride_, padding_); }

AvgPool2d::AvgPool2d(Size2d kernel, Size2d stride, Size2d padding, bool count_include_pad)
    : kernel_(kernel), stride_(stride), padding_(padding), count_include_pad_(count_include_pad) {}

Variable AvgPool2d::forward(const Variable& x) {
  return avg_pool2d(x, kernel_, stride_, padding_, count_include_pad_);
}

Variable GlobalAvgPool2d::forward(const Variable& x) { return global_avg_pool2d(x); }

}  // namespace dpl::nn
