#include "fabric/rail.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

namespace nnf::fabric {
namespace {

[[noreturn]] void fail(const std::string& what, int code, const fi_info* info) {
  throw std::runtime_error(what + " failed on " + info->fabric_attr->prov_name + "/" +
                           info->domain_attr->name + ": " + errorText(code));
}

constexpr const char* kShmPrefix = "nnf-";

// shm names its shared-memory region after the process id by default. A process killed with
// SIGKILL leaves its region in /dev/shm, and a later process that gets the same pid then fails
// fi_enable with -FI_EBUSY. We name our endpoints "nnf-<pid>-<random>" instead, and remove the
// regions of our own dead processes so they do not pile up.
void removeStaleShmRegions() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    if (strncmp(entry->d_name, kShmPrefix, strlen(kShmPrefix)) != 0) continue;
    long pid = strtol(entry->d_name + strlen(kShmPrefix), nullptr, 10);
    if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;
    std::string path = std::string("/dev/shm/") + entry->d_name;
    unlink(path.c_str());
  }
  closedir(dir);
}

void nameShmEndpoint(fid_ep* ep, const fi_info* info) {
  if (strcmp(info->fabric_attr->prov_name, "shm") != 0 || info->addr_format != FI_ADDR_STR) return;
  removeStaleShmRegions();
  std::random_device entropy;
  char name[64];
  snprintf(name, sizeof(name), "fi_shm://%s%d-%08x", kShmPrefix, static_cast<int>(getpid()),
           entropy());
  int ret = fi_setname(&ep->fid, name, strlen(name) + 1);
  if (ret != 0) fail("fi_setname", ret, info);
}

}  // namespace

Rail::Rail(const fi_info* info, size_t cqSize, std::vector<EndpointSetting>* settings,
           bool withEventQueue)
    : info_(fi_dupinfo(info)) {
  if (!info_) throw std::runtime_error("fi_dupinfo failed");
  int ret = fi_fabric(info_->fabric_attr, fabric_.out(), nullptr);
  if (ret != 0) fail("fi_fabric", ret, info_.get());
  ret = fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr);
  if (ret != 0) fail("fi_domain", ret, info_.get());

  fi_av_attr avAttr{};
  avAttr.type = FI_AV_TABLE;
  ret = fi_av_open(domain_.get(), &avAttr, av_.out(), nullptr);
  if (ret != 0) fail("fi_av_open", ret, info_.get());

  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_TAGGED;
  cqAttr.wait_obj = FI_WAIT_NONE;
  cqAttr.size = cqSize;
  ret = fi_cq_open(domain_.get(), &cqAttr, cq_.out(), nullptr);
  if (ret != 0) fail("fi_cq_open", ret, info_.get());

  ret = fi_endpoint(domain_.get(), info_.get(), ep_.out(), nullptr);
  if (ret != 0) fail("fi_endpoint", ret, info_.get());
  ret = fi_ep_bind(ep_.get(), &av_->fid, 0);
  if (ret != 0) fail("fi_ep_bind(av)", ret, info_.get());
  ret = fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (ret != 0) fail("fi_ep_bind(cq)", ret, info_.get());
  if (withEventQueue) {
    // A provider without event queues has nothing to report there either.
    fi_eq_attr eqAttr{};
    eqAttr.wait_obj = FI_WAIT_NONE;
    ret = fi_eq_open(fabric_.get(), &eqAttr, eq_.out(), nullptr);
    if (ret == 0) {
      ret = fi_ep_bind(ep_.get(), &eq_->fid, 0);
      if (ret != 0) fail("fi_ep_bind(eq)", ret, info_.get());
    } else if (ret != -FI_ENOSYS && ret != -FI_EOPNOTSUPP) {
      fail("fi_eq_open", ret, info_.get());
    }
  }
  nameShmEndpoint(ep_.get(), info_.get());
  if (settings != nullptr) {
    for (EndpointSetting& setting : *settings) {
      bool value = setting.value;
      setting.result = fi_setopt(&ep_->fid, setting.level, setting.name, &value, sizeof(value));
    }
  }
  ret = fi_enable(ep_.get());
  if (ret != 0) fail("fi_enable", ret, info_.get());

  size_t length = 0;
  ret = fi_getname(&ep_->fid, nullptr, &length);
  if (ret != -FI_ETOOSMALL && ret != 0) fail("fi_getname", ret, info_.get());
  address_.resize(length);
  ret = fi_getname(&ep_->fid, address_.data(), &length);
  if (ret != 0) fail("fi_getname", ret, info_.get());
  address_.resize(length);
}

Rail::~Rail() {
  // The endpoint goes first so that no completion can reference freed state; members then
  // close the CQ, AV, domain and fabric in reverse declaration order.
  ep_.reset();
}

int Rail::insertAddress(const void* address, size_t length, fi_addr_t* out) {
  (void)length;  // the provider knows its address format's length
  fi_addr_t addr = FI_ADDR_UNSPEC;
  int ret = fi_av_insert(av_.get(), address, 1, &addr, 0, nullptr);
  if (ret != 1) return ret < 0 ? ret : -FI_EINVAL;
  *out = addr;
  return 0;
}

int Rail::removeAddress(fi_addr_t address) {
  return fi_av_remove(av_.get(), &address, 1, 0);
}

ssize_t Rail::readError(fi_cq_err_entry* entry, const char** text) {
  if (errorBuffer_.empty()) errorBuffer_.resize(256);
  *entry = fi_cq_err_entry{};
  entry->err_data = errorBuffer_.data();
  entry->err_data_size = errorBuffer_.size();
  ssize_t ret = fi_cq_readerr(cq_.get(), entry, 0);
  if (ret > 0) *text = fi_cq_strerror(cq_.get(), entry->prov_errno, entry->err_data, nullptr, 0);
  return ret;
}

bool Rail::readEventError(int* errorCode, std::string* text) {
  if (!eq_) return false;
  uint32_t event = 0;
  char entry[256];
  ssize_t ret = fi_eq_read(eq_.get(), &event, entry, sizeof(entry), 0);
  if (ret != -FI_EAVAIL) return false;  // nothing, or an event the plugin does not ask for
  fi_eq_err_entry error{};
  if (fi_eq_readerr(eq_.get(), &error, 0) != sizeof(error)) return false;
  const char* detail = fi_eq_strerror(eq_.get(), error.prov_errno, error.err_data, nullptr, 0);
  *errorCode = error.err < 0 ? -error.err : error.err;
  *text = errorText(error.err) + (detail != nullptr ? std::string(" (") + detail + ")" : "");
  return true;
}

}  // namespace nnf::fabric
