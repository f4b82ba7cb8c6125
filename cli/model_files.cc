#include "cli/model_files.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "formats/safetensors.h"
#include "model/gpt_config_json.h"
#include "model/hf_gpt2.h"
#include "model/snapshot_loader.h"
#include "storage/files.h"

namespace strata {

namespace fs = std::filesystem;

namespace {
// model.json and config.json are a few hundred bytes.
constexpr size_t kMaxJsonBytes = size_t{1} << 20;
}  // namespace

std::optional<TokenizerFiles> FindTokenizerFiles(const std::string& dir) {
  const fs::path base = dir.empty() ? fs::path(".") : fs::path(dir);
  for (auto [encoder, merges] :
       {std::pair{"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}}) {
    TokenizerFiles f{(base / encoder).string(), (base / merges).string()};
    std::error_code ec;
    if (fs::is_regular_file(f.encoder, ec) && fs::is_regular_file(f.merges, ec))
      return f;
  }
  return std::nullopt;
}

absl::Status CopyTokenizerFiles(const TokenizerFiles& files,
                                const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (auto [from, to] : {std::pair{files.encoder, dir + "/vocab.json"},
                          {files.merges, dir + "/merges.txt"}}) {
    if (!ec && fs::equivalent(from, to, ec)) continue;
    ec.clear();
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot copy ", from, " to ", to, ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadTokenizerIn(
    const std::string& dir) {
  std::optional<TokenizerFiles> files = FindTokenizerFiles(dir);
  if (!files) return std::unique_ptr<Gpt2Tokenizer>();
  return Gpt2Tokenizer::Load(files->encoder, files->merges);
}

absl::StatusOr<std::unique_ptr<Gpt>> LoadRunModel(const std::string& dir,
                                                  int64_t* step) {
  STRATA_ASSIGN_OR_RETURN(std::string json,
                          ReadFile(dir + "/model.json", kMaxJsonBytes));
  STRATA_ASSIGN_OR_RETURN(GptConfig config, GptConfigFromJson(json));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(config));
  STRATA_ASSIGN_OR_RETURN(*step, LoadFromSnapshots(dir, *gpt));
  return gpt;
}

absl::StatusOr<GptConfig> HfModelConfig(const SafetensorsFile& file,
                                        int heads) {
  const std::string config_path =
      (fs::path(file.path()).parent_path() / "config.json").string();
  std::string config_json;
  if (fs::exists(config_path)) {
    STRATA_ASSIGN_OR_RETURN(config_json, ReadFile(config_path, kMaxJsonBytes));
  }
  STRATA_ASSIGN_OR_RETURN(GptConfig config, HfGpt2Config(file, config_json));
  if (heads > 0) config.heads = heads;
  if (config.heads == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no config.json beside ", file.path(),
                     " says how many heads it has: give --heads"));
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), " and its config.json make no model: ", s.message()));
  }
  return config;
}

absl::StatusOr<std::unique_ptr<Gpt>> LoadHfModel(const std::string& path,
                                                 int heads) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                          SafetensorsFile::Open(path));
  STRATA_ASSIGN_OR_RETURN(GptConfig config, HfModelConfig(*file, heads));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(config));
  STRATA_RETURN_IF_ERROR(LoadHfGpt2(*file, *gpt));
  return gpt;
}

}  // namespace strata
