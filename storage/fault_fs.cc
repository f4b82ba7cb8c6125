#include "storage/fault_fs.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace strata {
namespace {

std::atomic<FaultInjection*> installed{nullptr};

rocksdb::IOStatus ToIoStatus(const Fault& f, absl::string_view path) {
  const std::string msg = std::string("injected fault on ") + std::string(path);
  if (f.error == ENOSPC)
    return rocksdb::IOStatus::NoSpace(msg, strerror(ENOSPC));
  return rocksdb::IOStatus::IOError(msg, strerror(f.error));
}

// Writes `data` with `write` unless a fault is injected for `path`: then
// only its first half for a torn write, and the fault.
template <typename WriteFn>
rocksdb::IOStatus WriteOrFail(const std::string& path,
                              const rocksdb::Slice& data, WriteFn write) {
  const Fault f = FaultAt(FaultOp::kWrite, path);
  if (f.error == 0) return write(data);
  if (f.torn) write(rocksdb::Slice(data.data(), data.size() / 2));
  return ToIoStatus(f, path);
}

class FaultyWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultyWritableFile(std::unique_ptr<rocksdb::FSWritableFile> f,
                     std::string path)
      : FSWritableFileOwnerWrapper(std::move(f)), path_(std::move(path)) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    return WriteOrFail(path_, data, [&](const rocksdb::Slice& d) {
      return target()->Append(d, options, dbg);
    });
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& /*info*/,
                           rocksdb::IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& options,
                                     rocksdb::IODebugContext* dbg) override {
    return WriteOrFail(path_, data, [&](const rocksdb::Slice& d) {
      return target()->PositionedAppend(d, offset, options, dbg);
    });
  }
  rocksdb::IOStatus PositionedAppend(
      const rocksdb::Slice& data, uint64_t offset,
      const rocksdb::IOOptions& options,
      const rocksdb::DataVerificationInfo& /*info*/,
      rocksdb::IODebugContext* dbg) override {
    return PositionedAppend(data, offset, options, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                         rocksdb::IODebugContext* dbg) override {
    const Fault f = FaultAt(FaultOp::kSync, path_);
    if (f.error != 0) return ToIoStatus(f, path_);
    return target()->Sync(options, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    const Fault f = FaultAt(FaultOp::kSync, path_);
    if (f.error != 0) return ToIoStatus(f, path_);
    return target()->Fsync(options, dbg);
  }
  rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes,
                              const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    const Fault f = FaultAt(FaultOp::kSync, path_);
    if (f.error != 0) return ToIoStatus(f, path_);
    return target()->RangeSync(offset, nbytes, options, dbg);
  }

 private:
  const std::string path_;
};

class FaultyRandomAccessFile : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  FaultyRandomAccessFile(std::unique_ptr<rocksdb::FSRandomAccessFile> f,
                         std::string path)
      : FSRandomAccessFileOwnerWrapper(std::move(f)), path_(std::move(path)) {}

  rocksdb::IOStatus Read(uint64_t offset, size_t n,
                         const rocksdb::IOOptions& options,
                         rocksdb::Slice* result, char* scratch,
                         rocksdb::IODebugContext* dbg) const override {
    const Fault f = FaultAt(FaultOp::kRead, path_);
    if (f.error != 0) return ToIoStatus(f, path_);
    return target()->Read(offset, n, options, result, scratch, dbg);
  }
  rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs,
                              const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    const Fault f = FaultAt(FaultOp::kRead, path_);
    if (f.error == 0) return target()->MultiRead(reqs, num_reqs, options, dbg);
    for (size_t i = 0; i < num_reqs; ++i) reqs[i].status = ToIoStatus(f, path_);
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus ReadAsync(
      rocksdb::FSReadRequest& req, const rocksdb::IOOptions& opts,
      std::function<void(const rocksdb::FSReadRequest&, void*)> cb,
      void* cb_arg, void** io_handle, rocksdb::IOHandleDeleter* del_fn,
      rocksdb::IODebugContext* dbg) override {
    const Fault f = FaultAt(FaultOp::kRead, path_);
    if (f.error != 0) return ToIoStatus(f, path_);
    return target()->ReadAsync(req, opts, std::move(cb), cb_arg, io_handle,
                               del_fn, dbg);
  }

 private:
  const std::string path_;
};

class FaultySequentialFile : public rocksdb::FSSequentialFileOwnerWrapper {
 public:
  FaultySequentialFile(std::unique_ptr<rocksdb::FSSequentialFile> f,
                       std::string path)
      : FSSequentialFileOwnerWrapper(std::move(f)), path_(std::move(path)) {}

