#include "support/plugin_ops.h"

#include "support/patterns.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

namespace nnf::test {
namespace {

// Small enough to exercise the plugin's progress paths, large enough not to starve the other
// process of one of the two cores while spinning.
void backoff(int spins) {
  if (spins % 64 == 63) std::this_thread::yield();
}

}  // namespace

HostBuffer::HostBuffer(size_t size) : size_(size) {
  size_t rounded = (size + 4095) / 4096 * 4096;
  data_ = static_cast<uint8_t*>(aligned_alloc(4096, rounded == 0 ? 4096 : rounded));
  if (data_ == nullptr) throw std::bad_alloc();
}

HostBuffer::~HostBuffer() {
  free(data_);
}

void listenOn(Peer& peer, Handle* handle, void** listenComm) {
  memset(handle->bytes, 0, sizeof(handle->bytes));
  *listenComm = nullptr;
  ASSERT_EQ(peer.net->listen(peer.dev, handle->bytes, listenComm), abi::kSuccess);
  ASSERT_NE(*listenComm, nullptr) << "listen succeeded without a comm";
}

void connectTo(Peer& peer, Handle* handle, void** sendComm) {
  *sendComm = nullptr;
  Deadline deadline(kOpTimeoutSec);
  for (int spins = 0; *sendComm == nullptr; ++spins) {
    abi::NetDeviceHandleV8* devComm = nullptr;
    ASSERT_EQ(peer.net->connect(peer.dev, handle->bytes, sendComm, &devComm), abi::kSuccess);
    ASSERT_FALSE(deadline.expired()) << "connect made no comm in " << kOpTimeoutSec << " s";
    backoff(spins);
  }
}

void acceptOn(Peer& peer, void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  Deadline deadline(kOpTimeoutSec);
  for (int spins = 0; *recvComm == nullptr; ++spins) {
    abi::NetDeviceHandleV8* devComm = nullptr;
    ASSERT_EQ(peer.net->accept(listenComm, recvComm, &devComm), abi::kSuccess);
    ASSERT_FALSE(deadline.expired()) << "accept made no comm in " << kOpTimeoutSec << " s";
    backoff(spins);
  }
}

void connectLocal(Peer& peer, void* listenComm, Handle* handle, void** sendComm, void** recvComm) {
  *sendComm = nullptr;
  *recvComm = nullptr;
  Deadline deadline(kOpTimeoutSec);
  for (int spins = 0; *sendComm == nullptr || *recvComm == nullptr; ++spins) {
    abi::NetDeviceHandleV8* devComm = nullptr;
    if (*sendComm == nullptr) {
      ASSERT_EQ(peer.net->connect(peer.dev, handle->bytes, sendComm, &devComm), abi::kSuccess);
    }
    if (*recvComm == nullptr) {
      ASSERT_EQ(peer.net->accept(listenComm, recvComm, &devComm), abi::kSuccess);
    }
    ASSERT_FALSE(deadline.expired())
        << "connect/accept in one process: send comm " << *sendComm << ", recv comm " << *recvComm
        << " after " << kOpTimeoutSec << " s";
    backoff(spins);
  }
}

void acceptRemote(Peer& peer, void** listenComm, void** recvComm) {
  Handle handle;
  ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, listenComm));
  ASSERT_TRUE(peer.channel->send(handle.bytes, sizeof(handle.bytes)));
  ASSERT_NO_FATAL_FAILURE(acceptOn(peer, *listenComm, recvComm));
}

void connectRemote(Peer& peer, void** sendComm) {
  Handle handle;
  ASSERT_TRUE(peer.channel->recv(handle.bytes, sizeof(handle.bytes)));
  ASSERT_NO_FATAL_FAILURE(connectTo(peer, &handle, sendComm));
}

void regHost(Peer& peer, void* comm, void* data, size_t size, void** mhandle) {
  *mhandle = nullptr;
  ASSERT_EQ(peer.net->regMr(comm, data, size, abi::kPtrHost, mhandle), abi::kSuccess)
      << "regMr of " << size << " bytes of host memory";
  ASSERT_NE(*mhandle, nullptr) << "regMr succeeded without a handle";
}

