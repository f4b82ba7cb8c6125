// A shared-memory region between a worker and a server on one host: the
// payload path of co-located processes (gRPC stays the control path).
//
// The worker creates the region as a memfd sealed against shrinking and
// growing, so the server's mapping can never lose its pages under it (a
// truncated mapping would kill the server with SIGBUS). The server opens it
// through /proc/<pid>/fd/<fd>, which succeeds only on the same host, in the
// same PID namespace, for the same user, refuses it unless those seals are
// set, and checks the random nonce the creator wrote in its first 8 bytes.
#ifndef STRATA_COMMON_SHM_REGION_H_
#define STRATA_COMMON_SHM_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"

namespace strata {

// Trailing metadata of every Push, Pull, PushBatch and PullBatch a
// server's handler answered (the call's shared-memory places are free
// again), and of a Push or Pull whose session the server does not hold
// (the client attaches again and retries; in a batch each answer says so,
// BatchAnswer.shm_lost).
inline constexpr char kHandledKey[] = "strata-handled";
inline constexpr char kShmLostKey[] = "strata-shm-lost";
// How Resolve's NOT_FOUND for an unknown session begins.
inline constexpr char kNoSessionPrefix[] = "no shared-memory session";
// Whether `status` is that NOT_FOUND (the caller is to attach again).
inline bool IsNoSessionError(const absl::Status& status) {
  return absl::IsNotFound(status) &&
         absl::StartsWith(status.message(), kNoSessionPrefix);
}

class ShmRegion {
 public:
  // Bytes at the start that hold the nonce; payloads go after them.
  static constexpr size_t kHeaderBytes = 4096;
  // The largest region a server maps for one caller.
  static constexpr uint64_t kMaxBytes = 4ull << 30;

  // A new sealed region of `size` bytes (> kHeaderBytes) with a fresh nonce.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Create(size_t size);
  // Maps the region `fd` of process `pid` (see above). NOT_FOUND or
  // PERMISSION_DENIED where the path cannot be opened; INVALID_ARGUMENT for
  // anything but a memfd on tmpfs (a device, a socket, a hugetlb memfd whose
  // pages could fail), or one not sealed, of another size or another nonce;
  // FAILED_PRECONDITION for other system errors.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Open(int64_t pid, int fd,
                                                         uint64_t size,
                                                         uint64_t nonce);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  uint64_t nonce() const { return nonce_; }
  // The creator's descriptor (-1 in a region opened with Open).
  int fd() const { return fd_; }
  // [offset, offset + n) lies inside the region, without overflow.
  bool Contains(uint64_t offset, uint64_t n) const {
    return offset <= size_ && n <= size_ - offset;
  }

 private:
  ShmRegion(char* data, size_t size, uint64_t nonce, int fd)
      : data_(data), size_(size), nonce_(nonce), fd_(fd) {}
  char* data_;
  size_t size_;
  uint64_t nonce_;
  int fd_;
};

}  // namespace strata

#endif  // STRATA_COMMON_SHM_REGION_H_
