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
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/comm.hpp"
#include "models/dp_replay.hpp"
#include "plan/plan.hpp"

namespace meshwork::models {

// Which stages' running changes each stage's pace: stage k's are stages[first[k]] to
// stages[first[k + 1] - 1]. Empty `first`: every stage's changes every other's.
struct StagesMet {
  std::vector<std::size_t> first;
  std::vector<std::size_t> stages;
};

// A reference to a callable, not a copy of it: std::function allocates for a lambda that
// captures more than two pointers, and the estimate asks its callback once per stage and event
// (issue 18: the closed form's speed). The callable must outlive the call it is passed to.
template <class Signature>
class CallableRef;
template <class R, class... Args>
class CallableRef<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, CallableRef> && std::is_invocable_r_v<R, F&, Args...>)
  CallableRef(F&& f) {  // NOLINT(google-explicit-constructor): passed where a callable is expected
    using Target = std::remove_reference_t<F>;
    if constexpr (std::is_function_v<Target> || (std::is_pointer_v<Target> && std::is_function_v<std::remove_pointer_t<Target>>)) {
      // A function, or a pointer to one: kept by value, not by the address of the pointer.
      to_.function = f;
      call_ = [](To to, Args... args) -> R { return to.function(std::forward<Args>(args)...); };
    } else {
      to_.object = const_cast<void*>(static_cast<const void*>(std::addressof(f)));
      call_ = [](To to, Args... args) -> R { return (*static_cast<Target*>(to.object))(std::forward<Args>(args)...); };
    }
  }
  R operator()(Args... args) const { return call_(to_, std::forward<Args>(args)...); }

 private:
  union To {
    void* object;
    R (*function)(Args...);
  };
  To to_{};
  R (*call_)(To, Args...) = nullptr;
};

// Per stage, when its collectives after its last item end, given when each may start and
// `seconds(k, running)`: stage k's collectives' seconds were they to run whole beside the stages
// running (running[j] != 0 for each, k among them), which depend only on the stages `meets`
// names for k: only their starts and ends ask for its seconds again. Throws
// std::invalid_argument on a negative or non-finite start or seconds, or a `meets` of another
// size or naming a stage out of range.
std::vector<double> end_of_step(const std::vector<double>& start_s, CallableRef<double(std::size_t k, const std::vector<char>& running)> seconds,
                                const StagesMet& meets = {});

// The estimate's step's end for DP: per stage, when its collectives after its last item end,
// each stage's being the replayed stage's (dp.after_last_item) times scale[k] (its parameters
// over the replayed stage's), from start_s[k], at the NIC shares of each of `nets`' groups: its
// rings' alone, or beside the stages running, the least any one of them leaves it
// (stage_pair_nic_bytes_per_s). That is exact where the stages a stage meets meet it on
// different links, as on the shipped plans that reduce at their step's end (each stage's share
// with every stage at once equals its worst pair's there:
// tests/topology/fabric_share_test.cpp); where three or more stages' rings share one link it is
// optimistic. Groups without per-stage figures run at their share.
std::vector<double> dp_end_of_step(const plan::Plan& p, const DpNetworks& nets, const AfterLastItem& work, CollectivePrices& price,
                                   const std::vector<double>& start_s, const std::vector<double>& scale);

}  // namespace meshwork::models