void dereg(Peer& peer, void* comm, void* mhandle) {
  EXPECT_EQ(peer.net->deregMr(comm, mhandle), abi::kSuccess);
}

void postSend(Peer& peer, void* sendComm, void* data, int size, int tag, void* mhandle,
              void** request) {
  *request = nullptr;
  Deadline deadline(kOpTimeoutSec);
  for (int spins = 0; *request == nullptr; ++spins) {
    ASSERT_EQ(peer.net->isend(sendComm, data, size, tag, mhandle, request), abi::kSuccess)
        << "isend of " << size << " bytes, tag " << tag;
    ASSERT_FALSE(deadline.expired()) << "isend kept returning a NULL request";
    backoff(spins);
  }
}

void postRecv(Peer& peer, void* recvComm, void* data, int size, int tag, void* mhandle,
              void** request) {
  postRecvGroup(peer, recvComm, 1, &data, &size, &tag, &mhandle, request);
}

void postRecvGroup(Peer& peer, void* recvComm, int n, void** data, int* sizes, int* tags,
                   void** mhandles, void** request) {
  *request = nullptr;
  Deadline deadline(kOpTimeoutSec);
  for (int spins = 0; *request == nullptr; ++spins) {
    ASSERT_EQ(peer.net->irecv(recvComm, n, data, sizes, tags, mhandles, request), abi::kSuccess)
        << "irecv of " << n << " buffers, first " << sizes[0] << " bytes";
    ASSERT_FALSE(deadline.expired()) << "irecv kept returning a NULL request";
    backoff(spins);
  }
}

Outcome pollRequest(Peer& peer, void* request, int* sizes, double timeoutSec) {
  Outcome outcome;
  Deadline deadline(timeoutSec);
  int scratch[64];
  for (int spins = 0;; ++spins) {
    int done = 0;
    abi::Result result = peer.net->test(request, &done, sizes != nullptr ? sizes : scratch);
    if (result != abi::kSuccess) {
      outcome.result = result;
      outcome.done = done != 0;
      return outcome;
    }
    if (done != 0) {
      outcome.done = true;
      return outcome;
    }
    if (deadline.expired()) {
      outcome.timedOut = true;
      return outcome;
    }
    backoff(spins);
  }
}

void waitDone(Peer& peer, void* request, int* sizes) {
  Outcome outcome = pollRequest(peer, request, sizes);
  ASSERT_FALSE(outcome.timedOut) << "request " << request << " not done in " << kOpTimeoutSec
                                 << " s";
  ASSERT_EQ(outcome.result, abi::kSuccess) << "test failed for request " << request;
  ASSERT_TRUE(outcome.done);
}

void waitAll(Peer& peer, const std::vector<void*>& requests, std::vector<int>* sizes) {
  sizes->assign(requests.size(), -1);
  std::vector<bool> done(requests.size(), false);
  size_t left = requests.size();
  Deadline deadline(kOpTimeoutSec);
  int scratch[64];
  for (int spins = 0; left > 0; ++spins) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;  // a completed request is freed: never test it again
      int finished = 0;
      abi::Result result = peer.net->test(requests[i], &finished, scratch);
      ASSERT_EQ(result, abi::kSuccess)
          << "test failed for request " << i << " of " << requests.size();
      if (finished != 0) {
        done[i] = true;
        (*sizes)[i] = scratch[0];
        --left;
      }
    }
    ASSERT_FALSE(deadline.expired())
        << left << " of " << requests.size() << " requests not done in " << kOpTimeoutSec << " s";
    backoff(spins);
  }
}

void closeSend(Peer& peer, void* comm) {
  EXPECT_EQ(peer.net->closeSend(comm), abi::kSuccess);
}
void closeRecv(Peer& peer, void* comm) {
  EXPECT_EQ(peer.net->closeRecv(comm), abi::kSuccess);
}
void closeListen(Peer& peer, void* comm) {
  EXPECT_EQ(peer.net->closeListen(comm), abi::kSuccess);
}

