// Node attributes: a small closed set of value kinds, enough for the ONNX attributes
// mpc supports (ints, floats, strings and their lists). Tensor-valued attributes
// (Constant) become constant Values at import.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace mpc {

using AttrValue = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>>;

class AttrMap {
 public:
  void Set(const std::string& name, AttrValue value) { attrs_[name] = std::move(value); }
  bool Has(const std::string& name) const { return attrs_.count(name) > 0; }
  void Erase(const std::string& name) { attrs_.erase(name); }

  int64_t GetInt(const std::string& name, int64_t fallback) const;
  float GetFloat(const std::string& name, float fallback) const;
  std::string GetString(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> GetInts(const std::string& name, std::vector<int64_t> fallback) const;
  std::vector<float> GetFloats(const std::string& name, std::vector<float> fallback) const;

  const std::map<std::string, AttrValue>& all() const { return attrs_; }
  bool operator==(const AttrMap& other) const { return attrs_ == other.attrs_; }
  std::string ToString() const;

 private:
  std::map<std::string, AttrValue> attrs_;  // ordered: printing and CSE are deterministic
};

}  // namespace mpc
