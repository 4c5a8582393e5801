#pragma once
// The executor's test meshes (tests/data/exec's, 4 ranks of the tiny models) as JSON plans,
// which the GPU-only build reads without libyaml: the thread-mesh tests run them on the CPU
// backend (thread_mesh_test.cpp) and the GPU check on the CUDA backend (cuda_mesh_test.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/plan_io.hpp"

namespace meshwork::exec::test {

inline plan::Plan json_mesh(const std::string& model, const std::string& training, const std::string& parallelism,
                             const std::string& gpu = R"("cpu-host")") {
  const std::string text = R"({"schema_version": 1, "model": )" + model + R"(, "training": )" + training + R"(, "parallelism": )" + parallelism +
                           R"(, "cluster": {"gpu": )" + gpu + R"(, "num_gpus": 4, "gpus_per_node": 4, "intra_node": {"kind": "shared_memory"}, "nics_per_node": 0,
                              "topology": {"kind": "single_node"}}, "run": {"seed": 7}})";
  auto r = plan::load_plan_text(text, plan::Format::json);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.items().empty() ? text : r.diagnostics.items().front().message);
  return r.plan;
}

struct NamedMesh {
  std::string name;
  plan::Plan plan;
};

inline std::vector<NamedMesh> json_meshes() {
  const std::string tiny = R"({"preset": "tiny"})", moe = R"({"preset": "tiny-moe"})";
  const std::string llama = R"({"preset": "tiny", "activation": "swiglu", "normalization": "rmsnorm", "num_query_groups": 2,
                                "untie_embeddings_and_output_weights": true, "add_bias_linear": false, "position_embedding_type": "rope"})";
  const std::string training = R"({"global_batch_size": 8, "micro_batch_size": 2, "precision": "fp32", "recompute": "none", "flash_attention": false})";
  const std::string full = R"({"global_batch_size": 8, "micro_batch_size": 2, "precision": "fp32", "recompute": "full"})";
  return {
      {"tp2-pp2", json_mesh(tiny, training, R"({"tp": 2, "pp": 2, "pipeline_schedule": "gpipe"})")},
      {"llama-tp2-pp2-sp", json_mesh(llama, training, R"({"tp": 2, "pp": 2, "sequence_parallel": true, "zero_stage": 1})")},
      {"recompute-tp2-pp2-sp", json_mesh(tiny, R"({"global_batch_size": 8, "micro_batch_size": 2, "precision": "fp32", "recompute": "full",
                                                   "recompute_method": "uniform", "recompute_num_layers": 1})",
                                         R"({"tp": 2, "pp": 2, "sequence_parallel": true})")},
      {"zero3-dp4", json_mesh(tiny, training, R"({"zero_stage": 3})")},
      {"interleaved-pp2-dp2", json_mesh(R"({"preset": "tiny", "num_layers": 4})", R"({"global_batch_size": 8, "micro_batch_size": 1, "precision": "fp32"})",
                                        R"({"pp": 2, "pipeline_schedule": "interleaved", "virtual_pipeline_model_parallel_size": 2})")},
      {"zb-pp2-dp2", json_mesh(tiny, R"({"global_batch_size": 16, "micro_batch_size": 2, "precision": "fp32", "recompute": "selective"})",
                               R"({"pp": 2, "pipeline_schedule": "zero_bubble"})")},
      {"cp2-tp2-sp", json_mesh(llama, training, R"({"tp": 2, "cp": 2, "sequence_parallel": true})")},
      // Contiguous shares (no load balancing), full recomputation, ZeRO-1, learned positions.
      {"cp2-pp2", json_mesh(tiny, full, R"({"cp": 2, "pp": 2, "zero_stage": 1, "context_parallel_load_balance": false})")},
      {"cp2-dp2", json_mesh(tiny, training, R"({"cp": 2, "zero_stage": 1})")},
      {"moe-ep2-dp2", json_mesh(moe, training, R"({"ep": 2})")},
      // Expert tensor parallelism (TP 2) with EP 2, ZeRO-1 over the experts' data parallelism.
      {"moe-tp2-ep2-zero1", json_mesh(moe, training, R"({"tp": 2, "ep": 2, "sequence_parallel": true, "zero_stage": 1})")},
      {"moe-tp2-pp2", json_mesh(moe, full, R"({"tp": 2, "pp": 2, "sequence_parallel": true})")},
      // The zero-bubble schedule's weight-gradient items run the router's and the experts'
      // weight gradients apart from their input gradients (and from the routing ops, which
      // have none).
      {"moe-zb-pp2-ep2", json_mesh(moe, training, R"({"pp": 2, "ep": 2, "pipeline_schedule": "zero_bubble"})")},
  };
}

// Meshes of precision fp8: the CUDA backend runs their layers' GEMMs in e4m3, the CPU backend
// in fp32 as ever. The host's "GPU" is given an FP8 peak, so that the plan validates. The tiny
// models' dimensions per TP rank are multiples of 16 (hidden 64; 2 of 4 heads of 16; an MLP of
// 128 per rank; experts of 128), so every layer GEMM takes the e4m3 kernels.
inline std::vector<NamedMesh> json_fp8_meshes() {
  const std::string gpu = R"({"preset": "cpu-host", "peak_tflops": {"fp8": 0.384}})";
  const std::string training = R"({"global_batch_size": 8, "micro_batch_size": 2, "precision": "fp8", "recompute": "none", "flash_attention": false})";
  const std::string llama = R"({"preset": "tiny", "activation": "swiglu", "normalization": "rmsnorm", "num_query_groups": 2,
                                "untie_embeddings_and_output_weights": true, "add_bias_linear": false, "position_embedding_type": "rope"})";
  return {
      {"fp8-llama-tp2-pp2-sp", json_mesh(llama, training, R"({"tp": 2, "pp": 2, "sequence_parallel": true, "zero_stage": 1})", gpu)},
      {"fp8-moe-tp2-ep2", json_mesh(R"({"preset": "tiny-moe"})", training, R"({"tp": 2, "ep": 2, "sequence_parallel": true})", gpu)},
  };
}

inline plan::Plan json_mesh_named(const std::string& name) {
  for (auto& m : json_meshes()) {
    if (m.name == name) return m.plan;
  }
  ADD_FAILURE() << "no test mesh " << name;
  return {};
}

}  // namespace meshwork::exec::test
