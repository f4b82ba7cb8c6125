#include "common/kv_revision.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {

absl::Status WithKvRevision(absl::Status status, uint64_t revision) {
  status.SetPayload(kKvRevisionPayload, absl::Cord(absl::StrCat(revision)));
  return status;
}

std::optional<uint64_t> KvCurrentRevision(const absl::Status& status) {
  auto payload = status.GetPayload(kKvRevisionPayload);
  uint64_t revision = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &revision)) {
    return std::nullopt;
  }
  return revision;
}

}  // namespace strata
