#include "exec/reference_step.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "plan/rank_layout.hpp"

namespace meshwork::exec {

namespace {

// All parameter names of the model, in one order every rank agrees on.
std::vector<std::string> all_names(const plan::ModelConfig& m) {
  std::vector<std::string> names;
  for (const auto& s : embedding_specs(m)) names.push_back(s.name);
  for (std::int64_t l = 0; l < m.num_layers; ++l) {
    for (const auto& s : layer_specs(m, l)) names.push_back(s.name);
  }
  for (const auto& s : head_specs(m)) names.push_back(s.name);
  return names;
}

}  // namespace

Groups local_groups() {
  Groups g;
  g.world = std::make_unique<LocalGroup>("world");
  g.tp = std::make_unique<LocalGroup>("tp");
  g.dp = std::make_unique<LocalGroup>("dp");
  g.pp = std::make_unique<LocalGroup>("pp");
  g.embedding = std::make_unique<LocalGroup>("embedding");
  g.ep = std::make_unique<LocalGroup>("ep");
  g.expert_dp = std::make_unique<LocalGroup>("expert_dp");
  g.cp = std::make_unique<LocalGroup>("cp");
  return g;
}

// The same model and global batch on one rank: no parallelism, every micro-batch in turn.
plan::Plan single_rank(plan::Plan p) {
  auto& par = p.parallelism;
  par.tensor_model_parallel_size = par.pipeline_model_parallel_size = par.data_parallel_size = 1;
  par.expert_model_parallel_size = par.context_parallel_size = 1;
  par.virtual_pipeline_model_parallel_size = 1;
  par.decoder_first_pipeline_num_layers = par.decoder_last_pipeline_num_layers = 0;
  par.account_for_embedding_in_pipeline_split = par.account_for_loss_in_pipeline_split = false;
  par.pipeline_model_parallel_layout.clear();
  par.sequence_parallel = false;
  par.zero_stage = 0;
  par.pipeline_schedule = plan::PipelineSchedule::one_f_one_b;
  p.cluster.num_gpus = 1;
  return p;
}

// ||a - b|| / ||b|| per tensor between the distributed run's reduced gradients (each rank its
// shard, counted once) and the reference's, summed over the world.
void compare_with_reference(Trainer& run, Trainer& ref, const plan::Plan& plan, std::int64_t rank, StepRecord& rec) {
  const auto layout = plan::RankLayout::from_plan(plan.parallelism);
  const auto names = all_names(plan.model);
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < names.size(); ++i) index[names[i]] = i;
  // The reference's gradients, whole tensors on the host, as it reduced them (over groups of
  // one) and before clipping scaled them: its `keep_reduced` copy.
  if (ref.reduced().empty()) throw std::logic_error("--verify: the reference kept no gradients (set its keep_reduced)");
  std::map<std::string, Mat> reference;
  for (const auto& r : ref.reduced()) {
    // One rank holds every tensor whole.
    if (static_cast<Index>(r.grad.size()) != r.spec->rows * r.spec->cols) throw std::logic_error("--verify: the reference's " + r.spec->name + " is not whole");
    Mat& g = reference[r.spec->name];
    g.resize(r.spec->rows, r.spec->cols);
    std::copy(r.grad.begin(), r.grad.end(), g.data());
  }
  const int tp = run.groups().tp->size(), tp_rank = run.groups().tp->rank();
  // Dense parameters are counted on DP rank 0; an expert's on expert-DP rank 0 (its one
  // owner in each expert-data-parallel replica).
  const bool counted_dp = run.groups().dp->rank() == 0, counted_expert_dp = run.groups().expert_dp->rank() == 0;
  std::vector<double> sums(3 * names.size(), 0.0);  // squared differences, squared norms, elements
  for (const auto& r : run.reduced()) {
    const auto& spec = *r.spec;
    if (!(spec.is_expert() ? counted_expert_dp : counted_dp) || (spec.split == Split::replicated && tp_rank != 0)) continue;
    // The tied copy on the last stage equals the first stage's after their all-reduce.
    if (spec.name == "embedding.word" && layout.coord(rank).pp != 0) continue;
    const Mat expected = shard(reference.at(spec.name), spec.split, tp_rank, tp);
    const auto i = index.at(spec.name);
    sums[2 * names.size() + i] += static_cast<double>(expected.size());
    for (Index k = 0; k < expected.size(); ++k) {
      const double d = static_cast<double>(r.grad[static_cast<std::size_t>(k)]) - expected.data()[k];
      sums[i] += d * d;
      sums[names.size() + i] += static_cast<double>(expected.data()[k]) * expected.data()[k];
    }
  }
  run.groups().world->all_reduce_sum(std::span<double>(sums));
  // A gradient that is zero in exact arithmetic is rounding noise in both runs, and its
  // relative error means nothing: the key bias's (softmax is invariant to q.b_k, the same for
  // every key; its fp32 norm is ~1e-10 of the others'). Norms below 1e-4 of the largest
  // tensor's are compared against that floor.
  double largest = 0;
  for (std::size_t i = 0; i < names.size(); ++i) largest = std::max(largest, std::sqrt(sums[names.size() + i]));
  for (std::size_t i = 0; i < names.size(); ++i) {
    // Every element of every tensor compared exactly once, or the comparison is void.
    const double expected_elements = static_cast<double>(reference.at(names[i]).size());
    if (sums[2 * names.size() + i] != expected_elements) {
      throw CollectiveError("--verify: " + std::to_string(static_cast<std::int64_t>(sums[2 * names.size() + i])) + " of " + names[i] + "'s " +
                            std::to_string(static_cast<std::int64_t>(expected_elements)) + " gradient elements were compared");
    }
    const double norm = std::max(std::sqrt(sums[names.size() + i]), 1e-4 * largest);
    const double err = norm > 0 ? std::sqrt(sums[i]) / norm : std::sqrt(sums[i]);
    if (rec.worst_tensor.empty() || !(err <= rec.worst_relative_error)) {  // NaN is worst
      rec.worst_relative_error = err;
      rec.worst_tensor = names[i];
    }
  }
  const double loss_err = std::abs(rec.loss - rec.reference_loss) / std::max(1e-30, std::abs(rec.reference_loss));
  if (!(loss_err <= rec.worst_relative_error)) {  // NaN is worst
    rec.worst_relative_error = loss_err;
    rec.worst_tensor = "loss";
  }
  // The norm that clipping scaled by: each element counted once over the run's world.
  rec.grad_norm = run.grad_norm();
  rec.reference_grad_norm = ref.grad_norm();
  if (plan.training.clip_grad > 0) {
    const double norm_err = std::abs(rec.grad_norm - rec.reference_grad_norm) / std::max(1e-30, std::abs(rec.reference_grad_norm));
    if (!(norm_err <= rec.worst_relative_error)) {
      rec.worst_relative_error = norm_err;
      rec.worst_tensor = "grad_norm";
    }
  }
}

