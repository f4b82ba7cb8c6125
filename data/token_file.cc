// TokenFile: one file's tokens behind a read-only mapping, or owned.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/token_files.h"

namespace strata {

struct FileMapping {
  FileMapping(void* a, size_t b) : addr(a), bytes(b) {}
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping() { munmap(addr, bytes); }

  void* addr;
  size_t bytes;
};

namespace {

// Closes a file descriptor when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { close(fd_); }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status ErrnoError(int error, absl::string_view what,
                        const std::string& path) {
  return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path));
}

// Reads `size` bytes at `offset` of `fd` into `out`.
absl::Status ReadAt(int fd, uint64_t offset, char* out, size_t size,
                    const std::string& path) {
  while (size > 0) {
    const ssize_t n = pread(fd, out, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "error reading", path);
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": shrank while being read"));
    }
    out += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// Checks `count` mapped tokens from `tokens` against `vocab` a chunk at a
// time, dropping each chunk's pages from this process once checked: the
// scan passes the whole file through the page cache but leaves none of it
// resident here (a later read faults a page back in from the cache).
absl::Status CheckMapped(const FileMapping& m, const uint16_t* tokens,
                         uint64_t count, int vocab, const std::string& path) {
  if (vocab > std::numeric_limits<uint16_t>::max()) return absl::OkStatus();
  constexpr uint64_t kChunk = uint64_t{1} << 21;  // tokens: 4 MiB
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  madvise(m.addr, m.bytes, MADV_SEQUENTIAL);
  for (uint64_t i = 0; i < count; i += kChunk) {
    const uint64_t n = std::min(kChunk, count - i);
    absl::Status s = CheckVocab({tokens + i, n}, vocab, path, i);
    if (!s.ok()) return s;
    // Whole pages only; both ends stay inside the mapping.
    const uintptr_t lo = reinterpret_cast<uintptr_t>(tokens + i) & ~(page - 1);
    const uintptr_t hi =
        reinterpret_cast<uintptr_t>(tokens + i + n) & ~(page - 1);
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }
  return absl::OkStatus();
}

// The bytes of text file `fd` (`size` long), one token each.
absl::StatusOr<TokenFile> ReadText(int fd, uint64_t size, int vocab,
                                   const std::string& path) {
  if (vocab < kByteVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is read as bytes, which needs vocab >= 256, not ", vocab));
  }
  std::string bytes(size, '\0');
  absl::Status s = ReadAt(fd, 0, bytes.data(), bytes.size(), path);
  if (!s.ok()) return s;
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  std::vector<uint16_t> tokens(b, b + bytes.size());
  return TokenFile(path, std::move(tokens), /*text=*/true);
}

}  // namespace

absl::StatusOr<TokenFile> TokenFile::Open(const std::string& path, int vocab) {
  // O_NONBLOCK: opening a FIFO named by mistake must not wait for a writer.
  const int raw = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (raw < 0) return ErrnoError(errno, "cannot open", path);
  const ScopedFd fd(raw);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string head(std::min<uint64_t>(size, kLlmcHeaderBytes), '\0');
  absl::Status s = ReadAt(fd.get(), 0, head.data(), head.size(), path);
  if (!s.ok()) return s;
  absl::StatusOr<TokenLayout> layout = ParseTokenLayout(head, size, path);
  if (!layout.ok()) return layout.status();
  if (layout->format == TokenFormat::kBytes)
    return ReadText(fd.get(), size, vocab, path);
  if (layout->count == 0) return TokenFile(path, {}, /*text=*/false);

  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) return ErrnoError(errno, "cannot map", path);
  TokenFile file(path, std::make_unique<FileMapping>(addr, size), *layout);
  s = CheckMapped(*file.mapping_, file.mapped_tokens_, file.mapped_count_,
                  vocab, path);
  if (!s.ok()) return s;
  // Training reads windows at random places: read-ahead would only read
  // pages that no window asks for yet.
  madvise(addr, size, MADV_RANDOM);
  return file;
}

TokenFile::TokenFile(std::string path, std::vector<uint16_t> tokens, bool text)
    : path_(std::move(path)), owned_(std::move(tokens)), text_(text) {}

TokenFile::TokenFile(std::string path, std::unique_ptr<FileMapping> mapping,
                     const TokenLayout& layout)
    : path_(std::move(path)),
      mapping_(std::move(mapping)),
      mapped_tokens_(reinterpret_cast<const uint16_t*>(
          static_cast<const char*>(mapping_->addr) + layout.offset)),
      mapped_count_(layout.count) {}

TokenFile::TokenFile(TokenFile&&) noexcept = default;
TokenFile& TokenFile::operator=(TokenFile&&) noexcept = default;
TokenFile::~TokenFile() = default;

absl::Span<const uint16_t> TokenFile::tokens() const {
  if (mapping_ != nullptr) return {mapped_tokens_, mapped_count_};
  return owned_;
}

void TokenFile::Append(const TokenFile& next) {
  const absl::Span<const uint16_t> t = next.tokens();
  owned_.insert(owned_.end(), t.begin(), t.end());
}

}  // namespace strata
