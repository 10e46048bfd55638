// Human-readable views of a Graph: a text listing (one line per value declaration and
// per node, in topological order) and Graphviz DOT.
#pragma once

#include <string>

#include "graph/graph.h"

namespace mpc {

std::string GraphToText(const Graph& graph);
std::string GraphToDot(const Graph& graph);

}  // namespace mpc
