#include "transport/ucx_node.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace strata {
namespace {

absl::Status FromUcs(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK) return absl::OkStatus();
  const std::string message =
      absl::StrCat(what, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::DataLossError(message);
    case UCS_ERR_NO_MEMORY:
      return absl::ResourceExhaustedError(message);
    default:
      // A broken connection, a peer gone, a transport that failed: the
      // caller may try again (over gRPC).
      return absl::UnavailableError(message);
  }
}

ucp_worker_h Worker(void* w) { return static_cast<ucp_worker_h>(w); }

}  // namespace

// UCX's callbacks, which run on the progress thread (or, for an operation
// that ends while it is posted, on the posting one).
struct UcxCallbacks {
  static void SendDone(void*, ucs_status_t status, void* self) {
    static_cast<UcxTransfer*>(self)->Finish(FromUcs(status, "UCX send"));
  }
  static void ReceiveDone(void*, ucs_status_t status,
                          const ucp_tag_recv_info_t* info, void* self) {
    auto* t = static_cast<UcxTransfer*>(self);
    absl::Status s = FromUcs(status, "UCX receive");
    if (s.ok() && info->length != t->bytes_) {
      s = absl::DataLossError(absl::StrCat("UCX receive: ", info->length,
                                           " bytes for ", t->bytes_));
    }
    t->Finish(std::move(s));
  }
  static void OnError(void* flag, ucp_ep_h, ucs_status_t) {
    static_cast<std::atomic<bool>*>(flag)->store(true);
  }
  static void Closed(void*, ucs_status_t, void* done) {
    static_cast<absl::Notification*>(done)->Notify();
  }
};

namespace {

// The parameters of a receive into transfer `t`: completed through
// UcxCallbacks::ReceiveDone, which checks its length.
ucp_request_param_t ReceiveParam(UcxTransfer* t) {
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv = &UcxCallbacks::ReceiveDone;
  param.user_data = t;
  return param;
}

}  // namespace

absl::StatusOr<std::shared_ptr<UcxNode>> UcxNode::Create(
    const Options& options) {
  std::shared_ptr<UcxNode> node(new UcxNode());
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
      s != UCS_OK) {
    return FromUcs(s, "reading UCX's configuration");
  }
  if (!options.transports.empty()) {
    ucp_config_modify(config, "TLS", options.transports.c_str());
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  const ucs_status_t init = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (init != UCS_OK) return FromUcs(init, "starting UCX");
  node->context_ = context;
  // Single-threaded: only the progress thread touches it (and this one,
  // before that thread starts).
  ucp_worker_params_t wp = {};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  if (ucs_status_t s = ucp_worker_create(context, &wp, &worker); s != UCS_OK)
    return FromUcs(s, "starting a UCX worker");
  node->worker_ = worker;
  if (ucs_status_t s = ucp_worker_get_efd(worker, &node->event_fd_);
      s != UCS_OK) {
    return FromUcs(s, "the UCX worker's event descriptor");
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  if (ucs_status_t s = ucp_worker_get_address(worker, &address, &length);
      s != UCS_OK) {
    return FromUcs(s, "the UCX worker's address");
  }
  node->address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker, address);
  node->progress_ = std::thread([n = node.get()] { n->ProgressLoop(); });
  return node;
}

UcxNode::~UcxNode() {
  if (progress_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    ucp_worker_signal(Worker(worker_));
    progress_.join();
  }
  if (worker_ != nullptr) ucp_worker_destroy(Worker(worker_));
  if (context_ != nullptr) ucp_cleanup(static_cast<ucp_context_h>(context_));
}

void UcxNode::ProgressLoop() {
  ucp_worker_h worker = Worker(worker_);
  std::vector<std::function<void()>> commands;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      commands.swap(commands_);
    }
    for (auto& command : commands) command();
    commands.clear();
    if (!buried_.empty()) {
      std::erase_if(buried_, [](const auto& b) { return b.first->done(); });
    }
    if (ucp_worker_progress(worker) != 0) continue;
    // Nothing moved: sleep until the worker's sockets or a command (Post
    // signals) have something. Arm says BUSY when events came meanwhile.
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
    {
      absl::MutexLock lock(&mu_);
      if (!commands_.empty() || stopping_) continue;
    }
    pollfd fd = {event_fd_, POLLIN, 0};
    poll(&fd, 1, /*timeout_ms=*/100);
  }
}

