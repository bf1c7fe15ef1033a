// The protocols' state machines are small classes, each with an enum class of named states, one
// function per event (on<Event>) that checks the state it comes in (checkEvent), and one
// transition function that checks the move against the machine's table of allowed transitions
// (checkTransition). The checks are NNF_ASSERTs: on in debug and sanitizer builds, free in
// release builds. docs/architecture.md draws each table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "log/assert.h"

namespace nnf::protocol {

// For each state of `State` (an enum class of at most 32 states counted from 0), the states it
// may move to.
template <typename State, size_t kStates>
class Transitions {
 public:
  static_assert(kStates <= 32, "a bit per state");
  constexpr Transitions(std::initializer_list<std::pair<State, State>> allowed) {
    for (const auto& edge : allowed) next_[index(edge.first)] |= 1u << index(edge.second);
  }
  constexpr bool allows(State from, State to) const {
    return ((next_[index(from)] >> index(to)) & 1u) != 0;
  }

 private:
  static constexpr size_t index(State state) { return static_cast<size_t>(state); }
  uint32_t next_[kStates] = {};
};

// The check every transition function makes. `stateName` is the machine's (found by argument
// lookup); `machine` names it in the message.
template <typename State, size_t kStates>
inline void checkTransition(const Transitions<State, kStates>& table, const char* machine,
                            State from, State to) {
  NNF_ASSERT(table.allows(from, to), "%s: no transition from %s to %s", machine, stateName(from),
             stateName(to));
}

// The states an event may come in, as a set for checkEvent.
template <typename State>
constexpr uint32_t anyOf(std::initializer_list<State> states) {
  uint32_t set = 0;
  for (State state : states) set |= 1u << static_cast<uint32_t>(state);
  return set;
}

// The check every event function makes: `event` may come in the states of `sources` only.
template <typename State>
inline void checkEvent(const char* machine, const char* event, State from, uint32_t sources) {
  NNF_ASSERT(((sources >> static_cast<uint32_t>(from)) & 1u) != 0, "%s: %s in state %s", machine,
             event, stateName(from));
}

}  // namespace nnf::protocol
