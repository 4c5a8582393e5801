#pragma once
// GraphViz DOT of a topology, for a picture (`meshwork topology PLAN --dot FILE`).

#include <string>

#include "topology/topology.hpp"

namespace meshwork::topology {

std::string to_dot(const Topology& t);

}  // namespace meshwork::topology
