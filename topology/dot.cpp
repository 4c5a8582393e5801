#include "topology/dot.hpp"

#include <sstream>

namespace meshwork::topology {

std::string to_dot(const Topology& t) {
  std::ostringstream out;
  out << "graph meshwork {\n  graph [rankdir=BT, splines=false];\n  node [fontsize=9];\n";
  for (auto v : boost::make_iterator_range(boost::vertices(t.graph))) {
    const auto& x = t.graph[v];
    const char* shape = x.kind == VertexKind::gpu ? "box" : x.kind == VertexKind::nic ? "ellipse" : "hexagon";
    out << "  v" << v << " [label=\"" << to_string(x.kind) << ' ' << x.index;
    if (x.node >= 0) out << "\\nnode " << x.node;
    out << "\", shape=" << shape << "];\n";
  }
  for (auto e : boost::make_iterator_range(boost::edges(t.graph))) {
    out << "  v" << boost::source(e, t.graph) << " -- v" << boost::target(e, t.graph) << " [tooltip=\""
        << to_string(t.graph[e].tier) << ' ' << t.graph[e].bandwidth_gbytes_per_s << " GB/s\"];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace meshwork::topology
