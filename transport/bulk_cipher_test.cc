// AES-256-GCM sealing of bulk payloads: a round trip in place and out of
// place, and every change that must fail to open: a flipped byte of the
// payload or of its tag, another tag (a replay), the other direction,
// another key, a truncated payload.
#include "transport/bulk_cipher.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata {
namespace {

BulkCipher Cipher() {
  auto key = BulkCipher::NewKey();
  EXPECT_TRUE(key.ok());
  auto cipher = BulkCipher::FromKey(*key);
  EXPECT_TRUE(cipher.ok());
  return *cipher;
}

std::vector<char> Payload(size_t n) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 31 + 7);
  return v;
}

TEST(BulkCipher, SealedPayloadsOpenToTheSameBytes) {
  const BulkCipher c = Cipher();
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{3} << 20}) {
    const std::vector<char> plain = Payload(n);
    std::vector<char> sealed(n + BulkCipher::kTagBytes);
    ASSERT_TRUE(
        c.Seal(BulkCipher::kToServer, 42, plain.data(), n, sealed.data()).ok());
    if (n > 16) {
      EXPECT_NE(std::vector<char>(sealed.begin(), sealed.begin() + n), plain);
    }
    std::vector<char> out(n);
    ASSERT_TRUE(c.Open(BulkCipher::kToServer, 42, sealed.data(), sealed.size(),
                       out.data())
                    .ok());
    EXPECT_EQ(out, plain);
    // In place, both ways.
    std::vector<char> buf = plain;
    buf.resize(n + BulkCipher::kTagBytes);
    ASSERT_TRUE(
        c.Seal(BulkCipher::kToWorker, 7, buf.data(), n, buf.data()).ok());
    ASSERT_TRUE(
        c.Open(BulkCipher::kToWorker, 7, buf.data(), buf.size(), buf.data())
            .ok());
    buf.resize(n);
    EXPECT_EQ(buf, plain);
  }
}

TEST(BulkCipher, AnyChangeFailsToOpen) {
  const BulkCipher c = Cipher();
  const std::vector<char> plain = Payload(10000);
  std::vector<char> sealed(plain.size() + BulkCipher::kTagBytes);
  ASSERT_TRUE(c.Seal(BulkCipher::kToServer, 9, plain.data(), plain.size(),
                     sealed.data())
                  .ok());
  std::vector<char> out(plain.size());
  auto open = [&](const BulkCipher& with, BulkCipher::Direction d, uint64_t tag,
                  std::vector<char> bytes) {
    return with.Open(d, tag, bytes.data(), bytes.size(), out.data());
  };
  ASSERT_TRUE(open(c, BulkCipher::kToServer, 9, sealed).ok());
  std::vector<char> flipped = sealed;
  flipped[5000] ^= 1;
  EXPECT_TRUE(
      absl::IsPermissionDenied(open(c, BulkCipher::kToServer, 9, flipped)));
  std::vector<char> bad_tag = sealed;
  bad_tag.back() ^= 0x80;
  EXPECT_TRUE(
      absl::IsPermissionDenied(open(c, BulkCipher::kToServer, 9, bad_tag)));
  EXPECT_TRUE(
      absl::IsPermissionDenied(open(c, BulkCipher::kToServer, 10, sealed)));
  EXPECT_TRUE(
      absl::IsPermissionDenied(open(c, BulkCipher::kToWorker, 9, sealed)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      open(Cipher(), BulkCipher::kToServer, 9, sealed)));
  std::vector<char> cut(sealed.begin(), sealed.end() - 1);
  EXPECT_TRUE(absl::IsPermissionDenied(open(c, BulkCipher::kToServer, 9, cut)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      c.Open(BulkCipher::kToServer, 9, sealed.data(), 15, out.data())));
}

TEST(BulkCipher, KeysOfAnotherSizeAreRefused) {
  EXPECT_TRUE(absl::IsInvalidArgument(BulkCipher::FromKey("short").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      BulkCipher::FromKey(std::string(33, 'k')).status()));
}

}  // namespace
}  // namespace strata
