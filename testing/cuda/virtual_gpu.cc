// A virtual GPU for tests: the CUDA runtime and cuBLAS functions that
// Strata calls, implemented on the CPU, so that the CUDA launchers (built
// against testing/cuda/emulation.h, which runs each kernel on the CPU),
// GptCuda and their GPU tests run on machines without a GPU. Link it
// instead of libcudart and libcublas (the strata_virtual_gpu library).
//
// One device, "Strata virtual GPU". Device memory is host memory, filled
// with 0xff bytes by cudaMalloc (NaN as float and bf16) so that reading
// memory nobody wrote shows. Work on a stream runs in stream order when
// something waits for it (testing/cuda/virtual_streams.h), so reading what
// another stream (or the host) has not yet been waited for gives the old
// bytes; events hold the host time at which their record ran
// (cudaEventElapsedTime measures the emulation). cublasGemmEx and
// cublasGemmStridedBatchedEx follow cuBLAS's documented column-major
// semantics for the types Strata uses (bf16 or fp32 operands and results,
// fp32 compute), with beta == 0 never reading C, as cuBLAS does.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "testing/cuda/emulation.h"
#include "testing/cuda/virtual_streams.h"

namespace {

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t Fail(cudaError_t e) {
  last_error = e;
  return e;
}

float Load(const void* p, cudaDataType t, long long i) {
  if (t == CUDA_R_16BF) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  return static_cast<const float*>(p)[i];
}

void Store(void* p, cudaDataType t, long long i, float v) {
  if (t == CUDA_R_16BF) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

bool Supported(cudaDataType t) { return t == CUDA_R_16BF || t == CUDA_R_32F; }

// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C.
void Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
          float alpha, const void* A, cudaDataType at, int lda, const void* B,
          cudaDataType bt, int ldb, float beta, void* C, cudaDataType ct,
          int ldc) {
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float sum = 0;
      for (int l = 0; l < k; ++l) {
        const float a =
            Load(A, at,
                 ta == CUBLAS_OP_N ? i + static_cast<long long>(l) * lda
                                   : l + static_cast<long long>(i) * lda);
        const float b =
            Load(B, bt,
                 tb == CUBLAS_OP_N ? l + static_cast<long long>(j) * ldb
                                   : j + static_cast<long long>(l) * ldb);
        sum += a * b;
      }
      const long long c = i + static_cast<long long>(j) * ldc;
      const float old = beta == 0.0f ? 0.0f : beta * Load(C, ct, c);
      Store(C, ct, c, alpha * sum + old);
    }
  }
}

struct Handle {
  cudaStream_t stream = nullptr;
};

}  // namespace

