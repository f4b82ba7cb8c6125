// Encryption of the bulk plane's payloads (AES-256-GCM, OpenSSL) for jobs
// that run mutual TLS: the server makes a random key per session and hands
// it to the worker in AttachBulk's answer, over the TLS channel; each
// payload is sealed under that key with a nonce made of its direction and
// its tag, which a session never uses twice in one direction, and carries
// its 16-byte authentication tag after the ciphertext. A payload that was
// changed, replayed under another tag or sealed under another key fails to
// open.
#ifndef STRATA_TRANSPORT_BULK_CIPHER_H_
#define STRATA_TRANSPORT_BULK_CIPHER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// Thread-safe (each call has its own cipher context).
class BulkCipher {
 public:
  static constexpr size_t kKeyBytes = 32;
  static constexpr size_t kTagBytes = 16;  // after each sealed payload
  enum Direction : uint32_t { kToServer = 1, kToWorker = 2 };

  // A new random key.
  static absl::StatusOr<std::string> NewKey();
  // INVALID_ARGUMENT for a key of another size.
  static absl::StatusOr<BulkCipher> FromKey(std::string key);

  // Seals `n` bytes at `in` into `out` (n + kTagBytes; `out` may be `in`).
  absl::Status Seal(Direction direction, uint64_t tag, const void* in, size_t n,
                    void* out) const;
  // Opens `sealed` bytes at `in` (the payload and its tag) into `out`
  // (sealed - kTagBytes; may be `in`). PERMISSION_DENIED when the
  // payload does not authenticate; `out` then holds garbage.
  absl::Status Open(Direction direction, uint64_t tag, const void* in,
                    size_t sealed, void* out) const;

 private:
  explicit BulkCipher(std::string key) : key_(std::move(key)) {}
  std::string key_;
};

}  // namespace strata

#endif  // STRATA_TRANSPORT_BULK_CIPHER_H_
