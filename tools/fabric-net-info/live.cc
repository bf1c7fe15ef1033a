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

// The plugin's last WARN, without its prefix: the reason a failing call gives in one line.
std::string lastWarning;

// NCCL's logger signature; prints what NCCL_DEBUG would show (WARN always, INFO on request).
void toolLogger(abi::LogLevel level, unsigned long flags, const char* file, int line,
                const char* fmt, ...) {
  const char* debug = getenv("NCCL_DEBUG");
  bool info =
      debug != nullptr && (strcasecmp(debug, "INFO") == 0 || strcasecmp(debug, "TRACE") == 0);
  if (level != abi::kLogWarn && !(info && level == abi::kLogInfo)) return;
  char text[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  fprintf(stderr, "%s %s\n", level == abi::kLogWarn ? "WARN" : "INFO", text);
  if (level == abi::kLogWarn) {
    lastWarning = text;
    size_t prefix = lastWarning.find(" : ");
    if (prefix != std::string::npos) lastWarning.erase(0, prefix + 3);
  }
}

// "init failed (ncclSystemError): <the plugin's WARN>".
std::string callFailure(const char* call, abi::Result rc) {
  std::string text = std::string(call) + " failed (" + resultName(rc) + ")";
  if (!lastWarning.empty()) text += ": " + lastWarning;
  return text;
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

bool printPluginDevices(FILE* out, const std::string& path, std::string* failure) {
  try {
    PluginLibrary plugin(path);
    const abi::NetV8& net = plugin.net();
    fprintf(out, "plugin %s (%s, ncclNetPlugin_v%d)\n", path.c_str(),
            net.name != nullptr ? net.name : "?", plugin.version());
    abi::Result rc = net.init(toolLogger);
    if (rc != abi::kSuccess) {
      *failure = "plugin " + callFailure("init", rc);
      return false;
    }
    int count = 0;
    rc = net.devices(&count);
    if (rc != abi::kSuccess) {
      *failure = "plugin " + callFailure("devices", rc);
      return false;
    }
    fprintf(out, "  %d device(s)\n", count);
    for (int dev = 0; dev < count; ++dev) {
      abi::PropertiesV8 props{};
      rc = net.getProperties(dev, &props);
      if (rc != abi::kSuccess) {
        *failure = "plugin device " + std::to_string(dev) + ": " + callFailure("getProperties", rc);
        return false;
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
    return true;
  } catch (const std::exception& e) {
    *failure = std::string(e.what()) + " (pass --plugin PATH or set NNF_PLUGIN)";
    return false;
  }
}

}  // namespace nnf::tools
