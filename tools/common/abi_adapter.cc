#include "abi_adapter.h"

#include <climits>

namespace nnf::tools {
namespace {

using abi::Result;

// Each version's table and properties types.
template <typename NetT, typename PropsT>
struct TypesOf {
  using Net = NetT;
  using Props = PropsT;
};
template <int V>
struct Types;
template <>
struct Types<6> : TypesOf<abi::NetV6, abi::PropertiesV6> {};
template <>
struct Types<7> : TypesOf<abi::NetV7, abi::PropertiesV7> {};
template <>
struct Types<9> : TypesOf<abi::NetV9, abi::PropertiesV9> {};
template <>
struct Types<10> : TypesOf<abi::NetV10, abi::PropertiesV10> {};
template <>
struct Types<11> : TypesOf<abi::NetV11, abi::PropertiesV11> {};
template <>
struct Types<12> : TypesOf<abi::NetV12, abi::PropertiesV12> {};

// One adapter per version: plain functions over a stored table, so that their addresses can
// fill a v8 table as NCCL's own adapters do.
template <int V>
struct Adapter {
  using Net = typename Types<V>::Net;
  using Props = typename Types<V>::Props;
  static inline const Net* net = nullptr;
  static inline void* context = nullptr;  // v11+

  static Result init(abi::Logger logger) {
    if constexpr (V >= 11) {
      abi::CommConfig config{abi::kTrafficClassUndef};
      return net->init(&context, 0, &config, logger, nullptr);
    } else if constexpr (V == 10) {
      return net->init(logger, nullptr);
    } else {
      return net->init(logger);
    }
  }

  static Result getProperties(int dev, abi::PropertiesV8* out) {
    Props props{};
    Result result = net->getProperties(dev, &props);
    if (result != abi::kSuccess) return result;
    *out = abi::PropertiesV8{};
    out->name = props.name;
    out->pciPath = props.pciPath;
    out->guid = props.guid;
    out->ptrSupport = props.ptrSupport;
    out->speed = props.speed;
    out->port = props.port;
    out->latency = props.latency;
    out->maxComms = props.maxComms;
    out->maxRecvs = props.maxRecvs;
    if constexpr (V >= 7) {
      out->netDeviceType = props.netDeviceType;
      out->netDeviceVersion = props.netDeviceVersion;
    }
    if constexpr (V >= 8) out->regIsGlobal = props.regIsGlobal;
    return abi::kSuccess;
  }

  static Result listen(int dev, void* handle, void** listenComm) {
    if constexpr (V >= 11)
      return net->listen(context, dev, handle, listenComm);
    else
      return net->listen(dev, handle, listenComm);
  }

  static Result connect(int dev, void* handle, void** sendComm, abi::NetDeviceHandle** devComm) {
    if constexpr (V >= 11) {
      return net->connect(context, dev, handle, sendComm, devComm);
    } else if constexpr (V == 10) {
      abi::CommConfig config{abi::kTrafficClassUndef};
      return net->connect(dev, &config, handle, sendComm, devComm);
    } else if constexpr (V == 6) {
      return net->connect(dev, handle, sendComm);
    } else {
      return net->connect(dev, handle, sendComm, devComm);
    }
  }

  static Result accept(void* listenComm, void** recvComm, abi::NetDeviceHandle** devComm) {
    if constexpr (V == 6)
      return net->accept(listenComm, recvComm);
    else
      return net->accept(listenComm, recvComm, devComm);
  }

  static Result regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    if constexpr (V <= 7) {
      if (size > INT_MAX) return abi::kInternalError;  // as NCCL's v6/v7 adapters refuse it
      return net->regMr(comm, data, static_cast<int>(size), type, mhandle);
    } else {
      return net->regMr(comm, data, size, type, mhandle);
    }
  }

