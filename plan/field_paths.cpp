#include "plan/field_paths.hpp"

#include "plan/schema.hpp"

namespace meshwork::plan {
namespace {

std::vector<std::string> split(std::string_view dotted) {
  std::vector<std::string> parts;
  while (true) {
    const auto dot = dotted.find('.');
    parts.emplace_back(dotted.substr(0, dot));
    if (dot == std::string_view::npos) break;
    dotted.remove_prefix(dot + 1);
  }
  return parts;
}

bool spelled(const FieldInfo& info, const std::string& key) {
  if (info.key == key) return true;
  bool found = false;
  for_each_alias(info, [&](std::string_view a) { found = found || a == key; });
  return found;
}

// Walks the schema along the path's parts; records the field when the last part names one.
class PathFinder {
 public:
  PathFinder(const std::vector<std::string>& parts, std::size_t depth, std::optional<FieldPath>& out,
             std::vector<std::string> parent)
      : parts_(parts), depth_(depth), out_(out), parent_(std::move(parent)) {}

  template <class T>
  void field(T&, const FieldInfo& info) {
    if (depth_ + 1 != parts_.size() || !spelled(info, parts_[depth_])) return;
    FieldPath p;
    p.parent = parent_;
    for (const auto& s : parent_) p.canonical += s + ".";
    p.canonical += std::string(info.key);
    p.keys.emplace_back(info.key);
    for_each_alias(info, [&](std::string_view a) { p.keys.emplace_back(a); });
    out_ = std::move(p);
  }

  template <class S>
  void section(S& member, const FieldInfo& info) {
    if (depth_ + 1 >= parts_.size() || !spelled(info, parts_[depth_])) return;
    auto parent = parent_;
    parent.emplace_back(info.key);
    PathFinder child(parts_, depth_ + 1, out_, std::move(parent));
    describe(child, member);
  }

  template <class S>
  void list(std::vector<S>&, const FieldInfo&) {}
  template <class S>
  void preset(S&, const FieldInfo&) {}
  void hf_config(ModelConfig&, const FieldInfo&) {}

 private:
  const std::vector<std::string>& parts_;
  std::size_t depth_;
  std::optional<FieldPath>& out_;
  std::vector<std::string> parent_;
};

}  // namespace

std::optional<FieldPath> resolve_field_path(std::string_view dotted) {
  const auto parts = split(dotted);
  std::optional<FieldPath> out;
  Plan scratch;
  PathFinder finder(parts, 0, out, {});
  describe(finder, scratch);
  return out;
}

void set_field(nlohmann::json& tree, const FieldPath& field, nlohmann::json value) {
  if (!tree.is_object()) tree = nlohmann::json::object();
  nlohmann::json* node = &tree;
  for (const auto& section : field.parent) {
    if (node->contains(section) && (*node)[section].is_string()) {
      // `model: gpt3-175b` or `gpu: h100-sxm`: the shorthand for {preset: NAME}.
      (*node)[section] = nlohmann::json{{"preset", (*node)[section]}};
    }
    if (!node->contains(section) || !(*node)[section].is_object()) (*node)[section] = nlohmann::json::object();
    node = &(*node)[section];
  }
  for (const auto& key : field.keys) node->erase(key);
  (*node)[field.keys.front()] = std::move(value);
}

namespace {
nlohmann::json* section_of(nlohmann::json& tree, const FieldPath& field) {
  nlohmann::json* node = &tree;
  for (const auto& section : field.parent) {
    if (!node->is_object() || !node->contains(section)) return nullptr;
    node = &(*node)[section];
  }
  return node->is_object() ? node : nullptr;
}
}  // namespace

void erase_field(nlohmann::json& tree, const FieldPath& field) {
  if (nlohmann::json* node = section_of(tree, field)) {
    for (const auto& key : field.keys) node->erase(key);
  }
}

const nlohmann::json* find_field(const nlohmann::json& tree, const FieldPath& field) {
  const nlohmann::json* node = &tree;
  for (const auto& section : field.parent) {
    if (!node->is_object()) return nullptr;
    const auto it = node->find(section);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  if (!node->is_object()) return nullptr;
  for (const auto& key : field.keys) {
    const auto it = node->find(key);
    if (it != node->end()) return &*it;
  }
  return nullptr;
}

}  // namespace meshwork::plan
