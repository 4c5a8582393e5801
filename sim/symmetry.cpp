// Colour refinement of the ranks of a step (symmetry.hpp).
#include "sim/symmetry.hpp"

#include <algorithm>
#include <bit>
#include <map>

namespace meshwork::sim {
namespace {

// Dense ids for signatures, in order of first appearance.
class Palette {
 public:
  std::int32_t id(const std::vector<std::int64_t>& signature) {
    const auto [it, fresh] = ids_.emplace(signature, static_cast<std::int32_t>(ids_.size()));
    return it->second;
  }
  [[nodiscard]] std::int32_t size() const { return static_cast<std::int32_t>(ids_.size()); }

 private:
  std::map<std::vector<std::int64_t>, std::int32_t> ids_;
};

// Sorted values as (value, count) pairs appended to `out`.
void append_counted(std::vector<std::int64_t>& values, std::vector<std::int64_t>& out) {
  std::sort(values.begin(), values.end());
  for (std::size_t i = 0; i < values.size();) {
    std::size_t j = i;
    while (j < values.size() && values[j] == values[i]) ++j;
    out.push_back(values[i]);
    out.push_back(static_cast<std::int64_t>(j - i));
    i = j;
  }
}

}  // namespace

Colouring colour_ranks(const FlowSystem& s, bool refine, std::int32_t max_colours) {
  const auto n = static_cast<std::size_t>(s.ranks);
  const std::size_t types = s.peer.size();
  Colouring c;
  c.colour.assign(n, 0);
  {
    Palette start;
    for (std::size_t r = 0; r < n; ++r) c.colour[r] = start.id({refine ? s.initial[r] : static_cast<std::int64_t>(r)});
    c.colours = start.size();
  }
  // Members of each actor and of each collective group, found once.
  std::map<std::int64_t, std::vector<std::int64_t>> actor_members;
  for (std::size_t r = 0; r < n; ++r) actor_members[s.actor[r]].push_back(static_cast<std::int64_t>(r));
  std::vector<std::map<std::int64_t, std::vector<std::int64_t>>> group_members(types);
  for (std::size_t t = 0; t < types; ++t) {
    if (s.group[t].empty()) continue;
    for (std::size_t r = 0; r < n; ++r) {
      if (s.group[t][r] >= 0) group_members[t][s.group[t][r]].push_back(static_cast<std::int64_t>(r));
    }
  }
  c.group_kind.assign(types, std::vector<std::int32_t>(n, -1));
  std::vector<std::int64_t> scratch, sig;
  std::map<std::int64_t, std::int32_t> actor_kind;

  // Links: capacity and mark, then how many flows of each (colour, type) cross.
  auto colour_links = [&] {
    std::vector<std::vector<std::int64_t>> on_slot(s.capacity.size());
    for (std::size_t t = 0; t < types; ++t) {
      for (std::size_t r = 0; r < n; ++r) {
        const auto* hops = s.route[t][r];
        if (hops == nullptr) continue;
        for (const auto& h : *hops) on_slot[h.slot()].push_back(static_cast<std::int64_t>(c.colour[r]) * static_cast<std::int64_t>(types) + static_cast<std::int64_t>(t));
      }
    }
    Palette links;
    c.link_colour.assign(s.capacity.size(), -1);
    for (std::size_t slot = 0; slot < on_slot.size(); ++slot) {
      if (on_slot[slot].empty()) continue;
      sig.assign(1, std::bit_cast<std::int64_t>(s.capacity[slot]));
      sig.push_back(slot < s.mark.size() ? s.mark[slot] : 0);
      append_counted(on_slot[slot], sig);
      c.link_colour[slot] = links.id(sig);
    }
    c.link_colours = links.size();
  };
  // Groups and actors: their members' colours with counts.
  auto colour_kinds = [&] {
    Palette kinds;
    for (std::size_t t = 0; t < types; ++t) {
      for (const auto& [g, members] : group_members[t]) {
        scratch.clear();
        for (auto m : members) scratch.push_back(c.colour[static_cast<std::size_t>(m)]);
        sig.assign(1, static_cast<std::int64_t>(t));
        append_counted(scratch, sig);
        const std::int32_t kind = kinds.id(sig);
        for (auto m : members) c.group_kind[t][static_cast<std::size_t>(m)] = kind;
      }
    }
    actor_kind.clear();
    for (const auto& [a, members] : actor_members) {
      scratch.clear();
      for (auto m : members) scratch.push_back(c.colour[static_cast<std::size_t>(m)]);
      sig.assign(1, -1);
      append_counted(scratch, sig);
      actor_kind[a] = kinds.id(sig);
    }
  };
  // One round: per rank its own colour, its actor's, then per type the peer's colour (a
  // collective's only with `paths`) and the group's make-up, and with `paths` the link
  // colours under the flow and its latency.
  // Returns the number of colours of the refined partition, left in `next`.
  std::vector<std::int32_t> next(n);
  auto refine_once = [&](bool paths) {
    ++c.rounds;
    colour_kinds();
    if (paths) colour_links();
    Palette palette;
    for (std::size_t r = 0; r < n; ++r) {
      sig.assign({c.colour[r], actor_kind[s.actor[r]]});
      for (std::size_t t = 0; t < types; ++t) {
        // A collective's ring neighbour is a matter of paths: its members meet as a group.
        const bool collective = !s.group[t].empty();
        const std::int64_t p = s.peer[t][r];
        if (paths || !collective) sig.push_back(p >= 0 ? c.colour[static_cast<std::size_t>(p)] : -1);
        sig.push_back(c.group_kind[t][r]);
        if (!paths) continue;
        const auto* hops = s.route[t][r];
        if (hops == nullptr) {
          sig.push_back(-1);
          continue;
        }
        sig.push_back(std::bit_cast<std::int64_t>(s.latency_s[t][r]));
        scratch.clear();
        for (const auto& h : *hops) scratch.push_back(c.link_colour[h.slot()]);
        sig.push_back(static_cast<std::int64_t>(scratch.size()));
        append_counted(scratch, sig);
      }
      next[r] = palette.id(sig);
    }
    return palette.size();
  };

  if (refine) {
    // Structure first (pipeline peers, groups, actors), to stability: the play needs it
    // exact (a colour's sends meet one colour's receives, its collectives one make-up).
    // Then paths, a round at a time, each followed by structure again; a round that would
    // pass the budget is not taken.
    std::vector<std::int32_t> kept;
    std::int32_t kept_colours = 0;
    for (;;) {
      while (true) {
        const std::int32_t count = refine_once(false);
        if (count == c.colours) break;
        c.colour = next;
        c.colours = count;
      }
      if (max_colours > 0 && c.colours > max_colours && !kept.empty()) {
        c.refused_colours = c.colours;
        c.colour = std::move(kept);
        c.colours = kept_colours;
        break;
      }
      kept = c.colour;
      kept_colours = c.colours;
      const std::int32_t count = refine_once(true);
      if (count == c.colours) break;
      if (max_colours > 0 && count > max_colours) {
        c.refused_colours = count;
        break;
      }
      c.colour = next;
      c.colours = count;
    }
    // Colours numbered by their first rank, as one round numbers them.
    Palette order;
    for (std::size_t r = 0; r < n; ++r) c.colour[r] = order.id({c.colour[r]});
  }
  colour_links();
  colour_kinds();
  return c;
}

}  // namespace meshwork::sim
