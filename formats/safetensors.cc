#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using json = nlohmann::json;

// Bytes per element of each dtype the format names.
int DtypeBytes(const std::string& dtype) {
  static const std::map<std::string, int> kBytes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kBytes.find(dtype);
  return it == kBytes.end() ? 0 : it->second;
}

// IEEE half to float, subnormals and infinities included.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    exp = 113;
    while ((man & 0x400) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// Parses one tensor entry of the header into `t` (begin relative to the
// data section).
absl::Status ParseTensor(const std::string& path, const std::string& name,
                         const json& entry, SafetensorsTensor& t) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!entry.is_object() || !entry.contains("dtype") ||
      !entry.contains("shape") || !entry.contains("data_offsets")) {
    return Bad(path, where + " needs dtype, shape and data_offsets");
  }
  const json& dtype = entry["dtype"];
  const json& shape = entry["shape"];
  const json& offsets = entry["data_offsets"];
  if (!dtype.is_string() || DtypeBytes(dtype.get<std::string>()) == 0)
    return Bad(path, where + " has an unknown dtype " + dtype.dump());
  if (!shape.is_array()) return Bad(path, where + ": shape is not an array");
  if (!offsets.is_array() || offsets.size() != 2 ||
      !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    return Bad(path, where + ": data_offsets is not [begin, end]");
  }
  t.name = name;
  t.dtype = dtype.get<std::string>();
  uint64_t numel = 1;
  for (const json& d : shape) {
    if (!d.is_number_unsigned())
      return Bad(path, where + ": a dimension is not a non-negative integer");
    const uint64_t v = d.get<uint64_t>();
    if (v > INT64_MAX || __builtin_mul_overflow(numel, v, &numel))
      return Bad(path, where + ": its shape overflows");
    t.shape.push_back(static_cast<int64_t>(v));
  }
  const uint64_t begin = offsets[0].get<uint64_t>();
  const uint64_t end = offsets[1].get<uint64_t>();
  uint64_t bytes = 0;
  if (end < begin ||
      __builtin_mul_overflow(numel, uint64_t(DtypeBytes(t.dtype)), &bytes) ||
      bytes != end - begin) {
    return Bad(path, absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                                  ") do not hold its ", numel, " ", t.dtype,
                                  " values"));
  }
  t.begin = begin;
  t.bytes = bytes;
  return absl::OkStatus();
}

}  // namespace

uint64_t SafetensorsTensor::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

SafetensorsFile::SafetensorsFile(std::string path, const uint8_t* data,
                                 uint64_t size)
    : path_(std::move(path)), data_(data), size_(size) {}

SafetensorsFile::~SafetensorsFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  // Non-blocking: a FIFO at the path must not hang the open (it is then
  // refused as not a regular file).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return absl::NotFoundError(absl::StrCat(path, " is not a regular file"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      return absl::InternalError(
          absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
    }
    data = static_cast<const uint8_t*>(m);
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(path, data, size));
  if (absl::Status s = file->ParseHeader(); !s.ok()) return s;
  return file;
}

