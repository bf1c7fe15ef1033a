// EFA learns what a peer supports from its handshake packet; until the first one from a peer
// has arrived, operations to it are queued, or answer -FI_EAGAIN (an inject, or once too many
// wait: efa_rdm_ep_enforce_handshake_for_txe), and message protocols that need the peer's
// capabilities wait the same way. The stand-in cannot see the base's traffic, so it answers
// -FI_EAGAIN to the first NNF_EFA_RULES_HANDSHAKE_EAGAIN posts (default 2) of an endpoint to each
// new destination, or until a message from that peer has been received on the endpoint's CQ
// (known only where the caller asked for FI_SOURCE). A post to the endpoint's own address needs
// no handshake, as on EFA.
#include "efa_rules.h"

namespace efa_rules {

bool awaitingHandshake(Ep* ep, fi_addr_t dest) {
  const int limit = ep->domain->handshakeEagain;
  // With no -FI_EAGAIN to give (limit 0) the first posts to each peer are still counted: the
  // evidence (efa_rules.h) then shows the rule off.
  if (dest == FI_ADDR_UNSPEC || dest == FI_ADDR_NOTAVAIL) return false;
  {
    std::lock_guard<std::mutex> guard(ep->peersMutex);
    auto found = ep->handshakes.find(dest);
    if (found != ep->handshakes.end() && found->second == kHandshakeDone) return false;
  }
  bool heard = false;
  if (ep->rxCq != nullptr) {
    std::lock_guard<std::mutex> guard(ep->rxCq->mutex);
    heard = ep->rxCq->heard.count(dest) != 0;
  }
  // Outside the lock: the AV lookup may take the base's.
  bool self = !heard && isOwnAddress(ep, dest);
  std::lock_guard<std::mutex> guard(ep->peersMutex);
  int& tries = ep->handshakes[dest];
  if (tries == kHandshakeDone) return false;
  if (tries == 0 && !heard && !self) note(Evidence::kFirstPostsToPeers);
  if (heard || self || tries >= limit) {
    tries = kHandshakeDone;
    return false;
  }
  ++tries;
  ++ep->handshakeEagains;
  note(Evidence::kHandshakeEagains);
  return true;
}

}  // namespace efa_rules
