#include "storage/rocksdb_crc32c.h"

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "rocksdb/file_checksum.h"
#include "storage/crc32c.h"

namespace {
// Calls made on this thread, to tell whether RocksDB's reach this function.
thread_local uint64_t calls = 0;
}  // namespace

// Takes the place of rocksdb::crc32c::Extend(uint32_t init_crc, const char*
// data, size_t n), the CRC-32C of data[0, n) appended to a message whose
// CRC-32C is init_crc: the linker's --wrap (storage/CMakeLists.txt) sends
// the library's calls to it here.
uint32_t StrataExtendForRocksDb(
    uint32_t init_crc, const char* data,
    size_t n) asm("__wrap__ZN7rocksdb6crc32c6ExtendEjPKcm");

uint32_t StrataExtendForRocksDb(uint32_t init_crc, const char* data, size_t n) {
  ++calls;
  return strata::crc32c::Extend(init_crc, absl::string_view(data, n));
}

namespace strata {

bool RocksDbCrc32cIsStratas() {
  // A checksum RocksDB computes inside the library, through its own call.
  std::unique_ptr<rocksdb::FileChecksumGenerator> gen =
      rocksdb::GetFileChecksumGenCrc32cFactory()->CreateFileChecksumGenerator(
          rocksdb::FileChecksumGenContext());
  if (gen == nullptr) return false;
  const uint64_t before = calls;
  gen->Update("strata", 6);
  gen->Finalize();
  return calls > before;
}

}  // namespace strata