Progressor::Progressor(Peer& peer) : peer_(peer) {
  Handle handle;
  listenOn(peer, &handle, &listen_);
  thread_ = std::thread([this] {
    while (!stop_) {
      void* none = nullptr;
      abi::NetDeviceHandleV8* devComm = nullptr;
      EXPECT_EQ(peer_.net->accept(listen_, &none, &devComm), abi::kSuccess);
      EXPECT_EQ(none, nullptr);
      std::this_thread::yield();
    }
  });
}

Progressor::~Progressor() {
  stop_ = true;
  thread_.join();
  closeListen(peer_, listen_);
}

void transferOnFreshPair(Peer& peer, uint8_t* out, uint8_t* in, int size, uint64_t message) {
  constexpr int kTag = 0x51;
  Handle handle;
  void *listen, *send, *recv;
  ASSERT_NO_FATAL_FAILURE(listenOn(peer, &handle, &listen));
  ASSERT_NO_FATAL_FAILURE(connectLocal(peer, listen, &handle, &send, &recv));
  fillPattern(out, size, message);
  void *sendMh, *recvMh, *sendReq, *recvReq;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, send, out, size, &sendMh));
  ASSERT_NO_FATAL_FAILURE(regHost(peer, recv, in, size, &recvMh));
  ASSERT_NO_FATAL_FAILURE(postRecv(peer, recv, in, size, kTag, recvMh, &recvReq));
  ASSERT_NO_FATAL_FAILURE(postSend(peer, send, out, size, kTag, sendMh, &sendReq));
  std::vector<int> sizes;
  ASSERT_NO_FATAL_FAILURE(waitAll(peer, {recvReq, sendReq}, &sizes));
  ASSERT_EQ(sizes[0], size);
  ASSERT_TRUE(verifyPattern(in, size, message));
  dereg(peer, send, sendMh);
  dereg(peer, recv, recvMh);
  closeSend(peer, send);
  closeRecv(peer, recv);
  closeListen(peer, listen);
}

void receiveEachInTurn(Peer& peer, const std::vector<int>& sizes, int tag, size_t tail) {
  void *listen, *comm;
  ASSERT_NO_FATAL_FAILURE(acceptRemote(peer, &listen, &comm));
  const size_t largest = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  HostBuffer buffer(largest + tail);
  void* mh;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " B");
    fillSentinel(buffer.data(), sizes[i] + tail);
    void* request;
    ASSERT_NO_FATAL_FAILURE(postRecv(peer, comm, buffer.data(), sizes[i], tag, mh, &request));
    int size = -1;
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, &size));
    EXPECT_EQ(size, sizes[i]);
    EXPECT_TRUE(verifyPattern(buffer.data(), sizes[i], i));
    EXPECT_TRUE(verifySentinel(buffer.data() + sizes[i], tail));
  }
  dereg(peer, comm, mh);
  closeRecv(peer, comm);
  closeListen(peer, listen);
}

void sendEachInTurn(Peer& peer, const std::vector<int>& sizes, int tag) {
  void* comm;
  ASSERT_NO_FATAL_FAILURE(connectRemote(peer, &comm));
  // Allocated and registered once, like NCCL's buffers; each message uses a prefix.
  HostBuffer buffer(static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end())));
  void* mh;
  ASSERT_NO_FATAL_FAILURE(regHost(peer, comm, buffer.data(), buffer.size(), &mh));
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " B");
    fillPattern(buffer.data(), sizes[i], i);
    void* request;
    ASSERT_NO_FATAL_FAILURE(postSend(peer, comm, buffer.data(), sizes[i], tag, mh, &request));
    ASSERT_NO_FATAL_FAILURE(waitDone(peer, request, nullptr));
  }
  dereg(peer, comm, mh);
  closeSend(peer, comm);
}

}  // namespace nnf::test
