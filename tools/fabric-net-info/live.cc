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
#include "topology/pci_address.h"

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

// What the plugin reports for a device against what the plan says it is; "" when they agree.
// Disagreement means the plugin is another build than the tool, or a device failed to open.
std::string planDifference(const core::DeviceSpec& spec, const abi::PropertiesV8& props) {
  const core::DeviceProperties& planned = spec.properties;
  std::string name = props.name != nullptr ? props.name : "";
  std::string pciPath = props.pciPath != nullptr ? props.pciPath : "";
  std::string out;
  auto differ = [&out](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
  if (name != planned.name) differ("name (plan: " + planned.name + ")");
  if (pciPath != planned.pciPath) differ("pciPath (plan: " + planned.pciPath + ")");
  if (props.guid != planned.guid) differ("guid");
  if (props.speed != planned.speedMbps) {
    differ("speed (plan: " + std::to_string(planned.speedMbps) + " Mbps)");
  }
  return out;
}

}  // namespace

void printProviders(FILE* out, const fabric::InfoQuery& query, const std::string& chosen) {
  fabric::InfoPtr all;
  try {
    all = query(*fabric::makeHints().get());
  } catch (const std::exception& e) {
    fprintf(out, "  %s\n", e.what());
  }
  if (!all) fprintf(out, "  none\n");
  // libfabric lists one fi_info per capability set; one line per provider and domain is enough.
  std::set<std::string> shown;
  for (const fi_info* info = all.get(); info != nullptr; info = info->next) {
    std::string provider = info->fabric_attr->prov_name;
    std::string domain = info->domain_attr->name;
    if (!shown.insert(provider + "/" + domain).second) continue;
    std::string pci = "-";
    std::string speed = "-";
    if (info->nic != nullptr && info->nic->bus_attr != nullptr &&
        info->nic->bus_attr->bus_type == FI_BUS_PCI) {
      const fi_pci_attr& attr = info->nic->bus_attr->attr.pci;
      pci =
          topology::PciAddress{attr.domain_id, attr.bus_id, attr.device_id, attr.function_id}.str();
    }
    if (info->nic != nullptr && info->nic->link_attr != nullptr &&
        info->nic->link_attr->speed > 0) {
      speed = std::to_string(info->nic->link_attr->speed / 1000000) + " Mbps";
    }
    const char* note = provider == chosen                   ? "  (chosen)"
                       : fabric::skippedByDefault(provider) ? "  (too slow: used only when named)"
                                                            : "";
    fprintf(out, "  %-12s domain %-20s pci %-12s speed %s%s\n", provider.c_str(), domain.c_str(),
            pci.c_str(), speed.c_str(), note);
  }
}

bool printPluginDevices(FILE* out, const std::string& path, const core::NetworkPlan* plan,
                        std::string* failure) {
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
    if (plan != nullptr && static_cast<size_t>(count) != plan->devices.specs.size()) {
      fprintf(out, "  differs from the plan, which has %zu device(s)\n",
              plan->devices.specs.size());
    }
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
      if (plan != nullptr && static_cast<size_t>(dev) < plan->devices.specs.size()) {
        std::string difference = planDifference(plan->devices.specs[dev], props);
        fprintf(
            out, "         %s\n",
            difference.empty() ? "as planned" : ("differs from the plan: " + difference).c_str());
      }
    }
    return true;
  } catch (const std::exception& e) {
    *failure = std::string(e.what()) + " (pass --plugin PATH or set NNF_PLUGIN)";
    return false;
  }
}

}  // namespace nnf::tools
