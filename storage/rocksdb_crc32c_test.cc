#include "storage/rocksdb_crc32c.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "rocksdb/file_checksum.h"

namespace strata {
namespace {

// RocksDB's CRC-32C generator (its code, calling its CRC function) gives
// the standard's check value through Strata's function.
TEST(RocksDbCrc32c, RocksDbsOwnCallsReachStratasAndGiveTheStandardValue) {
#if defined(__x86_64__)
  EXPECT_TRUE(RocksDbCrc32cIsStratas());  // the link wraps them here
#endif
  std::unique_ptr<rocksdb::FileChecksumGenerator> gen =
      rocksdb::GetFileChecksumGenCrc32cFactory()->CreateFileChecksumGenerator(
          rocksdb::FileChecksumGenContext());
  ASSERT_NE(gen, nullptr);
  gen->Update("1234", 4);
  gen->Update("56789", 5);
  gen->Finalize();
  const std::string sum = gen->GetChecksum();
  ASSERT_EQ(sum.size(), 4u);
  uint32_t big_endian = 0;
  for (char c : sum) big_endian = (big_endian << 8) | static_cast<uint8_t>(c);
  EXPECT_EQ(big_endian, 0xe3069283u);
}

}  // namespace
}  // namespace strata
