// Plan -> JSON, the save format: every field under its canonical key, numbers in the unit its
// key names, so that load(save(plan)) == plan exactly.
#include "plan/plan_io.hpp"

#include "plan/diagnostics.hpp"
#include "plan/schema.hpp"

namespace meshwork::plan {
namespace {

using nlohmann::json;

json value_json(std::int64_t v) { return v; }
json value_json(double v) { return v; }
json value_json(bool v) { return v; }
json value_json(const std::string& v) { return v; }

template <class E>
  requires std::is_enum_v<E>
json value_json(E v) {
  return std::string(to_string(v));
}

template <class E>
  requires std::is_enum_v<E>
json value_json(const std::vector<E>& values) {
  json arr = json::array();
  for (E v : values) arr.push_back(std::string(to_string(v)));
  return arr;
}

json value_json(const CheckpointInterval& v) {
  if (v.automatic) return "auto";
  return v.seconds;
}

class JsonWriter {
 public:
  explicit JsonWriter(json& out) : out_(out) {}

  template <class T>
  void field(T& member, const FieldInfo& info) {
    out_[std::string(info.key)] = value_json(member);
  }

  template <class S>
  void section(S& member, const FieldInfo& info) {
    json child = json::object();
    JsonWriter w(child);
    describe(w, member);
    out_[std::string(info.key)] = std::move(child);
  }

  template <class S>
  void list(std::vector<S>& member, const FieldInfo& info) {
    json arr = json::array();
    for (auto& item : member) {
      json child = json::object();
      JsonWriter w(child);
      describe(w, item);
      arr.push_back(std::move(child));
    }
    out_[std::string(info.key)] = std::move(arr);
  }

  // Presets and HF configs are load-time directives: the resolved fields are written instead.
  template <class S>
  void preset(S&, const FieldInfo&) {}
  void hf_config(ModelConfig&, const FieldInfo&) {}

 private:
  json& out_;
};

}  // namespace

nlohmann::json to_json(const Plan& plan) {
  Plan copy = plan;  // describe() takes sections by reference; the writer only reads them
  json out = json::object();
  JsonWriter w(out);
  describe(w, copy);
  return out;
}

}  // namespace meshwork::plan
