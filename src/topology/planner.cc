#include "topology/planner.h"

#include <algorithm>
#include <map>
#include <set>

#include "log/log.h"

namespace nnf::topology {
namespace {

// Where one PCI NIC sits: its hwloc object, the deepest bridge it shares with any GPU and the
// GPUs under that bridge (all equally close to it).
struct Site {
  size_t nic = 0;
  hwloc_obj_t obj = nullptr;
  hwloc_obj_t bridge = nullptr;
  std::vector<hwloc_obj_t> gpus;
};

struct Group {
  Placement placement = Placement::kGpu;
  std::vector<hwloc_obj_t> gpus;
  std::vector<size_t> nics;
};

Site locate(size_t index, hwloc_obj_t obj, const std::vector<hwloc_obj_t>& gpus) {
  Site site;
  site.nic = index;
  site.obj = obj;
  int best = -1;
  for (hwloc_obj_t gpu : gpus) {
    hwloc_obj_t common = commonAncestor(obj, gpu);
    // Only a bridge counts: a package or NUMA node in common means traffic crosses the CPU.
    if (common->type != HWLOC_OBJ_BRIDGE) continue;
    int depth = treeDepth(common);
    if (depth > best) {
      best = depth;
      site.bridge = common;
      site.gpus.clear();
    }
    if (common == site.bridge) site.gpus.push_back(gpu);
  }
  return site;
}

// Nearest first: deeper common ancestor, then fewer hops, then PCI order.
void orderGpusFrom(hwloc_obj_t leader, std::vector<hwloc_obj_t>& gpus) {
  if (leader == nullptr) {
    std::sort(gpus.begin(), gpus.end(),
              [](hwloc_obj_t a, hwloc_obj_t b) { return pciAddressOf(a) < pciAddressOf(b); });
    return;
  }
  auto rank = [leader](hwloc_obj_t gpu) {
    hwloc_obj_t common = commonAncestor(leader, gpu);
    int depth = treeDepth(common);
    int hops = treeDepth(leader) + treeDepth(gpu) - 2 * depth;
    return std::make_tuple(-depth, hops, pciAddressOf(gpu));
  };
  std::sort(gpus.begin(), gpus.end(),
            [&rank](hwloc_obj_t a, hwloc_obj_t b) { return rank(a) < rank(b); });
}

// Splits `count` items over `parts` contiguous shares, the first count % parts one larger.
std::vector<size_t> shares(size_t count, size_t parts) {
  std::vector<size_t> out(parts, count / parts);
  for (size_t i = 0; i < count % parts; ++i) ++out[i];
  return out;
}

void placeBucket(const std::vector<const Site*>& sites, std::vector<Group>& groups,
                 std::map<hwloc_obj_t, size_t>& groupOfGpu) {
  const std::vector<hwloc_obj_t>& candidates = sites.front()->gpus;
  std::vector<hwloc_obj_t> free;
  for (hwloc_obj_t gpu : candidates)
    if (groupOfGpu.count(gpu) == 0) free.push_back(gpu);

  if (free.empty()) {
    // Every GPU here already has closer NICs: top up the group with the fewest NICs.
    for (const Site* site : sites) {
      size_t best = groupOfGpu.at(candidates.front());
      for (hwloc_obj_t gpu : candidates) {
        size_t g = groupOfGpu.at(gpu);
        if (groups[g].nics.size() < groups[best].nics.size()) best = g;
      }
      groups[best].nics.push_back(site->nic);
    }
    return;
  }

  if (sites.size() >= free.size()) {
    std::vector<size_t> share = shares(sites.size(), free.size());
    size_t next = 0;
    for (size_t i = 0; i < free.size(); ++i) {
      Group group;
      group.gpus.push_back(free[i]);
      for (size_t k = 0; k < share[i]; ++k) group.nics.push_back(sites[next++]->nic);
      groupOfGpu[free[i]] = groups.size();
      groups.push_back(std::move(group));
    }
  } else {
    std::vector<size_t> share = shares(free.size(), sites.size());
    size_t next = 0;
    for (size_t j = 0; j < sites.size(); ++j) {
      Group group;
      group.nics.push_back(sites[j]->nic);
      for (size_t k = 0; k < share[j]; ++k) {
        groupOfGpu[free[next]] = groups.size();
        group.gpus.push_back(free[next++]);
      }
      groups.push_back(std::move(group));
    }
  }
}

// NICs named by a manual rail group leave automatic placement: marked in `taken`.
std::vector<std::vector<size_t>> manualGroups(const std::vector<Nic>& nics, const RailGroups& rails,
                                              std::vector<bool>& taken) {
  std::vector<std::vector<size_t>> manual;
  for (const std::vector<std::string>& names : rails) {
    std::vector<size_t> group;
    for (const std::string& name : names) {
      auto it =
          std::find_if(nics.begin(), nics.end(), [&](const Nic& n) { return n.name == name; });
      if (it == nics.end()) {
        NNF_WARN(
            "NCCL_FABRIC_RAILS names \"%s\", which is not among this machine's NICs; "
            "ignored",
            name.c_str());
        continue;
      }
      size_t index = (size_t)(it - nics.begin());
      taken[index] = true;
      group.push_back(index);
    }
    if (!group.empty()) manual.push_back(std::move(group));
  }
  return manual;
}

// Fills `objOf` with each PCI NIC's hwloc object (null when hwloc lacks it) and returns the
// sites of those left to automatic placement.
std::vector<Site> locateNics(const std::vector<Nic>& nics, const Topology* topo,
                             const std::vector<hwloc_obj_t>& gpus, const std::vector<bool>& taken,
                             std::vector<hwloc_obj_t>& objOf) {
  std::vector<Site> sites;
  for (size_t i = 0; i < nics.size(); ++i) {
    if (topo == nullptr || !nics[i].pci) continue;
    objOf[i] = topo->pciObject(*nics[i].pci);
    if (objOf[i] == nullptr) {
      NNF_WARN("NIC %s at %s is not in the hwloc topology; it becomes a device of its own",
               nics[i].name.c_str(), nics[i].pci->str().c_str());
      continue;
    }
    if (!taken[i]) sites.push_back(locate(i, objOf[i], gpus));
  }
  return sites;
}

// Automatic placement: the sites' groups with their GPUs, in the PCI order of their first GPU.
std::vector<Group> groupSites(const std::vector<Nic>& nics, const std::vector<Site>& sites,
                              const std::vector<hwloc_obj_t>& objOf) {
  // Bucket NICs by their nearest bridge; deeper buckets choose GPUs first.
  std::map<hwloc_obj_t, std::vector<const Site*>> buckets;
  for (const Site& site : sites)
    if (site.bridge != nullptr) buckets[site.bridge].push_back(&site);
  std::vector<std::vector<const Site*>> ordered;
  for (auto& entry : buckets) {
    std::sort(entry.second.begin(), entry.second.end(),
              [&](const Site* a, const Site* b) { return *nics[a->nic].pci < *nics[b->nic].pci; });
    ordered.push_back(entry.second);
  }
  std::sort(ordered.begin(), ordered.end(), [&](const auto& a, const auto& b) {
    int da = treeDepth(a.front()->bridge);
    int db = treeDepth(b.front()->bridge);
    if (da != db) return da > db;
    return *nics[a.front()->nic].pci < *nics[b.front()->nic].pci;
  });

  std::vector<Group> groups;
  std::map<hwloc_obj_t, size_t> groupOfGpu;
  for (const auto& bucket : ordered) placeBucket(bucket, groups, groupOfGpu);
  for (Group& group : groups) orderGpusFrom(objOf[group.nics.front()], group.gpus);
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    return pciAddressOf(a.gpus.front()) < pciAddressOf(b.gpus.front());
  });
  return groups;
}

