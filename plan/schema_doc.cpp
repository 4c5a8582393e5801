// The field reference of the README, generated from schema.hpp so that it cannot drift:
// `meshwork schema --markdown` prints it and a test compares it with the README.
#include "plan/schema_doc.hpp"

#include <sstream>

#include "plan/diagnostics.hpp"
#include "plan/schema.hpp"

namespace meshwork::plan {
namespace {

std::string number_text(double v) {
  std::ostringstream s;
  s.precision(12);
  s << v;
  return s.str();
}

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::string unit_suffix(const FieldInfo& info) {
  return symbol(info.unit).empty() ? "" : " (" + std::string(symbol(info.unit)) + ")";
}

std::string type_of(const std::int64_t&, const FieldInfo& info) {
  return info.unit == Unit::count ? "count" : "integer";
}
std::string type_of(const double&, const FieldInfo& info) {
  if (info.unit == Unit::count) return "count";
  return "number" + unit_suffix(info);
}
std::string type_of(const bool&, const FieldInfo&) { return "bool"; }
std::string type_of(const std::string&, const FieldInfo&) { return "string"; }
std::string type_of(const CheckpointInterval&, const FieldInfo& info) { return "auto or duration" + unit_suffix(info); }
template <class E>
  requires std::is_enum_v<E>
std::string type_of(const E&, const FieldInfo&) {
  return enum_choices<E>();
}
template <class E>
  requires std::is_enum_v<E>
std::string type_of(const std::vector<E>&, const FieldInfo&) {
  return "list of " + enum_choices<E>();
}

std::string default_of(const std::int64_t& v) { return std::to_string(v); }
std::string default_of(const double& v) { return number_text(v); }
std::string default_of(const bool& v) { return v ? "true" : "false"; }
std::string default_of(const std::string& v) { return v.empty() ? "" : v; }
std::string default_of(const CheckpointInterval& v) { return v.automatic ? "auto" : number_text(v.seconds); }
template <class E>
  requires std::is_enum_v<E>
std::string default_of(const E& v) {
  return std::string(to_string(v));
}
template <class E>
  requires std::is_enum_v<E>
std::string default_of(const std::vector<E>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::string(to_string(values[i]));
  return out + "]";
}

std::string aliases_of(const FieldInfo& info) {
  std::string out;
  for_each_alias(info, [&](std::string_view a) {
    if (!out.empty()) out += ", ";
    out += "`" + std::string(a) + "`";
  });
  return out;
}

class DocWriter {
 public:
  DocWriter(std::string path, std::ostringstream& out) : path_(std::move(path)), out_(out) {}

  template <class T>
  void field(T& member, const FieldInfo& info) {
    std::string def = info.default_text.empty() ? default_of(member) : std::string(info.default_text);
    if (info.required) def = "required";
    row(join_path(path_, info.key), type_of(member, info), def, aliases_of(info), info.doc);
  }

  template <class S>
  void section(S& member, const FieldInfo& info) {
    const std::string path = join_path(path_, info.key);
    row(path, "section", info.required ? "required" : "", aliases_of(info), info.doc);
    DocWriter child(path, out_);
    describe(child, member);
  }

  template <class S>
  void list(std::vector<S>&, const FieldInfo& info) {
    const std::string path = join_path(path_, info.key) + "[]";
    row(path, "list", "[]", aliases_of(info), info.doc);
    S item{};
    DocWriter child(path, out_);
    describe(child, item);
  }

  template <class S>
  void preset(S&, const FieldInfo& info) {
    row(join_path(path_, info.key), "preset name", "", "", info.doc);
  }
  void hf_config(ModelConfig&, const FieldInfo& info) {
    row(join_path(path_, info.key), "path", "", "", info.doc);
  }

 private:
  void row(const std::string& path, const std::string& type, const std::string& def,
           const std::string& aliases, std::string_view doc) {
    out_ << "| `" << path << "` | " << escape(type) << " | " << escape(def) << " | " << aliases << " | "
         << escape(doc) << " |\n";
  }

  std::string path_;
  std::ostringstream& out_;
};

}  // namespace

std::string field_reference_markdown() {
  std::ostringstream out;
  out << "| field | type (unit) | default | aliases | meaning |\n";
  out << "|---|---|---|---|---|\n";
  Plan defaults;
  DocWriter w("", out);
  describe(w, defaults);
  return out.str();
}

}  // namespace meshwork::plan
