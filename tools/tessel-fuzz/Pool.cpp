//===- Pool.cpp - fuzz programs in child processes with a watchdog --------===//
//
// A child reports through a pipe: "C\n" once it has compiled, then
// "R<kind>\n<message>" at the end. Anything else (no report, a signal) is a
// crash, described by its exit status and the end of its stderr.
//
//===----------------------------------------------------------------------===//
#include "Pool.h"

#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <poll.h>
#include <signal.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace tessel::fuzz;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Child {
  uint64_t id = 0;
  pid_t pid = -1;
  int fd = -1;
  std::string report, logPath;
  double phaseStart = 0;
  bool compiled = false;
};

void writeAll(int fd, const std::string &text) {
  for (size_t at = 0; at < text.size();) {
    ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n <= 0) return;
    at += size_t(n);
  }
}

Child spawn(const Task &task, const std::string &scratch) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  Child c;
  c.id = task.id;
  c.logPath = fmt::format("{}/child-{}.log", scratch, task.id);
  std::fflush(nullptr);
  c.pid = ::fork();
  if (c.pid == 0) {
    ::close(fds[0]);
    int log = ::open(c.logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) ::dup2(log, 1), ::dup2(log, 2);
    int out = fds[1];
    Outcome o = task.work([&] { writeAll(out, "C\n"); });
    writeAll(out, fmt::format("R{}\n{}", int(o.kind), o.message));
    std::fflush(nullptr);
    ::_exit(0);
  }
  ::close(fds[1]);
  c.fd = fds[0];
  c.phaseStart = now();
  return c;
}

std::string tail(const std::string &path, size_t bytes = 3000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  return text.size() > bytes ? "..." + text.substr(text.size() - bytes) : text;
}

Outcome finish(Child &c, int status, bool killed, const Limits &limits) {
  ::close(c.fd);
  Outcome o;
  std::string body = c.report.rfind("C\n", 0) == 0 ? c.report.substr(2) : c.report;
  if (killed) {
    o = {Outcome::hung, c.compiled ? fmt::format("the run did not finish within {} s", limits.runSeconds)
                                   : fmt::format("compiling did not finish within {} s", limits.compileSeconds)};
  } else if (body.rfind("R", 0) == 0) {
    size_t eol = body.find('\n');
    o.kind = Outcome::Kind(std::atoi(body.substr(1, eol - 1).c_str()));
    o.message = eol == std::string::npos ? "" : body.substr(eol + 1);
  } else if (WIFSIGNALED(status)) {
    o = {Outcome::crashed, fmt::format("{} {}: killed by signal {} ({})\n{}",
                                       c.compiled ? "running" : "compiling", c.id, WTERMSIG(status),
                                       strsignal(WTERMSIG(status)), tail(c.logPath))};
  } else {
    o = {Outcome::crashed, fmt::format("{}: exited with status {} without a report\n{}",
                                       c.compiled ? "running" : "compiling", WEXITSTATUS(status), tail(c.logPath))};
  }
  if (o.kind != Outcome::passed && o.kind != Outcome::crashed) {
    std::string log = tail(c.logPath, 1500);
    if (!log.empty()) o.message += "\nchild's output:\n" + log;
  }
  std::filesystem::remove(c.logPath);
  return o;
}

} // namespace

void tessel::fuzz::runPool(const std::function<std::optional<Task>()> &next, int jobs, const Limits &limits,
                           const std::string &scratch,
                           const std::function<void(uint64_t, const Outcome &)> &done) {
  std::vector<Child> running;
  bool more = true;
  while (true) {
    while (more && int(running.size()) < jobs) {
      std::optional<Task> task = next();
      if (!task) more = false;
      else running.push_back(spawn(*task, scratch));
    }
    if (running.empty()) return;
    std::vector<pollfd> fds;
    for (const Child &c : running) fds.push_back({c.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    for (size_t i = running.size(); i-- > 0;) {
      Child &c = running[i];
      bool ended = false, killed = false;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buffer[4096];
        ssize_t n = ::read(c.fd, buffer, sizeof(buffer));
        if (n > 0) c.report.append(buffer, size_t(n));
        else ended = true;
        if (!c.compiled && c.report.rfind("C\n", 0) == 0) {
          c.compiled = true;
          c.phaseStart = now();
        }
      }
      double limit = c.compiled ? limits.runSeconds : limits.compileSeconds;
      if (!ended && now() - c.phaseStart > limit) {
        ::kill(c.pid, SIGKILL);
        ended = killed = true;
      }
      if (!ended) continue;
      int status = 0;
      ::waitpid(c.pid, &status, 0);
      Outcome o = finish(c, status, killed, limits);
      uint64_t id = c.id;
      running.erase(running.begin() + i);
      done(id, o);
    }
  }
}

Outcome tessel::fuzz::runIsolated(const Task &task, const Limits &limits, const std::string &scratch) {
  Outcome result;
  bool given = false;
  runPool([&]() -> std::optional<Task> {
            if (given) return std::nullopt;
            given = true;
            return task;
          },
          1, limits, scratch, [&](uint64_t, const Outcome &o) { result = o; });
  return result;
}
