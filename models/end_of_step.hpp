#pragma once
// The end of a step in the closed form: the collectives each pipeline stage issues after its
// last item (the deferred gradient reduction without overlap.grad_reduce, the distributed
// optimizer's closing gather; models::AfterLastItem) start when that stage's items end, which
// the schedule staggers (1F1B and interleaved: the last stage first), and run beside those of
// the stages still reducing. Where destination-mod-k (an oversubscribed tier, ECMP's
// collisions) makes one stage's rings meet another's above the leaves, each runs slower while
// the others run: the simulator plays it flow by flow (on the default scenario, the last stage
// reduces almost alone, at 36-49 ms a bucket, while the seven others overlap at 72-106 ms;
// NAR21 145.6B's eight stages end within 0.6 s and all reduce at 72 ms a bucket against 37 ms
// alone: tests/models/tiers_agreement_test.cpp).
//
// Here the stages' collectives after their last items run from when each may start, each at
// the pace its rings get beside the other stages running at that moment (their steady-state
// shares, topology::tier_shares), played event by event (a stage starts or ends): a stage's
// progress runs at one over its seconds at the shares of the moment.
#include <cstddef>
#include <functional>
#include <vector>

namespace meshwork::models {

// Per stage, when its collectives after its last item end, given when each may start and
// `seconds(k, running)`: stage k's collectives' seconds were they to run whole beside the stages
// running (running[j] != 0 for each, k among them). Throws std::invalid_argument on a negative
// or non-finite start or seconds.
std::vector<double> end_of_step(const std::vector<double>& start_s,
                                const std::function<double(std::size_t k, const std::vector<char>& running)>& seconds);

}  // namespace meshwork::models
