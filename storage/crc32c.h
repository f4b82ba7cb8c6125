// CRC-32C (Castagnoli), the checksum of Strata's on-disk formats (used by
// storage/, and measured by bench/crc32c_bench.cc).
#ifndef STRATA_STORAGE_CRC32C_H_
#define STRATA_STORAGE_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace strata::crc32c {

// Returns the CRC-32C of `data` appended to a message whose CRC-32C is
// `crc` (0 for the empty message). Uses the SSE4.2 instruction when the CPU
// has it, on three streams at once for data of 12 KiB and more.
// Thread-safe.
uint32_t Extend(uint32_t crc, absl::string_view data);

// As Extend, one byte at a time from a table: the reference the fast path is
// tested against.
uint32_t ExtendPortable(uint32_t crc, absl::string_view data);

// The CRC-32C of `data`.
inline uint32_t Value(absl::string_view data) { return Extend(0, data); }

}  // namespace strata::crc32c

#endif  // STRATA_STORAGE_CRC32C_H_
