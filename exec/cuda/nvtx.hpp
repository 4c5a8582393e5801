#pragma once
// An NVTX range for Nsight Systems: NvtxRange r("forward"); marks the host thread from here to
// the end of the scope, under the "meshwork" domain, named as the trace events are
// (exec::kTraceNames: "forward", "backward", "grad_reduce", ...; op names such as "qkv" as in
// models::Op). NVTX v3 is header-only (NVIDIA NVTX documentation); without a profiler
// attached each call is a no-op through a null function pointer. Linking needs libdl
// (${CMAKE_DL_LIBS}, or CMake's CUDA::nvtx3 target) for the profiler's injection library.

#include <nvtx3/nvToolsExt.h>

#include <string>

namespace meshwork::exec::cuda {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;  // copied by the tool during the call
    nvtxDomainRangePushEx(domain(), &a);
  }
  explicit NvtxRange(const std::string& name) : NvtxRange(name.c_str()) {}
  ~NvtxRange() { nvtxDomainRangePop(domain()); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  // Created once per process; domains live until the process ends (nvtxDomainDestroy is
  // optional).
  static nvtxDomainHandle_t domain() {
    static const nvtxDomainHandle_t d = nvtxDomainCreateA("meshwork");
    return d;
  }
};

}  // namespace meshwork::exec::cuda
