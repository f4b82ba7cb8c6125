// The chunk record (storage/chunk_record.h), as snapshots and the RocksDB
// tier store it: any bytes decode to a Status or to a record that encodes
// and decodes again to the same bytes.
#include <cstdint>
#include <cstdlib>

#include "storage/chunk_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<strata::ChunkRecord> record = strata::DecodeChunkRecord(bytes);
  if (!record.ok()) return 0;
  absl::StatusOr<std::string> again = strata::EncodeChunkRecord(*record);
  if (!again.ok()) std::abort();  // a record we decoded must encode
  absl::StatusOr<strata::ChunkRecord> back = strata::DecodeChunkRecord(*again);
  if (!back.ok()) std::abort();
  absl::StatusOr<std::string> third = strata::EncodeChunkRecord(*back);
  if (!third.ok() || *third != *again) std::abort();
  return 0;
}
