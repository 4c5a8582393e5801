#pragma once
// The logical layout of ranks: rank <-> mesh coordinate by the plan's `order`, and the members
// of every parallel group. Megatron-core's semantics (parallel_state.RankGenerator): the world
// is TP x CP x DP x PP; expert parallelism divides DP, so the five mesh dimensions are
// tp, cp, ep, dp/ep and pp, the first in `order` varying fastest. The dense data-parallel group
// spans ep and dp/ep; expert-data-parallel spans dp/ep only.
//
// Costs: a coordinate or group index is O(1); a group's members O(group size). Nothing is
// stored per rank, so a 131K-GPU layout is as cheap as an 8-GPU one.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::plan {

// The five mesh dimensions, named as in `order`; MeshDim::dp is the expert-data-parallel
// coordinate (size DP / EP), which is all of DP when EP = 1.
enum class MeshDim { tp, cp, ep, dp, pp };
inline constexpr std::size_t kMeshDims = 5;

enum class GroupKind {
  tp,         // tensor parallel
  cp,         // context parallel
  ep,         // expert parallel
  dp,         // data parallel (dense parameters): ep x dp/ep
  expert_dp,  // data parallel of expert parameters: cp x dp/ep (Megatron-core's expert-DP group spans CP)
  pp,         // pipeline
  dp_cp,      // gradient reduction of dense parameters with CP: cp x ep x dp/ep
  // With several distributed-optimizer instances (Megatron-core's
  // --num-distributed-optimizer-instances N; hybrid sharding), dp_cp and expert_dp split in
  // two: an instance, whose members shard the optimizer (the first 1/N of the group's
  // ascending members, and so on: parallel_state's intra-instance groups), and the replicas,
  // the members at one position of every instance (the inter-instance groups).
  dp_shard,
  dp_replica,
  expert_dp_shard,
  expert_dp_replica,
};
inline constexpr std::array kAllGroupKinds = {GroupKind::tp,       GroupKind::cp,         GroupKind::ep,
                                              GroupKind::dp,       GroupKind::expert_dp,  GroupKind::pp,
                                              GroupKind::dp_cp,    GroupKind::dp_shard,   GroupKind::dp_replica,
                                              GroupKind::expert_dp_shard, GroupKind::expert_dp_replica};
std::string_view to_string(GroupKind g);
std::string_view to_string(MeshDim d);

using DimOrder = std::array<MeshDim, kMeshDims>;

// Parses "tp-cp-ep-dp-pp": each of the five names once, separated by '-'.
std::optional<DimOrder> parse_order(std::string_view text, std::string& error);

struct MeshShape {
  std::int64_t tp = 1;
  std::int64_t cp = 1;
  std::int64_t ep = 1;
  std::int64_t dp = 1;  // all of data parallelism, as Megatron counts it (EP divides it)
  std::int64_t pp = 1;
  std::int64_t instances = 1;  // distributed-optimizer instances (see GroupKind::dp_shard)
};

struct MeshCoord {
  std::int64_t tp = 0;
  std::int64_t cp = 0;
  std::int64_t ep = 0;
  std::int64_t edp = 0;  // expert-data-parallel index, 0 .. dp/ep - 1
  std::int64_t pp = 0;

  bool operator==(const MeshCoord&) const = default;
};

class RankLayout {
 public:
  // Preconditions (checked by validate()): sizes >= 1, ep divides dp, and instance_split
  // holds for dp_cp and, with EP, expert_dp.
  RankLayout(MeshShape shape, DimOrder order);
  // The layout of a resolved, valid plan.
  static RankLayout from_plan(const ParallelismConfig& par);

  [[nodiscard]] std::int64_t world_size() const { return world_; }
  [[nodiscard]] const MeshShape& shape() const { return shape_; }
  [[nodiscard]] const DimOrder& order() const { return order_; }
  [[nodiscard]] std::int64_t size(MeshDim d) const { return size_[static_cast<std::size_t>(d)]; }
  [[nodiscard]] std::int64_t stride(MeshDim d) const { return stride_[static_cast<std::size_t>(d)]; }

  [[nodiscard]] MeshCoord coord(std::int64_t rank) const;
  [[nodiscard]] std::int64_t rank(const MeshCoord& c) const;
  // Index of the rank in the dense data-parallel group (0 .. dp-1).
  [[nodiscard]] std::int64_t dp_index(std::int64_t rank) const { return rank_in_group(GroupKind::dp, rank); }

