#include "rma/signal_words.h"

#include <cassert>

namespace nnf::rma {

SignalWords::SignalWords(Io& io, uint32_t capacity) : io_(io), words_(capacity) {
  size_t buckets = 1;
  while (buckets < 2 * size_t{capacity}) buckets <<= 1;
  buckets_.assign(buckets, -1);
  free_.reserve(capacity);
  for (uint32_t i = capacity; i > 0; --i) free_.push_back(i - 1);
}

size_t SignalWords::bucketOf(uint32_t window, uint64_t offset) const {
  uint64_t key = (uint64_t{window} << 40) ^ (offset >> 3);
  key *= 0x9e3779b97f4a7c15ull;
  return static_cast<size_t>(key >> 20) & (buckets_.size() - 1);
}

int32_t SignalWords::find(uint32_t window, uint64_t offset) const {
  for (size_t b = bucketOf(window, offset);; b = (b + 1) & (buckets_.size() - 1)) {
    int32_t index = buckets_[b];
    if (index < 0) return -1;
    const Word& word = words_[static_cast<size_t>(index)];
    if (word.window == window && word.offset == offset) return index;
  }
}

int32_t SignalWords::insert(uint32_t window, uint64_t offset) {
  if (free_.empty()) {
    // Forget an idle kept word: its next use reads it again, which is always right.
    for (uint32_t i = 0; i < words_.size() && free_.empty(); ++i) {
      if (words_[i].state == State::kIdle) erase(i);
    }
    if (free_.empty()) return -1;
  }
  uint32_t index = free_.back();
  free_.pop_back();
  Word& word = words_[index];
  word = Word{};
  word.window = window;
  word.offset = offset;
  size_t b = bucketOf(window, offset);
  while (buckets_[b] >= 0) b = (b + 1) & (buckets_.size() - 1);
  buckets_[b] = static_cast<int32_t>(index);
  return static_cast<int32_t>(index);
}

void SignalWords::erase(uint32_t index) {
  Word& word = words_[index];
  size_t mask = buckets_.size() - 1;
  size_t b = bucketOf(word.window, word.offset);
  while (buckets_[b] != static_cast<int32_t>(index)) b = (b + 1) & mask;
  // Backward-shift deletion keeps every probe sequence unbroken without tombstones.
  size_t hole = b;
  for (size_t next = (hole + 1) & mask; buckets_[next] >= 0; next = (next + 1) & mask) {
    const Word& moved = words_[static_cast<size_t>(buckets_[next])];
    size_t home = bucketOf(moved.window, moved.offset);
    // `moved` may fill the hole when its home does not lie cyclically in (hole, next].
    bool inRange = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next);
    if (!inRange) {
      buckets_[hole] = buckets_[next];
      hole = next;
    }
  }
  buckets_[hole] = -1;
  word.state = State::kFree;
  free_.push_back(index);
}

void SignalWords::setState(Word& word, State to) {
#ifndef NDEBUG
  bool allowed = (word.state == State::kFree && (to == State::kReading)) ||
                 (word.state == State::kReading && to == State::kWriting) ||
                 (word.state == State::kWriting && (to == State::kWriting || to == State::kIdle)) ||
                 (word.state == State::kIdle && to == State::kWriting);
  assert(allowed && "SignalWords: word transition out of order");
#endif
  bool wasBusy = word.state == State::kReading || word.state == State::kWriting;
  bool isBusy = to == State::kReading || to == State::kWriting;
  if (wasBusy && !isBusy) --busy_;
  if (!wasBusy && isBusy) ++busy_;
  word.state = to;
}

bool SignalWords::add(uint32_t window, uint64_t offset, uint64_t delta, bool strong, bool keep) {
  if (strong && !quiet()) return false;
  int32_t found = find(window, offset);
  if (found < 0) {
    found = insert(window, offset);
    if (found < 0) return false;
    uint32_t index = static_cast<uint32_t>(found);
    Word& word = words_[index];
    word.keep = keep;
    word.pending = delta;
    setState(word, State::kReading);
    if (!io_.postRead(index, window, offset)) {
      setState(word, State::kWriting);  // counted busy: leave through settle()
      settle(index);
      erase(index);
    }
    return true;
  }
  uint32_t index = static_cast<uint32_t>(found);
  Word& word = words_[index];
  word.pending += delta;
  if (word.state == State::kIdle) write(index);
  return true;
}

void SignalWords::write(uint32_t index) {
  Word& word = words_[index];
  word.shadow += word.pending;
  word.pending = 0;
  setState(word, State::kWriting);
  if (!io_.postWrite(index, word.window, word.offset, word.shadow)) {
    settle(index);
    erase(index);
  }
}

void SignalWords::settle(uint32_t index) {
  Word& word = words_[index];
  if (word.state == State::kReading || word.state == State::kWriting) --busy_;
  word.state = State::kIdle;
}

void SignalWords::onRead(uint32_t index, uint64_t value, bool ok) {
  Word& word = words_[index];
  assert(word.state == State::kReading);
  if (!ok || word.forget) {
    settle(index);
    erase(index);
    return;
  }
  word.shadow = value;
  write(index);
}

void SignalWords::onWrite(uint32_t index, bool ok) {
  Word& word = words_[index];
  assert(word.state == State::kWriting);
  if (!ok || word.forget) {
    settle(index);
    erase(index);
    return;
  }
  if (word.pending != 0) {
    write(index);
    return;
  }
  setState(word, State::kIdle);
  if (!word.keep) erase(index);
}

void SignalWords::forgetWindow(uint32_t window) {
  for (uint32_t i = 0; i < words_.size(); ++i) {
    Word& word = words_[i];
    if (word.state == State::kFree || word.window != window) continue;
    if (word.state == State::kIdle) {
      erase(i);
    } else {
      word.forget = true;
    }
  }
}

}  // namespace nnf::rma
