// The calling side of a simulation: a child process runs SimGrid, the parent reads its
// progress and result from a pipe.
#include "sim/simulate.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <spawn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "plan/plan_io.hpp"
#include "report/report_io.hpp"

extern char** environ;

namespace meshwork::sim {
namespace {

// Writes all of `text` (a pipe may take it in pieces).
bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::string result_to_json(const SimulateResult& r) {
  nlohmann::json j;
  if (r.report) j["report"] = report::to_json(*r.report);
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : r.hottest_links) links.push_back({{"name", l.name}, {"busy_fraction", l.busy_fraction}, {"bytes", l.bytes}});
  j["hottest_links"] = links;
  j["flows"] = r.flows;
  j["played_actors"] = r.played_actors;
  if (r.interruption) {
    const auto& i = *r.interruption;
    j["interruption"] = {{"target", i.target},       {"at_s", i.at_s},   {"stalled_s", i.stalled_s}, {"ranks_stopped", i.ranks_stopped},
                         {"ranks_waiting", i.ranks_waiting}, {"ranks", i.ranks}};
  }
  j["error"] = r.error;
  return j.dump();
}

SimulateResult result_from_json(const std::string& text) {
  SimulateResult r;
  const auto j = nlohmann::json::parse(text);
  if (j.contains("report")) r.report = report::from_json(j.at("report"));
  for (const auto& l : j.at("hottest_links")) {
    r.hottest_links.push_back({l.at("name").get<std::string>(), l.at("busy_fraction").get<double>(), l.at("bytes").get<double>()});
  }
  r.flows = j.at("flows").get<std::int64_t>();
  r.played_actors = j.at("played_actors").get<std::int64_t>();
  if (j.contains("interruption")) {
    const auto& i = j.at("interruption");
    r.interruption = Interruption{i.at("target"), i.at("at_s"), i.at("stalled_s"), i.at("ranks_stopped"), i.at("ranks_waiting"), i.at("ranks")};
  }
  r.error = j.at("error").get<std::string>();
  return r;
}

namespace {

nlohmann::json options_to_json(const SimulateOptions& o) {
  nlohmann::json j = {{"free_communication", o.free_communication}, {"trace_path", o.trace_path}, {"trace_ranks", o.trace_ranks},
                      {"fine", o.fine}, {"per_message", o.per_message}, {"mirror_alike", o.mirror_alike}};
  if (o.failure) j["failure"] = {{"target", o.failure->target}, {"at_s", o.failure->at_s}};
  return j;
}

SimulateOptions options_from_json(const nlohmann::json& j) {
  SimulateOptions o;
  o.free_communication = j.at("free_communication").get<bool>();
  o.trace_path = j.at("trace_path").get<std::string>();
  o.trace_ranks = j.at("trace_ranks").get<std::vector<std::int64_t>>();
  o.fine = j.at("fine").get<bool>();
  o.per_message = j.at("per_message").get<bool>();
  o.mirror_alike = j.at("mirror_alike").get<bool>();
  if (j.contains("failure")) o.failure = SimulateOptions::Failure{j["failure"].at("target").get<std::string>(), j["failure"].at("at_s").get<double>()};
  return o;
}

// Starts `worker __simulate-worker` with the request on its stdin (written through a pipe by
// a thread-free loop here: the request is small) and its stdout on `out_fd`'s other end.
pid_t spawn_worker(const std::string& worker, const std::string& request, int stdout_write_end, int stdout_read_end, std::string& error) {
  int in[2];
  if (::pipe2(in, O_CLOEXEC) != 0) {
    error = std::string("cannot create a pipe for the simulation worker: ") + std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stdout_write_end, STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, in[1]);
  posix_spawn_file_actions_addclose(&actions, stdout_read_end);
  std::string arg0 = worker, arg1 = "__simulate-worker";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, worker.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  if (rc != 0) {
    ::close(in[1]);
    error = "cannot start the simulation worker " + worker + ": " + std::strerror(rc);
    return -1;
  }
  const bool sent = write_all(in[1], request);
  ::close(in[1]);
  if (!sent) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    error = "cannot send the plan to the simulation worker " + worker;
    return -1;
  }
  return pid;
}

}  // namespace

