// The safetensors file format (Hugging Face's): a little-endian u64 N, N
// bytes of a JSON header, then the tensors' bytes. The header maps each
// tensor's name to {"dtype", "shape", "data_offsets": [begin, end)} (offsets
// into the bytes after the header) and may hold "__metadata__", a map of
// strings. Tensors lie back to back: no gap, no overlap.
//
// SafetensorsFile reads a file through a read-only memory mapping (nothing
// is read whole); WriteSafetensors writes fp32 tensors. Nothing here knows a
// model's names: model/hf_gpt2.h maps GPT-2's.
#ifndef STRATA_FORMATS_SAFETENSORS_H_
#define STRATA_FORMATS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// The largest header accepted (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

// One tensor of a file, as its header describes it.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;  // () for a scalar
  uint64_t begin = 0;          // of its bytes, from the file's start
  uint64_t bytes = 0;
  uint64_t numel() const;
};

// An open safetensors file. Immutable after Open; thread-safe.
class SafetensorsFile {
 public:
  // Maps and validates the file at `path`. NOT_FOUND if it cannot be
  // opened; DATA_LOSS, naming the file and the field, for a file shorter
  // than its header says, a header over kMaxSafetensorsHeader, JSON that
  // does not parse or is not the format's, an unknown dtype, a tensor
  // whose byte count disagrees with its shape and dtype, or tensors that
  // overlap, leave gaps or run past the end of the file.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return size_; }
  // The header's "__metadata__" (empty if it has none).
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // Every tensor, in the order of their bytes in the file.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // The tensor named `name`, or null.
  const SafetensorsTensor* Find(const std::string& name) const;

  // Writes elements [first, first + count) of `t` (row-major) to `out` as
  // fp32, converting from F16 or BF16. INVALID_ARGUMENT if the range is
  // outside the tensor or its dtype is not F32, F16 or BF16 (the message
  // names the file and the tensor). REQUIRES: t is one of tensors().
  absl::Status ReadF32(const SafetensorsTensor& t, uint64_t first,
                       uint64_t count, float* out) const;

 private:
  SafetensorsFile(std::string path, const uint8_t* data, uint64_t size);
  absl::Status ParseHeader();

  const std::string path_;
  const uint8_t* const data_;  // the whole file, mapped (null when empty)
  const uint64_t size_;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> by_name_;
};

// How a tensor of shape `dest` is made from file tensor `t`: dest is t, or
// t's transpose when `transpose` (both 2-D), except that dest's rows (its
// first dimension) beyond t's are zero and t's rows beyond dest's are left
// out; every other dimension agrees. This is how a model whose vocabulary
// is padded, or whose context is shorter, takes a published checkpoint's
// embeddings. INVALID_ARGUMENT, naming the file and the tensor, for shapes
// that do not fit so or a dtype ReadF32 does not read.
absl::Status CheckFits(const SafetensorsFile& file, const SafetensorsTensor& t,
                       bool transpose, const std::vector<int64_t>& dest);

// Writes elements [first, first + count) (row-major) of the tensor
// CheckFits describes to `out`. CheckFits's errors, and INVALID_ARGUMENT
// for a range outside `dest`.
absl::Status ReadFitted(const SafetensorsFile& file, const SafetensorsTensor& t,
                        bool transpose, const std::vector<int64_t>& dest,
                        uint64_t first, uint64_t count, float* out);

// An fp32 tensor to write: `data` holds the product of `shape` values,
// row-major, and must stay valid during the call.
struct SafetensorsView {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes `tensors` (dtype F32) and `metadata` to `path`, replacing it only
// once the whole file is written and synced (it is written beside it
// first). The header lists the tensors by name in sorted order, their bytes
// follow in the same order, and it is padded with spaces to a multiple of 8
// bytes, so the same tensors always give the same bytes. INVALID_ARGUMENT
// for an empty or repeated name, "__metadata__" as a name, or a negative
// dimension; INTERNAL for an I/O error.
absl::Status WriteSafetensors(
    const std::string& path, const std::map<std::string, std::string>& metadata,
    const std::vector<SafetensorsView>& tensors);

}  // namespace strata

#endif  // STRATA_FORMATS_SAFETENSORS_H_
