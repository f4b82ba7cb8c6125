#include "transport/bulk_cipher.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

using Context = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

// The 96-bit nonce: the direction, then the tag, little-endian.
void Nonce(BulkCipher::Direction direction, uint64_t tag, unsigned char* iv) {
  for (int i = 0; i < 4; ++i)
    iv[i] = static_cast<unsigned char>(direction >> (8 * i));
  for (int i = 0; i < 8; ++i)
    iv[4 + i] = static_cast<unsigned char>(tag >> (8 * i));
}

// EVP takes lengths as int: payloads go through in pieces of 1 GiB.
constexpr size_t kPiece = size_t{1} << 30;

absl::Status Failed(const char* what) {
  return absl::InternalError(absl::StrCat("AES-GCM: ", what, " failed"));
}

}  // namespace

absl::StatusOr<std::string> BulkCipher::NewKey() {
  std::string key(kKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), kKeyBytes) != 1)
    return absl::UnavailableError("no random bytes for a bulk-plane key");
  return key;
}

absl::StatusOr<BulkCipher> BulkCipher::FromKey(std::string key) {
  if (key.size() != kKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a bulk-plane key of ", key.size(), " bytes, not ", kKeyBytes));
  }
  return BulkCipher(std::move(key));
}

absl::Status BulkCipher::Seal(Direction direction, uint64_t tag, const void* in,
                              size_t n, void* out) const {
  Context ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  unsigned char iv[12];
  Nonce(direction, tag, iv);
  if (!ctx ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                         reinterpret_cast<const unsigned char*>(key_.data()),
                         iv) != 1) {
    return Failed("setup");
  }
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  for (size_t done = 0; done < n;) {
    const int piece = static_cast<int>(std::min(kPiece, n - done));
    int len = 0;
    if (EVP_EncryptUpdate(ctx.get(), dst + done, &len, src + done, piece) != 1)
      return Failed("encryption");
    done += static_cast<size_t>(len);
  }
  int len = 0;
  if (EVP_EncryptFinal_ex(ctx.get(), dst + n, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes,
                          dst + n) != 1) {
    return Failed("sealing");
  }
  return absl::OkStatus();
}

absl::Status BulkCipher::Open(Direction direction, uint64_t tag, const void* in,
                              size_t sealed, void* out) const {
  if (sealed < kTagBytes) {
    return absl::PermissionDeniedError(
        "a sealed bulk payload shorter than its tag");
  }
  const size_t n = sealed - kTagBytes;
  Context ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  unsigned char iv[12];
  Nonce(direction, tag, iv);
  if (!ctx ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                         reinterpret_cast<const unsigned char*>(key_.data()),
                         iv) != 1) {
    return Failed("setup");
  }
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  // The tag first: `out` may overwrite `in`.
  unsigned char auth[kTagBytes];
  std::copy(src + n, src + sealed, auth);
  if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, auth) !=
      1) {
    return Failed("setup");
  }
  for (size_t done = 0; done < n;) {
    const int piece = static_cast<int>(std::min(kPiece, n - done));
    int len = 0;
    if (EVP_DecryptUpdate(ctx.get(), dst + done, &len, src + done, piece) != 1)
      return Failed("decryption");
    done += static_cast<size_t>(len);
  }
  int len = 0;
  if (EVP_DecryptFinal_ex(ctx.get(), dst + n, &len) != 1) {
    return absl::PermissionDeniedError(
        "a bulk payload failed authentication: changed, replayed, or sealed "
        "under another session's key");
  }
  return absl::OkStatus();
}

}  // namespace strata