// ---------------------------------------------------------------------------
// CUDA runtime.

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : Fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr,
                                   int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = 227 << 10;  // as an H100
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = 1;
      return cudaSuccess;
    default:
      return Fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "Strata virtual GPU");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->totalGlobalMem = size_t{1} << 34;
  prop->sharedMemPerBlockOptin = 227 << 10;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory (virtual GPU)";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal (virtual GPU)";
    case cudaErrorInvalidValue:
      return "invalid argument (virtual GPU)";
    default:
      return "error (virtual GPU)";
  }
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = strata::vgpu::NewStream();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  strata::vgpu::DeleteStream(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  strata::vgpu::RunStream(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int) {
  strata::vgpu::QueueWait(stream, event);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  strata::vgpu::RunStream(nullptr);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  // 256-byte aligned, as cudaMalloc's are, and exactly `bytes` long so that
  // AddressSanitizer (when the tests are built with it) sees a kernel that
  // reads or writes past the end.
  *ptr = ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{256},
                         std::nothrow);
  if (*ptr == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::memset(*ptr, 0xff, bytes);
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  strata::vgpu::RunStream(nullptr);  // as CUDA, cudaFree waits for the device
  if (ptr != nullptr) ::operator delete (ptr, std::align_val_t{256});
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes,
                       cudaMemcpyKind) {
  strata::vgpu::RunStream(nullptr);
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  using strata::vgpu::IsPinned;
  if (kind == cudaMemcpyHostToDevice && !IsPinned(src, bytes)) {
    // Pageable: CUDA stages the bytes before it returns.
    auto staged = std::make_shared<std::vector<char>>(
        static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    strata::vgpu::Enqueue(stream, [dst, staged] {
      std::memcpy(dst, staged->data(), staged->size());
    });
    return cudaSuccess;
  }
  if ((kind == cudaMemcpyDeviceToHost && !IsPinned(dst, bytes)) ||
      kind == cudaMemcpyHostToHost) {
    // Pageable: CUDA returns once the copy, after the stream's work, is done.
    strata::vgpu::RunStream(stream);
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  }
  strata::vgpu::Enqueue(stream,
                        [dst, src, bytes] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  strata::vgpu::RunStream(nullptr);
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes,
                            cudaStream_t stream) {
  strata::vgpu::Enqueue(
      stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr,
                                 int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    // As an H100: at most 227 KiB of shared memory per block.
    if (value < 0 || value > (227 << 10)) return Fail(cudaErrorInvalidValue);
    strata::emu::SetMaxDynamicSharedMemory(func, value);
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = strata::vgpu::NewEvent();
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  strata::vgpu::RecordEvent(event, stream);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  strata::vgpu::RunToEvent(event);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  const std::optional<float> elapsed = strata::vgpu::ElapsedMs(start, end);
  if (!elapsed.has_value()) return Fail(cudaErrorInvalidResourceHandle);
  *ms = *elapsed;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  strata::vgpu::DeleteEvent(event);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned int) {
  if (bytes == 0) return Fail(cudaErrorInvalidValue);
  if (!strata::vgpu::Pin(ptr, bytes)) {
    return Fail(cudaErrorHostMemoryAlreadyRegistered);
  }
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  if (!strata::vgpu::Unpin(ptr)) return Fail(cudaErrorHostMemoryNotRegistered);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------
// cuBLAS.

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete reinterpret_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  reinterpret_cast<Handle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
    int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
    long long int strideB, const void* beta, void* C, cudaDataType Ctype,
    int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t) {
  // The combinations cuBLAS takes with fp32 compute: bf16 x bf16 into bf16
  // or fp32, fp32 x fp32 into fp32.
  if (computeType != CUBLAS_COMPUTE_32F || !Supported(Atype) ||
      Atype != Btype || (Atype == CUDA_R_32F && Ctype != CUDA_R_32F) ||
      !Supported(Ctype)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 ||
      lda < (transa == CUBLAS_OP_N ? m : k) ||
      ldb < (transb == CUBLAS_OP_N ? k : n) || ldc < m) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const size_t ea = Atype == CUDA_R_16BF ? 2 : 4;
  const size_t eb = Btype == CUDA_R_16BF ? 2 : 4;
  const size_t ec = Ctype == CUDA_R_16BF ? 2 : 4;
  // alpha and beta are host pointers (cuBLAS's default pointer mode): read
  // at the call, as cuBLAS does.
  const float a = *static_cast<const float*>(alpha);
  const float b = *static_cast<const float*>(beta);
  strata::vgpu::CountLaunch();
  strata::vgpu::Enqueue(reinterpret_cast<Handle*>(handle)->stream, [=] {
    for (int i = 0; i < batchCount; ++i) {
      Gemm(transa, transb, m, n, k, a,
           static_cast<const char*>(A) + i * strideA * ea, Atype, lda,
           static_cast<const char*>(B) + i * strideB * eb, Btype, ldb, b,
           static_cast<char*>(C) + i * strideC * ec, Ctype, ldc);
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* A,
                            cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A,
                                    Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                                    Ctype, ldc, 0, 1, computeType, algo);
}
