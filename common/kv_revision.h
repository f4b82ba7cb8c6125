// The revision a failed compare-and-set of the scheduler's KV reports: the
// key's current revision ("0" when the key does not exist), carried inside
// the scheduler as a payload of the absl::Status and on the wire as gRPC
// trailing metadata (gRPC sends no response body with an error status). One
// home for both names, for the scheduler and for its client.
#ifndef STRATA_COMMON_KV_REVISION_H_
#define STRATA_COMMON_KV_REVISION_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace strata {

// Payload type URL on the scheduler's absl::Status.
inline constexpr char kKvRevisionPayload[] = "strata.v1/kv_current_revision";
// Trailing metadata key on the wire.
inline constexpr char kKvRevisionMetadata[] = "strata-kv-revision";

// `status` with `revision` attached as kKvRevisionPayload.
absl::Status WithKvRevision(absl::Status status, uint64_t revision);

// The revision attached to `status`; nullopt if none (or not a number).
std::optional<uint64_t> KvCurrentRevision(const absl::Status& status);

}  // namespace strata

#endif  // STRATA_COMMON_KV_REVISION_H_
