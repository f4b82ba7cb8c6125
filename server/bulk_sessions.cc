#include "server/bulk_sessions.h"

#include <sys/random.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/wire.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

// How long an ended session's unclaimed payloads are given to arrive
// whole before they are dropped anyway.
constexpr absl::Duration kDropLimit = absl::Seconds(2);

absl::Status NoSession(uint32_t id, uint64_t member) {
  return absl::UnavailableError(absl::StrCat("no bulk session ", id,
                                             " of member ", member,
                                             " on this server: attach again"));
}

}  // namespace

std::unique_ptr<BulkSessions> BulkSessions::Refusing(std::string why_not) {
  auto sessions =
      std::make_unique<BulkSessions>(UcxNode::Options(), /*encrypt=*/false);
  absl::MutexLock lock(&sessions->start_mu_);
  sessions->start_error_ = absl::FailedPreconditionError(std::move(why_not));
  return sessions;
}

absl::StatusOr<std::shared_ptr<UcxNode>> BulkSessions::Node() {
  absl::MutexLock lock(&start_mu_);
  if (start_error_) return *start_error_;
  if (node_ != nullptr) return node_;
  absl::StatusOr<std::shared_ptr<UcxNode>> node = UcxNode::Create(options_);
  if (!node.ok()) {
    start_error_ = absl::FailedPreconditionError(absl::StrCat(
        "this server's bulk plane could not start: ", node.status().message()));
    spdlog::warn("strata server: {}", start_error_->ToString());
    return *start_error_;
  }
  spdlog::info("strata server: bulk plane (UCX) started");
  node_ = *std::move(node);
  return node_;
}

BulkSessions::~BulkSessions() {
  absl::flat_hash_map<uint32_t, Session> sessions;
  {
    absl::MutexLock lock(&mu_);
    sessions.swap(sessions_);
  }
  for (auto& [id, s] : sessions) End(id, std::move(s));
}

absl::StatusOr<v1::AttachBulkResponse> BulkSessions::Attach(
    const v1::AttachBulkRequest& req) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<UcxNode> node, Node());
  if (req.address().empty() || req.address().size() > 64 * 1024) {
    return absl::InvalidArgumentError(
        "AttachBulk: a UCX worker address of 1 to 65536 bytes");
  }
  std::optional<BulkCipher> cipher;
  std::string key;
  if (encrypt_) {
    STRATA_ASSIGN_OR_RETURN(key, BulkCipher::NewKey());
    STRATA_ASSIGN_OR_RETURN(cipher, BulkCipher::FromKey(key));
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<UcxEndpoint> endpoint,
                          node->Connect(req.address()));
  std::optional<std::pair<uint32_t, Session>> replaced;
  uint32_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (members_.has_value() &&
        !std::binary_search(members_->begin(), members_->end(),
                            req.member_id())) {
      return absl::UnavailableError(absl::StrCat(
          "member ", req.member_id(), " is not a live worker here yet"));
    }
    if (auto it = by_member_.find(req.member_id()); it != by_member_.end()) {
      auto s = sessions_.find(it->second);
      replaced.emplace(s->first, std::move(s->second));
      sessions_.erase(s);
      by_member_.erase(it);
    }
    if (sessions_.size() >= max_sessions_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this server already holds ", max_sessions_, " bulk sessions"));
    }
    // Random: a session's tags are no use to another member.
    while (id == 0 || sessions_.contains(id)) {
      if (getrandom(&id, sizeof id, 0) != sizeof id)
        return absl::UnavailableError("getrandom failed");
    }
    sessions_[id] = Session{req.member_id(), std::move(endpoint), cipher};
    by_member_[req.member_id()] = id;
    attached_++;
  }
  if (replaced) End(replaced->first, std::move(replaced->second));
  v1::AttachBulkResponse resp;
  resp.set_session(id);
  resp.set_address(node->address());
  resp.set_key(std::move(key));
  return resp;
}

bool BulkSessions::Detach(uint32_t id) {
  Session session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return false;
    session = std::move(it->second);
    by_member_.erase(session.member);
    sessions_.erase(it);
  }
  End(id, std::move(session));
  return true;
}

void BulkSessions::RetainOnly(const std::vector<uint64_t>& members) {
  std::vector<std::pair<uint32_t, Session>> gone;
  {
    absl::MutexLock lock(&mu_);
    members_ = members;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (std::binary_search(members.begin(), members.end(),
                             it->second.member)) {
        ++it;
        continue;
      }
      by_member_.erase(it->second.member);
      gone.emplace_back(it->first, std::move(it->second));
      sessions_.erase(it++);
    }
  }
  for (auto& [id, s] : gone) End(id, std::move(s));
}

