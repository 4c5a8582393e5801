#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include "exec/backend_module.hpp"

namespace meshwork::exec {

namespace {

std::filesystem::path module_path() {
  if (const char* env = std::getenv("MESHWORK_CUDA_BACKEND"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return kCudaModuleFile;
  return exe.parent_path().parent_path() / "lib" / kCudaModuleFile;
}

struct Loaded {
  const CudaBackendModule* module = nullptr;
  std::string why;
};

Loaded load() {
  Loaded out;
  std::error_code ec;
  // Absolute: dlopen searches the library path for a name without a '/', which is not the file
  // that exists() found.
  const std::filesystem::path path = std::filesystem::absolute(module_path(), ec);
  if (!std::filesystem::exists(path, ec)) {
    out.why = "this build has no CUDA backend (no " + path.string() +
              "; it is built where the CUDA toolkit and MPI are found, or MESHWORK_CUDA_BACKEND names it)";
    return out;
  }
  // Never closed: the CUDA runtime and NCCL keep threads and state until the process ends.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    out.why = "cannot load " + path.string() + ": " + (e != nullptr ? e : "unknown error");
    return out;
  }
  using Entry = const CudaBackendModule* (*)();
  void* symbol = dlsym(handle, kCudaModuleEntry);
  if (symbol == nullptr) {
    out.why = path.string() + " has no " + kCudaModuleEntry + ": not a meshwork CUDA backend";
    return out;
  }
  const CudaBackendModule* m = reinterpret_cast<Entry>(symbol)();
  if (m == nullptr || m->abi != module_abi() || m->make_rank == nullptr || m->missing_device == nullptr) {
    char abi[96] = "";
    if (m != nullptr) std::snprintf(abi, sizeof abi, "; its fingerprint %016llx, this build's %016llx", static_cast<unsigned long long>(m->abi), static_cast<unsigned long long>(module_abi()));
    out.why = path.string() + " comes from another build of meshwork (" + kVersion + ", " + kGitCommit + " here" + abi + "): rebuild both";
    return out;
  }
  out.module = m;
  return out;
}

}  // namespace

const CudaBackendModule* cuda_backend(std::string& why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  why = loaded.why;
  return loaded.module;
}

}  // namespace meshwork::exec
