// The files a --data path names, and which of them are validation shards.
#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/token_files.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// What a --data path is.
enum class PathKind { kFile, kFolder, kPattern };

PathKind KindOf(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return PathKind::kFolder;
  // A missing path without glob characters is a file that opening reports.
  if (fs::exists(st) || path.find_first_of("*?[") == std::string::npos)
    return PathKind::kFile;
  return PathKind::kPattern;
}

// Appends the regular files under folder `dir`, recursively, to `out`.
absl::Status ListFolder(const std::string& dir, std::vector<std::string>& out) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code type_error;  // a file gone meanwhile is not listed
    if (it->is_regular_file(type_error)) out.push_back(it->path().string());
  }
  if (ec) {
    return absl::ErrnoToStatus(ec.value(), absl::StrCat("listing ", dir));
  }
  return absl::OkStatus();
}

// The matches of glob(3) `pattern`, sorted; none is not an error.
absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) {
  glob_t g{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) out.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    return absl::ResourceExhaustedError(
        absl::StrCat("glob(3) failed (", rc, ") on ", pattern));
  }
  return out;
}

// The files a pattern's matches name: files, and folders' files.
absl::StatusOr<std::vector<std::string>> ListPattern(
    const std::string& pattern) {
  absl::StatusOr<std::vector<std::string>> matches = Glob(pattern);
  if (!matches.ok()) return matches.status();
  if (matches->empty()) {
    return absl::NotFoundError(
        absl::StrCat("no file matches the pattern ", pattern));
  }
  std::vector<std::string> files;
  for (const std::string& m : *matches) {
    std::error_code ec;
    if (!fs::is_directory(m, ec)) {
      files.push_back(m);  // opening reports one that is gone or odd
    } else if (absl::Status s = ListFolder(m, files); !s.ok()) {
      return s;
    }
  }
  return files;
}

// `s` with glob(3)'s special characters escaped.
std::string GlobEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

bool IsWordEdge(const std::string& name, size_t i) {
  return i >= name.size() || name[i] == '_' || name[i] == '-' || name[i] == '.';
}

// Where the last "train" word of `name` starts, or npos.
size_t FindTrainWord(const std::string& name) {
  for (size_t pos = name.rfind("train"); pos != std::string::npos;
       pos = pos == 0 ? std::string::npos : name.rfind("train", pos - 1)) {
    if ((pos == 0 || IsWordEdge(name, pos - 1)) && pos + 5 < name.size() &&
        IsWordEdge(name, pos + 5)) {
      return pos;
    }
  }
  return std::string::npos;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListTokenFiles(
    const std::string& path) {
  std::vector<std::string> files;
  switch (KindOf(path)) {
    case PathKind::kFile:
      return std::vector<std::string>{path};
    case PathKind::kFolder:
      if (absl::Status s = ListFolder(path, files); !s.ok()) return s;
      break;
    case PathKind::kPattern: {
      absl::StatusOr<std::vector<std::string>> f = ListPattern(path);
      if (!f.ok()) return f.status();
      files = std::move(*f);
      break;
    }
  }
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("no regular file under ", path));
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

bool IsValidationShard(const std::string& file) {
  const std::string name = fs::path(file).filename().string();
  if (!absl::EndsWith(name, ".bin")) return false;
  const absl::string_view stem =
      absl::string_view(name).substr(0, name.size() - 4);
  return stem == "val" || absl::EndsWith(stem, "_val") ||
         absl::StrContains(name, "_val_");
}

std::string ValidationPatternFor(const std::string& path, bool literal) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  if (!absl::EndsWith(name, ".bin")) return "";
  const size_t pos = FindTrainWord(name);
  if (pos == std::string::npos) return "";
  const std::string after = name.substr(pos + 5);
  const auto quote = [literal](absl::string_view s) {
    return literal ? GlobEscape(s) : std::string(s);
  };
  // Shard numbers differ between splits (fineweb_val_000000.bin beside
  // fineweb_train_000001.bin): what follows "train_" matches anything.
  const std::string sibling =
      absl::StrCat(quote(name.substr(0, pos)), "val",
                   after[0] == '_' ? "_*.bin" : quote(after));
  const std::string dir = p.parent_path().string();
  return dir.empty() ? sibling : absl::StrCat(quote(dir), "/", sibling);
}

absl::StatusOr<DataFiles> FindDataFiles(const std::string& path) {
  const PathKind kind = KindOf(path);
  absl::StatusOr<std::vector<std::string>> files = ListTokenFiles(path);
  if (!files.ok()) return files.status();
  DataFiles out;
  for (const std::string& f : *files) {
    const bool eval = kind != PathKind::kFile && IsValidationShard(f);
    (eval ? out.eval : out.train).push_back(f);
  }
  if (out.train.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": its ", out.eval.size(),
                     " file(s) are all validation shards (val.bin, *_val.bin, "
                     "*_val_*.bin); name the train shards too"));
  }
  const std::string pattern =
      kind == PathKind::kFolder || !out.eval.empty()
          ? ""
          : ValidationPatternFor(path, kind == PathKind::kFile);
  if (pattern.empty()) return out;
  absl::StatusOr<std::vector<std::string>> siblings = Glob(pattern);
  if (!siblings.ok()) return siblings.status();
  for (const std::string& s : *siblings) {
    std::error_code ec;
    if (!fs::is_directory(s, ec)) out.eval.push_back(s);
  }
  return out;
}

}  // namespace strata
