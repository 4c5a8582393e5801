#pragma once
// Which ranks of a step behave alike, so that the simulator plays one of each kind.
//
// Ranks are coloured by colour refinement (the 1-dimensional Weisfeiler-Leman algorithm) on
// everything that sets a rank's timing: its stage and pace, the colours of its pipeline
// peers, of the members of each of its collective groups and of the lanes of its actor, and
// the links under each of its flows, a link being coloured by its capacity and by how many
// flows of each (rank colour, flow type) cross it. Refinement stops when no colour splits:
// the partition is then equitable. Every rank of a colour plays the same instructions at the
// same times, so their flows of one type start and end together; on a link of a given colour
// each such flow class has the same count c, every member of a class crosses the same
// multiset of link colours, and max-min sharing (progressive filling) therefore raises and
// freezes the members of a class together. The system SimGrid solves can then keep one link
// per link colour and one flow per class, the flow crossing a link of colour K with weight c_K
// (a route through that link c_K times: SimGrid adds up repeated consumption), and its
// solution is the full system's, member for member. A straggler or a degraded link splits
// the colours it touches and only those.
//
// Past a budget of colours the partition stops short of equitable (a budget): colours
// stay equitable in structure (pipeline peers, groups, actors), so that the play pairs sends
// with receives and collectives with their members, but ranks whose paths differ may share a
// colour. Links are still coloured by the exact count of each class's flows on them, so each
// link's load is the real one when a class moves at one rate, and a class's flow crosses every
// link colour any of its members crosses: the class moves at the pace of its slowest member,
// which is how a ring collective moves anyway, and pipeline sends of alike stages move
// together. Collisions that one member meets and another does not are averaged out of sight;
// the report says so. This is the quotient of Kayali and Suciu's quasi-stable colouring
// ("Quasi-stable Coloring for Graph Compression", VLDB 2023), which approximates linear
// programs the same way, with the split rule replaced by whole rounds of refinement.
//
// Reference: Grohe, Kersting, Mladenov, Selman, "Dimension reduction via colour refinement"
// (ESA 2014), which reduces linear programs by the same equitable partitions.

#include <cstdint>
#include <vector>

#include "topology/router.hpp"

namespace meshwork::sim {

struct FlowSystem {
  std::int64_t ranks = 0;
  // Per rank: the actor that plays it (a TP group in lockstep, or the rank itself) and the
  // colour it starts with (stage and pace); equal numbers mean alike.
  std::vector<std::int64_t> actor;
  std::vector<std::int64_t> initial;
  // Per flow type, per rank: where its flow goes (-1: none, or itself) and over which links.
  std::vector<std::vector<std::int64_t>> peer;
  std::vector<std::vector<const std::vector<topology::Hop>*>> route;
  std::vector<std::vector<double>> latency_s;
  // Per flow type: the collective group of each rank (-1: the type is not a collective's).
  std::vector<std::vector<std::int64_t>> group;
  // Per directed link slot: its capacity in bytes per second, and a mark that sets it apart
  // (a link that will fail); empty marks: none.
  std::vector<double> capacity;
  std::vector<std::int64_t> mark;
};

struct Colouring {
  std::vector<std::int32_t> colour;       // per rank, dense from 0
  std::int32_t colours = 0;
  // Per flow type, per rank: the colour of its collective group's make-up (the colours of
  // its members with their counts); groups alike have the same one.
  std::vector<std::vector<std::int32_t>> group_kind;
  // Per directed link slot: its colour, -1 where no flow passes.
  std::vector<std::int32_t> link_colour;
  std::int32_t link_colours = 0;
  int rounds = 0;
  // The colours of the round the budget refused (0: the partition is equitable, exact).
  std::int32_t refused_colours = 0;
};

// Refines `initial` until stable, or until a round of path refinement would give more than
// `max_colours` colours (0: no budget). With `refine` false every rank is its own colour
// (the full system).
Colouring colour_ranks(const FlowSystem& system, bool refine = true, std::int32_t max_colours = 0);

}  // namespace meshwork::sim
