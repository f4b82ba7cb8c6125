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
// whole before they are left to finish on their own (UcxNode::Bury), and
// how long an aborted transfer is waited for before the same.
constexpr absl::Duration kDropLimit = absl::Seconds(2);
constexpr absl::Duration kAbortLimit = absl::Seconds(2);

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
  reaper_ = std::thread([this] { ReapLoop(); });
  return node_;
}

BulkSessions::~BulkSessions() {
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, s] : sessions_) {
      ending_.push_back({id, std::move(s.endpoint), std::move(s.waiting)});
    }
    sessions_.clear();
    stopping_ = true;
    ending_cv_.Signal();
  }
  if (reaper_.joinable()) reaper_.join();
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
      // Replaced: ended as a detach ends it.
      auto s = sessions_.find(it->second);
      ending_.push_back({s->first, std::move(s->second.endpoint),
                         std::move(s->second.waiting)});
      ending_cv_.Signal();
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
    // would wait unmatched for good: dropped if it is here (not for a
    // session another member holds: its payloads are its own).
    bool held;
    {
      absl::MutexLock lock(&mu_);
      held = sessions_.contains(ref.session());
      if (!held && ref.tag() >> 32 == ref.session()) {
        ending_.push_back({ref.session(), nullptr, nullptr});
        ending_cv_.Signal();
      }
    }
    return session.status();
  }
  if (ref.tag() >> 32 != ref.session()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bulk tag ", ref.tag(), " is not of session ", ref.session()));
  }
  const size_t overhead = session->cipher ? BulkCipher::kTagBytes : 0;
  const size_t on_wire = expected + overhead;
  if (ref.size() != on_wire) {
    return absl::InvalidArgumentError(
        absl::StrCat("a bulk payload of ", ref.size(), " bytes for ", on_wire));
  }
  auto payload = std::make_shared<grpc::Slice>(AllocateSlice(on_wire));
  char* bytes = reinterpret_cast<char*>(const_cast<uint8_t*>(payload->begin()));
  auto transfer = node_->Receive(bytes, on_wire, ref.tag());
  Waiting& waiting = *session->waiting;
  {
    absl::MutexLock lock(&waiting.mu);
    if (waiting.ended) {
      transfer->CancelReceive();
    } else {
      waiting.receives.insert(transfer.get());
    }
  }
  absl::Status received = transfer->Wait(deadline);
  {
    absl::MutexLock lock(&waiting.mu);
    waiting.receives.erase(transfer.get());
  }
  if (absl::Status s = std::move(received); !s.ok()) {
    node_->Bury(std::move(transfer), payload, kAbortLimit);
    return Lose(ref.session(), s);
  }
  if (!session->cipher) return *payload;
  STRATA_RETURN_IF_ERROR(session->cipher->Open(BulkCipher::kToServer, ref.tag(),
                                               bytes, on_wire, bytes));
  return payload->sub(0, expected);
}

absl::Status BulkSessions::Send(const v1::BulkRef& ref, uint64_t member,
                                const grpc::Slice& weights,
                                absl::Time deadline) {
  STRATA_ASSIGN_OR_RETURN(Session session, Find(ref, member));
  const size_t n = weights.size();
  const size_t overhead = session.cipher ? BulkCipher::kTagBytes : 0;
  if (ref.size() != n + overhead) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pull into ", ref.size(), " bulk bytes of weights of ",
                     n, overhead > 0 ? " sealed" : ""));
  }
  // What the send reads, kept alive for as long as UCX may read it.
  std::shared_ptr<void> keep = std::make_shared<grpc::Slice>(weights);
  const void* data = weights.begin();
  if (session.cipher) {
    auto sealed = std::make_shared<std::string>(n + overhead, '\0');
    STRATA_RETURN_IF_ERROR(session.cipher->Seal(
        BulkCipher::kToWorker, ref.tag(), data, n, sealed->data()));
    data = sealed->data();
    keep = sealed;
  }
  auto transfer = session.endpoint->Send(data, n + overhead, ref.tag());
  if (absl::Status s = transfer->Wait(deadline); !s.ok()) {
    // Closes the endpoint, which ends the send.
    node_->Bury(std::move(transfer), std::move(keep), kAbortLimit);
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
  absl::MutexLock lock(&mu_);
  ending_.push_back(
      {id, std::move(session.endpoint), std::move(session.waiting)});
  ending_cv_.Signal();
}

void BulkSessions::ReapLoop() {
  for (;;) {
    std::vector<Ending> ending;
    {
      absl::MutexLock lock(&mu_);
      while (ending_.empty() && !stopping_) ending_cv_.Wait(&mu_);
      if (ending_.empty() && stopping_) return;
      ending.swap(ending_);
    }
    for (Ending& e : ending) {
      if (e.waiting != nullptr) {
        // Its waiting receives end now (CANCELLED), and later ones at
        // once. Under the lock, so none is freed meanwhile.
        absl::MutexLock lock(&e.waiting->mu);
        e.waiting->ended = true;
        for (UcxTransfer* t : e.waiting->receives) t->CancelReceive();
      }
      if (e.endpoint != nullptr) e.endpoint->Close();
      node_->DropUnmatched(e.id, kDropLimit);
    }
  }
}

}  // namespace strata
