#include "topology/pci_address.h"

#include <cctype>
#include <cstdio>

namespace nnf::topology {
namespace {

// Reads minDigits..maxDigits hex digits starting at `pos` and advances past them.
bool readHex(const std::string& text, size_t& pos, size_t minDigits, size_t maxDigits,
             uint32_t& out) {
  size_t start = pos;
  uint32_t value = 0;
  while (pos < text.size() && pos - start < maxDigits && isxdigit((unsigned char)text[pos])) {
    char c = (char)tolower((unsigned char)text[pos]);
    value = value * 16 + (uint32_t)(isdigit((unsigned char)c) ? c - '0' : c - 'a' + 10);
    ++pos;
  }
  if (pos - start < minDigits) return false;
  out = value;
  return true;
}

bool expect(const std::string& text, size_t& pos, char c) {
  if (pos >= text.size() || text[pos] != c) return false;
  ++pos;
  return true;
}

}  // namespace

std::optional<PciAddress> PciAddress::parse(const std::string& text) {
  PciAddress addr;
  size_t pos = 0;
  // Two colons mean a domain is present.
  size_t colons = 0;
  for (char c : text) colons += (c == ':');
  if (colons == 2) {
    if (!readHex(text, pos, 4, 8, addr.domain) || !expect(text, pos, ':')) return std::nullopt;
  } else if (colons != 1) {
    return std::nullopt;
  }
  if (!readHex(text, pos, 2, 2, addr.bus) || !expect(text, pos, ':')) return std::nullopt;
  if (!readHex(text, pos, 2, 2, addr.device) || !expect(text, pos, '.')) return std::nullopt;
  if (!readHex(text, pos, 1, 1, addr.function) || pos != text.size()) return std::nullopt;
  if (addr.device > 0x1f || addr.function > 7) return std::nullopt;
  return addr;
}

std::string PciAddress::str() const {
  char buf[32];
  snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", domain, bus, device, function);
  return buf;
}

}  // namespace nnf::topology
