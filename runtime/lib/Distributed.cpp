//===- Distributed.cpp - ranks, their launch and the node bootstrap -------===//
#include "tessel/runtime/Distributed.h"
#include "tessel/runtime/Error.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>
#include <iostream>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace tessel;
using namespace tessel::rt;

//===----------------------------------------------------------------------===//
// The environment
//===----------------------------------------------------------------------===//

RankInfo rt::rankInfoFromEnvironment(const std::function<const char *(const char *)> &getenv) {
  auto integer = [&](const char *name, bool required, int fallback) {
    const char *text = getenv(name);
    if (!text || !*text) {
      if (required) throw Error(fmt::format("{} is not set (RANK is: the launcher must set both)", name));
      return fallback;
    }
    int value = 0;
    auto [end, ec] = std::from_chars(text, text + std::strlen(text), value);
    if (ec != std::errc() || *end || value < 0)
      throw Error(fmt::format("{}={} is not a non-negative integer", name, text));
    return value;
  };
  RankInfo info;
  const char *rank = getenv("RANK");
  if (!rank || !*rank) return info; // one process, one rank
  info.rank = integer("RANK", true, 0);
  info.worldSize = integer("WORLD_SIZE", true, 1);
  info.localRank = integer("LOCAL_RANK", true, 0);
  info.localWorldSize = integer("LOCAL_WORLD_SIZE", true, 1);
  if (info.worldSize < 1 || info.rank >= info.worldSize)
    throw Error(fmt::format("RANK={} is outside WORLD_SIZE={}", info.rank, info.worldSize));
  if (info.localWorldSize < 1 || info.localRank >= info.localWorldSize)
    throw Error(fmt::format("LOCAL_RANK={} is outside LOCAL_WORLD_SIZE={}", info.localRank,
                            info.localWorldSize));
  if (info.localWorldSize > info.worldSize || info.worldSize % info.localWorldSize)
    throw Error(fmt::format("LOCAL_WORLD_SIZE={} does not divide WORLD_SIZE={} into nodes",
                            info.localWorldSize, info.worldSize));
  auto text = [&](const char *name) {
    const char *v = getenv(name);
    return std::string(v ? v : "");
  };
  if (!text("TESSEL_JOB_ID").empty()) info.jobId = text("TESSEL_JOB_ID");
  else if (!text("TORCHELASTIC_RUN_ID").empty())
    info.jobId = text("TORCHELASTIC_RUN_ID") + "-" + text("MASTER_PORT");
  else if (!text("MASTER_PORT").empty())
    info.jobId = text("MASTER_ADDR") + "-" + text("MASTER_PORT");
  else if (info.localWorldSize > 1)
    throw Error("the ranks of a node need a common job id to meet: set TESSEL_JOB_ID (or start "
                "them with torchrun, which sets TORCHELASTIC_RUN_ID and MASTER_PORT)");
  return info;
}

//===----------------------------------------------------------------------===//
// Socket plumbing
//===----------------------------------------------------------------------===//

