// Flows of a class: started, waited for, and moved when the fabric reroutes (engine.hpp).
#include "sim/engine.hpp"

namespace meshwork::sim::engine {

sg4::CommPtr Simulation::send_flow(std::int64_t from, std::size_t type, double bytes, std::size_t* cls) {
  const std::size_t i = class_now(from, type);
  if (cls != nullptr) *cls = i;
  FlowClass& fc = flow_class_[i];
  const double b = share(i, bytes);
  fc.bytes += b;
  ++fc.played;
  if (options_.free_communication || bytes <= 0) return nullptr;
  if (rerouted_ && crosses_failed_[flow_class_of(from, type)]) ++flows_moved_;
  sg4::CommPtr flow = sg4::Comm::sendto_async(flow_host_[i], sink_, payload(b));
  const std::size_t now = class_now(from, type);
  if (now != i) {
    // The fabric rerouted while the flow was being started (starting it let the failure
    // daemon run): it goes on the new paths, all of it.
    flow->cancel();
    fc.bytes -= b;
    flow_class_[now].bytes += share(now, bytes);
    if (cls != nullptr) *cls = now;
    if (crosses_failed_[i]) ++flows_moved_;
    flow = sg4::Comm::sendto_async(flow_host_[now], sink_, payload(share(now, bytes)));
  }
  return flow;
}

bool Simulation::wait_flow(const sg4::CommPtr& slot) {
  for (;;) {
    const sg4::CommPtr mine = slot;  // the daemon may drop the slot's reference
    try {
      // Activity's wait, not Comm's: Comm's would start a prepared flow itself.
      static_cast<sg4::Activity&>(*mine).wait_for(-1.0);
      return true;
    } catch (const simgrid::NetworkFailureException&) {
      if (slot == mine) return false;
    }
  }
}

void Simulation::play_failure() {
  sg4::this_actor::sleep_until(options_.failure->at_s);
  for (auto* h : failing_hosts_) h->turn_off();
  if (failing_links_.empty()) return;
  for (auto* l : failing_links_) l->set_bandwidth(kStalledBytesPerS);
  sg4::this_actor::sleep_until(options_.failure->at_s + p_.cluster.topology.effective_reroute_s());
  rerouted_ = true;
  // Two passes: the first swaps unstarted replacements into the slots without handing
  // control to any actor (the slots and the maps stay as they are meanwhile); the second
  // starts them and cancels the old flows, which lets the waiters run.
  std::vector<std::pair<sg4::CommPtr, sg4::CommPtr>> moved;  // (old started flow, its replacement)
  for (auto& [slot, cls] : in_flight_) move_flow(*slot, *cls, 0, moved);
  for (auto& [key, e] : p2p_) {
    if (e.flow) move_flow(e.flow, e.cls, e.bytes, moved);
  }
  for (auto& [old, fresh] : moved) {
    fresh->start();
    old->cancel();
  }
  for (auto* l : failing_links_) l->turn_off();
}

void Simulation::move_flow(sg4::CommPtr& flow, std::size_t& cls, double bytes, std::vector<std::pair<sg4::CommPtr, sg4::CommPtr>>& started) {
  const std::size_t types = peer_.size(), type = cls % types;
  if (!crosses_failed_[cls] || type >= base_types_) return;
  const std::size_t to = cls + base_types_;
  if (crosses_failed_[to]) return;  // partitioned: it fails when the links turn off
  const auto state = flow->get_state();
  if (state == sg4::Activity::State::FINISHED || state == sg4::Activity::State::FAILED || state == sg4::Activity::State::CANCELED) return;
  // Made by a receiver and not yet sent: sendto_init leaves it STARTING in SimGrid 3.32.
  const bool unstarted = state == sg4::Activity::State::INITED || state == sg4::Activity::State::STARTING;
  if (unstarted) {
    // Its sender starts the replacement, and counts its bytes then.
    ++flows_moved_;
    flow = sg4::Comm::sendto_init(flow_host_[to], sink_)->set_payload_size(payload(share(to, bytes)));
    cls = to;
    return;
  }
  // A started flow: the bytes of its edge still to go (its remainder is one share). One
  // that has delivered them, not yet waited for, stays.
  const double left = flow->get_remaining();
  if (left <= 0) return;
  ++flows_moved_;
  const double edge_left = left * flows_per_edge_[type];
  const sg4::CommPtr old = flow;
  flow = sg4::Comm::sendto_init(flow_host_[to], sink_)->set_payload_size(payload(share(to, edge_left)));
  flow_class_[cls].bytes -= left;
  flow_class_[to].bytes += share(to, edge_left);
  cls = to;
  started.emplace_back(old, flow);
}

}  // namespace meshwork::sim::engine
