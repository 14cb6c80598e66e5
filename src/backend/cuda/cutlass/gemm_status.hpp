#pragma once
// What a CUTLASS product reports to its caller (gemm_column_sums.hpp). The kernels' files return
// it instead of throwing: they are compiled apart from the library's error
// machinery, and a refusal is an answer (the caller takes cuDNN's way), not an error. The callers
// (conv1x1.cpp) turn kFailed into one.

namespace dpl::backend::cuda_detail {

/// kDone: the product ran. kRefused: CUTLASS cannot run this problem, and nothing was written.
/// kFailed: a launch failed.
enum class GemmStatus { kDone, kRefused, kFailed };

}  // namespace dpl::backend::cuda_detail
