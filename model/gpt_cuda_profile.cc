#include "model/gpt_cuda_profile.h"

#include "common/status.h"
#include "kernels/cuda_ops.h"

namespace strata::gpt_cuda {

using ::strata::kernels::cuda::CudaStatus;

OpProfiler::~OpProfiler() {
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

absl::StatusOr<cudaEvent_t> OpProfiler::NextEvent() {
  if (used_ == pool_.size()) {
    cudaEvent_t e = nullptr;
    STRATA_RETURN_IF_ERROR(CudaStatus(
        cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreate"));
    pool_.push_back(e);
  }
  return pool_[used_++];
}

absl::Status OpProfiler::Time(const char* name,
                              absl::FunctionRef<absl::Status()> enqueue) {
  STRATA_ASSIGN_OR_RETURN(cudaEvent_t start, NextEvent());
  STRATA_ASSIGN_OR_RETURN(cudaEvent_t end, NextEvent());
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaEventRecord(start, stream_), "cudaEventRecord"));
  const absl::Status s = enqueue();
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaEventRecord(end, stream_), "cudaEventRecord"));
  marks_.push_back({name, start, end});
  return s;
}

absl::Status OpProfiler::Collect() {
  for (const Mark& m : marks_) {
    float ms = 0;
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, m.start, m.end),
                                      "cudaEventElapsedTime"));
    auto it = totals_.begin();
    while (it != totals_.end() && it->first != m.name) ++it;
    if (it == totals_.end()) {
      totals_.emplace_back(m.name, ms);
    } else {
      it->second += ms;
    }
  }
  marks_.clear();
  used_ = 0;
  return absl::OkStatus();
}

std::vector<std::pair<std::string, double>> OpProfiler::Take() {
  return std::exchange(totals_, {});
}

}  // namespace strata::gpt_cuda
