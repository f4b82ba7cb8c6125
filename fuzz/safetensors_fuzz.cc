// safetensors files (formats/safetensors.h: --init_from, `strata generate
// --model`): any bytes give a Status or a file whose every tensor lies
// within it and reads back (as fp32 where its dtype allows) without a
// fault.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader maps a file: an anonymous one in memory.
  const int fd = memfd_create("safetensors_fuzz", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size))
    std::abort();
  auto file =
      strata::SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd));
  if (file.ok()) {
    for (const strata::SafetensorsTensor& t : (*file)->tensors()) {
      if (t.begin + t.bytes > size) std::abort();
      const uint64_t n = std::min<uint64_t>(t.numel(), 4096);
      std::vector<float> out(n);
      (void)(*file)->ReadF32(t, 0, n, out.data());
      if (!t.shape.empty() && t.shape[0] > 0 && t.numel() <= 4096) {
        std::vector<int64_t> dest = t.shape;
        dest[0] += 1;  // padded by a row of zeros
        std::vector<float> fitted(n + n / t.shape[0]);
        (void)strata::ReadFitted(**file, t, false, dest, 0, fitted.size(),
                                 fitted.data());
      }
    }
  }
  close(fd);
  return 0;
}