namespace {
[[noreturn]] void systemError(const std::string &what) {
  throw Error(fmt::format("{}: {}", what, std::strerror(errno)));
}

/// Waits until `fd` is readable (or writable), at most `seconds`.
void waitFor(int fd, short events, double seconds, const std::string &who) {
  pollfd p{fd, events, 0};
  int ms = static_cast<int>(seconds * 1000);
  while (true) {
    int n = ::poll(&p, 1, ms);
    if (n > 0) return;
    if (n == 0)
      throw Error(fmt::format("bootstrap: {} sent nothing for {} s (set TESSEL_BOOTSTRAP_TIMEOUT "
                              "to wait longer)", who, seconds));
    if (errno != EINTR) systemError("bootstrap: poll");
  }
}

void sendAll(int fd, const void *data, size_t n, const std::string &who) {
  auto *p = static_cast<const char *>(data);
  while (n) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) systemError(fmt::format("bootstrap: sending to {}", who));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void recvAll(int fd, void *data, size_t n, double timeout, const std::string &who) {
  auto *p = static_cast<char *>(data);
  while (n) {
    waitFor(fd, POLLIN, timeout, who);
    ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) throw Error(fmt::format("bootstrap: {} closed its connection (did it exit?)", who));
    if (k < 0) systemError(fmt::format("bootstrap: receiving from {}", who));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void sendRecord(int fd, const std::string &bytes, const std::string &who) {
  uint64_t n = bytes.size();
  sendAll(fd, &n, sizeof(n), who);
  sendAll(fd, bytes.data(), bytes.size(), who);
}

std::string recvRecord(int fd, double timeout, const std::string &who) {
  uint64_t n = 0;
  recvAll(fd, &n, sizeof(n), timeout, who);
  if (n > (uint64_t{1} << 30)) throw Error(fmt::format("bootstrap: {} sent a {}-byte record", who, n));
  std::string bytes(n, '\0');
  recvAll(fd, bytes.data(), n, timeout, who);
  return bytes;
}

/// One byte carrying `fds` as SCM_RIGHTS.
void sendFds(int socket, const std::vector<int> &fds, const std::string &who) {
  char byte = 'F';
  iovec iov{&byte, 1};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  while (::sendmsg(socket, &msg, MSG_NOSIGNAL) < 0)
    if (errno != EINTR) systemError(fmt::format("bootstrap: passing descriptors to {}", who));
}

std::vector<int> recvFds(int socket, size_t count, double timeout, const std::string &who) {
  char byte = 0;
  iovec iov{&byte, 1};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * count));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  waitFor(socket, POLLIN, timeout, who);
  ssize_t k;
  while ((k = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC)) < 0)
    if (errno != EINTR) systemError(fmt::format("bootstrap: receiving descriptors from {}", who));
  if (k == 0) throw Error(fmt::format("bootstrap: {} closed its connection (did it exit?)", who));
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_type != SCM_RIGHTS || (msg.msg_flags & MSG_CTRUNC) ||
      c->cmsg_len != CMSG_LEN(sizeof(int) * count))
    throw Error(fmt::format("bootstrap: {} sent no (or not {}) descriptors", who, count));
  std::vector<int> fds(count);
  std::memcpy(fds.data(), CMSG_DATA(c), sizeof(int) * count);
  return fds;
}

std::string rankName(int r) { return fmt::format("local rank {}", r); }

sockaddr_un abstractAddress(const std::string &name, socklen_t &length) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file, gone with the socket.
  std::string path = std::string(1, '\0') + name.substr(0, sizeof(addr.sun_path) - 2);
  std::memcpy(addr.sun_path, path.data(), path.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  return addr;
}
} // namespace

//===----------------------------------------------------------------------===//
// NodeChannel
//===----------------------------------------------------------------------===//