void UcxNode::Post(std::function<void()> command) {
  {
    absl::MutexLock lock(&mu_);
    commands_.push_back(std::move(command));
  }
  ucp_worker_signal(Worker(worker_));  // thread-safe in every mode
}

bool UcxNode::OnProgressThread() const {
  return std::this_thread::get_id() == progress_.get_id();
}

void UcxNode::Call(std::function<void()> command) {
  if (OnProgressThread()) {
    command();
    return;
  }
  absl::Notification done;
  Post([&command, &done] {
    command();
    done.Notify();
  });
  done.WaitForNotification();
}

absl::StatusOr<std::shared_ptr<UcxEndpoint>> UcxNode::Connect(
    absl::string_view address) {
  std::shared_ptr<UcxEndpoint> endpoint(
      new UcxEndpoint(shared_from_this(), nullptr));
  ucs_status_t status = UCS_OK;
  Call([&] {
    ucp_ep_params_t params = {};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxCallbacks::OnError;
    endpoint->failed_ = &error_flags_.emplace_back(false);
    params.err_handler.arg = endpoint->failed_;
    ucp_ep_h ep = nullptr;
    status = ucp_ep_create(Worker(worker_), &params, &ep);
    endpoint->ep_ = ep;
  });
  if (status != UCS_OK) {
    absl::MutexLock lock(&endpoint->mu_);
    endpoint->closed_ = true;
    return FromUcs(status, "connecting to a UCX peer");
  }
  return endpoint;
}

std::unique_ptr<UcxTransfer> UcxNode::Receive(void* buffer, size_t bytes,
                                              uint64_t tag) {
  std::unique_ptr<UcxTransfer> t(
      new UcxTransfer(shared_from_this(), nullptr, bytes));
  Post([this, t = t.get(), buffer, bytes, tag] {
    // A message here already completes the receive at once, without the
    // callback that checks its length: its length is checked here first
    // (nothing arrives between the probe and the post, both on this
    // thread). One of another length stays unmatched, dropped with its
    // session. (UCX 1.13 leaves `recv_info` at 0 on an immediate
    // completion, and its NO_IMM_CMPL flag corrupted memory here.)
    ucp_tag_recv_info_t info;
    if (ucp_tag_probe_nb(Worker(worker_), tag, ~uint64_t{0}, /*remove=*/0,
                         &info) != nullptr &&
        info.length != bytes) {
      t->Finish(absl::DataLossError(
          absl::StrCat("UCX receive: ", info.length, " bytes for ", bytes)));
      return;
    }
    const ucp_request_param_t param = ReceiveParam(t);
    t->Posted(ucp_tag_recv_nbx(Worker(worker_), buffer, bytes, tag,
                               ~uint64_t{0}, &param));
  });
  return t;
}

int UcxNode::DropUnmatched(uint32_t session, absl::Duration limit) {
  int dropped = 0;
  for (;;) {
    std::vector<char> sink;
    std::unique_ptr<UcxTransfer> t;
    Call([&] {
      ucp_tag_recv_info_t info;
      ucp_tag_message_h message =
          ucp_tag_probe_nb(Worker(worker_), uint64_t{session} << 32,
                           0xFFFFFFFF00000000ull, /*remove=*/1, &info);
      if (message == nullptr) return;
      sink.resize(info.length);
      t.reset(new UcxTransfer(shared_from_this(), nullptr, info.length));
      const ucp_request_param_t param = ReceiveParam(t.get());
      t->Posted(ucp_tag_msg_recv_nbx(Worker(worker_), sink.data(), info.length,
                                     message, &param));
    });
    if (t == nullptr) return dropped;
    if (!t->Wait(absl::Now() + limit).ok()) {
      Bury(std::move(t), std::make_shared<std::vector<char>>(std::move(sink)),
           absl::ZeroDuration());
    }
    ++dropped;
  }
}

