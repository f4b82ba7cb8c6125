#include "kernels/cuda/emulation.h"

#include <chrono>
#include <thread>

#include "common/check.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace strata::emu {
namespace {

thread_local Block* current = nullptr;

}  // namespace

Block::Block(int threads, size_t smem_bytes)
    : all(threads),
      exchange(static_cast<size_t>(threads), 0.0f),
      smem(smem_bytes, 0xff) {
  for (int w = 0; w < threads / 32; ++w) {
    warps.push_back(std::make_unique<std::barrier<>>(32));
  }
}

void Jitter() {
  thread_local uint64_t barriers = 0;  // this thread's __syncthreads so far
  const uint64_t n = barriers++;
  uint64_t h = (uint64_t{blockIdx.x} << 40) ^ (uint64_t{blockIdx.y} << 20) ^
               blockIdx.z ^ (uint64_t{LinearThread() / 32} << 56) ^
               (n * 0x9E3779B97F4A7C15ull);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  if (h % 4 != 0) return;
  std::this_thread::sleep_for(std::chrono::microseconds(1000 + h / 4 % 2000));
}

Block& CurrentBlock() {
  STRATA_CHECK(current != nullptr);
  return *current;
}

void RunGrid(dim3 grid, dim3 block, size_t smem_bytes,
             const std::function<void()>& kernel) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  STRATA_CHECK(threads > 0 && threads % 32 == 0);
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        Block state(threads, smem_bytes);
        std::vector<std::thread> pool;
        pool.reserve(threads);
        for (int t = 0; t < threads; ++t) {
          pool.emplace_back([&, t] {
            const unsigned u = static_cast<unsigned>(t);
            threadIdx = uint3{u % block.x, u / block.x % block.y,
                              u / (block.x * block.y)};
            blockIdx = uint3{x, y, z};
            blockDim = block;
            gridDim = grid;
            current = &state;
            kernel();
            // An exited thread no longer holds up its block or warp.
            state.warps[t / 32]->arrive_and_drop();
            state.all.arrive_and_drop();
            current = nullptr;
          });
        }
        for (std::thread& th : pool) th.join();
      }
    }
  }
}

}  // namespace strata::emu
