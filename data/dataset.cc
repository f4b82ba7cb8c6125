// TokenDataset: segments of tokens, their splits, and sampling windows.
#include "data/dataset.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/token_files.h"

namespace strata {
namespace {

uint64_t Mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Opens `paths` onto `files`, consecutive text files as one segment.
absl::Status OpenAll(const std::vector<std::string>& paths, int vocab,
                     std::vector<TokenFile>& files) {
  for (const std::string& path : paths) {
    absl::StatusOr<TokenFile> file = TokenFile::Open(path, vocab);
    if (!file.ok()) return file.status();
    if (!files.empty() && files.back().text() && file->text()) {
      files.back().Append(*file);
    } else {
      files.push_back(std::move(*file));
    }
  }
  return absl::OkStatus();
}

int64_t CountTokens(const std::vector<TokenFile>& files) {
  int64_t n = 0;
  for (const TokenFile& f : files) n += static_cast<int64_t>(f.tokens().size());
  return n;
}

}  // namespace

absl::StatusOr<std::vector<uint16_t>> LoadTokens(const std::string& path,
                                                 int vocab) {
  absl::StatusOr<std::vector<std::string>> paths = ListTokenFiles(path);
  if (!paths.ok()) return paths.status();
  std::vector<uint16_t> tokens;
  for (const std::string& p : *paths) {
    absl::StatusOr<TokenFile> file = TokenFile::Open(p, vocab);
    if (!file.ok()) return file.status();
    tokens.insert(tokens.end(), file->tokens().begin(), file->tokens().end());
  }
  return tokens;
}

int64_t PermuteIndex(int64_t index, int64_t n, uint64_t key) {
  // A balanced Feistel network on 2*half bits (>= log2 n) is a bijection of
  // [0, 4^half); walking the cycle until the value is below n restricts it
  // to a bijection of [0, n). The domain is < 4n, so walks are short.
  int half = 1;
  while ((int64_t{1} << (2 * half)) < n) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = static_cast<uint64_t>(index);
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = Mix64(right ^ Mix64(key + round)) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

TokenDataset::TokenDataset(std::vector<TokenFile> files,
                           const DatasetOptions& options)
    : files_(std::move(files)), options_(options) {}

TokenDataset::~TokenDataset() = default;

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Create(
    std::vector<uint16_t> tokens, const DatasetOptions& options) {
  std::vector<TokenFile> files;
  files.emplace_back("tokens", std::move(tokens), /*text=*/false);
  return Build(std::move(files), std::nullopt, options);
}

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(
    const std::string& path, int vocab, const DatasetOptions& options) {
  absl::StatusOr<DataFiles> found = FindDataFiles(path);
  if (!found.ok()) return found.status();
  std::vector<TokenFile> files, eval;
  absl::Status s = OpenAll(found->train, vocab, files);
  if (s.ok()) s = OpenAll(found->eval, vocab, eval);
  if (!s.ok()) return s;
  const int64_t train_tokens = CountTokens(files);
  for (TokenFile& f : eval) files.push_back(std::move(f));
  return Build(
      std::move(files),
      found->eval.empty() ? std::nullopt : std::optional<int64_t>(train_tokens),
      options);
}

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Build(
    std::vector<TokenFile> files, std::optional<int64_t> train_tokens,
    const DatasetOptions& options) {
  DatasetOptions o = options;
  if (o.stride == 0) o.stride = o.context;
  if (o.context < 1 || o.stride < 1) {
    return absl::InvalidArgumentError("context and stride must be positive");
  }
  if (!(o.eval_fraction >= 0 && o.eval_fraction < 1)) {
    return absl::InvalidArgumentError("eval_fraction must be in [0, 1)");
  }
  std::unique_ptr<TokenDataset> d(new TokenDataset(std::move(files), o));
  const int64_t n = d->total_tokens_ = CountTokens(d->files_);
  d->train_tokens_ =
      train_tokens.value_or(n - static_cast<int64_t>(n * o.eval_fraction));
  d->CutWindows(Split::kTrain, 0, d->train_tokens_);
  d->CutWindows(Split::kEval, d->train_tokens_, n);
  const int64_t window = int64_t{o.context} + 1;
  const bool need_eval = train_tokens.has_value() || o.eval_fraction > 0;
  if (d->windows_[0] > 0 && (d->windows_[1] > 0 || !need_eval)) return d;
  if (!train_tokens.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset of ", n, " tokens is too small for windows of ", window,
        " tokens in both splits (eval fraction ", o.eval_fraction,
        "; a window does not cross from one file into the next)"));
  }
  const bool train = d->windows_[0] == 0;
  return absl::InvalidArgumentError(absl::StrCat(
      train ? "the train files (" : "the validation shards (",
      train ? *train_tokens : n - *train_tokens, " tokens, the first ",
      train ? d->files_.front().path() : d->files_.back().path(),
      ") hold no window of ", window,
      " tokens (a window does not cross from one file into the next)"));
}

