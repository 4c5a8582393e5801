// Colour refinement (sim/symmetry.hpp) on small systems whose symmetry is known.
#include "sim/symmetry.hpp"

#include <gtest/gtest.h>

#include <set>

namespace meshwork::sim {
namespace {

// `n` ranks in a ring, each sending to the next over its own link (slot r), all of the same
// capacity unless `slow` names one.
struct Ring {
  std::vector<std::vector<topology::Hop>> hops;
  FlowSystem system;
  explicit Ring(std::int64_t n, std::int64_t slow = -1) {
    hops.resize(static_cast<std::size_t>(n));
    system.ranks = n;
    system.peer.assign(1, std::vector<std::int64_t>(static_cast<std::size_t>(n)));
    system.route.assign(1, std::vector<const std::vector<topology::Hop>*>(static_cast<std::size_t>(n)));
    system.latency_s.assign(1, std::vector<double>(static_cast<std::size_t>(n), 1e-6));
    system.group.assign(1, std::vector<std::int64_t>(static_cast<std::size_t>(n), 0));
    system.capacity.assign(static_cast<std::size_t>(2 * n), 50e9);
    for (std::int64_t r = 0; r < n; ++r) {
      const auto i = static_cast<std::size_t>(r);
      system.actor.push_back(r);
      system.initial.push_back(0);
      system.peer[0][i] = (r + 1) % n;
      hops[i] = {topology::Hop{r, true}};
      system.route[0][i] = &hops[i];
    }
    if (slow >= 0) system.capacity[static_cast<std::size_t>(2 * slow)] = 25e9;
  }
};

TEST(Symmetry, ARingOfAlikeRanksIsOneColour) {
  Ring ring(8);
  const Colouring c = colour_ranks(ring.system);
  EXPECT_EQ(c.colours, 1);
  EXPECT_EQ(c.link_colours, 1);
  EXPECT_EQ(colour_ranks(ring.system, false).colours, 8);  // no refinement: every rank its own
}

TEST(Symmetry, OneSlowLinkSplitsTheRingByDistanceFromIt) {
  // The rank on the slow link differs; so does each rank by how far along the ring it is
  // from it (its peer's colour differs, and so on): all eight end up apart.
  Ring ring(8, 3);
  const Colouring c = colour_ranks(ring.system);
  EXPECT_EQ(c.colours, 8);
  EXPECT_EQ(c.link_colours, 8);  // each carries a flow of another colour
}

TEST(Symmetry, AStragglerSplitsItsColourButTwoAlikeGroupsStayAlike) {
  // Two rings of four (two collective groups); a slower start colour on rank 1 of each: the
  // two rings remain alike, member for member.
  Ring ring(8);
  for (std::int64_t r = 0; r < 8; ++r) {
    const auto i = static_cast<std::size_t>(r);
    ring.system.peer[0][i] = (r / 4) * 4 + (r + 1) % 4;
    ring.system.group[0][i] = r / 4;
    ring.system.initial[i] = r % 4 == 1 ? 1 : 0;
  }
  const Colouring c = colour_ranks(ring.system);
  EXPECT_EQ(c.colours, 4);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(c.colour[r], c.colour[r + 4]);
  EXPECT_EQ(c.group_kind[0][0], c.group_kind[0][4]);
}

TEST(Symmetry, PastTheBudgetAColourHoldsRanksWhosePathsDifferAndItsLinksStayExact) {
  // The ring with one slow link needs eight colours to be exact. With a budget of one the
  // first path round is refused: the ranks stay one colour (a collective's ring neighbour is a
  // matter of paths, not of structure), and the links are coloured from that one colour: the
  // slow one apart by its capacity, each carrying one flow of the colour.
  Ring ring(8, 3);
  const Colouring c = colour_ranks(ring.system, true, 1);
  EXPECT_EQ(c.colours, 1);
  EXPECT_EQ(c.refused_colours, 2);  // the first path round splits off the rank on the slow link
  EXPECT_EQ(c.link_colours, 2);
  EXPECT_NE(c.link_colour[6], c.link_colour[0]);  // slot 2 x 3: the slow link
  for (std::size_t slot = 0; slot < 16; slot += 2) {
    if (slot != 6) {
      EXPECT_EQ(c.link_colour[slot], c.link_colour[0]);
    }
  }
  // Path rounds are taken while they fit: one more rank apart per round, from the slow link.
  const Colouring four = colour_ranks(ring.system, true, 4);
  EXPECT_EQ(four.colours, 4);
  EXPECT_EQ(four.refused_colours, 5);
  // A budget the exact colouring fits in changes nothing.
  const Colouring exact = colour_ranks(ring.system), roomy = colour_ranks(ring.system, true, 8);
  EXPECT_EQ(roomy.refused_colours, 0);
  EXPECT_EQ(roomy.colour, exact.colour);
  EXPECT_EQ(roomy.link_colour, exact.link_colour);
}

TEST(Symmetry, StructureStaysExactPastTheBudget) {
  // Point-to-point flows (no group): a rank's peer is structure, and the play pairs a colour's
  // sends with one colour's receives. A chain 0 -> 1 -> ... -> 7 (the last sends nowhere)
  // splits by distance from its end whatever the budget.
  Ring ring(8);
  ring.system.group[0].clear();
  ring.system.peer[0][7] = -1;
  ring.system.route[0][7] = nullptr;
  const Colouring c = colour_ranks(ring.system, true, 2);
  EXPECT_EQ(c.colours, 8);
  EXPECT_EQ(c.refused_colours, 0);
}

}  // namespace
}  // namespace meshwork::sim