// The reference takes the distributed run's parameters after each step, so that every step's
// gradients are compared from the same point (AdamW's update of a near-zero gradient is about
// its sign, so rounding differences would otherwise grow into different parameters). Each
// parameter is assembled from its shards, counted once, summed over the world.
void sync_reference(Trainer& run, Trainer& ref, const plan::Plan& plan, std::int64_t rank) {
  const auto layout = plan::RankLayout::from_plan(plan.parallelism);
  const bool released = run.materialise();
  const int tp = run.groups().tp->size(), tp_rank = run.groups().tp->rank();
  const bool counted_dp = run.groups().dp->rank() == 0, counted_expert_dp = run.groups().expert_dp->rank() == 0;
  std::map<std::string, ParamSlot> reference;
  for (auto& c : ref.chunks()) {
    for (const auto& slot : c->slots()) reference[slot.spec->name] = slot;
  }
  std::map<std::string, std::size_t> offset;
  std::size_t total = 0;
  for (const auto& [name, slot] : reference) {
    offset[name] = total;
    total += slot.size();
  }
  std::vector<double> flat(total, 0.0);
  for (auto& c : run.chunks()) {
    for (const auto& slot : c->slots()) {
      const auto& spec = *slot.spec;
      if (!(spec.is_expert() ? counted_expert_dp : counted_dp) || (spec.split == Split::replicated && tp_rank != 0)) continue;
      if (spec.name == "embedding.word" && layout.coord(rank).pp != 0) continue;
      Mat value(slot.rows, slot.cols);
      run.backend().to_host(slot.value, std::span<float>(value.data(), slot.size()));
      Mat full = Mat::Zero(spec.rows, spec.cols);
      place(value, full, spec.split, tp_rank, tp);
      const std::size_t o = offset.at(spec.name);
      for (Index k = 0; k < full.size(); ++k) flat[o + static_cast<std::size_t>(k)] += full.data()[k];
    }
  }
  run.release_after(released);
  run.groups().world->all_reduce_sum(std::span<double>(flat));
  for (const auto& [name, slot] : reference) {
    const std::size_t o = offset.at(name);
    std::vector<float> value(slot.size());
    for (std::size_t k = 0; k < value.size(); ++k) value[k] = static_cast<float>(flat[o + k]);
    ref.backend().from_host(value, slot.value);
  }
  ref.load_from_chunks();
}

}  // namespace meshwork::exec
