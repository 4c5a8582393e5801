// The actors' play: each plays its stage's Program, its transfers and collectives (engine.hpp).
#include "sim/engine.hpp"

namespace meshwork::sim::engine {

void Simulation::start(P2p& e) {
  if (!e.flow && e.src >= 0 && e.bytes > 0) e.flow = send_flow(e.src, e.type, e.bytes, &e.cls);
}

void Simulation::post(std::int64_t r, const Instr& in) {
  P2p& e = p2p_[p2p_key(r, in.tag)];
  e.posted = true;
  if (e.sent) {
    start(e);
    return;
  }
  const std::size_t next_type = kinds_.size();
  const std::int64_t my_stage = layout_.coord(r).pp;
  if (options_.free_communication || in.bytes <= 0 || in.peer_stage == my_stage) return;
  const std::int64_t prev = peer_[next_type + 1][static_cast<std::size_t>(r)];
  const std::int64_t sender = in.peer_stage == layout_.coord(prev).pp ? prev : peer_[next_type][static_cast<std::size_t>(r)];
  const std::int64_t after_sender = peer_[next_type][static_cast<std::size_t>(sender)];
  e.src = rep_[static_cast<std::size_t>(colour_of(sender))];
  e.type = my_stage == layout_.coord(after_sender).pp ? next_type : next_type + 1;
  e.bytes = in.bytes;
  e.prepared = true;
  e.cls = class_now(e.src, e.type);
  e.flow = sg4::Comm::sendto_init(flow_host_[e.cls], sink_)->set_payload_size(payload(share(e.cls, e.bytes)));
}

double Simulation::receive(const std::pair<std::int64_t, std::int32_t>& key) {
  // By key, not by iterator: other actors add entries while this one waits, and a rehash
  // invalidates iterators (references stay valid).
  const std::uint64_t k = p2p_key(key.first, key.second);
  P2p& e = p2p_.find(k)->second;
  if (!e.sent && (!e.flow || !failing_links_.empty())) {
    // Until the send. With a link failure pending, also when the flow was made here
    // (unstarted): the failure daemon may move it to another path before the send.
    e.ready = sg4::Semaphore::create(0);
    e.ready->acquire();
  }
  double arrived_s = sg4::Engine::get_clock();
  if (e.flow) {
    if (!wait_flow(e.flow)) hang();
    // The last byte went through when the flow finished, which may be before this actor
    // looked (a compute waiting for a gather too waits for that first): the data is there a
    // route latency after the flow's end, not after the look.
    const double finished_s = e.flow->get_finish_time();
    arrived_s = (finished_s >= 0 ? std::min(finished_s, arrived_s) : arrived_s) + flow_class_[e.cls].latency_s;
  }
  p2p_.erase(k);
  return arrived_s;
}

void Simulation::collective(std::uint64_t key, std::int32_t kind, const models::CollectiveFlows& f, std::size_t type) {
  const auto& colours = group_colours_.at(kind);
  const auto size = static_cast<std::int64_t>(colours.size());
  Coll& c = colls_[key];
  if (++c.arrived < size) {
    if (!c.done) {
      if (!c.finished) c.finished = sg4::Semaphore::create(0);
      ++c.waiting;
      c.finished->acquire();
    }
  } else {
    // One flow per ring edge with all its bytes, then the ring's latency terms; or, per
    // message, each step's S/n on every edge once the previous step has arrived everywhere.
    const int steps = options_.per_message ? static_cast<int>(std::llround(f.steps)) : 1;
    const double bytes = f.edge_bytes / steps;
    std::vector<sg4::CommPtr> flows;
    std::vector<std::size_t> classes;
    // Slots that stay put: the failure daemon may move each flow from the moment it starts
    // (starting the next one lets it run).
    flows.reserve(colours.size());
    classes.reserve(colours.size());
    for (int step = 0; step < steps; ++step) {
      flows.clear();
      classes.clear();
      // The collective's latency (models::collective_flows: NCCL's tuner's for the protocol it
      // runs; a CPU host's steps), spread over the steps when played per message.
      const double latency = f.latency_s / steps;
      for (const auto colour : colours) {
        const std::int64_t from = rep_[static_cast<std::size_t>(colour)];
        std::size_t cls = 0;
        if (auto flow = send_flow(from, type, bytes, &cls)) {
          flows.push_back(std::move(flow));
          classes.push_back(cls);
          if (!failing_links_.empty()) in_flight_.emplace(&flows.back(), &classes.back());
        }
      }
      bool failed = false;
      for (auto& fl : flows) failed = !wait_flow(fl) || failed;
      for (auto& fl : flows) in_flight_.erase(&fl);
      if (failed) hang();
      if (latency > 0) sg4::this_actor::sleep_for(latency);
    }
    // The hierarchical algorithm's in-node phases: on NVLink, which nothing else shares.
    if (f.in_node_s > 0) sg4::this_actor::sleep_for(f.in_node_s);
    c.done = true;
    for (std::int64_t i = 0; i < c.waiting; ++i) c.finished->release();
  }
  if (++colls_[key].left == size) colls_.erase(key);
}

void Simulation::wait_for(ActorState& st, std::int32_t i, const models::StageProgram* sp) {
  if (i < 0 || (st.receiving.empty() && st.workers.empty())) return;
  const auto idx = static_cast<std::size_t>(i);
  bool waited = false;
  double arrived = 0;
  for (std::size_t j = 0; j < st.receiving.size();) {
    if (st.receiving[j].first != i) {
      ++j;
      continue;
    }
    arrived = std::max(arrived, receive(st.receiving[j].second));
    st.receiving.erase(st.receiving.begin() + static_cast<std::ptrdiff_t>(j));
    waited = true;
  }
  // The last byte is through; the data is there a route latency later (waited for by the
  // next thing the actor does, in the same sleep as its compute when that comes next).
  if (waited) {
    st.ready_s = std::max(st.ready_s, arrived);
    // A traced receive: from its posting to when the rank saw it complete.
    // (Data that came before the receive was posted is seen at the posting.)
    if (st.traced && sp != nullptr && sp->instrs[idx].kind == InstrKind::recv) record(st, *sp, sp->instrs[idx], st.issued_s[idx], std::max(arrived, st.issued_s[idx]));
  }
  for (std::size_t j = 0; j < st.workers.size(); ++j) {
    if (st.workers[j].first != i) continue;
    Lane& lane = st.lanes[st.workers[j].second];
    if (lane.done < i) {
      lane.awaited = i;
      lane.woken->acquire();
    }
    st.workers.erase(st.workers.begin() + static_cast<std::ptrdiff_t>(j));
    break;
  }
}

void Simulation::hold_sms(ActorState& st, std::size_t stream, double sms) {
  st.held_sms.at(stream) = sms;
  if (st.computing) {
    st.computing = false;  // one token per change the compute has not yet seen
    st.sms_changed->release();
  }
}

void Simulation::compute_for(ActorState& st, double work_s) {
  double held = 0;
  for (const double f : st.held_sms) held += f;
  bool queued = false;  // a lane with work to start: a collective may begin under this compute
  for (const Lane& lane : st.lanes) queued = queued || !lane.jobs.empty();
  if (held <= 0 && !queued) {
    if (work_s > 0) sg4::this_actor::sleep_for(work_s);
    return;
  }
  if (!st.sms_changed) st.sms_changed = sg4::Semaphore::create(0);
  double left = work_s;
  while (left > 0) {
    std::array<double, 6> shares = st.held_sms;
    held = 0;
    for (const double f : shares) held += f;
    const double rate = 1 - std::min(held, models::kMostSmsHeld);
    const double start = sg4::Engine::get_clock();
    st.computing = true;
    const bool done = st.sms_changed->acquire_timeout(left / rate);  // true: no change came
    st.computing = false;
    const double elapsed = sg4::Engine::get_clock() - start;
    const double worked = done ? left : std::min(left, elapsed * rate);
    left = done ? 0 : left - worked;
    // What the collectives took: charged to their streams' waits, by the SMs each held.
    const double lost = elapsed - worked;
    if (lost > 0 && held > 0) {
      for (std::size_t s = 0; s < shares.size(); ++s) {
        if (shares[s] > 0) st.waited_s[stream_wait(static_cast<models::Stream>(s))] += lost * shares[s] / held;
      }
    }
  }
}

void Simulation::play_lane(ActorState& st, Lane& lane, const models::StageProgram& sp) {
  for (;;) {
    lane.queued->acquire();
    if (lane.jobs.empty()) return;
    const Job job = lane.jobs.front();
    lane.jobs.pop_front();
    const double start = sg4::Engine::get_clock();
    const auto stream = static_cast<std::size_t>(&lane - st.lanes.data());
    hold_sms(st, stream, job.sms);
    collective(job.key, job.kind, job.flows, job.type);
    hold_sms(st, stream, 0);
    if (st.traced) record(st, sp, sp.instrs[static_cast<std::size_t>(job.index)], start, sg4::Engine::get_clock());
    lane.done = job.index;
    if (lane.awaited >= 0 && lane.done >= lane.awaited) {
      lane.awaited = -1;
      lane.woken->release();
    }
  }
}

void Simulation::play(std::size_t a) {
  ActorState& st = actors_[a];
  const std::int64_t lead = leads_[a];
  const models::StageProgram& sp = stage_of(lead);
  const std::size_t n = sp.instrs.size();

  std::array<std::uint64_t, 6> collectives{};  // collectives issued so far, per stream
  if (st.traced) st.issued_s.assign(n, 0);
  std::array<std::int32_t, 6> last{-1, -1, -1, -1, -1, -1};
  const double slow = pace_[static_cast<std::size_t>(node_of_[static_cast<std::size_t>(lead)])];  // the actor's slowest member
  const std::int64_t my_stage = layout_.coord(lead).pp;
  const std::size_t next_type = kinds_.size();
  const std::int64_t next_stage = (my_stage + 1) % program_.stages;
  std::size_t reported = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const Instr& in = sp.instrs[k];
    const auto stream = static_cast<std::size_t>(in.stream);
    if (st.traced) st.issued_s[k] = sg4::Engine::get_clock();
    // A collective waits for its stream's previous one in its own worker, not here: the
    // compute stream goes on (a DP bucket does not hold the backward pass).
    if (in.kind != InstrKind::collective) wait_for(st, last[stream], &sp);
    switch (in.kind) {
      case InstrKind::compute: {
        // Idle compute time before this instruction is charged to what it waited for: with
        // two things to wait for (a parameter gather and a receive), up to the end of the
        // second (also_after) to it, the rest to the first.
        wait_for(st, in.also_after, &sp);
        const double also_s = std::max(sg4::Engine::get_clock(), st.ready_s);
        wait_for(st, in.after, &sp);
        const double clock = sg4::Engine::get_clock();
        const double now = std::max(clock, st.ready_s);  // when the inputs are all there
        auto kind_of = [&](std::int32_t i) { return i >= 0 ? wait_of(sp.instrs[static_cast<std::size_t>(i)]) : Wait::none; };
        const double also_gap = in.also_after >= 0 ? std::max(0.0, std::min(also_s, now) - st.last_compute_end_s) : 0.0;
        if (also_gap > 0) st.waited_s[kind_of(in.also_after)] += also_gap;
        const double gap = now - st.last_compute_end_s - also_gap;
        if (gap > 0) st.waited_s[kind_of(in.after)] += gap;
        const BlockTime& bt = blocks_[static_cast<std::size_t>(sp.stage)][k];
        const double dt = bt.total() * slow;
        // Each part at the healthy pace; what a straggler adds is its own part (stalls).
        st.busy_s += bt.compute_s;
        st.recompute_s += bt.recompute_s;
        st.optimizer_s += bt.optimizer_s;
        st.straggle_s += bt.total() * (slow - 1);
        // In-node collectives merged into the block: their time is exposed TP/CP time.
        st.waited_s[Wait::tp] += bt.tp_s;
        st.waited_s[Wait::cp] += bt.cp_s;
        // The compute stream is this actor's own: nothing shares it, so it is a sleep
        // (an execution would cost SimGrid a max-min variable for nothing).
        if (now > clock) sg4::this_actor::sleep_for(now - clock);
        if (in.tail_after >= 0) {
          // Ring attention under CP's p2p exchange (Instr::tail_after): the blocks that have
          // arrived, then the last once the ring is through; the wait is exposed CP time.
          compute_for(st, dt * (1 - in.tail_fraction));
          const double head_end = sg4::Engine::get_clock();
          wait_for(st, in.tail_after, &sp);
          st.waited_s[Wait::cp] += sg4::Engine::get_clock() - head_end;
          compute_for(st, dt * in.tail_fraction);
        } else {
          compute_for(st, dt);
        }
        st.last_compute_end_s = sg4::Engine::get_clock();
        st.last_active_s = st.last_compute_end_s;
        if (st.traced) record(st, sp, in, now, st.last_compute_end_s);
        break;
      }
      case InstrKind::collective: {
        wait_for(st, in.after);
        settle(st);
        const auto g = in.group;
        if (layout_.group_size(g) <= 1 || options_.free_communication) break;
        const std::size_t type = kind_type(g);
        const auto& net = nets_[type];
        const models::CollectiveFlows f = models::collective_flows(net, in.collective, in.bytes, models::algorithm_for(net, in.collective, in.bytes));
        const std::uint64_t seq = collectives[stream]++;
        const auto kind = group_kind_of(type, lead);
        const std::uint64_t key = ((type * 8 + stream) << 52) | (static_cast<std::uint64_t>(kind) << 24) | seq;
        Lane& lane = st.lanes[stream];
        if (!lane.worker) {
          lane.queued = sg4::Semaphore::create(0);
          lane.woken = sg4::Semaphore::create(0);
          lane.worker = sg4::Actor::create("coll", host_of_[static_cast<std::size_t>(lead)], [this, &st, &lane, &sp] { play_lane(st, lane, sp); });
        }
        lane.jobs.push_back({key, kind, f, type, static_cast<std::int32_t>(k), models::sm_fraction(timer_.hardware(), in.stream, in.collective, false)});
        lane.queued->release();
        st.workers.emplace_back(static_cast<std::int32_t>(k), stream);
        break;
      }
      case InstrKind::send: {
        wait_for(st, in.after);
        settle(st);
        // Sends are buffered: in the trace, a mark where the rank handed the data over.
        if (st.traced) record(st, sp, in, sg4::Engine::get_clock(), sg4::Engine::get_clock());
        const double bytes = options_.free_communication ? 0 : in.bytes;
        const std::size_t type = in.peer_stage == my_stage || in.peer_stage == next_stage ? next_type : next_type + 1;
        const std::int64_t peer = in.peer_stage == my_stage ? lead : peer_[type][static_cast<std::size_t>(lead)];
        // Sends are buffered, as the Program's replay takes them (Megatron batches
        // isend/irecv): nothing waits for one but its receiver, the one playing the peer's
        // colour.
        P2p& e = p2p_[p2p_key(rep_[static_cast<std::size_t>(colour_of(peer))], in.tag)];
        e.sent = true;
        if (e.prepared) {
          // The receiver made this flow for the class it expected.
          if (flow_class_of(e.src, e.type) != flow_class_of(lead, type) || e.bytes != bytes) {
            throw std::logic_error("pipeline transfer " + std::to_string(in.tag) + " from rank " + std::to_string(lead) + " is not the one its receiver expected");
          }
          FlowClass& fc = flow_class_[e.cls];
          fc.bytes += share(e.cls, bytes);
          ++fc.played;
          e.flow->start();
          if (e.ready) e.ready->release();
          break;
        }
        e.src = peer == lead ? -1 : lead;
        e.type = type;
        e.bytes = bytes;
        // overlap.p2p: Megatron posts the next receive ahead of the compute
        // (--overlap-p2p-communication), so the transfer runs as soon as it is sent;
        // otherwise it starts when the receiver reaches its receive (models/pipeline).
        if (e.posted || p_.parallelism.overlap.p2p) start(e);
        if (e.ready) e.ready->release();
        break;
      }
      case InstrKind::recv: {
        post(lead, in);
        st.receiving.push_back({static_cast<std::int32_t>(k), {lead, in.tag}});
        break;
      }
    }
    if (in.kind != InstrKind::send) last[stream] = static_cast<std::int32_t>(k);
    if (a == 0 && progress_ && (k + 1) * 50 / n > reported) {
      reported = (k + 1) * 50 / n;
      progress_(static_cast<double>(reported) / 50);
    }
  }
  while (!st.receiving.empty()) wait_for(st, st.receiving.front().first, &sp);
  while (!st.workers.empty()) wait_for(st, st.workers.front().first, &sp);
  for (Lane& lane : st.lanes) {
    if (lane.worker) lane.queued->release();  // no job: the worker ends
  }
  settle(st);
  // The tail after the last compute (the distributed optimizer's gather when it is not
  // overlapped with the forward, the last gradient buckets) is DP time.
  const double tail = sg4::Engine::get_clock() - st.last_compute_end_s;
  if (tail > 0) st.waited_s[Wait::dp] += tail;
  st.end_s = sg4::Engine::get_clock();
  st.finished = true;
}

}  // namespace meshwork::sim::engine
