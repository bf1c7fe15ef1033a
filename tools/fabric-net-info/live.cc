#include "live.h"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <strings.h>
#include <cinttypes>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>

#include "plugin_loader.h"

namespace nnf::tools {
namespace {

// NCCL's logger signature; prints what NCCL_DEBUG would show (WARN always, INFO on request).
void toolLogger(abi::LogLevel level, unsigned long flags, const char* file, int line,
                const char* fmt, ...) {
  const char* debug = getenv("NCCL_DEBUG");
  bool info =
      debug != nullptr && (strcasecmp(debug, "INFO") == 0 || strcasecmp(debug, "TRACE") == 0);
  if (level != abi::kLogWarn && !(info && level == abi::kLogInfo)) return;
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "%s ", level == abi::kLogWarn ? "WARN" : "INFO");
  vfprintf(stderr, fmt, args);
  fprintf(stderr, "\n");
  va_end(args);
}

std::string ptrSupportText(int bits) {
  std::string out;
  if (bits & abi::kPtrHost) out += "host";
  if (bits & abi::kPtrCuda) out += out.empty() ? "cuda" : "|cuda";
  if (bits & abi::kPtrDmaBuf) out += out.empty() ? "dmabuf" : "|dmabuf";
  return out.empty() ? "none" : out;
}

// "tcp;ofi_rxm" is the tcp provider under the rxm utility layer.
std::string baseProvider(const std::string& name) {
  return name.substr(0, name.find(';'));
}

}  // namespace

std::vector<ProviderEntry> listRdmProviders() {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) throw std::runtime_error("fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_RDM;
  fi_info* info = nullptr;
  int rc = fi_getinfo(fi_version(), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  std::vector<ProviderEntry> out;
  if (rc == -FI_ENODATA) return out;
  if (rc != 0) throw std::runtime_error(std::string("fi_getinfo: ") + fi_strerror(-rc));
  for (fi_info* cur = info; cur != nullptr; cur = cur->next) {
    ProviderEntry entry;
    entry.provider =
        cur->fabric_attr && cur->fabric_attr->prov_name ? cur->fabric_attr->prov_name : "?";
    entry.fabric = cur->fabric_attr && cur->fabric_attr->name ? cur->fabric_attr->name : "";
    entry.domain = cur->domain_attr && cur->domain_attr->name ? cur->domain_attr->name : "";
    entry.nic.name = entry.domain;
    if (cur->nic != nullptr) {
      if (cur->nic->device_attr != nullptr && cur->nic->device_attr->name != nullptr)
        entry.nic.name = cur->nic->device_attr->name;
      const fi_bus_attr* bus = cur->nic->bus_attr;
      if (bus != nullptr && bus->bus_type == FI_BUS_PCI) {
        const fi_pci_attr& pci = bus->attr.pci;
        entry.nic.pci =
            topology::PciAddress{pci.domain_id, pci.bus_id, pci.device_id, pci.function_id};
      }
      if (cur->nic->link_attr != nullptr && cur->nic->link_attr->speed > 0)
        entry.nic.speedMbps = (int64_t)(cur->nic->link_attr->speed / 1000000);
    }
    out.push_back(std::move(entry));
  }
  fi_freeinfo(info);
  return out;
}

std::string pickProvider(const std::vector<ProviderEntry>& entries, const std::string& wanted) {
  if (!wanted.empty()) return wanted;
  for (const ProviderEntry& e : entries)
    if (baseProvider(e.provider) == "efa") return e.provider;
  return entries.empty() ? "" : entries.front().provider;
}

std::vector<topology::Nic> nicsOf(const std::vector<ProviderEntry>& entries,
                                  const std::string& provider, int64_t defaultMbps) {
  std::vector<topology::Nic> nics;
  std::set<std::string> domains;
  for (const ProviderEntry& e : entries) {
    bool match = e.provider == provider || baseProvider(e.provider) == provider;
    if (!match || !domains.insert(e.domain).second) continue;
    topology::Nic nic = e.nic;
    if (nic.speedMbps <= 0) nic.speedMbps = defaultMbps;
    nics.push_back(std::move(nic));
  }
  return nics;
}

bool printPluginDevices(FILE* out, const std::string& path) {
  try {
    PluginLibrary plugin(path);
    const abi::NetV8& net = plugin.net();
    fprintf(out, "plugin %s (%s)\n", path.c_str(), net.name != nullptr ? net.name : "?");
    abi::Result rc = net.init(toolLogger);
    if (rc != abi::kSuccess) {
      fprintf(out, "  init failed: %s (%d); run with NCCL_DEBUG=INFO for details\n", resultName(rc),
              (int)rc);
      return false;
    }
    int count = 0;
    rc = net.devices(&count);
    if (rc != abi::kSuccess) {
      fprintf(out, "  devices failed: %s (%d)\n", resultName(rc), (int)rc);
      return false;
    }
    fprintf(out, "  %d device(s)\n", count);
    bool ok = true;
    for (int dev = 0; dev < count; ++dev) {
      abi::PropertiesV8 props{};
      rc = net.getProperties(dev, &props);
      if (rc != abi::kSuccess) {
        fprintf(out, "  dev %d: getProperties failed: %s (%d)\n", dev, resultName(rc), (int)rc);
        ok = false;
        continue;
      }
      fprintf(out,
              "  dev %d: name=%s pciPath=%s guid=0x%016" PRIx64
              " ptrSupport=%s regIsGlobal=%d\n"
              "         speed=%d Mbps port=%d latency=%.1f us maxComms=%d maxRecvs=%d "
              "netDeviceType=%d netDeviceVersion=%d\n",
              dev, props.name ? props.name : "(null)", props.pciPath ? props.pciPath : "(null)",
              props.guid, ptrSupportText(props.ptrSupport).c_str(), props.regIsGlobal, props.speed,
              props.port, props.latency, props.maxComms, props.maxRecvs, (int)props.netDeviceType,
              props.netDeviceVersion);
    }
    return ok;
  } catch (const std::exception& e) {
    fprintf(out,
            "plugin %s could not be loaded: %s\n  (build the nccl-net-fabric target, or pass "
            "--plugin PATH / set NNF_PLUGIN)\n",
            path.c_str(), e.what());
    return false;
  }
}

}  // namespace nnf::tools