int run_worker(std::string_view request, int out_fd) {
  SimulateResult r;
  try {
    const auto j = nlohmann::json::parse(request);
    const plan::LoadResult loaded = plan::load_plan_json(j.at("plan"));
    if (!loaded.ok()) {
      r.error = "the worker could not load the plan: " + plan::format(loaded.diagnostics.items().front());
    } else {
      ::mallopt(M_MMAP_THRESHOLD, 1 << 30);  // as the forked child (simulate below)
      ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
      r = simulate_here(loaded.plan, options_from_json(j.at("options")), out_fd);
    }
  } catch (const std::exception& e) {
    r.error = std::string("simulation failed: ") + e.what();
  }
  return write_all(out_fd, "result " + result_to_json(r) + "\n") ? 0 : 3;
}

SimulateResult simulate(const plan::Plan& plan, const SimulateOptions& options) {
  SimulateResult failed;
  int fds[2];
  // Close-on-exec: a worker started by another thread must not hold our pipe open.
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    failed.error = std::string("cannot create a pipe for the simulation: ") + std::strerror(errno);
    return failed;
  }
  pid_t child = -1;
  if (!options.worker.empty()) {
    const std::string request = nlohmann::json{{"plan", plan::to_json(plan)}, {"options", options_to_json(options)}}.dump() + "\n";
    child = spawn_worker(options.worker, request, fds[1], fds[0], failed.error);
    if (child < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return failed;
    }
  } else {
    child = ::fork();
  }
  if (child < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    failed.error = std::string("cannot start the simulation process: ") + std::strerror(errno);
    return failed;
  }
  if (child == 0) {
    // The child: simulate, send the result, and end without running the parent's atexit
    // handlers or flushing its buffers a second time.
    ::close(fds[0]);
    // The child lives for one simulation: keep freed memory for reuse instead of handing
    // large blocks back to the kernel and faulting fresh pages in for the next (the
    // per-operation Program of a long pipeline is hundreds of MB, built then coarsened).
    ::mallopt(M_MMAP_THRESHOLD, 1 << 30);
    ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
    SimulateOptions mine = options;
    mine.progress = nullptr;
    mine.cancel = nullptr;
    SimulateResult r;
    try {
      r = simulate_here(plan, mine, fds[1]);
    } catch (const std::exception& e) {
      r.error = std::string("simulation failed: ") + e.what();
    }
    const bool ok = write_all(fds[1], "result " + result_to_json(r) + "\n");
    ::close(fds[1]);
    ::_exit(ok ? 0 : 3);
  }
  ::close(fds[1]);
  std::string buffer, result_line;
  bool cancelled = false;
  char chunk[65536];
  for (;;) {
    if (options.cancel != nullptr && options.cancel->load()) {
      ::kill(child, SIGKILL);
      cancelled = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child closed its end
    buffer.append(chunk, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (line.rfind("progress ", 0) == 0) {
        if (options.progress) options.progress(std::strtod(line.c_str() + 9, nullptr));
      } else if (line.rfind("result ", 0) == 0) {
        result_line = line.substr(7);
      }
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (cancelled) {
    failed.error = "cancelled";
    return failed;
  }
  if (result_line.empty()) {
    failed.error = WIFSIGNALED(status) ? "the simulation process died (signal " + std::to_string(WTERMSIG(status)) + ")"
                                       : "the simulation process ended without a result (exit status " +
                                             std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
    return failed;
  }
  try {
    return result_from_json(result_line);
  } catch (const std::exception& e) {
    failed.error = std::string("unreadable result from the simulation process: ") + e.what();
    return failed;
  }
}

}  // namespace meshwork::sim
