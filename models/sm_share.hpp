#pragma once
// Communication under compute slows the compute (issue 18). NCCL's collectives and
// point-to-point transfers are kernels: one thread block (CTA) per channel, each on an SM of
// its own for as long as the collective runs, spinning while it waits for its peers. A GEMM or
// an attention kernel beside it has the rest of the SMs, so it runs at 1 - f of its speed,
// where f = channels / SMs (HardwareProfile::collective_sm_fraction). Transfers a copy engine
// moves (Transformer Engine's userbuffers ring exchange) take no SMs.
//
// Both tiers price it with the rule below: the estimate on its replay of the DP stream and in
// TP's split GEMMs, the simulator on every stream a rank's collectives run on
// (sim/engine_play.cpp). The time the compute loses is exposed communication of the stream
// whose collective took the SMs. Not priced, in either tier: what the collective's memory
// traffic takes from a kernel beside it (measured slowdowns are larger than the SM share:
// 18.9% on average, Lee et al. 2025, arXiv:2507.03114), and the SMs of pipeline transfers
// (NCCL's send and receive kernels), which neither tier yet puts beside the compute. The
// simulator holds a collective's SMs from when its stream starts it, waiting for late peers
// included (NCCL's kernels spin); the estimate, whose peers are never late, from its start.
// The power model counts the time lost as communication, not as compute (a slight
// underestimate of the GPU's draw).
#include <cstddef>
#include <utility>
#include <vector>

#include "models/hardware.hpp"
#include "models/program.hpp"

namespace meshwork::models {

// Collectives running at once hold at most this fraction of the SMs together: NCCL runs at
// most 64 channels (MAXCHANNELS, NVIDIA/nccl src/include/device.h), 0.59 of A100's 108 SMs;
// the compute always keeps the rest (and a simulated rank whose compute stopped could not
// reach the collective its peers wait for).
inline constexpr double kMostSmsHeld = 64.0 / 108;

// The fraction of the SMs a collective of `c` on `stream` holds while it runs: NCCL's channels
// (HardwareProfile::collective_sm_fraction), or, for TP's collectives split with their GEMMs
// (overlap.tp_comm, `tp_split`), what Transformer Engine's userbuffers take: none for the
// all-gather's ring exchange (copy engine), the reduce-scatter's SMs otherwise.
double sm_fraction(const HardwareProfile& hw, Stream stream, Collective c, bool tp_split);

// Compute of `work_s` (at full speed) that starts at `start_s` while collectives holding
// `fraction` of the SMs run for `overlap_s` of it from its start: when it ends, from its
// start. With f = fraction: the compute runs at 1 - f beside the collective; if it is not done
// when the collective ends, it runs the rest at full speed.
double slowed_compute_s(double work_s, double overlap_s, double fraction);

// The exposed time of a TP collective of `comm_s` split with a GEMM of `gemm_s`
// (overlap.tp_comm, models/layer_comm) when the collective holds `fraction` of the SMs: the
// pair takes max(comm, the GEMM slowed beside it), of which the GEMM's own `gemm_s` is compute.
double tp_exposed_s(double comm_s, double gemm_s, double fraction);

// The same rule for CP's p2p ring split with the attention it feeds (Instr::tail_after): the
// exchange runs beside all but the attention's last block (`attention_s` (cp - 1) / cp, the
// compute it can hide under), and the last block runs after both. Exposed:
// max(comm, that compute slowed beside it) - that compute. With equal steps this is exact:
// block k of the ring starts at max(end of block k-1, arrival of step k), and the latest end
// over k is max(a, x + a / cp) for attention a and exchange x.
double split_exposed_s(double comm_s, double attention_s, double cp, double fraction);

// One stream of collectives (the DP stream of the estimate's replay) beside the compute
// stream: the spans in which the stream runs a collective, each holding `fraction` of the SMs,
// and the compute that runs at 1 - fraction inside them.
class SharedSms {
 public:
  explicit SharedSms(double fraction) : fraction_(fraction) {}
  // The stream runs a collective over [start_s, end_s); spans come in order and do not overlap
  // (one stream).
  void busy(double start_s, double end_s);
  // When compute of `work_s` (at full speed) started at `start_s` ends.
  double run(double start_s, double work_s) { return idle_from(start_s) ? start_s + work_s : run_beside(start_s, work_s); }
  // Whether no collective runs at or after `t_s`: compute from then on runs at full speed.
  bool idle_from(double t_s) const { return spans_.empty() || spans_.back().second <= t_s; }
  // The same rule for other work beside the stream's collectives, which they slow to
  // 1 - `fraction` of its speed, `fraction` in [0, 1) (a pipeline transfer sharing its NIC with
  // them: models/pipeline; not held to kMostSmsHeld, which is the SMs'), from any start (run's
  // starts only move forward).
  double run_at(double start_s, double work_s, double fraction) const;

 private:
  double run_beside(double start_s, double work_s);
  // From the span at `first` on, none before it ending after `start_s`, at 1 - `fraction`.
  double run_from(std::size_t first, double start_s, double work_s, double fraction) const;

  double fraction_;
  std::vector<std::pair<double, double>> spans_;
  std::size_t first_ = 0;  // spans before it end before any compute still to run
};

}  // namespace meshwork::models
