// meshwork calibrate [--plan PLAN] [--out FILE] [--json] [--nccl-tests FILE...]: measures this machine (GEMM
// efficiency on a fixed grid of shapes, streaming bandwidth, the executor's own kernels, an
// op's fixed cost, collective bus bandwidth and latency over the ranks of `mpirun -np N`) and writes what it found where
// plans and the simulator take it: with --plan, that plan with its GPU's `calibration` and
// its node fabric's latency filled in; otherwise the calibrated GPU section. With --nccl-tests
// it measures nothing: it reads real nccl-tests outputs against the plan's fabric
// (models/nccl_tests.hpp).
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <ostream>

#include "cli/commands.hpp"
#include "exec/calibrate.hpp"
#include "models/hardware.hpp"
#include "models/nccl_tests.hpp"
#include "plan/document.hpp"
#include "exec/launch.hpp"
#include "exec/mpi_group.hpp"
#include "plan/plan_io.hpp"
#include "plan/presets.hpp"

namespace meshwork::cli {

namespace {

// calibrate --nccl-tests: real nccl-tests outputs read against the plan's fabric, no MPI.
void calibrate_from_files(Io& io, const plan::Plan& p, const std::vector<std::string>& files, const std::string& out_file, bool json) {
  std::vector<models::NcclTestBlock> blocks;
  for (const auto& f : files) {
    std::string error;
    const auto text = plan::read_text_file(f, std::size_t{64} << 20, error);
    if (!text) {
      io.err << "meshwork calibrate: --nccl-tests " << f << ": " << error << '\n';
      io.exit_code = 1;
      return;
    }
    try {
      for (auto& b : models::parse_nccl_tests(*text, f)) blocks.push_back(std::move(b));
    } catch (const std::exception& e) {
      io.err << "meshwork calibrate: " << e.what() << '\n';
      io.exit_code = 1;
      return;
    }
  }
  models::NcclCalibration cal;
  try {
    cal = models::calibrate_from_nccl_tests(p, blocks);
  } catch (const std::exception& e) {
    io.err << "meshwork calibrate: " << e.what() << '\n';
    io.exit_code = 1;
    return;
  }
  const auto& k = cal.plan.cluster.gpu.calibration;
  if (json) {
    nlohmann::json m;
    for (const auto& r : cal.blocks) {
      nlohmann::json b = {{"where", r.block->where}, {"collective", r.block->collective}, {"ranks", r.block->ranks}, {"nodes", r.block->nodes},
                          {"sizes", r.block->points.size()}, {"fit_latency_us", r.fit.latency_s * 1e6}, {"fit_algbw_gbytes_per_s", r.fit.algbw_bytes_per_s / 1e9}};
      if (!r.field.empty()) {
        b["field"] = r.field;
        b["efficiency"] = r.efficiency;
        b["model_max_error"] = r.max_error;
        b["model_max_error_bytes"] = r.max_error_bytes;
        b["model_own_max_error"] = r.own_max_error;
        b["model_own_max_error_bytes"] = r.own_max_error_bytes;
      } else {
        b["why_none"] = r.why;
        if (r.max_error > 0) {
          b["model_max_error"] = r.max_error;
          b["model_max_error_bytes"] = r.max_error_bytes;
        }
      }
      m["blocks"].push_back(b);
    }
    m["intra_node_efficiency"] = k.intra_node_efficiency;
    m["nic_efficiency"] = k.nic_efficiency;
    m["intra_node_latency_us"] = cal.plan.cluster.intra_node.latency_us;
    // On GPUs the collectives' latencies are NCCL's tuner's (models/nccl_tuner), not the plan's.
    m["collective_latencies"] = models::hardware_profile(cal.plan.cluster.gpu).nccl ? "nccl_tuner" : "intra_node_latency_us";
    io.out << m.dump(2) << '\n';
  } else {
    char buf[512];
    io.out << "nccl-tests blocks against " << p.cluster.gpu.name << " nodes of " << p.cluster.gpus_per_node << " GPUs (the cost model's own collectives):\n";
    for (const auto& r : cal.blocks) {
      const auto& b = *r.block;
      std::snprintf(buf, sizeof buf, "  %-48s %-15s %4lld ranks on %3lld nodes, %2zu sizes: fit %8.1f us + S / %7.1f GB/s; ", b.where.c_str(),
                    b.collective.empty() ? "?" : b.collective.c_str(), static_cast<long long>(b.ranks), static_cast<long long>(b.nodes), b.points.size(),
                    r.fit.latency_s * 1e6, r.fit.algbw_bytes_per_s / 1e9);
      io.out << buf;
      if (!r.field.empty()) {
        std::snprintf(buf, sizeof buf, "%s %.3f (the model then misses by up to %.1f%%, at %.0f bytes; at this block's own efficiency by up to %.1f%%, at %.0f bytes)\n",
                      r.field.c_str(), r.efficiency, 100 * r.max_error, r.max_error_bytes, 100 * r.own_max_error, r.own_max_error_bytes);
        io.out << buf;
      } else {
        io.out << "sets nothing: " << r.why;
        if (r.max_error > 0) {
          std::snprintf(buf, sizeof buf, "; the model misses by up to %.1f%%, at %.0f bytes", 100 * r.max_error, r.max_error_bytes);
          io.out << buf;
        }
        io.out << '\n';
      }
    }
    std::snprintf(buf, sizeof buf, "calibration: intra_node_efficiency %.4f, nic_efficiency %.4f (0: the generation's), ", k.intra_node_efficiency,
                  k.nic_efficiency);
    io.out << buf;
    if (models::hardware_profile(cal.plan.cluster.gpu).nccl) {
      io.out << "collective latencies NCCL's tuner's per protocol\n";
    } else {
      std::snprintf(buf, sizeof buf, "intra-node latency %.3f us\n", cal.plan.cluster.intra_node.latency_us);
      io.out << buf;
    }
  }
  if (!out_file.empty()) {
    std::string error;
    if (!plan::save_plan(cal.plan, out_file, error)) {
      io.err << "meshwork calibrate: " << error << '\n';
      io.exit_code = 1;
    } else if (!json) {
      io.out << "wrote " << out_file << '\n';
    }
  }
}

}  // namespace

void add_calibrate_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("calibrate", "Measure this machine (GEMMs, memory, the executor's kernels, op overhead, collectives over mpirun's ranks) for the cost models");
  auto plan_file = std::make_shared<std::string>();
  auto out_file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--plan", *plan_file, "Calibrate this plan's GPU and node fabric; --out then gets the calibrated plan");
  cmd->add_option("--out", *out_file, "Write the calibrated plan (with --plan) or GPU section (JSON), atomically");
  cmd->add_flag("--json", *json, "Print the measurements as JSON");
  auto nccl_files = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--nccl-tests", *nccl_files,
                  "Read these nccl-tests outputs instead of measuring (no MPI): the plan's intra-node and NIC efficiencies for which the cost model "
                  "reproduces them (and a CPU host's node latency when a run inside one node reaches 64 KiB or less; on GPUs NCCL's tuner's "
                  "latencies stand); needs --plan");
  cmd->callback([&io, plan_file, out_file, json, nccl_files] {
    std::optional<plan::Plan> p;
    if (!plan_file->empty()) {
      p = load_plan_for(io, *plan_file, "calibrate");
      if (!p) return;
    }
    if (!nccl_files->empty()) {
      if (!p) {
        io.err << "meshwork calibrate: --nccl-tests needs --plan PLAN, the cluster whose fabric the measurements are read against\n";
        io.exit_code = 2;
        return;
      }
      calibrate_from_files(io, *p, *nccl_files, *out_file, *json);
      return;
    }
    plan::GpuSpec spec = p ? p->cluster.gpu : plan::find_gpu_preset("cpu-host")->spec;
    const plan::Precision precision = p ? p->training.precision : plan::Precision::fp32;
    const double intra_gbytes = p ? p->cluster.intra_node.bandwidth_gbytes_per_s : spec.hbm_gbytes_per_s;
    exec::keep_freed_memory();
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) MPI_Init(nullptr, nullptr);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    {
      std::vector<std::int64_t> all(static_cast<std::size_t>(size));
      for (int i = 0; i < size; ++i) all[static_cast<std::size_t>(i)] = i;
      auto world = exec::MpiGroup::split("world", all, 0, {.timeout_s = 600, .self_check = false, .on_timeout = {}});
      auto progress = [&](const std::string& line) {
        if (rank == 0 && !*json) io.err << "calibrate: " << line << '\n' << std::flush;
      };
      const exec::CalibrationRun run = exec::calibrate(*world, spec, precision, intra_gbytes, progress, p ? &*p : nullptr);
      // What the run measured replaces the plan's calibration; what it does not measure (the SMs a
      // collective holds) stays as the plan had it.
      const double collective_sms = spec.calibration.collective_sm_fraction;
      spec.calibration = run.calibration;
      spec.calibration.collective_sm_fraction = collective_sms;
      if (rank == 0) {
        nlohmann::json m;
        for (const auto& g : run.gemm) m["gemm"].push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"gflops_per_s", g.flops_per_s / 1e9}});
        m["stream_gbytes_per_s"] = run.stream_bytes_per_s / 1e9;
        m["streaming_kernels_gbytes_per_s"] = run.kernel_bytes_per_s / 1e9;
        m["op_overhead_us"] = run.op_overhead_s * 1e6;
        const std::pair<const char*, const std::vector<exec::CollectivePoint>*> collectives[] = {
            {"all_reduce", &run.all_reduce}, {"reduce_scatter", &run.reduce_scatter}, {"all_gather", &run.all_gather}};
        for (const auto& [name, points] : collectives) {
          for (const auto& c : *points) {
            m[name].push_back({{"bytes", c.bytes}, {"time_us", c.seconds * 1e6}, {"algbw_gbytes_per_s", c.algbw_bytes_per_s / 1e9}, {"busbw_gbytes_per_s", c.busbw_bytes_per_s / 1e9}});
          }
        }
        plan::Plan holder;
        holder.cluster.gpu = spec;
        m["gpu"] = plan::to_json(holder)["cluster"]["gpu"];
        m["ranks"] = size;
        // A ring all-reduce of a small buffer is 2(n-1) latency steps (nccl-tests).
        const double latency_us = run.all_reduce.empty() ? 0 : run.all_reduce.front().seconds * 1e6 / (2.0 * (size - 1));
        if (latency_us > 0) m["intra_node_latency_us"] = latency_us;
        if (*json) {
          io.out << m.dump(2) << '\n';
        } else {
          char buf[600];
          io.out << "GEMMs (fixed grid):\n";
          for (const auto& g : run.gemm) {
            std::snprintf(buf, sizeof buf, "  %5lld x %5lld x %5lld  %8.2f GFLOP/s\n", static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
                          g.flops_per_s / 1e9);
            io.out << buf;
          }
          std::snprintf(buf, sizeof buf, "memory: STREAM triad %.2f GB/s, the executor's streaming kernels %.2f GB/s; an op's fixed cost: %.2f us\n",
                        run.stream_bytes_per_s / 1e9, run.kernel_bytes_per_s / 1e9, run.op_overhead_s * 1e6);
          io.out << buf;
          const std::pair<const char*, const std::vector<exec::CollectivePoint>*> tables[] = {
              {"all-reduce", &run.all_reduce}, {"reduce-scatter", &run.reduce_scatter}, {"all-gather", &run.all_gather}};
          for (const auto& [name, points] : tables) {
            if (points->empty()) continue;
            io.out << name << " over " << size << " ranks (nccl-tests' definitions):\n       bytes    time (us)  algbw (GB/s)  busbw (GB/s)\n";
            for (const auto& c : *points) {
              std::snprintf(buf, sizeof buf, "  %10.0f  %11.1f  %12.3f  %12.3f\n", c.bytes, c.seconds * 1e6, c.algbw_bytes_per_s / 1e9, c.busbw_bytes_per_s / 1e9);
              io.out << buf;
            }
          }
          const auto& k = run.calibration;
          std::snprintf(buf, sizeof buf,
                        "calibration: gemm_max_efficiency %.4f, gemm_half_macs %.3g, memory_efficiency %.3f, elementwise_efficiency %.4f, norm_efficiency %.4f, "
                        "attention_max_efficiency %.4f, attention_half_macs %.3g, loss_efficiency %.4f, embedding_efficiency %.4f, optimizer_efficiency %.4f, "
                        "kernel_overhead_us %.2f, intra_node_efficiency %.3f",
                        k.gemm_max_efficiency, k.gemm_half_macs, k.memory_efficiency, k.elementwise_efficiency, k.norm_efficiency, k.attention_max_efficiency,
                        k.attention_half_macs, k.loss_efficiency, k.embedding_efficiency, k.optimizer_efficiency, k.kernel_overhead_us, k.intra_node_efficiency);
          io.out << buf;
          if (latency_us > 0) io.out << ", intra-node latency " << latency_us << " us";
          io.out << '\n';
        }
        if (!out_file->empty()) {
          std::string error;
          bool ok = false;
          if (p) {
            plan::Plan calibrated = *p;
            calibrated.cluster.gpu = spec;
            if (latency_us > 0 && size > 1) calibrated.cluster.intra_node.latency_us = latency_us;
            ok = plan::save_plan(calibrated, *out_file, error);
          } else {
            ok = plan::write_file_atomically(*out_file, m["gpu"].dump(2) + "\n", error);
          }
          if (!ok) {
            io.err << "meshwork calibrate: " << error << '\n';
            io.exit_code = 1;
          } else if (!*json) {
            io.out << "wrote " << *out_file << '\n';
          }
        }
      }
    }
    if (!initialised) MPI_Finalize();
  });
}

}  // namespace meshwork::cli