  rocksdb::IOStatus Read(size_t n, const rocksdb::IOOptions& options,
                         rocksdb::Slice* result, char* scratch,
                         rocksdb::IODebugContext* dbg) override {
    const Fault f = FaultAt(FaultOp::kRead, path_);
    if (f.error != 0) return ToIoStatus(f, path_);
    return target()->Read(n, options, result, scratch, dbg);
  }
  rocksdb::IOStatus PositionedRead(uint64_t offset, size_t n,
                                   const rocksdb::IOOptions& options,
                                   rocksdb::Slice* result, char* scratch,
                                   rocksdb::IODebugContext* dbg) override {
    const Fault f = FaultAt(FaultOp::kRead, path_);
    if (f.error != 0) return ToIoStatus(f, path_);
    return target()->PositionedRead(offset, n, options, result, scratch, dbg);
  }

 private:
  const std::string path_;
};

// `open`s a file into `file` and, if it opened, puts it in `out` wrapped
// as a `Faulty` of path `f`.
template <typename Faulty, typename File, typename OpenFn>
rocksdb::IOStatus OpenWrapped(const std::string& f, std::unique_ptr<File>* out,
                              OpenFn open) {
  std::unique_ptr<File> file;
  rocksdb::IOStatus s = open(&file);
  if (s.ok()) *out = std::make_unique<Faulty>(std::move(file), f);
  return s;
}

// Wraps each file RocksDB opens for reading or writing.
class FaultyFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FaultyFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "StrataFaultyFileSystem"; }

  rocksdb::IOStatus NewSequentialFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSSequentialFile>* r,
      rocksdb::IODebugContext* dbg) override {
    return OpenWrapped<FaultySequentialFile>(f, r, [&](auto* file) {
      return target()->NewSequentialFile(f, o, file, dbg);
    });
  }
  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
      rocksdb::IODebugContext* dbg) override {
    return OpenWrapped<FaultyRandomAccessFile>(f, r, [&](auto* file) {
      return target()->NewRandomAccessFile(f, o, file, dbg);
    });
  }
  rocksdb::IOStatus NewWritableFile(const std::string& f,
                                    const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    return OpenWrapped<FaultyWritableFile>(f, r, [&](auto* file) {
      return target()->NewWritableFile(f, o, file, dbg);
    });
  }
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* dbg) override {
    return OpenWrapped<FaultyWritableFile>(f, r, [&](auto* file) {
      return target()->ReopenWritableFile(f, o, file, dbg);
    });
  }
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& f, const std::string& old,
      const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* dbg) override {
    return OpenWrapped<FaultyWritableFile>(f, r, [&](auto* file) {
      return target()->ReuseWritableFile(f, old, o, file, dbg);
    });
  }
};

}  // namespace

FaultInjection& FaultInjection::Install() {
  static FaultInjection* const layer = [] {
    auto* l = new FaultInjection();
    installed.store(l, std::memory_order_release);
    return l;
  }();
  return *layer;
}

FaultInjection* FaultInjection::Get() {
  return installed.load(std::memory_order_acquire);
}

void FaultInjection::Add(FaultRule rule) {
  absl::MutexLock lock(&mu_);
  rules_.push_back(std::move(rule));
}

void FaultInjection::Clear() {
  absl::MutexLock lock(&mu_);
  rules_.clear();
}

int64_t FaultInjection::injected() const {
  absl::MutexLock lock(&mu_);
  return injected_;
}

Fault FaultInjection::Check(FaultOp op, absl::string_view path) {
  absl::MutexLock lock(&mu_);
  for (FaultRule& r : rules_) {
    if (r.op != op || !absl::StartsWith(path, r.path_prefix) ||
        !absl::EndsWith(path, r.path_suffix)) {
      continue;
    }
    if (r.skip > 0) {
      --r.skip;
      continue;
    }
    if (r.times == 0) continue;
    if (r.times > 0) --r.times;
    ++injected_;
    return Fault{r.error, r.torn && op == FaultOp::kWrite};
  }
  return Fault{};
}

Fault FaultAt(FaultOp op, absl::string_view path) {
  FaultInjection* layer = FaultInjection::Get();
  return layer == nullptr ? Fault{} : layer->Check(op, path);
}

rocksdb::Env* FaultEnvOrNull() {
  if (FaultInjection::Get() == nullptr) return nullptr;
  static rocksdb::Env* const env =
      rocksdb::NewCompositeEnv(std::make_shared<FaultyFileSystem>()).release();
  return env;
}

}  // namespace strata
