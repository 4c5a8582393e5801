#pragma once
// The parameters of the executor's GPT, by name, with how each is split over tensor
// parallelism as Megatron splits it (Shoeybi et al. 2019, §3): column-parallel projections
// keep a block of columns (whole heads, a block of the MLP), row-parallel ones a block of rows,
// the word embedding a block of the vocabulary. Every tensor starts from the same full value on
// every rank (a counter-based generator keyed by seed and name), so a rank's shard is a slice
// of what the single-rank reference holds: the basis of --verify.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

using Mat = kernels::Mat<float>;
using kernels::Index;

enum class Split : std::uint8_t {
  replicated,
  rows,          // a contiguous block of rows per TP rank
  columns,       // a contiguous block of columns per TP rank
  column_halves  // SwiGLU's [gate | up]: a block of each half, kept as [gate block | up block]
};
enum class Init : std::uint8_t { normal, ones, zeros };

struct ParamSpec {
  std::string name;     // also the key of its initial value
  Index rows = 0, cols = 1;  // the full tensor; a vector is [n, 1]
  Split split = Split::replicated;
  Init init = Init::zeros;
  double std = 0.02;    // Init::normal
  // With sequence parallelism each TP rank computes this replicated parameter's gradient on
  // its share of the tokens: the TP group sums them (Korthikanti et al. 2022, §4.2.2).
  bool sequence_partial = false;
  // An MoE expert's weight: the expert's index (-1 for every other parameter). Expert
  // parallelism keeps it on the EP rank that owns the expert only, and the expert-data-parallel
  // group (not the dense DP group) reduces its gradient (Lepikhin et al. 2021, GShard §2.2).
  std::int64_t expert = -1;
  [[nodiscard]] bool is_expert() const { return expert >= 0; }
};

struct Param {
  ParamSpec spec;
  Mat value;  // this rank's shard
  Mat grad;
};

// The full initial value: N(0, std) by Box-Muller over a SplitMix64 stream keyed by (seed,
// name) (Steele et al. 2014), ones or zeros.
Mat initial_value(const ParamSpec& spec, std::uint64_t seed);
// This TP rank's slice of a full tensor.
Mat shard(const Mat& full, Split split, int tp_rank, int tp);

// The inverse of shard: writes this TP rank's slice into its place in the full tensor.
void place(const Mat& slice, Mat& full, Split split, int tp_rank, int tp);

// Whether layer `layer` of the model is an MoE layer (the first first_k_dense_layers are dense,
// as DeepSeek's first_k_dense_replace), and its experts' FFN width.
bool is_moe_layer(const plan::ModelConfig& m, std::int64_t layer);
Index expert_ffn(const plan::ModelConfig& m);
// The EP rank that holds expert `e` of `experts` over `ep` ranks: contiguous blocks, as
// Megatron-core assigns local experts.
inline int expert_owner(std::int64_t e, std::int64_t experts, int ep) { return static_cast<int>(e / (experts / ep)); }

// The specs of one transformer layer, the embeddings and the head, as the model has them.
std::vector<ParamSpec> layer_specs(const plan::ModelConfig& m, std::int64_t layer);
std::vector<ParamSpec> embedding_specs(const plan::ModelConfig& m);
std::vector<ParamSpec> head_specs(const plan::ModelConfig& m);  // final norm; the output layer when untied

}  // namespace meshwork::exec
