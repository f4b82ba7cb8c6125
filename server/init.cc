#include "server/init.h"

#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/splitmix.h"
#include "common/status.h"
#include "formats/safetensors.h"

namespace strata {
namespace {

// A uniform double in (0, 1).
double Unit(uint64_t bits) {
  return ((bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// The file of a FILE init, opened (through `files`) and checked against the
// chunk's spec; `tensor` is set to its source tensor.
absl::StatusOr<const SafetensorsFile*> OpenSource(
    const v1::ChunkSpec& spec, InitFiles& files,
    const SafetensorsTensor** tensor) {
  const v1::InitSpec& init = spec.init();
  absl::StatusOr<const SafetensorsFile*> file = files.Get(init.file());
  if (absl::IsNotFound(file.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the initial weights of ", spec.tensor(), ": this server cannot read ",
        init.file(), " (", file.status().message(),
        "); the servers open it themselves, so it must be at that path on "
        "every server's host"));
  }
  if (!file.ok()) return file.status();
  if (init.file_bytes() != 0 && (*file)->file_bytes() != init.file_bytes()) {
    return absl::FailedPreconditionError(
        absl::StrCat(init.file(), " has ", (*file)->file_bytes(),
                     " bytes on this server but ", init.file_bytes(),
                     " on the worker that registered ", spec.tensor()));
  }
  *tensor = (*file)->Find(init.source());
  if (*tensor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(init.file(), " has no tensor '", init.source(), "' for ",
                     spec.tensor()));
  }
  const std::vector<int64_t> dest(spec.tensor_shape().begin(),
                                  spec.tensor_shape().end());
  STRATA_RETURN_IF_ERROR(CheckFits(**file, **tensor, init.transpose(), dest));
  return file;
}

}  // namespace

absl::StatusOr<const SafetensorsFile*> InitFiles::Get(const std::string& path) {
  auto it = files_.find(path);
  if (it != files_.end()) return it->second.get();
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                          SafetensorsFile::Open(path));
  return (files_[path] = std::move(file)).get();
}

absl::Status CheckChunkInit(const v1::ChunkSpec& spec, InitFiles* files) {
  if (spec.init().kind() != v1::InitSpec::FILE) return absl::OkStatus();
  InitFiles own;
  const SafetensorsTensor* tensor = nullptr;
  return OpenSource(spec, files != nullptr ? *files : own, &tensor).status();
}

absl::Status FillChunkInit(const v1::ChunkSpec& spec, float* w,
                           InitFiles* files) {
  if (spec.init().kind() != v1::InitSpec::FILE) {
    FillInit(spec.init(), spec.chunk_id(), w, spec.numel());
    return absl::OkStatus();
  }
  InitFiles own;
  const SafetensorsTensor* tensor = nullptr;
  STRATA_ASSIGN_OR_RETURN(
      const SafetensorsFile* file,
      OpenSource(spec, files != nullptr ? *files : own, &tensor));
  const std::vector<int64_t> dest(spec.tensor_shape().begin(),
                                  spec.tensor_shape().end());
  return ReadFitted(*file, *tensor, spec.init().transpose(), dest,
                    spec.offset(), spec.numel(), w);
}

void FillInit(const v1::InitSpec& init, uint64_t chunk_id, float* w, size_t n) {
  const uint64_t key = SplitMix(init.seed() ^ SplitMix(chunk_id));
  const float scale = init.scale();
  switch (init.kind()) {
    case v1::InitSpec::ONES:
      for (size_t i = 0; i < n; ++i) w[i] = 1.0f;
      return;
    case v1::InitSpec::CONSTANT:
      for (size_t i = 0; i < n; ++i) w[i] = scale;
      return;
    case v1::InitSpec::UNIFORM:
      for (size_t i = 0; i < n; ++i) {
        w[i] =
            static_cast<float>((2.0 * Unit(SplitMix(key + i)) - 1.0) * scale);
      }
      return;
    case v1::InitSpec::NORMAL:
      // Box-Muller, one normal per element (the second draw is discarded to
      // keep element i a function of i alone).
      for (size_t i = 0; i < n; ++i) {
        const double u1 = Unit(SplitMix(key + 2 * i));
        const double u2 = Unit(SplitMix(key + 2 * i + 1));
        w[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                                  std::cos(6.283185307179586 * u2) * scale);
      }
      return;
    default:
      for (size_t i = 0; i < n; ++i) w[i] = 0.0f;
      return;
  }
}

}  // namespace strata
