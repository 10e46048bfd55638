// The registry of op-numerics case tables (see op_cases.h).
#include <map>
#include <string>

#include "tests/graph/op_cases.h"

namespace mpc::opcases {
namespace {

std::map<std::string, CaseTable>& Tables() {
  static auto* tables = new std::map<std::string, CaseTable>();
  return *tables;
}

}  // namespace

bool RegisterCaseTable(const char* family, CaseTable table) {
  Tables().emplace(family, table);
  return true;
}

const std::vector<OpCase>& AllCases() {
  static const std::vector<OpCase>* cases = [] {
    auto* all = new std::vector<OpCase>();
    for (const auto& [family, table] : Tables()) {
      for (OpCase& c : table()) all->push_back(std::move(c));
    }
    return all;
  }();
  return *cases;
}

}  // namespace mpc::opcases
