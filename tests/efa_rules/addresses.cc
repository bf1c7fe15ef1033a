// Which NIC an address belongs to, across processes. With NNF_EFA_RULES_NICS > 1, every enabled
// endpoint writes a file named after a hash of its base address into NNF_EFA_RULES_ADDRESSES (a
// directory; default /tmp/efa-rules-addresses-<uid>) holding "<nic> <pid> <address in hex>";
// the endpoint removes it when it closes, a reader when its process is gone. All NICs share the
// base interface, so a base address names exactly one live endpoint on the machine, and its file
// tells an initiator which NIC's keys an RMA to it must carry. A process that ends without closing
// leaves its files behind until a reader finds it gone or the next endpoint bound to the same
// address overwrites them.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "efa_rules.h"

namespace efa_rules {
namespace {

std::string directory() {
  const char* dir = std::getenv("NNF_EFA_RULES_ADDRESSES");
  if (dir != nullptr && *dir != '\0') return dir;
  return "/tmp/efa-rules-addresses-" + std::to_string(getuid());
}

std::string hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// FNV-1a: a file name of fixed length whatever the address's (shm names are long strings).
std::string fileOf(const std::string& canonical) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : canonical) hash = (hash ^ c) * 0x100000001b3ULL;
  char name[32];
  std::snprintf(name, sizeof(name), "/%016llx", static_cast<unsigned long long>(hash));
  return directory() + name;
}

struct Entry {
  int nic = -1;
  long pid = 0;
  std::string address;
};

bool readEntry(const std::string& path, Entry* entry) {
  std::ifstream in(path);
  return static_cast<bool>(in >> entry->nic >> entry->pid >> entry->address);
}

}  // namespace

std::string canonicalAddress(const char* data, size_t len) {
  std::string text(data, len);
  while (!text.empty() && text.back() == '\0') text.pop_back();
  size_t scheme = text.find("://");
  if (scheme != std::string::npos && text.find('\0') == std::string::npos)
    text.erase(0, scheme + 3);
  return text;
}

void publishAddress(const std::string& ownName, int nic) {
  std::string canonical = canonicalAddress(ownName.data(), ownName.size());
  mkdir(directory().c_str(), 0700);
  std::string path = fileOf(canonical);
  std::string temp = path + "." + std::to_string(getpid());
  std::string line =
      std::to_string(nic) + " " + std::to_string(getpid()) + " " + hex(canonical) + "\n";
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t written = write(fd, line.data(), line.size());
  close(fd);
  // Renamed into place: a reader sees the old file or the whole new one.
  if (written == static_cast<ssize_t>(line.size())) rename(temp.c_str(), path.c_str());
  unlink(temp.c_str());
}

void withdrawAddress(const std::string& ownName, int nic) {
  std::string canonical = canonicalAddress(ownName.data(), ownName.size());
  std::string path = fileOf(canonical);
  Entry entry;
  if (readEntry(path, &entry) && entry.pid == getpid() && entry.nic == nic &&
      entry.address == hex(canonical))
    unlink(path.c_str());
}

int publishedNic(const std::string& canonical) {
  int nic = -1;
  long pid = 0;
  return publishedEndpoint(canonical, &nic, &pid) ? nic : -1;
}

bool publishedEndpoint(const std::string& canonical, int* nic, long* pid) {
  Entry entry;
  std::string path = fileOf(canonical);
  if (!readEntry(path, &entry) || entry.address != hex(canonical)) return false;
  // Left by a process that ended without closing (forked test children leave with _exit).
  if (kill(static_cast<pid_t>(entry.pid), 0) != 0 && errno == ESRCH) {
    unlink(path.c_str());
    return false;
  }
  *nic = entry.nic;
  *pid = entry.pid;
  return true;
}

std::string sharedDirectory() {
  return directory();
}

}  // namespace efa_rules