NodeChannel::NodeChannel(const RankInfo &info, double timeoutSeconds)
    : rank(info.localRank), ranks(info.localWorldSize), timeout(timeoutSeconds) {
  if (timeout <= 0) {
    timeout = 120;
    if (const char *t = std::getenv("TESSEL_BOOTSTRAP_TIMEOUT"); t && *t) timeout = std::atof(t);
    if (timeout <= 0) throw Error("TESSEL_BOOTSTRAP_TIMEOUT must be a positive number of seconds");
  }
  if (ranks == 1) return;
  name = "tessel-" + info.jobId;
  socklen_t length = 0;
  sockaddr_un addr = abstractAddress(name, length);
  if (rank == 0) {
    listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) systemError("bootstrap: socket");
    if (::bind(listener, reinterpret_cast<sockaddr *>(&addr), length) < 0)
      systemError(fmt::format("bootstrap: binding @{} (another job with the same id?)", name));
    if (::listen(listener, ranks) < 0) systemError("bootstrap: listen");
    peers.assign(ranks, -1);
    for (int accepted = 1; accepted < ranks; ++accepted) {
      waitFor(listener, POLLIN, timeout,
              fmt::format("{} of the {} other local ranks", ranks - accepted, ranks - 1));
      int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) systemError("bootstrap: accept");
      int32_t who = -1;
      recvAll(fd, &who, sizeof(who), timeout, "a connecting rank");
      if (who <= 0 || who >= ranks || peers[who] >= 0) {
        ::close(fd);
        throw Error(fmt::format("bootstrap: a process claiming local rank {} joined job {} (of {} "
                                "local ranks): is another job using the same id?",
                                who, info.jobId, ranks));
      }
      peers[who] = fd;
    }
    return;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) systemError("bootstrap: socket");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  while (::connect(fd, reinterpret_cast<sockaddr *>(&addr), length) < 0) {
    if (errno != ECONNREFUSED && errno != ENOENT && errno != EINTR && errno != EAGAIN) {
      ::close(fd);
      systemError(fmt::format("bootstrap: connecting to @{}", name));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::close(fd);
      throw Error(fmt::format("bootstrap: local rank 0 of job {} did not open @{} within {} s",
                              info.jobId, name, timeout));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int32_t me = rank;
  sendAll(fd, &me, sizeof(me), rankName(0));
  peers = {fd};
}

NodeChannel::~NodeChannel() {
  for (int fd : peers)
    if (fd >= 0) ::close(fd);
  if (listener >= 0) ::close(listener);
}

std::vector<std::string> NodeChannel::allGather(const std::string &bytes) {
  std::vector<std::string> all(ranks);
  all[rank] = bytes;
  if (ranks == 1) return all;
  if (rank != 0) {
    sendRecord(peers[0], bytes, rankName(0));
    for (int r = 0; r < ranks; ++r) all[r] = recvRecord(peers[0], timeout, rankName(0));
    return all;
  }
  for (int r = 1; r < ranks; ++r) all[r] = recvRecord(peers[r], timeout, rankName(r));
  for (int r = 1; r < ranks; ++r)
    for (const std::string &record : all) sendRecord(peers[r], record, rankName(r));
  return all;
}

std::vector<int> NodeChannel::allGatherFds(int fd) {
  if (ranks == 1) {
    int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) systemError("bootstrap: dup");
    return {own};
  }
  if (rank != 0) {
    sendFds(peers[0], {fd}, rankName(0));
    return recvFds(peers[0], ranks, timeout, rankName(0));
  }
  std::vector<int> all(ranks, -1);
  all[0] = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (all[0] < 0) systemError("bootstrap: dup");
  for (int r = 1; r < ranks; ++r) all[r] = recvFds(peers[r], 1, timeout, rankName(r))[0];
  for (int r = 1; r < ranks; ++r) sendFds(peers[r], all, rankName(r));
  return all;
}

//===----------------------------------------------------------------------===//
// Launching ranks
//===----------------------------------------------------------------------===//

namespace {
/// The ranks a launcher waits for, as its signal handler sees them. Each
/// rank leads its own process group (so that stopping one stops what it
/// started), which a signal to the launcher alone (`timeout`, a job
/// scheduler) would not reach: the launcher passes SIGTERM, SIGINT and
/// SIGHUP on to its ranks' groups, rather than leave them running with
/// nobody waiting for them.
constexpr int kMaxForwarded = 1024;
pid_t forwardTo[kMaxForwarded];
volatile sig_atomic_t forwardCount = 0, forwardedSignal = 0;

extern "C" void forwardToRanks(int sig) {
  forwardedSignal = sig;
  for (sig_atomic_t i = 0; i < forwardCount; ++i)
    if (forwardTo[i] > 0) {
      ::kill(-forwardTo[i], sig);
      ::kill(forwardTo[i], sig);
    }
}

/// Forwards the stopping signals to `children` while it lives (one
/// launcher at a time per process), and restores the handlers after.
class ForwardStopSignals {
public:
  explicit ForwardStopSignals(const std::vector<pid_t> &children) {
    forwardedSignal = 0;
    int count = 0;
    for (pid_t pid : children)
      if (count < kMaxForwarded) forwardTo[count++] = pid;
    forwardCount = count;
    struct sigaction forward {};
    forward.sa_handler = forwardToRanks;
    sigemptyset(&forward.sa_mask);
    for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &forward, &before[i]);
  }
  ~ForwardStopSignals() {
    for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &before[i], nullptr);
    forwardCount = 0;
  }
  ForwardStopSignals(const ForwardStopSignals &) = delete;
  ForwardStopSignals &operator=(const ForwardStopSignals &) = delete;

