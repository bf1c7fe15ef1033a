#include "rma/engine.h"

#include "log/log.h"
#include "rma/group.h"
#include "rma/wire.h"

namespace nnf::rma {

bool Engine::allocateLinks(uint32_t count, Group* group, uint32_t* base) {
  if (links_.empty()) links_.resize(kMaxLinks);
  if (count == 0 || count >= kMaxLinks) return false;
  // First fit from the cursor, wrapping once.
  uint32_t start = cursor_;
  for (uint32_t scanned = 0; scanned < kMaxLinks;) {
    if (start + count > kMaxLinks) {
      scanned += kMaxLinks - start;
      start = 1;
      continue;
    }
    uint32_t free = 0;
    while (free < count && links_[start + free].group == nullptr) ++free;
    if (free == count) {
      for (uint32_t p = 0; p < count; ++p) links_[start + p] = {group, p};
      *base = start;
      cursor_ = start + count < kMaxLinks ? start + count : 1;
      return true;
    }
    scanned += free + 1;
    start += free + 1;
  }
  return false;
}

void Engine::releaseLinks(uint32_t base, uint32_t count) {
  for (uint32_t p = 0; p < count && base + p < links_.size(); ++p) links_[base + p] = {};
}

void Engine::onRemoteWrite(core::Device& device, size_t rail, uint64_t data, size_t length) {
  Immediate imm = decode(data);
  const LinkRef* ref = imm.link < links_.size() ? &links_[imm.link] : nullptr;
  if (ref == nullptr || ref->group == nullptr) {
    ++dropped_;
    if (imm.link != 0) NNF_TRACE("RMA: a write for link %u of no open group dropped", imm.link);
    return;
  }
  ref->group->onRemote(ref->peer, imm.kind, imm.field);
}

}  // namespace nnf::rma
