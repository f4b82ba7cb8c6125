#include "testing/cuda/virtual_streams.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "testing/cuda/emulation.h"

namespace strata::vgpu {
namespace {

struct Op {
  uint64_t seq = 0;
  std::function<void()> run;
};

struct Stream {
  std::deque<Op> queue;
};

// One record of an event. Waits hold the record they were queued after.
struct Record {
  Stream* stream = nullptr;
  uint64_t seq = 0;
  bool done = false;  // its stream has run past it
  std::chrono::steady_clock::time_point at;
};

struct Event {
  std::shared_ptr<Record> last;
};

// Everything below is guarded by mu. Recursive: running a queued wait runs
// another stream's work, which may queue or wait again.
std::recursive_mutex mu;
uint64_t next_seq = 1;
// Never freed, so that a CUDA call from a static destructor or a thread
// still running at exit finds them.
std::set<Stream*>& streams = *new std::set<Stream*>;
std::map<uintptr_t, size_t>& pinned = *new std::map<uintptr_t, size_t>;
std::atomic<int64_t> launches{0};
bool fail_next_pin = false;

Stream* Of(cudaStream_t s) { return reinterpret_cast<Stream*>(s); }

void RunUntil(Stream* s, uint64_t seq) {
  while (!s->queue.empty() && s->queue.front().seq <= seq) {
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    op.run();
  }
}

// Every stream's work, one op at a time in the order it was queued: a
// legal schedule, and the same on every run.
void RunAll() {
  while (true) {
    Stream* first = nullptr;
    for (Stream* s : streams) {
      if (!s->queue.empty() &&
          (first == nullptr ||
           s->queue.front().seq < first->queue.front().seq)) {
        first = s;
      }
    }
    if (first == nullptr) return;
    RunUntil(first, first->queue.front().seq);
  }
}

uint64_t Push(cudaStream_t stream, std::function<void()> work) {
  if (stream == nullptr) {
    RunAll();
    work();
    return 0;
  }
  const uint64_t seq = next_seq++;
  Of(stream)->queue.push_back({seq, std::move(work)});
  return seq;
}

void QueueLaunch(cudaStream_t stream, std::function<void()> work) {
  CountLaunch();
  Enqueue(stream, std::move(work));
}

// Kernels launched through STRATA_LAUNCH go on their streams' queues.
[[maybe_unused]] const bool installed =
    (emu::SetLaunchQueue(&QueueLaunch), true);

}  // namespace

cudaStream_t NewStream() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Stream* s = new Stream;
  streams.insert(s);
  return reinterpret_cast<cudaStream_t>(s);
}

void DeleteStream(cudaStream_t stream) {
  if (stream == nullptr) return;
  std::lock_guard<std::recursive_mutex> lock(mu);
  RunUntil(Of(stream), UINT64_MAX);
  streams.erase(Of(stream));
  delete Of(stream);
}

void Enqueue(cudaStream_t stream, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Push(stream, std::move(work));
}

void RunStream(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (stream == nullptr) {
    RunAll();
  } else {
    RunUntil(Of(stream), UINT64_MAX);
  }
}

cudaEvent_t NewEvent() { return reinterpret_cast<cudaEvent_t>(new Event); }

void DeleteEvent(cudaEvent_t event) {
  // Queued records and waits hold their Record; the handle can go.
  std::lock_guard<std::recursive_mutex> lock(mu);
  delete reinterpret_cast<Event*>(event);
}

void RecordEvent(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  auto r = std::make_shared<Record>();
  r->stream = Of(stream);
  reinterpret_cast<Event*>(event)->last = r;
  r->seq = Push(stream, [r] {
    r->at = std::chrono::steady_clock::now();
    r->done = true;
  });
}

void QueueWait(cudaStream_t stream, cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  std::shared_ptr<Record> r = reinterpret_cast<Event*>(event)->last;
  if (r == nullptr) return;  // never recorded: CUDA waits for nothing
  Push(stream, [r] {
    // A deleted stream ran everything first, so r is done.
    if (!r->done) RunUntil(r->stream, r->seq);
  });
}

void RunToEvent(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  std::shared_ptr<Record> r = reinterpret_cast<Event*>(event)->last;
  if (r != nullptr && !r->done) RunUntil(r->stream, r->seq);
}

std::optional<float> ElapsedMs(cudaEvent_t start, cudaEvent_t end) {
  RunToEvent(start);
  RunToEvent(end);
  std::lock_guard<std::recursive_mutex> lock(mu);
  const Record* a = reinterpret_cast<Event*>(start)->last.get();
  const Record* b = reinterpret_cast<Event*>(end)->last.get();
  if (a == nullptr || b == nullptr) return std::nullopt;
  return std::chrono::duration<float, std::milli>(b->at - a->at).count();
}

bool Pin(void* ptr, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (std::exchange(fail_next_pin, false)) return false;
  // Drivers pin whole pages: a range that shares a page with a pinned one
  // is refused.
  constexpr uintptr_t kPage = 4096;
  const uintptr_t first = reinterpret_cast<uintptr_t>(ptr) / kPage;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(ptr) + bytes - 1) / kPage;
  for (const auto& [start, n] : pinned) {
    if (start / kPage <= last && (start + n - 1) / kPage >= first) return false;
  }
  pinned[reinterpret_cast<uintptr_t>(ptr)] = bytes;
  return true;
}

bool Unpin(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  RunAll();  // queued copies may still read or write the range
  return pinned.erase(reinterpret_cast<uintptr_t>(ptr)) == 1;
}

void FailNextPin() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  fail_next_pin = true;
}

bool IsPinned(const void* ptr, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  auto it = pinned.upper_bound(p);
  if (it == pinned.begin()) return false;
  --it;
  return p + bytes <= it->first + it->second;
}

int64_t LaunchesQueued() { return launches.load(); }

void CountLaunch() { launches.fetch_add(1); }

}  // namespace strata::vgpu