uint64_t BulkSessions::attached() const {
  absl::MutexLock lock(&mu_);
  return attached_;
}

size_t BulkSessions::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

absl::StatusOr<BulkSessions::Session> BulkSessions::Find(
    const v1::BulkRef& ref, uint64_t member) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(ref.session());
  if (it == sessions_.end() || it->second.member != member)
    return NoSession(ref.session(), member);
  return it->second;
}

absl::StatusOr<grpc::Slice> BulkSessions::Receive(const v1::BulkRef& ref,
                                                  uint64_t member,
                                                  size_t expected,
                                                  absl::Time deadline) {
  absl::StatusOr<Session> session = Find(ref, member);
  if (!session.ok()) {
    // A payload sent in a session that ended before its request came
    // would wait unmatched for good: dropped if it is here already.
    // (Not for a session another member holds: its payloads are its own.)
    std::shared_ptr<UcxNode> node;
    {
      absl::MutexLock lock(&start_mu_);
      node = node_;
    }
    bool held;
    {
      absl::MutexLock lock(&mu_);
      held = sessions_.contains(ref.session());
    }
    if (node != nullptr && !held && ref.tag() >> 32 == ref.session())
      node->DropUnmatched(ref.session(), kDropLimit);
    return session.status();
  }
  if (ref.tag() >> 32 != ref.session()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bulk tag ", ref.tag(), " is not of session ", ref.session()));
  }
  if (ref.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a bulk payload of ", ref.size(), " bytes for ", expected));
  }
  const size_t overhead = session->cipher ? BulkCipher::kTagBytes : 0;
  if (expected < overhead) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sealed bulk payload of ", expected, " bytes, under its tag's"));
  }
  grpc::Slice payload = AllocateSlice(expected);
  char* bytes = reinterpret_cast<char*>(const_cast<uint8_t*>(payload.begin()));
  auto transfer = node_->Receive(bytes, expected, ref.tag());
  if (absl::Status s = transfer->Wait(deadline); !s.ok()) {
    transfer->Abort();
    return Lose(ref.session(), s);
  }
  if (!session->cipher) return payload;
  STRATA_RETURN_IF_ERROR(session->cipher->Open(BulkCipher::kToServer, ref.tag(),
                                               bytes, expected, bytes));
  return payload.sub(0, expected - overhead);
}

absl::Status BulkSessions::Send(const v1::BulkRef& ref, uint64_t member,
                                const char* data, size_t n,
                                absl::Time deadline) {
  STRATA_ASSIGN_OR_RETURN(Session session, Find(ref, member));
  const size_t overhead = session.cipher ? BulkCipher::kTagBytes : 0;
  if (ref.size() != n + overhead) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pull into ", ref.size(), " bulk bytes of weights of ",
                     n, overhead > 0 ? " sealed" : ""));
  }
  std::string sealed;
  if (session.cipher) {
    sealed.resize(n + overhead);
    STRATA_RETURN_IF_ERROR(session.cipher->Seal(
        BulkCipher::kToWorker, ref.tag(), data, n, sealed.data()));
    data = sealed.data();
  }
  auto transfer = session.endpoint->Send(data, n + overhead, ref.tag());
  if (absl::Status s = transfer->Wait(deadline); !s.ok()) {
    transfer->Abort();  // closes the endpoint: UCX no longer reads `data`
    return Lose(ref.session(), s);
  }
  return absl::OkStatus();
}

absl::Status BulkSessions::Lose(uint32_t id, const absl::Status& why) {
  uint64_t member = 0;
  std::optional<Session> session;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = sessions_.find(id); it != sessions_.end()) {
      member = it->second.member;
      session = std::move(it->second);
      by_member_.erase(member);
      sessions_.erase(it);
    }
  }
  if (session) {
    spdlog::warn("strata server: ended bulk session {} of member {}: {}", id,
                 member, why.ToString());
    End(id, *std::move(session));
  }
  return absl::UnavailableError(absl::StrCat("no bulk session ", id,
                                             " on this server: it ended (",
                                             why.message(), "); attach again"));
}

void BulkSessions::End(uint32_t id, Session session) {
  session.endpoint->Close();
  node_->DropUnmatched(id, kDropLimit);
}

}  // namespace strata