// A manual group serves every GPU that is nearest to any of its NICs.
void addManualGroups(const std::vector<std::vector<size_t>>& manual,
                     const std::vector<hwloc_obj_t>& objOf, const std::vector<hwloc_obj_t>& gpus,
                     std::vector<Group>& groups) {
  for (const std::vector<size_t>& members : manual) {
    Group group;
    group.placement = Placement::kManual;
    group.nics = members;
    std::set<hwloc_obj_t> served;
    for (size_t nic : members)
      if (objOf[nic] != nullptr)
        for (hwloc_obj_t gpu : locate(nic, objOf[nic], gpus).gpus) served.insert(gpu);
    group.gpus.assign(served.begin(), served.end());
    orderGpusFrom(objOf[members.front()], group.gpus);
    groups.push_back(std::move(group));
  }
}

// Every NIC no group took becomes a device of its own, without GPUs.
void addLoneNics(const std::vector<bool>& taken, const std::vector<hwloc_obj_t>& objOf,
                 std::vector<Group>& groups) {
  for (size_t i = 0; i < taken.size(); ++i) {
    if (taken[i]) continue;
    Group group;
    group.placement = objOf[i] != nullptr ? Placement::kNoGpu : Placement::kNoPci;
    group.nics.push_back(i);
    groups.push_back(std::move(group));
  }
}

Plan planOf(const std::vector<Group>& groups, const std::vector<hwloc_obj_t>& objOf,
            const Topology* topo) {
  Plan plan;
  for (const Group& group : groups) {
    Device device;
    device.placement = group.placement;
    device.nics = group.nics;
    for (hwloc_obj_t gpu : group.gpus) device.gpus.push_back(pciAddressOf(gpu));
    hwloc_obj_t anchor = objOf[group.nics.front()];
    if (anchor == nullptr && !group.gpus.empty()) anchor = group.gpus.front();
    if (anchor != nullptr) {
      device.numaNode = numaNodeOf(topo->get(), anchor);
      device.cpuset = cpusetOf(topo->get(), anchor);
    }
    plan.devices.push_back(std::move(device));
  }
  return plan;
}

}  // namespace

const char* placementName(Placement placement) {
  switch (placement) {
    case Placement::kGpu:
      return "gpu";
    case Placement::kManual:
      return "manual";
    case Placement::kNoGpu:
      return "no-gpu";
    case Placement::kNoPci:
      return "no-pci";
  }
  return "?";
}

Plan planDevices(const std::vector<Nic>& nics, const Topology* topo, const RailGroups& rails) {
  std::vector<bool> taken(nics.size(), false);
  std::vector<std::vector<size_t>> manual = manualGroups(nics, rails, taken);

  std::vector<hwloc_obj_t> gpus;
  if (topo != nullptr) gpus = topo->gpus();
  std::vector<hwloc_obj_t> objOf(nics.size(), nullptr);
  std::vector<Site> sites = locateNics(nics, topo, gpus, taken, objOf);

  std::vector<Group> groups = groupSites(nics, sites, objOf);
  for (const Group& group : groups)
    for (size_t nic : group.nics) taken[nic] = true;
  addManualGroups(manual, objOf, gpus, groups);
  addLoneNics(taken, objOf, groups);
  return planOf(groups, objOf, topo);
}

}  // namespace nnf::topology
