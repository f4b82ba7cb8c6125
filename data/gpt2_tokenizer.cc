// Gpt2Tokenizer's encoding and decoding (loading: gpt2_tokenizer_load.cc).
#include "data/gpt2_tokenizer.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/gpt2_pretokenizer.h"

namespace strata {
namespace {

// Pre-tokens longer than this are encoded each time, not cached: they
// rarely repeat and would fill the cache.
constexpr size_t kMaxCachedPiece = 256;
// The cache is emptied when it holds this many pre-tokens (some tens of
// MiB; a few GB of English text has a few million distinct ones).
constexpr size_t kMaxCachedPieces = size_t{1} << 19;
// And at most about this many bytes of them.
constexpr size_t kMaxCacheBytes = size_t{48} << 20;

// One thread's ids of the pre-tokens it has encoded with one tokenizer:
// piece -> [offset, offset + count) in `ids`.
struct PieceCache {
  uint64_t owner = 0;  // the tokenizer's serial
  absl::flat_hash_map<std::string, std::pair<uint32_t, uint32_t>> spans;
  std::vector<int32_t> ids;
  size_t bytes = 0;  // about what the entries take, keys and table included

  void Reset(uint64_t serial) {
    owner = serial;
    spans.clear();
    ids.clear();
    bytes = 0;
  }
};

// Per thread, so that Encode takes no lock and threads never wait on one
// another; a thread encodes with one tokenizer at a time in practice.
thread_local PieceCache t_cache;

// A pair of adjacent symbols that a merge applies to: the symbol at `pos`
// with id `left`, followed by a symbol with id `right`.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t left;
  int32_t right;

  // The heap's order: lowest rank first, then leftmost.
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

// A symbol of the word being merged, in a list linked by position; a merge
// keeps the left symbol's position and unlinks the right one (id -1).
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;  // -1 at the end
};

}  // namespace

// encoder.py's bpe(): while some adjacent pair has a merge, take the pair of
// the lowest rank and merge all its occurrences left to right, then look
// again. Done with a heap of candidate pairs ordered by (rank, position), so
// a long pre-token costs O(n log n), not O(n^2): one pass is the run of
// pops of one rank. Pairs that a pass makes wait in `made` until the pass
// ends, as in encoder.py, where they join only the next pass's choice.
void Gpt2Tokenizer::EncodePiece(absl::string_view piece,
                                std::vector<int32_t>* out) const {
  const int32_t n = static_cast<int32_t>(piece.size());
  // Scratch reused by the thread's next pieces (cache misses are frequent
  // at first, and an allocation costs as much as a short piece's merges).
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap;
  thread_local std::vector<Candidate> made;
  sym.resize(n);
  heap.clear();
  made.clear();
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = {byte_ids_[static_cast<unsigned char>(piece[i])], i - 1,
              i + 1 < n ? i + 1 : -1};
  }
  auto consider = [&](int32_t pos, std::vector<Candidate>& into) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(PairKey(sym[pos].id, sym[next].id));
    if (it == merges_.end()) return;
    into.push_back({it->second.rank, pos, sym[pos].id, sym[next].id});
    std::push_heap(into.begin(), into.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, heap);
  int32_t pass_rank = -1;
  while (true) {
    if (heap.empty() || heap.front().rank != pass_rank) {
      for (const Candidate& c : made) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
      made.clear();
      if (heap.empty()) break;
      pass_rank = heap.front().rank;
    }
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = sym[c.pos];
    // Stale: the pair changed since (ids only ever grow, so no pair comes
    // back once gone).
    if (left.id != c.left || left.next < 0 || sym[left.next].id != c.right) {
      continue;
    }
    Symbol& right = sym[left.next];
    left.id = merges_.find(PairKey(c.left, c.right))->second.result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = c.pos;
    if (left.prev >= 0) consider(left.prev, made);
    consider(c.pos, made);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = sym[i].next) {
    out->push_back(sym[i].id);
  }
}

void Gpt2Tokenizer::Encode(absl::string_view text,
                           std::vector<int32_t>* out) const {
  PieceCache& cache = t_cache;
  if (cache.owner != serial_) cache.Reset(serial_);
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = Gpt2PretokenEnd(text, pos);
    const absl::string_view piece = text.substr(pos, end - pos);
    pos = end;
    if (piece.size() > kMaxCachedPiece) {
      EncodePiece(piece, out);
      continue;
    }
    if (const auto it = cache.spans.find(piece); it != cache.spans.end()) {
      const auto [offset, count] = it->second;
      out->insert(out->end(), cache.ids.begin() + offset,
                  cache.ids.begin() + offset + count);
      continue;
    }
    const size_t first = out->size();
    EncodePiece(piece, out);
    if (cache.spans.size() >= kMaxCachedPieces ||
        cache.bytes >= kMaxCacheBytes) {
      cache.Reset(serial_);
    }
    // The key's bytes, its ids, and the hash table's slot with its string.
    cache.bytes += piece.size() + 4 * (out->size() - first) + 48;
    const auto offset = static_cast<uint32_t>(cache.ids.size());
    cache.ids.insert(cache.ids.end(), out->begin() + first, out->end());
    cache.spans.emplace(
        piece,
        std::make_pair(offset, static_cast<uint32_t>(out->size() - first)));
  }
}

absl::StatusOr<std::string> Gpt2Tokenizer::Decode(
    absl::Span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", ids[i], " at position ", i,
                       " is not in the vocabulary (", vocab_size(), " ids)"));
    }
    text += tokens_[ids[i]];
  }
  return text;
}

}  // namespace strata
