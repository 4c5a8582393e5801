// The calling side of a simulation: a child process runs SimGrid, the parent reads its
// progress and result from a pipe.
#include "sim/simulate.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <spawn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>

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
                         {"ranks_waiting", i.ranks_waiting}, {"ranks", i.ranks}, {"partitioned", i.partitioned}};
  }
  if (r.reroute) {
    j["reroute"] = {{"target", r.reroute->target}, {"at_s", r.reroute->at_s}, {"reroute_s", r.reroute->reroute_s}, {"flows_moved", r.reroute->flows_moved}};
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
    r.interruption = Interruption{i.at("target"), i.at("at_s"),  i.at("stalled_s"), i.at("ranks_stopped"), i.at("ranks_waiting"),
                                  i.at("ranks"),  i.at("partitioned")};
  }
  if (j.contains("reroute")) {
    const auto& x = j.at("reroute");
    r.reroute = Reroute{x.at("target"), x.at("at_s"), x.at("reroute_s"), x.at("flows_moved")};
  }
  r.error = j.at("error").get<std::string>();
  return r;
}

namespace {

nlohmann::json options_to_json(const SimulateOptions& o) {
  nlohmann::json j = {{"free_communication", o.free_communication}, {"trace_path", o.trace_path}, {"trace_ranks", o.trace_ranks},
                      {"fine", o.fine}, {"per_message", o.per_message}, {"mirror_alike", o.mirror_alike}, {"max_played_actors", o.max_played_actors}, {"inject_death", o.inject_death}};
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
  o.inject_death = j.value("inject_death", std::string());
  o.mirror_alike = j.at("mirror_alike").get<bool>();
  o.max_played_actors = j.value("max_played_actors", kDefaultMaxPlayedActors);
  if (j.contains("failure")) o.failure = SimulateOptions::Failure{j["failure"].at("target").get<std::string>(), j["failure"].at("at_s").get<double>()};
  return o;
}

// Starts `worker __simulate-worker` with the request on its stdin (written through a pipe by
// a thread-free loop here: the request is small) and its stdout on `out_fd`'s other end.
pid_t spawn_worker(const std::string& worker, const std::string& request, int stdout_write_end, int stdout_read_end, const std::string& log_path,
                   std::string& error) {
  int in[2];
  if (::pipe2(in, O_CLOEXEC) != 0) {
    error = std::string("cannot create a pipe for the simulation worker: ") + std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stdout_write_end, STDOUT_FILENO);
  if (!log_path.empty() && std::getenv("MESHWORK_SIM_DEBUG") == nullptr) posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(), O_WRONLY | O_NOFOLLOW, 0644);
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


// The child's messages go to a file of their own: a death's backtrace is kept for the user
// instead of scrolling past (or into) the parent's output.
std::string default_child_log(const plan::Plan& plan) {
  std::string name;
  for (char c : plan.name.substr(0, 64)) name += (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_') ? c : '_';
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  // The pid and a counter: the GUI runs several simulations of one plan from one process.
  static std::atomic<unsigned> serial{0};
  return (dir / ("meshwork-simulate-" + (name.empty() ? std::string("plan") : name) + "-" + std::to_string(::getpid()) + "-" +
                 std::to_string(serial.fetch_add(1)) + ".log"))
      .string();
}

// Creates the log afresh (never through a link planted at its name); false when it cannot be,
// and the simulation process then keeps its parent's stderr.
bool create_child_log(const std::string& path) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// The fault injection of SimulateOptions::inject_death, in the simulation process.
void die_as_asked(const std::string& how) {
  if (how == "abort") {
    std::fprintf(stderr, "[0.000000] /build/simgrid/src/kernel/EngineImpl.cpp:123: [root/CRITICAL] Assertion `injected' failed: fault injection\n");
    std::fflush(stderr);
    std::raise(SIGABRT);
  } else if (how == "kill") {
    std::raise(SIGKILL);
  } else if (how == "bad_alloc") {
    throw std::bad_alloc();
  }
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    default: return "signal " + std::to_string(sig);
  }
}

// The first line of `text` holding any of `needles`, trimmed, or "".
std::string line_with(const std::string& text, std::initializer_list<const char*> needles) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    for (const char* n : needles) {
      if (line.find(n) != std::string::npos) return line.substr(0, 300);
    }
  }
  return "";
}

long max_map_count() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  long n = 0;
  return (in >> n) ? n : 0;
}

}  // namespace