private:
  static constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
  struct sigaction before[std::size(kSignals)];
};

/// Waits for every child; when one fails, stops the others. Returns 0 or
/// the first failure's exit code; 128 + the signal when the launcher was
/// told to stop (and passed that on to the ranks).
int waitForRanks(std::vector<pid_t> children) {
  ForwardStopSignals forward(children);
  int result = 0;
  size_t left = children.size();
  while (left) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = std::find(children.begin(), children.end(), pid);
    if (it == children.end()) continue;
    *it = -1;
    // Reaped: its pid may be reused, and must not be signalled any more.
    if (size_t i = it - children.begin(); i < size_t(kMaxForwarded)) forwardTo[i] = -1;
    --left;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code && !result) {
      result = code;
      // Each rank leads its own process group: what it started goes too.
      // The rank itself is signalled as well, in case its group is gone.
      for (pid_t other : children)
        if (other > 0) {
          ::kill(-other, SIGTERM);
          ::kill(other, SIGTERM);
        }
    }
  }
  return forwardedSignal ? 128 + forwardedSignal : result;
}

/// A child in its own process group, with nothing left buffered to be
/// written twice.
pid_t forkRank() {
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  // SIGTERM and SIGINT stay blocked across the fork until the child has
  // dropped the parent's handlers: one sent in between (a rank stopped as
  // soon as it starts) then waits, and kills it as told, rather than
  // running a test framework's handler in the child, which would report the
  // parent's test as failed from there.
  sigset_t stop, before;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  ::sigprocmask(SIG_BLOCK, &stop, &before);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    systemError("fork");
  }
  // Both sides set the group: whichever runs first, the group exists
  // before the parent may need to signal it.
  if (pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
  } else {
    ::setpgid(pid, pid);
  }
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  return pid;
}

std::string freshJobId() {
  static int counter = 0;
  return fmt::format("{}-{}-{}", ::getpid(),
                     std::chrono::steady_clock::now().time_since_epoch().count(), counter++);
}

void setRankEnvironment(int rank, int ranks, const std::string &job) {
  for (const char *name : {"RANK", "LOCAL_RANK"}) ::setenv(name, std::to_string(rank).c_str(), 1);
  for (const char *name : {"WORLD_SIZE", "LOCAL_WORLD_SIZE"})
    ::setenv(name, std::to_string(ranks).c_str(), 1);
  ::setenv("TESSEL_JOB_ID", job.c_str(), 1);
}
} // namespace

int rt::launchLocalRanks(int ranks, const std::vector<std::string> &argv) {
  if (ranks < 1) throw Error(fmt::format("cannot launch {} ranks", ranks));
  if (argv.empty()) throw Error("launchLocalRanks: no program to run");
  std::string job = freshJobId();
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = forkRank();
    if (pid == 0) {
      setRankEnvironment(r, ranks, job);
      std::vector<char *> args;
      for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "tessel: cannot run %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    children.push_back(pid);
  }
  return waitForRanks(children);
}

int rt::runLocalRanks(int ranks, const std::function<int(const RankInfo &)> &body) {
  if (ranks < 1) throw Error(fmt::format("cannot run {} ranks", ranks));
  std::string job = freshJobId();
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = forkRank();
    if (pid == 0) {
      int code = 1;
      try {
        setRankEnvironment(r, ranks, job);
        code = body(rankInfoFromEnvironment());
      } catch (const std::exception &e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  return waitForRanks(children);
}
