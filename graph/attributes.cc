// Typed access to node attributes with defaults, and their printed form.
#include "graph/attributes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mpc {

int64_t AttrMap::GetInt(const std::string& name, int64_t fallback) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) return fallback;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  if (auto* f = std::get_if<float>(&it->second)) return static_cast<int64_t>(*f);
  return fallback;
}

float AttrMap::GetFloat(const std::string& name, float fallback) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) return fallback;
  if (auto* v = std::get_if<float>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<float>(*i);
  return fallback;
}

std::string AttrMap::GetString(const std::string& name, const std::string& fallback) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) return fallback;
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return fallback;
}

std::vector<int64_t> AttrMap::GetInts(const std::string& name, std::vector<int64_t> fallback) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) return fallback;
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return fallback;
}

std::vector<float> AttrMap::GetFloats(const std::string& name, std::vector<float> fallback) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) return fallback;
  if (auto* v = std::get_if<std::vector<float>>(&it->second)) return *v;
  return fallback;
}

std::string AttrMap::ToString() const {
  std::vector<std::string> parts;
  for (const auto& [name, value] : attrs_) {
    std::string text;
    if (auto* i = std::get_if<int64_t>(&value))
      text = absl::StrCat(*i);
    else if (auto* f = std::get_if<float>(&value))
      text = absl::StrCat(*f);
    else if (auto* s = std::get_if<std::string>(&value))
      text = absl::StrCat("\"", *s, "\"");
    else if (auto* is = std::get_if<std::vector<int64_t>>(&value))
      text = absl::StrCat("[", absl::StrJoin(*is, ","), "]");
    else if (auto* fs = std::get_if<std::vector<float>>(&value))
      text = absl::StrCat("[", absl::StrJoin(*fs, ","), "]");
    parts.push_back(absl::StrCat(name, "=", text));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace mpc