std::string explain_child_death(int status, const std::string& log, const std::string& log_path) {
  std::string how = WIFSIGNALED(status) ? "died of " + signal_name(WTERMSIG(status))
                    : WIFEXITED(status) ? "ended without a result (exit status " + std::to_string(WEXITSTATUS(status)) + ")"
                                        : "ended without a result";
  std::string cause, todo;
  const std::string memory = line_with(log, {"std::bad_alloc", "out of memory", "Out of memory", "Cannot allocate memory", "failed to allocate"});
  const std::string mappings = line_with(log, {"max_map_count", "mmap", "ERROR: AddressSanitizer failed to allocate"});
  const std::string assertion = line_with(log, {"Assertion", "xbt_assert", "[root/CRITICAL]", "terminate called"});
  if (!mappings.empty() && (mappings.find("mmap") != std::string::npos || mappings.find("max_map_count") != std::string::npos)) {
    cause = "the kernel's limit on memory mappings (vm.max_map_count " + std::to_string(max_map_count()) + "; the simulator's actors each map a stack): \"" + mappings + "\"";
    todo = "raise the limit (sysctl -w vm.max_map_count=1048576) or simulate a smaller plan";
  } else if (!memory.empty()) {
    cause = "out of memory: \"" + memory + "\"";
    todo = "simulate on a machine with more memory, or price the plan with `meshwork estimate`";
  } else if (!assertion.empty()) {
    cause = "a SimGrid assertion: \"" + assertion + "\"";
    todo = "report it with the plan and the log; `meshwork estimate` prices the plan meanwhile";
  } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
    cause = "killed from outside, most likely by the kernel's out-of-memory killer (dmesg says)";
    todo = "simulate on a machine with more memory, or price the plan with `meshwork estimate`";
  } else {
    cause = "no cause in its messages";
    todo = "report it with the plan and the log";
  }
  std::string out = "the simulation process " + how + ": " + cause + "; " + todo;
  if (!log_path.empty()) out += " (its messages and backtrace are in " + log_path + ")";
  return out;
}

int run_worker(std::string_view request, int out_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // ends with its caller, as the forked child (simulate below)
  SimulateResult r;
  try {
    const auto j = nlohmann::json::parse(request);
    const plan::LoadResult loaded = plan::load_plan_json(j.at("plan"));
    if (!loaded.ok()) {
      r.error = "the worker could not load the plan: " + plan::format(loaded.diagnostics.items().front());
    } else {
      ::mallopt(M_MMAP_THRESHOLD, 1 << 30);  // as the forked child (simulate below)
      ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
      const SimulateOptions o = options_from_json(j.at("options"));
      die_as_asked(o.inject_death);
      r = simulate_here(loaded.plan, o, out_fd);
    }
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "simulation failed: std::bad_alloc (out of memory)\n");
    return 4;  // the parent explains it from the log
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
  std::string log_path = options.child_log.empty() ? default_child_log(plan) : options.child_log;
  if (!create_child_log(log_path)) log_path.clear();
  if (!options.worker.empty()) {
    const std::string request = nlohmann::json{{"plan", plan::to_json(plan)}, {"options", options_to_json(options)}}.dump() + "\n";
    child = spawn_worker(options.worker, request, fds[1], fds[0], log_path, failed.error);
    if (child < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return failed;
    }
  } else {
    const pid_t parent = ::getpid();
    child = ::fork();
    if (child == 0) {
      // The simulation ends with its caller: killed (a timeout, Ctrl-C), the caller would
      // otherwise leave it running on until its next progress line met a closed pipe.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
    }
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
    // MESHWORK_SIM_DEBUG: the engine's phase timings go to the caller's stderr, not the log.
    const bool debug = std::getenv("MESHWORK_SIM_DEBUG") != nullptr;
    if (const int log = log_path.empty() || debug ? -1 : ::open(log_path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC); log >= 0) {
      ::dup2(log, STDERR_FILENO);
      ::close(log);
    }
    // The child lives for one simulation: keep freed memory for reuse instead of handing
    // large blocks back to the kernel and faulting fresh pages in for the next (the
    // per-operation Program of a long pipeline is hundreds of MB, built then coarsened).
    // glibc's setting: a program linked against jemalloc (cmake/MeshworkOptions.cmake) keeps
    // freed pages for a while by itself, and these change nothing.
    ::mallopt(M_MMAP_THRESHOLD, 1 << 30);
    ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
    SimulateOptions mine = options;
    mine.progress = nullptr;
    mine.cancel = nullptr;
    SimulateResult r;
    try {
      die_as_asked(mine.inject_death);
      r = simulate_here(plan, mine, fds[1]);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "simulation failed: std::bad_alloc (out of memory)\n");
      ::_exit(4);  // the parent explains it from the log
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
  std::error_code ec;
  if (cancelled) {
    if (!log_path.empty()) std::filesystem::remove(log_path, ec);
    failed.error = "cancelled";
    return failed;
  }
  if (result_line.empty()) {
    std::stringstream text;
    if (!log_path.empty()) {
      std::ifstream in(log_path, std::ios::binary);
      text << in.rdbuf();
    }
    failed.error = explain_child_death(status, text.str(), log_path);
    failed.child_log = log_path;
    return failed;
  }
  if (!log_path.empty()) std::filesystem::remove(log_path, ec);
  try {
    return result_from_json(result_line);
  } catch (const std::exception& e) {
    failed.error = std::string("unreadable result from the simulation process: ") + e.what();
    return failed;
  }
}

}  // namespace meshwork::sim
