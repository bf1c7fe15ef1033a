// Signals into GPU memory, which the CPU must never store to (EFA's rules): the target keeps a
// shadow of each 64-bit word it updates, learns a word's value by one RDMA read from its own
// endpoint the first time, and makes each new value visible by an RDMA write from a registered
// host word to itself (the NIC writes GPU memory in PCIe order after the data it placed).
//
// Per word: one read or write in flight at a time (SRD does not order two writes to the same
// address); additions that come meanwhile gather in `pending` and go in the next write. A strong
// signal waits until nothing is in flight or pending for any word, so that it becomes visible
// after every signal applied before it (two writes to different words are unordered too).
// Words of windows registered with NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET keep their shadow once
// idle (nobody else writes them); others are forgotten, so that the next use reads the word
// again (the GPU may have reset it).
//
// The table is fixed-size (no allocation on the data path); when every entry is busy, an
// addition waits (add() says false) until one is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nnf::rma {

class SignalWords {
 public:
  // Posts the loopback operations (the group, device lock held). `index` names the entry and its
  // registered host word; false when the post failed (logged): the entry is dropped.
  class Io {
   public:
    virtual bool postRead(uint32_t index, uint32_t window, uint64_t offset) = 0;
    virtual bool postWrite(uint32_t index, uint32_t window, uint64_t offset, uint64_t value) = 0;

   protected:
    ~Io() = default;
  };

  enum class State : uint8_t {
    kFree,     // no word
    kReading,  // the word's value is being read into the host word
    kWriting,  // the shadow is being written; more may be pending
    kIdle,     // the shadow is the word's value (kept words only)
  };

  SignalWords(Io& io, uint32_t capacity);

  // Adds `delta` to the word at `offset` of GPU window `window`. False: not now (strong and not
  // quiet(), or no entry free); call again after a completion.
  bool add(uint32_t window, uint64_t offset, uint64_t delta, bool strong, bool keep);
  // The read of entry `index` completed with the word's `value` (or failed: `ok` false).
  void onRead(uint32_t index, uint64_t value, bool ok);
  void onWrite(uint32_t index, bool ok);
  // Nothing in flight and nothing pending: every addition so far is visible.
  bool quiet() const { return busy_ == 0; }
  // The window goes: its idle words are forgotten; busy ones once done.
  void forgetWindow(uint32_t window);
  uint32_t capacity() const { return static_cast<uint32_t>(words_.size()); }
  State state(uint32_t index) const { return words_[index].state; }
  // Operations the table has with the provider.
  uint32_t busy() const { return busy_; }

 private:
  struct Word {
    State state = State::kFree;
    bool keep = false;
    bool forget = false;  // its window went while it was busy
    uint32_t window = 0;
    uint64_t offset = 0;
    uint64_t shadow = 0;
    uint64_t pending = 0;
  };
  size_t bucketOf(uint32_t window, uint64_t offset) const;
  int32_t find(uint32_t window, uint64_t offset) const;
  int32_t insert(uint32_t window, uint64_t offset);
  void erase(uint32_t index);
  void setState(Word& word, State to);
  void write(uint32_t index);
  void settle(uint32_t index);

  Io& io_;
  std::vector<Word> words_;
  std::vector<int32_t> buckets_;  // open addressing, linear probing; -1 empty
  std::vector<uint32_t> free_;
  uint32_t busy_ = 0;  // entries reading or writing
};

}  // namespace nnf::rma
