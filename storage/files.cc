#include "storage/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "storage/fault_fs.h"

namespace strata {

namespace fs = std::filesystem;

absl::Status FsError(absl::string_view what, const std::string& path,
                     const std::error_code& ec) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", ec.message()));
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return FsError(what, path, std::error_code(errno, std::generic_category()));
}

absl::Status InjectedError(absl::string_view what, const std::string& path,
                           int error) {
  return FsError(absl::StrCat(what, " (injected)"), path,
                 std::error_code(error, std::generic_category()));
}

absl::Status SyncPath(const std::string& path) {
  if (const Fault f = FaultAt(FaultOp::kSync, path); f.error != 0) {
    return InjectedError("fsync", path, f.error);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoError("fsync", path);
}

absl::Status WriteFileSynced(const std::string& path,
                             absl::string_view contents) {
  if (const Fault f = FaultAt(FaultOp::kWrite, path); f.error != 0) {
    if (f.torn) {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(contents.data(),
                static_cast<std::streamsize>(contents.size() / 2));
    }
    return InjectedError("write", path, f.error);
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) return ErrnoError("write", path);
  }
  return SyncPath(path);
}

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t limit) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    }
    return FsError("stat", path, ec);
  }
  if (size > limit) {
    return absl::DataLossError(absl::StrCat(path, " is implausibly large"));
  }
  if (const Fault f = FaultAt(FaultOp::kRead, path); f.error != 0) {
    return InjectedError("read", path, f.error);
  }
  std::string data(size, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(data.data(), static_cast<std::streamsize>(size));
  if (!in || in.gcount() != static_cast<std::streamsize>(size)) {
    return ErrnoError("read", path);
  }
  return data;
}

absl::Status RenameSynced(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) return FsError(absl::StrCat("rename ", from, " to"), to, ec);
  return SyncPath(fs::path(to).parent_path().string());
}

}  // namespace strata