  // v9+ take size_t: a negative test size arrives as a huge one, which the plugin must refuse.
  static Result isend(void* sendComm, void* data, int size, int tag, void* mhandle,
                      void** request) {
    if constexpr (V >= 10) {
      return net->isend(sendComm, data, static_cast<size_t>(size), tag, mhandle, nullptr, request);
    } else if constexpr (V == 9) {
      return net->isend(sendComm, data, static_cast<size_t>(size), tag, mhandle, request);
    } else {
      return net->isend(sendComm, data, size, tag, mhandle, request);
    }
  }

  static Result irecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                      void** request) {
    if constexpr (V >= 9) {
      // Only the n entries the plugin reads are filled: NCCL hands its own arrays, and zeroing
      // all 32 of two arrays on every receive cost this tool about 75 instructions a message
      // that NCCL does not spend (the small-message rows of docs/performance.md count them).
      size_t wide[abi::kMaxRequests];
      size_t* widePtr = sizes != nullptr ? wide : nullptr;
      for (int i = 0; sizes != nullptr && i < n && i < abi::kMaxRequests; ++i) {
        wide[i] = static_cast<size_t>(sizes[i]);
      }
      if constexpr (V >= 10) {
        void* pHandles[abi::kMaxRequests];
        for (int i = 0; i < n && i < abi::kMaxRequests; ++i) pHandles[i] = nullptr;
        return net->irecv(recvComm, n, data, widePtr, tags, mhandles, pHandles, request);
      } else {
        return net->irecv(recvComm, n, data, widePtr, tags, mhandles, request);
      }
    } else {
      return net->irecv(recvComm, n, data, sizes, tags, mhandles, request);
    }
  }

  static Result getDeviceMr(void* comm, void* mhandle, void** dptrMhandle) {
    if constexpr (V == 6) {
      if (dptrMhandle != nullptr) *dptrMhandle = nullptr;  // v6 has no device offload
      return abi::kSuccess;
    } else {
      return net->getDeviceMr(comm, mhandle, dptrMhandle);
    }
  }

  static Result irecvConsumed(void* recvComm, int n, void* request) {
    if constexpr (V == 6)
      return abi::kSuccess;
    else
      return net->irecvConsumed(recvComm, n, request);
  }

  static Result finalize() {
    if constexpr (V >= 11) {
      if (context == nullptr) return abi::kSuccess;
      Result result = net->finalize(context);
      context = nullptr;
      return result;
    } else {
      return abi::kSuccess;
    }
  }

  static const abi::NetV8* adapt(const void* table) {
    net = static_cast<const Net*>(table);
    static abi::NetV8 shaped{};
    shaped.name = net->name;
    shaped.init = init;
    shaped.devices = net->devices;
    shaped.getProperties = getProperties;
    shaped.listen = listen;
    shaped.connect = connect;
    shaped.accept = accept;
    shaped.regMr = regMr;
    shaped.regMrDmaBuf = net->regMrDmaBuf;
    shaped.deregMr = net->deregMr;
    shaped.isend = isend;
    shaped.irecv = irecv;
    shaped.iflush = net->iflush;
    shaped.test = net->test;
    shaped.closeSend = net->closeSend;
    shaped.closeRecv = net->closeRecv;
    shaped.closeListen = net->closeListen;
    shaped.getDeviceMr = getDeviceMr;
    shaped.irecvConsumed = irecvConsumed;
    return &shaped;
  }
};

}  // namespace

const abi::NetV8* adaptToV8(const void* table, int version) {
  switch (version) {
    case 6:
      return Adapter<6>::adapt(table);
    case 7:
      return Adapter<7>::adapt(table);
    case 8:
      return static_cast<const abi::NetV8*>(table);
    case 9:
      return Adapter<9>::adapt(table);
    case 10:
      return Adapter<10>::adapt(table);
    case 11:
      return Adapter<11>::adapt(table);
    case 12:
      return Adapter<12>::adapt(table);
  }
  return nullptr;
}

abi::Result finalizeAdapted(int version) {
  switch (version) {
    case 11:
      return Adapter<11>::finalize();
    case 12:
      return Adapter<12>::finalize();
  }
  return abi::kSuccess;
}

}  // namespace nnf::tools