absl::Status SafetensorsFile::ParseHeader() {
  if (size_ < 8) return Bad(path_, "shorter than the 8-byte header length");
  uint64_t n;
  std::memcpy(&n, data_, 8);
  if (n > kMaxSafetensorsHeader) {
    return Bad(path_, absl::StrCat("header length ", n, " is over the limit ",
                                   kMaxSafetensorsHeader));
  }
  if (n > size_ - 8) {
    return Bad(path_, absl::StrCat("header length ", n, " runs past the end (",
                                   size_, " bytes): truncated file?"));
  }
  const json header = json::parse(data_ + 8, data_ + 8 + n, nullptr,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded()) return Bad(path_, "the header is not JSON");
  if (!header.is_object()) return Bad(path_, "the header is not an object");
  const uint64_t data_begin = 8 + n, data_bytes = size_ - data_begin;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return Bad(path_, "__metadata__ is not a map");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          return Bad(path_, "__metadata__ '" + k + "' is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    SafetensorsTensor t;
    if (absl::Status s = ParseTensor(path_, key, value, t); !s.ok()) return s;
    t.begin += data_begin;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin < b.begin ||
                     (a.begin == b.begin && a.bytes < b.bytes);
            });
  uint64_t at = data_begin;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const SafetensorsTensor& t = tensors_[i];
    if (t.begin != at) {
      return Bad(path_, absl::StrCat("tensor '", t.name, "' starts at byte ",
                                     t.begin - data_begin, " of the data, not ",
                                     at - data_begin,
                                     " (tensors overlap or leave a gap)"));
    }
    at += t.bytes;
    by_name_[t.name] = i;
  }
  if (at != size_) {
    return Bad(path_,
               absl::StrCat("the tensors hold ", at - data_begin,
                            " bytes but the data is ", data_bytes, " bytes"));
  }
  return absl::OkStatus();
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

absl::Status SafetensorsFile::ReadF32(const SafetensorsTensor& t,
                                      uint64_t first, uint64_t count,
                                      float* out) const {
  const uint64_t n = t.numel();
  if (first > n || count > n - first) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": elements [", first, ", ", first + count,
                     ") are outside tensor '", t.name, "' of ", n));
  }
  const uint8_t* p = data_ + t.begin;
  if (t.dtype == "F32") {
    std::memcpy(out, p + first * 4, count * 4);
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    const bool bf16 = t.dtype == "BF16";
    for (uint64_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, p + (first + i) * 2, 2);
      out[i] = bf16 ? Bf16ToFloat(h) : HalfToFloat(h);
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", t.name, "' is ", t.dtype,
                     "; only F32, F16 and BF16 tensors are read"));
  }
  return absl::OkStatus();
}

namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + ")";
}

}  // namespace

namespace {

// ReadFitted's transposed case: dest (R, K) is t (K, R) transposed. The
// destination rows the range touches are a band of t's columns, read a
// source row's slice at a time (contiguous), then scattered.
absl::Status ReadTransposed(const SafetensorsFile& file,
                            const SafetensorsTensor& t,
                            const std::vector<int64_t>& dest, uint64_t first,
                            uint64_t count, float* out) {
  if (count == 0) return absl::OkStatus();
  const uint64_t rows = static_cast<uint64_t>(dest[0]);
  const uint64_t cols = static_cast<uint64_t>(dest[1]);
  const uint64_t r0 = first / cols, r1 = (first + count - 1) / cols + 1;
  std::vector<float> band(r1 - r0);  // t[k][r0..r1)
  for (uint64_t k = 0; k < cols; ++k) {
    if (absl::Status s = file.ReadF32(t, k * rows + r0, r1 - r0, band.data());
        !s.ok()) {
      return s;
    }
    for (uint64_t r = r0; r < r1; ++r) {
      const uint64_t i = r * cols + k;  // dest's element (r, k)
      if (i >= first && i < first + count) out[i - first] = band[r - r0];
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFits(const SafetensorsFile& file, const SafetensorsTensor& t,
                       bool transpose, const std::vector<int64_t>& dest) {
  if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": tensor '", t.name, "' is ", t.dtype,
                     "; only F32, F16 and BF16 tensors are read"));
  }
  bool fits = t.shape.size() == dest.size() && !dest.empty();
  if (fits && transpose) {
    fits = dest.size() == 2 && t.shape[0] == dest[1] && t.shape[1] == dest[0];
  } else if (fits) {
    fits = std::equal(dest.begin() + 1, dest.end(), t.shape.begin() + 1);
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": tensor '", t.name, "' has shape ", ShapeText(t.shape),
        ", which does not fit ", ShapeText(dest),
        transpose ? " transposed" : "",
        transpose ? "" : " (only the first dimension may differ)"));
  }
  return absl::OkStatus();
}

