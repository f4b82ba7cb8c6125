#include "common/shm_region.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

absl::Status Errno(absl::string_view what) {
  const int e = errno;
  std::string msg = absl::StrCat(what, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  // Nothing here gets better by trying again (no memfd, no memory, too
  // many files): the caller goes on without shared memory.
  return absl::FailedPreconditionError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(size_t size) {
  if (size <= kHeaderBytes || size > kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory region of ", size, " bytes"));
  }
  const int fd =
      memfd_create("strata-payloads", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  auto fail = [fd](absl::string_view what) {
    absl::Status s = Errno(what);
    close(fd);
    return s;
  };
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) return fail("ftruncate");
  if (fcntl(fd, F_ADD_SEALS, kSeals) != 0) return fail("sealing the memfd");
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("mmap");
  uint64_t nonce = 0;
  while (nonce == 0) {
    if (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce) {
      munmap(p, size);
      return fail("getrandom");
    }
  }
  std::memcpy(p, &nonce, sizeof nonce);
  return std::unique_ptr<ShmRegion>(
      new ShmRegion(static_cast<char*>(p), size, nonce, fd));
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Open(int64_t pid, int fd,
                                                           uint64_t size,
                                                           uint64_t nonce) {
  if (pid <= 0 || fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no process ", pid, " descriptor ", fd));
  }
  if (size <= kHeaderBytes || size > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-memory region of ", size, " bytes (allowed: ", kHeaderBytes + 1,
        " to ", kMaxBytes, ")"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  // Look before opening: opening a device or a terminal has effects of its
  // own. O_PATH opens nothing but the name.
  const int look = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (look < 0) return Errno(absl::StrCat("opening ", path));
  struct stat st;
  struct statfs fs;
  const bool shmem = fstat(look, &st) == 0 && S_ISREG(st.st_mode) &&
                     fstatfs(look, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  int own = -1;
  if (shmem) {
    own = open(absl::StrCat("/proc/self/fd/", look).c_str(),
               O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  }
  close(look);
  if (!shmem) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a memfd on tmpfs"));
  }
  if (own < 0) return Errno(absl::StrCat("opening ", path));
  const int seals = fcntl(own, F_GET_SEALS);
  absl::Status bad;
  if (seals < 0 || (seals & kSeals) != kSeals) {
    bad = absl::InvalidArgumentError(
        absl::StrCat(path, " is not sealed against shrinking and growing"));
  } else if (static_cast<uint64_t>(st.st_size) != size) {
    bad = absl::InvalidArgumentError(
        absl::StrCat(path, " holds ", st.st_size, " bytes, not ", size));
  }
  if (!bad.ok()) {
    close(own);
    return bad;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  close(own);  // the mapping keeps the memory
  if (p == MAP_FAILED) return Errno("mmap");
  uint64_t found = 0;
  std::memcpy(&found, p, sizeof found);
  if (found != nonce) {
    munmap(p, size);
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not the region the caller made (nonce)"));
  }
  return std::unique_ptr<ShmRegion>(
      new ShmRegion(static_cast<char*>(p), size, nonce, -1));
}

ShmRegion::~ShmRegion() {
  munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace strata
