// The RMA layer's wire (src/rma/wire.h) and its GPU signal words (src/rma/signal_words.h):
// immediates round-trip and always carry the mark the device routes by, handles are refused when
// cut or foreign, and the signal words' shadow protocol, over a fake NIC completing its reads
// and writes in random order, leaves every word at the sum of what was added, with never two
// accesses to one word in flight and strong additions only when nothing else is.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/remote_writes.h"
#include "core/wire.h"
#include "rma/signal_words.h"
#include "rma/wire.h"

namespace nnf::rma {
namespace {

TEST(RmaWire, ImmediatesRoundTripAndCarryTheRmaMark) {
  for (ImmKind kind : {ImmKind::kPlain, ImmKind::kSignaled, ImmKind::kEntry, ImmKind::kCredit}) {
    for (uint32_t link : {0u, 1u, 12345u, kMaxLinks - 1}) {
      for (uint32_t field : {0u, 1u, 63u, 64u, 255u}) {
        uint64_t data = encode(kind, link, field);
        EXPECT_TRUE(core::isRmaImmediate(data));
        EXPECT_LT(data, uint64_t{1} << 32) << "EFA carries 32 bits";
        Immediate imm = decode(data);
        EXPECT_EQ(imm.kind, kind);
        EXPECT_EQ(imm.link, link);
        EXPECT_EQ(imm.field, field);
      }
    }
  }
  // The rdma protocol's immediates never look like ours: data (bit 31 clear) and its controls
  // (kinds 0 to 3 in bits 4..0).
  EXPECT_FALSE(core::isRmaImmediate(0x7fffffffu));
  for (uint32_t control = 0; control < 4; ++control) {
    EXPECT_FALSE(core::isRmaImmediate((1u << 31) | (0x3ffffu << 13) | control));
  }
  // shm and tcp carry a length in the upper 32 bits: the mark looks at the lower ones only.
  EXPECT_TRUE(core::isRmaImmediate((uint64_t{4096} << 32) | encode(ImmKind::kPlain, 7, 0)));
}

TEST(RmaWire, ListenHandlesAreCheckedWholeAndPerProvider) {
  uint8_t address[32];
  for (size_t i = 0; i < sizeof(address); ++i) address[i] = static_cast<uint8_t>(i * 7);
  ListenHandle handle = makeListenHandle(42, 0x1234567890abcdefull, "efa", address, 32);
  ListenHandle out;
  std::string reason;
  ASSERT_TRUE(decodeListenHandle(&handle, "efa", &out, &reason)) << reason;
  EXPECT_EQ(out.listenerId, 42u);
  EXPECT_EQ(out.nonce, 0x1234567890abcdefull);
  EXPECT_FALSE(decodeListenHandle(&handle, "tcp", &out, &reason));
  EXPECT_NE(reason.find("another provider"), std::string::npos) << reason;
  ListenHandle damaged = handle;
  damaged.address[3] ^= 1;
  EXPECT_FALSE(decodeListenHandle(&damaged, "efa", &out, &reason));
  // A net listen handle is not an RMA one.
  core::wire::ListenHandle net = core::wire::makeListenHandle(42, "efa", address, 32);
  EXPECT_FALSE(decodeListenHandle(&net, "efa", &out, &reason));
}

TEST(RmaWire, MessagesAreRefusedWhenCutOrForeign) {
  JoinMessage join{};
  join.magic = JoinMessage::kMagic;
  join.version = kVersion;
  join.kind = static_cast<uint32_t>(MessageKind::kJoin);
  join.rails = 1;
  join.nranks = 4;
  join.rank = 3;
  const auto* bytes = reinterpret_cast<const uint8_t*>(&join);
  JoinMessage out;
  std::string reason;
  MessageKind kind;
  ASSERT_TRUE(messageKind(bytes, sizeof(join), &kind));
  EXPECT_EQ(kind, MessageKind::kJoin);
  EXPECT_TRUE(decodeJoin(bytes, sizeof(join), &out, &reason)) << reason;
  EXPECT_FALSE(decodeJoin(bytes, sizeof(join) - 1, &out, &reason));
  join.rank = 4;
  EXPECT_FALSE(decodeJoin(bytes, sizeof(join), &out, &reason)) << "rank 4 of 4";
  join.rank = 0;
  join.rails = 2;  // a second rail without its address length
  EXPECT_FALSE(decodeJoin(bytes, sizeof(join), &out, &reason));
  WindowMessage window{};
  window.magic = JoinMessage::kMagic;  // a join's magic on a window record
  window.version = kVersion;
  WindowMessage record;
  EXPECT_FALSE(decodeWindow(reinterpret_cast<const uint8_t*>(&window), sizeof(window), &record,
                            &reason));
}

// GPU memory and a NIC that completes loopback reads and writes in random order.
class FakeNic : public SignalWords::Io {
 public:
  explicit FakeNic(uint32_t seed) : random_(seed) {}

