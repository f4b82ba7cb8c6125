#include "collective/kv_rendezvous.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cluster/scheduler_client.h"
#include "gloo/common/error.h"

namespace strata {

KvRendezvousStore::KvRendezvousStore(SchedulerClient* client,
                                     std::string prefix, absl::Duration timeout)
    : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

void KvRendezvousStore::set(const std::string& key,
                            const std::vector<char>& data) {
  absl::Status status =
      client_->KvPut(prefix_ + key, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous KV put ", prefix_, key,
                                         ": ", status.ToString()));
  }
}

std::vector<char> KvRendezvousStore::get(const std::string& key) {
  absl::StatusOr<std::string> value = client_->KvGet(prefix_ + key, timeout_);
  if (!value.ok()) {
    // Gloo's own stores say "Timed out" for a key that never came; keep
    // that word so the caller sees DEADLINE_EXCEEDED.
    const bool late = absl::IsDeadlineExceeded(value.status());
    throw gloo::IoException(absl::StrCat("rendezvous KV get ", prefix_, key,
                                         late ? ": Timed out: " : ": ",
                                         value.status().ToString()));
  }
  return std::vector<char>(value->begin(), value->end());
}

void KvRendezvousStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void KvRendezvousStore::wait(const std::vector<std::string>& keys,
                             const std::chrono::milliseconds& timeout) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout.count());
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value = client_->KvGet(
        prefix_ + key, std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (!value.ok()) {
      throw gloo::IoException(
          absl::StrCat("rendezvous KV wait for ", prefix_, key,
                       ": Timed out: ", value.status().ToString()));
    }
  }
}

std::string GroupPrefix(absl::string_view name, uint64_t epoch) {
  return absl::StrCat("collective/", name, "/", epoch, "/");
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinGlooGroup(
    SchedulerClient* client, absl::string_view name, uint64_t epoch,
    const GlooOptions& options) {
  KvRendezvousStore store(client, GroupPrefix(name, epoch),
                          options.connect_timeout);
  return ConnectGloo(options, store);
}

}  // namespace strata
