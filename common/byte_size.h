// Byte sizes as people write them on a command line ("2GiB", "512MiB").
#ifndef STRATA_COMMON_BYTE_SIZE_H_
#define STRATA_COMMON_BYTE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// Parses a byte size: a number with an optional unit B, KiB, MiB, GiB,
// TiB (powers of 1024; K, M, G alone too) or KB, MB, GB, TB (powers of
// 1000), e.g. "2GiB", "512MiB", "1.5KiB", "1048576". INVALID_ARGUMENT
// names the text.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

}  // namespace strata

#endif  // STRATA_COMMON_BYTE_SIZE_H_