void UcxNode::Bury(std::unique_ptr<UcxTransfer> transfer,
                   std::shared_ptr<void> keep, absl::Duration limit) {
  if (transfer->Abort(limit)) return;
  // Kept where the progress thread frees it once UCX ends it. (Posted:
  // the transfer's own commands are queued already, in order.) It lets
  // go of the node and the endpoint first: freed on the progress thread,
  // it must not be what keeps the node alive.
  transfer->endpoint_.reset();
  transfer->node_.reset();
  auto buried = std::make_shared<
      std::pair<std::unique_ptr<UcxTransfer>, std::shared_ptr<void>>>(
      std::move(transfer), std::move(keep));
  Post([this, buried] { buried_.push_back(std::move(*buried)); });
}

UcxEndpoint::~UcxEndpoint() { Close(); }

std::unique_ptr<UcxTransfer> UcxEndpoint::Send(const void* buffer, size_t bytes,
                                               uint64_t tag) {
  std::unique_ptr<UcxTransfer> t(
      new UcxTransfer(node_, shared_from_this(), bytes));
  if (failed()) {
    // Known already: done at once, not after a trip through the progress
    // thread.
    t->Finish(absl::UnavailableError("UCX send: the endpoint is closed"));
    return t;
  }
  // The endpoint outlives the command: the transfer holds it.
  node_->Post([this, t = t.get(), buffer, bytes, tag] {
    if (ep_ == nullptr || failed()) {
      t->Finish(absl::UnavailableError("UCX send: the endpoint is closed"));
      return;
    }
    ucp_request_param_t param = {};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &UcxCallbacks::SendDone;
    param.user_data = t;
    t->Posted(ucp_tag_send_nbx(static_cast<ucp_ep_h>(ep_), buffer, bytes, tag,
                               &param));
  });
  return t;
}

void UcxEndpoint::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
  }
  // Posted after every send on this endpoint: the force close ends those
  // still under way (UCS_ERR_CANCELED), and later ones fail above.
  absl::Notification closed;
  void* request = nullptr;
  node_->Call([&] {
    ucp_ep_h ep = static_cast<ucp_ep_h>(ep_);
    ep_ = nullptr;
    if (ep == nullptr) {
      closed.Notify();
      return;
    }
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    param.cb.send = &UcxCallbacks::Closed;
    param.user_data = &closed;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &param);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      closed.Notify();
    } else {
      request = r;
    }
  });
  closed.WaitForNotification();
  if (request != nullptr) node_->Call([request] { ucp_request_free(request); });
}

bool UcxEndpoint::failed() const {
  absl::MutexLock lock(&mu_);
  return closed_ || (failed_ != nullptr && failed_->load());
}

UcxTransfer::~UcxTransfer() {
  if (!done()) Abort();
  void* request;
  {
    absl::MutexLock lock(&mu_);
    request = request_;
  }
  if (request == nullptr) return;
  if (node_ == nullptr) {
    ucp_request_free(request);  // buried: on the progress thread
  } else {
    node_->Call([request] { ucp_request_free(request); });
  }
}

void UcxTransfer::Posted(void* status_ptr) {
  if (status_ptr == nullptr) {
    Finish(absl::OkStatus());  // done at once; no callback comes
  } else if (UCS_PTR_IS_ERR(status_ptr)) {
    Finish(FromUcs(UCS_PTR_STATUS(status_ptr), "UCX post"));
  } else {
    absl::MutexLock lock(&mu_);
    request_ = status_ptr;
  }
}

void UcxTransfer::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  status_ = std::move(status);
  done_ = true;
}

absl::Status UcxTransfer::Wait(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&done_), deadline);
  if (!done_) return absl::DeadlineExceededError("UCX transfer still running");
  return status_;
}

bool UcxTransfer::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void UcxTransfer::CancelReceive() {
  node_->Call([this] {
    void* request;
    {
      absl::MutexLock lock(&mu_);
      request = done_ ? nullptr : request_;
    }
    if (request != nullptr) ucp_request_cancel(Worker(node_->worker_), request);
  });
}

bool UcxTransfer::Abort(absl::Duration limit) {
  if (endpoint_ != nullptr) {
    endpoint_->Close();
  } else {
    // After the post (commands run in order): its request is known then.
    // Called, not posted: once this returns nothing queued refers to the
    // transfer, which may go as soon as it is done.
    node_->Call([this] {
      void* request;
      {
        absl::MutexLock lock(&mu_);
        request = done_ ? nullptr : request_;
      }
      if (request != nullptr)
        ucp_request_cancel(Worker(node_->worker_), request);
    });
  }
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&done_), limit);
  return done_;
}

}  // namespace strata
