#include "plan/field_catalogue.hpp"

#include "plan/diagnostics.hpp"
#include "plan/schema.hpp"

namespace meshwork::plan {
namespace {

template <class E>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (const auto& [v, name] : EnumNames<E>::values) out.emplace_back(name);
  return out;
}

class Cataloguer {
 public:
  Cataloguer(std::string path, FieldCatalogue& out) : path_(std::move(path)), out_(out) {}

  template <class T>
  void field(T& member, const FieldInfo& info) {
    FieldEntry e = entry(info);
    classify(member, e);
    out_.fields.push_back(std::move(e));
  }

  template <class S>
  void section(S& member, const FieldInfo& info) {
    const std::string path = join_path(path_, info.key);
    out_.sections.push_back(path);
    Cataloguer child(path, out_);
    describe(child, member);
  }

  template <class S>
  void list(std::vector<S>&, const FieldInfo& info) {
    out_.lists.push_back(join_path(path_, info.key));
  }

  template <class S>
  void preset(S&, const FieldInfo& info) {
    FieldEntry e = entry(info);
    e.kind = FieldKind::preset;
    out_.fields.push_back(std::move(e));
  }
  void hf_config(ModelConfig&, const FieldInfo& info) {
    FieldEntry e = entry(info);
    e.kind = FieldKind::path;
    out_.fields.push_back(std::move(e));
  }

 private:
  FieldEntry entry(const FieldInfo& info) const {
    FieldEntry e;
    e.path = join_path(path_, info.key);
    e.section = path_;
    e.key = info.key;
    e.aliases = info.aliases;
    e.unit = info.unit;
    e.min = info.min;
    e.max = info.max;
    e.required = info.required;
    e.doc = info.doc;
    return e;
  }
  static void classify(const std::int64_t&, FieldEntry& e) { e.kind = FieldKind::integer; }
  static void classify(const double&, FieldEntry& e) { e.kind = FieldKind::number; }
  static void classify(const bool&, FieldEntry& e) { e.kind = FieldKind::boolean; }
  static void classify(const std::string&, FieldEntry& e) { e.kind = FieldKind::text; }
  static void classify(const CheckpointInterval&, FieldEntry& e) { e.kind = FieldKind::duration_or_auto; }
  template <class E>
    requires std::is_enum_v<E>
  static void classify(const E&, FieldEntry& e) {
    e.kind = FieldKind::choice;
    e.choices = names_of<E>();
  }
  template <class E>
    requires std::is_enum_v<E>
  static void classify(const std::vector<E>&, FieldEntry& e) {
    e.kind = FieldKind::choice_list;
    e.choices = names_of<E>();
  }

  std::string path_;
  FieldCatalogue& out_;
};

FieldCatalogue build() {
  FieldCatalogue c;
  c.sections.emplace_back();
  Plan defaults;
  Cataloguer v("", c);
  describe(v, defaults);
  return c;
}

}  // namespace

const FieldCatalogue& field_catalogue() {
  static const FieldCatalogue catalogue = build();
  return catalogue;
}

}  // namespace meshwork::plan