absl::Status ReadFitted(const SafetensorsFile& file, const SafetensorsTensor& t,
                        bool transpose, const std::vector<int64_t>& dest,
                        uint64_t first, uint64_t count, float* out) {
  if (absl::Status s = CheckFits(file, t, transpose, dest); !s.ok()) return s;
  uint64_t numel = 1;
  for (int64_t d : dest) numel *= static_cast<uint64_t>(d);
  if (first > numel || count > numel - first) {
    return absl::InvalidArgumentError(
        absl::StrCat("elements [", first, ", ", first + count,
                     ") are outside a tensor of ", numel));
  }
  if (count == 0) return absl::OkStatus();  // numel may be 0
  if (transpose) return ReadTransposed(file, t, dest, first, count, out);
  const uint64_t row = numel / static_cast<uint64_t>(dest[0]);
  // Row by row: the source's rows as they are, zeros past its last.
  const uint64_t source = t.numel();
  uint64_t i = first, end = first + count;
  while (i < end) {
    const uint64_t n = std::min(end, (i / row + 1) * row) - i;
    if (i < source) {
      if (absl::Status s = file.ReadF32(t, i, n, out + (i - first)); !s.ok())
        return s;
    } else {
      std::fill(out + (i - first), out + (i - first) + n, 0.0f);
    }
    i += n;
  }
  return absl::OkStatus();
}

namespace {

// The header of WriteSafetensors: sorted names (json objects sort keys),
// back-to-back offsets, padded with spaces to a multiple of 8.
absl::StatusOr<std::string> EncodeHeader(
    const std::map<std::string, std::string>& metadata,
    const std::vector<const SafetensorsView*>& sorted) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const SafetensorsView* v : sorted) {
    uint64_t numel = 1;
    for (int64_t d : v->shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", v->name, "' has a negative dimension"));
      }
      numel *= static_cast<uint64_t>(d);
    }
    header[v->name] = {{"dtype", "F32"},
                       {"shape", v->shape},
                       {"data_offsets", {at, at + numel * 4}}};
    at += numel * 4;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

absl::Status WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::InternalError(std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSafetensors(
    const std::string& path, const std::map<std::string, std::string>& metadata,
    const std::vector<SafetensorsView>& tensors) {
  std::vector<const SafetensorsView*> sorted;
  std::set<std::string> names;
  for (const SafetensorsView& v : tensors) {
    if (v.name.empty() || v.name == "__metadata__" ||
        !names.insert(v.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write a tensor named '", v.name,
                       "' (empty, reserved or repeated)"));
    }
    sorted.push_back(&v);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](auto* a, auto* b) { return a->name < b->name; });
  absl::StatusOr<std::string> header = EncodeHeader(metadata, sorted);
  if (!header.ok()) return header.status();
  const std::string temp = absl::StrCat(path, ".tmp-", getpid());
  const int fd =
      open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", temp, ": ", std::strerror(errno)));
  }
  absl::Status s;
  {
    absl::Cleanup close_fd = [fd] { close(fd); };
    const uint64_t n = header->size();
    s = WriteAll(fd, &n, 8);
    if (s.ok()) s = WriteAll(fd, header->data(), header->size());
    for (const SafetensorsView* v : sorted) {
      uint64_t numel = 1;
      for (int64_t d : v->shape) numel *= static_cast<uint64_t>(d);
      if (s.ok() && numel > 0) s = WriteAll(fd, v->data, numel * 4);
    }
    if (s.ok() && fsync(fd) != 0) s = absl::InternalError(strerror(errno));
  }
  if (s.ok() && rename(temp.c_str(), path.c_str()) != 0)
    s = absl::InternalError(std::strerror(errno));
  if (!s.ok()) {
    unlink(temp.c_str());
    return absl::InternalError(
        absl::StrCat("writing ", path, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace strata