void TokenDataset::CutWindows(Split split, int64_t begin, int64_t end) {
  const int64_t window = int64_t{options_.context} + 1;
  std::vector<Piece>& pieces = pieces_[Index(split)];
  int64_t& windows = windows_[Index(split)];
  int64_t file_begin = 0;
  for (const TokenFile& f : files_) {
    const absl::Span<const uint16_t> t = f.tokens();
    const int64_t file_end = file_begin + static_cast<int64_t>(t.size());
    const int64_t lo = std::max(begin, file_begin);
    const int64_t hi = std::min(end, file_end);
    if (hi - lo >= window) {
      pieces.push_back({lo, t.data() + (lo - file_begin), windows});
      windows += (hi - lo - window) / options_.stride + 1;
    }
    file_begin = file_end;
  }
}

int64_t TokenDataset::num_tokens(Split split) const {
  return split == Split::kTrain ? train_tokens_ : total_tokens_ - train_tokens_;
}

int64_t TokenDataset::mapped_tokens() const {
  int64_t n = 0;
  for (const TokenFile& f : files_) {
    if (f.mapped()) n += static_cast<int64_t>(f.tokens().size());
  }
  return n;
}

int64_t ShuffledIndex(int64_t sample, int64_t n, uint64_t seed, Split split) {
  const uint64_t epoch = static_cast<uint64_t>(sample / n);
  const uint64_t key =
      Mix64(seed ^ Mix64(epoch * 2 + (split == Split::kEval ? 1 : 0)));
  return PermuteIndex(sample % n, n, key);
}

const TokenDataset::Piece& TokenDataset::Locate(Split split, uint64_t seed,
                                                int64_t sample,
                                                int64_t* offset) const {
  const int64_t w = ShuffledIndex(sample, num_windows(split), seed, split);
  // The last piece whose first window is at or before w.
  const std::vector<Piece>& pieces = pieces_[Index(split)];
  const auto next = std::upper_bound(
      pieces.begin(), pieces.end(), w,
      [](int64_t w, const Piece& p) { return w < p.first_window; });
  const Piece& piece = *(next - 1);
  *offset = (w - piece.first_window) * options_.stride;
  return piece;
}

int64_t TokenDataset::WindowStart(Split split, uint64_t seed,
                                  int64_t sample) const {
  int64_t offset = 0;
  return Locate(split, seed, sample, &offset).begin + offset;
}

void TokenDataset::Sample(Split split, uint64_t seed, int64_t sample,
                          int32_t* out) const {
  int64_t offset = 0;
  const uint16_t* w = Locate(split, seed, sample, &offset).data + offset;
  std::copy(w, w + options_.context + 1, out);
}

void TokenDataset::Batch(Split split, uint64_t seed, int64_t first_sample,
                         int B, int32_t* tokens, int32_t* targets) const {
  const int T = options_.context;
  for (int b = 0; b < B; ++b) {
    int64_t offset = 0;
    const uint16_t* w =
        Locate(split, seed, first_sample + b, &offset).data + offset;
    std::copy(w, w + T, tokens + int64_t{b} * T);
    std::copy(w + 1, w + T + 1, targets + int64_t{b} * T);
  }
}

}  // namespace strata
