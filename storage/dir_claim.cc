#include "storage/dir_claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "storage/crc32c.h"
#include "storage/files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr char kMarkerName[] = "STRATA_DATADIR";
constexpr char kMarkerMagic[] = "strata-data-dir";
constexpr int kFormatVersion = 1;
constexpr size_t kMaxMarkerBytes = 64 << 10;

std::string EncodeMarker(absl::string_view owner) {
  std::string body = absl::StrCat(kMarkerMagic, "\nformat ", kFormatVersion,
                                  "\nowner ", owner, "\n");
  return absl::StrCat(body,
                      absl::StrFormat("crc32c %08x\n", crc32c::Value(body)));
}

// Checks the marker at `path` names `owner` (see DataDir::Open's errors).
absl::Status CheckMarker(const std::string& path, absl::string_view owner) {
  absl::StatusOr<std::string> data = ReadFile(path, kMaxMarkerBytes);
  if (!data.ok()) {
    return absl::DataLossError(
        absl::StrCat("unreadable Strata marker: ", data.status().message()));
  }
  const auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("corrupt Strata marker ", path, ": ", why));
  };
  const std::vector<std::string> lines = absl::StrSplit(*data, '\n');
  if (lines.size() != 5 || lines[0] != kMarkerMagic || !lines[4].empty()) {
    return corrupt("not in the marker format");
  }
  const size_t body_size = data->size() - lines[3].size() - 1;
  uint32_t crc = 0;
  if (!absl::StartsWith(lines[3], "crc32c ") ||
      !absl::SimpleHexAtoi(lines[3].substr(7), &crc) ||
      crc != crc32c::Value(absl::string_view(*data).substr(0, body_size))) {
    return corrupt("checksum mismatch");
  }
  int format = 0;
  if (!absl::StartsWith(lines[1], "format ") ||
      !absl::SimpleAtoi(lines[1].substr(7), &format) ||
      !absl::StartsWith(lines[2], "owner ")) {
    return corrupt("bad fields");
  }
  if (format != kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": data directory format ", format,
                     ", this build reads ", kFormatVersion));
  }
  if (lines[2].substr(6) != owner) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory belongs to \"", lines[2].substr(6),
                     "\", not to \"", owner, "\""));
  }
  return absl::OkStatus();
}

// Creates `path` if needed and checks it is an empty directory or ours;
// writes the marker into an empty one (or one marked by `legacy_marker`).
absl::Status ClaimDirectory(const std::string& path, const std::string& owner,
                            const std::string& legacy_marker) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec || !fs::is_directory(path, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a usable directory", ec ? ": " : "",
                     ec ? ec.message() : ""));
  }
  const std::string marker = absl::StrCat(path, "/", kMarkerName);
  if (fs::exists(marker, ec)) return CheckMarker(marker, owner);
  const std::string temp_marker = marker + ".tmp";
  const std::string legacy =
      legacy_marker.empty() ? "" : absl::StrCat(path, "/", legacy_marker);
  const bool adopt = !legacy.empty() && fs::exists(legacy, ec);
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    if (!adopt && e.path().string() != temp_marker) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is not a Strata data directory (it holds ",
          e.path().filename().string(), " and no ", kMarkerName, ")"));
    }
  }
  if (ec) return FsError("list", path, ec);
  if (absl::Status s = WriteFileSynced(temp_marker, EncodeMarker(owner));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = RenameSynced(temp_marker, marker); !s.ok()) return s;
  if (adopt) fs::remove(legacy, ec);  // harmless if it stays
  return absl::OkStatus();
}

absl::StatusOr<int> LockDirectory(const std::string& path) {
  const std::string lock_path = absl::StrCat(path, "/LOCK");
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open", lock_path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", path, " is in use"));
  }
  return fd;
}

}  // namespace

DirClaim::DirClaim(std::string path, std::string owner_tag, int lock_fd)
    : path_(std::move(path)),
      owner_tag_(std::move(owner_tag)),
      lock_fd_(lock_fd) {}

DirClaim::~DirClaim() { ::close(lock_fd_); }  // releases the flock

absl::StatusOr<std::unique_ptr<DirClaim>> DirClaim::Acquire(
    const std::string& path, const std::string& owner_tag,
    const std::string& legacy_marker) {
  if (owner_tag.empty() ||
      std::any_of(owner_tag.begin(), owner_tag.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20;
      })) {
    return absl::InvalidArgumentError(
        "data directory owner tag must be non-empty printable text");
  }
  if (absl::Status s = ClaimDirectory(path, owner_tag, legacy_marker);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<int> lock_fd = LockDirectory(path);
  if (!lock_fd.ok()) return lock_fd.status();
  return std::unique_ptr<DirClaim>(new DirClaim(path, owner_tag, *lock_fd));
}

}  // namespace strata