  [[nodiscard]] std::int64_t group_size(GroupKind g) const;
  // Whether kind g is a group of its own in this layout: more than one member, and a shard or
  // replica group only when there are several instances (with one, the shard is dp_cp or
  // expert_dp, which the listings name instead).
  [[nodiscard]] bool distinct(GroupKind g) const;
  // Whether `whole` (dp_cp or expert_dp) splits into `instances` blocks of consecutive
  // members on the mesh's digits: the block size must be a product of whole dimensions of the
  // group, in increasing stride, and a divisor of the next. Otherwise `why` says so.
  [[nodiscard]] bool instance_split(GroupKind whole, std::string& why) const;
  [[nodiscard]] std::int64_t num_groups(GroupKind g) const { return world_ / group_size(g); }
  // Which of the num_groups(g) groups the rank is in, and its position in it (members ascend).
  [[nodiscard]] std::int64_t group_index(GroupKind g, std::int64_t rank) const;
  [[nodiscard]] std::int64_t rank_in_group(GroupKind g, std::int64_t rank) const;
  [[nodiscard]] std::vector<std::int64_t> group_members(GroupKind g, std::int64_t rank) const;
  [[nodiscard]] std::vector<std::int64_t> group(GroupKind g, std::int64_t index) const;
  // The lowest member of group `index` and the distance from it to the highest, without
  // building the member list.
  [[nodiscard]] std::int64_t group_first(GroupKind g, std::int64_t index) const;
  [[nodiscard]] std::int64_t group_span(GroupKind g) const;
  // How groups of kind g fall on nodes of `gpus_per_node` consecutive ranks: the members of one
  // group in a node and the nodes one group spans (the most of any group). Closed form when the
  // node boundary falls on the mesh's mixed-radix digits (gpus_per_node divides or is divided by
  // the dimensions' strides, the case of every power-of-two mesh); otherwise counted on the
  // first 64 groups, whose pattern of offsets within a node repeats.
  struct NodeSpan {
    std::int64_t per_node = 1;
    std::int64_t nodes = 1;
  };
  [[nodiscard]] NodeSpan node_span(GroupKind g, std::int64_t gpus_per_node) const;

 private:
  // A mixed-radix digit of the rank: its value is (rank / stride) % size.
  struct Digit {
    std::int64_t size = 1;
    std::int64_t stride = 1;
  };
  // A few items kept in place: a rank has at most kMeshDims + 1 digits (a shard or replica
  // group splits one dimension in two), and the estimate asks for them hundreds of times a plan
  // (issue 18: allocating them was a tenth of an estimate's time).
  template <typename T, std::size_t N>
  class Few {
   public:
    void push_back(const T& x) { items_.at(n_++) = x; }
    void clear() { n_ = 0; }
    [[nodiscard]] std::size_t size() const { return n_; }
    T* begin() { return items_.data(); }
    T* end() { return items_.data() + n_; }
    [[nodiscard]] const T* begin() const { return items_.data(); }
    [[nodiscard]] const T* end() const { return items_.data() + n_; }
    [[nodiscard]] bool contains(const T& x) const {
      for (const T& y : *this) {
        if (y == x) return true;
      }
      return false;
    }

   private:
    std::array<T, N> items_{};
    std::size_t n_ = 0;
  };
  using Digits = Few<Digit, 2 * kMeshDims + 2>;
  // The digits a group spans and the others, each in increasing stride; a shard or replica
  // group's dimension at the instance boundary counts as two digits.
  [[nodiscard]] Digits varying(GroupKind g) const;
  [[nodiscard]] Digits fixed(GroupKind g) const;
  [[nodiscard]] Few<MeshDim, kMeshDims> dims(GroupKind g) const;
  // The digits of the whole group (dp_cp or expert_dp) in increasing stride, the first
  // `shard` of their product (their instance) and the rest (the replicas); false if the
  // instance does not fall on the digits.
  bool split(GroupKind whole, Digits& shard, Digits& replica) const;
  [[nodiscard]] std::int64_t get(const MeshCoord& c, MeshDim d) const;
  static void set(MeshCoord& c, MeshDim d, std::int64_t v);

  MeshShape shape_;
  DimOrder order_;
  std::array<std::int64_t, kMeshDims> size_{};
  std::array<std::int64_t, kMeshDims> stride_{};
  std::int64_t world_ = 1;
};

// A member's successor in its group's ring, as NCCL lays rings over nodes. `members` ascend
// (rank = GPU index); `per_node` is how many of them share a node (1 or less: one). Between
// nodes with several members each, the successor is the member at the same position on the
// next node: NCCL's channels start on every member, so each member's NIC carries its share (a
// rail). Otherwise, and when the members do not fill nodes evenly, the next member.
std::int64_t ring_successor(const std::vector<std::int64_t>& members, std::size_t pos, std::int64_t per_node, std::int64_t gpus_per_node);

}  // namespace meshwork::plan