  bool postRead(uint32_t index, uint32_t window, uint64_t offset) override {
    return post({true, index, window, offset, 0});
  }
  bool postWrite(uint32_t index, uint32_t window, uint64_t offset, uint64_t value) override {
    return post({false, index, window, offset, value});
  }
  // Completes one access at random; false when none is in flight.
  bool completeOne(SignalWords& words) {
    if (inFlight_.empty()) return false;
    size_t pick = random_() % inFlight_.size();
    Access access = inFlight_[pick];
    inFlight_[pick] = inFlight_.back();
    inFlight_.pop_back();
    busy_.erase({access.window, access.offset});
    uint64_t& word = memory_[{access.window, access.offset}];
    if (access.read) {
      words.onRead(access.index, word, true);
    } else {
      word = access.value;
      words.onWrite(access.index, true);
    }
    return true;
  }
  uint64_t value(uint32_t window, uint64_t offset) { return memory_[{window, offset}]; }
  size_t inFlight() const { return inFlight_.size(); }

 private:
  struct Access {
    bool read;
    uint32_t index;
    uint32_t window;
    uint64_t offset;
    uint64_t value;
  };
  bool post(const Access& access) {
    // Two accesses to one word in flight at once could land in either order.
    EXPECT_TRUE(busy_.insert({access.window, access.offset}).second)
        << "a second access to window " << access.window << " offset " << access.offset;
    inFlight_.push_back(access);
    return true;
  }
  std::mt19937 random_;
  std::vector<Access> inFlight_;
  std::set<std::pair<uint32_t, uint64_t>> busy_;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> memory_;
};

TEST(RmaSignalWords, EveryWordEndsAtTheSumOfItsAdditions) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    FakeNic nic(seed);
    // Fewer entries than words in use: idle ones are forgotten and read again.
    SignalWords words(nic, 16);
    std::mt19937 random(seed * 77);
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> expected;
    int refusedStrong = 0;
    for (int i = 0; i < 50000; ++i) {
      uint32_t window = random() % 3;
      uint64_t offset = 8 * (random() % 12);
      uint64_t delta = 1 + random() % 5;
      bool strong = random() % 4 == 0;
      bool keep = window == 0;  // window 0: NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET
      bool quiet = words.quiet();
      if (words.add(window, offset, delta, strong, keep)) {
        EXPECT_TRUE(!strong || quiet) << "a strong addition while others were in flight";
        expected[{window, offset}] += delta;
      } else {
        refusedStrong += strong ? 1 : 0;
      }
      int completions = static_cast<int>(random() % 3);
      for (int c = 0; c < completions; ++c) nic.completeOne(words);
    }
    while (nic.completeOne(words)) {
    }
    EXPECT_TRUE(words.quiet());
    EXPECT_GT(refusedStrong, 0) << "the model never held a strong addition back";
    for (const auto& [word, sum] : expected) {
      EXPECT_EQ(nic.value(word.first, word.second), sum)
          << "window " << word.first << " offset " << word.second;
    }
  }
}

TEST(RmaSignalWords, AForgottenWindowsWordsAreDroppedOnceIdle) {
  FakeNic nic(5);
  SignalWords words(nic, 4);
  ASSERT_TRUE(words.add(1, 0, 1, false, true));  // a read goes out
  words.forgetWindow(1);
  while (nic.completeOne(words)) {
  }
  EXPECT_TRUE(words.quiet());
  for (uint32_t i = 0; i < words.capacity(); ++i) {
    EXPECT_EQ(words.state(i), SignalWords::State::kFree) << "entry " << i;
  }
}

}  // namespace
}  // namespace nnf::rma
