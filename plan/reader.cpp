#include "plan/reader.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "plan/field_catalogue.hpp"
#include "plan/hf_import.hpp"
#include "plan/presets.hpp"
#include "plan/schema.hpp"
#include "plan/validate.hpp"

namespace meshwork::plan {
namespace {

using nlohmann::json;

std::string describe_json(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return j.get<bool>() ? "true" : "false";
    case json::value_t::string: {
      std::string s = j.get<std::string>();
      if (s.size() > 40) {
        std::size_t cut = 37;
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // a code-point boundary
        s = s.substr(0, cut) + "...";
      }
      return "the string " + json(s).dump(-1, ' ', /*ensure_ascii=*/true);
    }
    case json::value_t::array: return "a list";
    case json::value_t::object: return "a mapping";
    default: return j.dump();
  }
}

struct Where {
  std::string path;     // canonical
  const FieldInfo& info;
  ReadContext& ctx;

  void error(const std::string& message) const { ctx.diagnostics.error(path, message); }
};

// --- scalar conversions -------------------------------------------------------------------

bool read_value(const json& j, std::int64_t& out, const Where& w) {
  if (j.is_number_integer()) {
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      w.error("the integer " + j.dump() + " is out of range");
      return false;
    }
    out = j.get<std::int64_t>();
    return true;
  }
  double d = 0;
  if (j.is_number_float()) {
    d = j.get<double>();
  } else if (j.is_string() && w.info.unit == Unit::count) {
    auto q = parse_quantity(j.get<std::string>(), Unit::count);
    if (!q.value) {
      w.error(q.error);
      return false;
    }
    d = *q.value;
  } else {
    w.error("expected an integer, got " + describe_json(j));
    return false;
  }
  if (!std::isfinite(d) || std::floor(d) != d) {
    w.error("expected an integer, got " + json(d).dump());
    return false;
  }
  if (std::fabs(d) > 9.0e15) {
    w.error("the integer " + json(d).dump() + " is out of range");
    return false;
  }
  out = static_cast<std::int64_t>(d);
  return true;
}

bool read_value(const json& j, double& out, const Where& w) {
  if (j.is_number()) {
    const double d = j.get<double>();
    if (!std::isfinite(d)) {
      w.error("expected a finite number");
      return false;
    }
    out = d;
    return true;
  }
  if (j.is_string() && w.info.unit != Unit::none) {
    auto q = parse_quantity(j.get<std::string>(), w.info.unit);
    if (!q.value) {
      w.error(q.error);
      return false;
    }
    out = *q.value;
    return true;
  }
  // Oversubscription as people write it: "2:1" (down-links to up-links).
  if (j.is_string() && std::string_view(w.info.key).find("oversubscription") != std::string_view::npos) {
    const std::string text = j.get<std::string>();
    const std::size_t colon = text.find(':');
    const auto down = parse_number(std::string_view(text).substr(0, colon));
    // A bare number in quotes ("2") is the ratio itself.
    const auto up = colon == std::string::npos ? std::optional<double>(1.0) : parse_number(std::string_view(text).substr(colon + 1));
    if (down && up && *up > 0) {
      out = *down / *up;
      return true;
    }
    w.error("expected a ratio such as 2 or \"2:1\" (down-links to up-links), got " + describe_json(j));
    return false;
  }
  std::string want = "expected a number";
  if (w.info.unit != Unit::none && !symbol(w.info.unit).empty()) {
    want += " (in " + std::string(symbol(w.info.unit)) + ") or a quantity such as " + std::string(examples(w.info.unit));
  }
  w.error(want + ", got " + describe_json(j));
  return false;
}

bool read_value(const json& j, bool& out, const Where& w) {
  if (!j.is_boolean()) {
    w.error("expected true or false, got " + describe_json(j));
    return false;
  }
  out = j.get<bool>();
  return true;
}

bool read_value(const json& j, std::string& out, const Where& w) {
  if (j.is_string()) {
    out = j.get<std::string>();
    return true;
  }
  // Names and targets such as `target: 17` are written as numbers too.
  if (j.is_number_integer()) {
    out = j.dump();
    return true;
  }
  w.error("expected a string, got " + describe_json(j));
  return false;
}

// Other names people give the precisions (PyTorch's dtypes, Megatron's flags) and the attention
// kernels (Megatron-core's --attention-backend, the kernels' short names).
constexpr std::pair<std::string_view, std::string_view> kEnumSpellings[] = {
    {"bfloat16", "bf16"}, {"float16", "fp16"}, {"half", "fp16"}, {"float32", "fp32"}, {"float", "fp32"},
    {"float8", "fp8"},    {"e4m3", "fp8"},     {"hybrid", "fp8"}, {"rms_norm", "rmsnorm"}, {"layer_norm", "layernorm"},
    {"fused", "cudnn"},   {"flash", "flash2"}, {"fa2", "flash2"}, {"fa3", "flash3"},
};

template <class E>
  requires std::is_enum_v<E>
bool read_value(const json& j, E& out, const Where& w) {
  std::string hint;
  if (j.is_string()) {
    const std::string text = j.get<std::string>();
    if (auto v = enum_from_string<E>(text)) {
      out = *v;
      return true;
    }
    std::vector<std::string> names;
    for (const auto& [v, name] : EnumNames<E>::values) names.emplace_back(name);
    for (const auto& [spelling, name] : kEnumSpellings) {
      if (enum_name_equal(spelling, text) && enum_from_string<E>(name)) hint = std::string(name);
    }
    if (hint.empty()) hint = nearest(text, names);
  }
  // 1f1b written unquoted in YAML is still a string; a number here is a mistake.
  w.error("expected one of " + enum_choices<E>() + ", got " + describe_json(j) +
          (hint.empty() ? std::string() : "; did you mean \"" + hint + "\"?"));
  return false;
}

template <class E>
  requires std::is_enum_v<E>
bool read_value(const json& j, std::vector<E>& out, const Where& w) {
  if (!j.is_array()) {
    w.error("expected a list of " + enum_choices<E>() + ", got " + describe_json(j));
    return false;
  }
  std::vector<E> values;
  bool ok = true;
  for (std::size_t i = 0; i < j.size(); ++i) {
    E v{};
    Where item{index_path(w.path, i), w.info, w.ctx};
    if (!read_value(j[i], v, item)) {
      ok = false;
      continue;
    }
    if (std::find(values.begin(), values.end(), v) != values.end()) {
      item.error(std::string(to_string(v)) + " is listed twice");
      ok = false;
      continue;
    }
    values.push_back(v);
  }
  if (ok) out = std::move(values);
  return ok;
}

bool read_value(const json& j, CheckpointInterval& out, const Where& w) {
  if (j.is_string() && enum_name_equal(j.get<std::string>(), "auto")) {
    out = CheckpointInterval{true, 0};
    return true;
  }
  double seconds = 0;
  if (!j.is_number() && !j.is_string()) {
    w.error("expected auto or a duration such as \"30min\", got " + describe_json(j));
    return false;
  }
  if (!read_value(j, seconds, w)) return false;
  out = CheckpointInterval{false, seconds};
  return true;
}

// --- sections -----------------------------------------------------------------------------

// "; did you mean "h100-sxm"?" for a preset name that is near one, or that starts one.
template <class Presets>
std::string preset_hint(std::string_view name, const Presets& presets) {
  std::vector<std::string> keys;
  for (const auto& p : presets) keys.emplace_back(p.key);
  const std::string best = nearest(name, keys);
  return best.empty() ? std::string() : "; did you mean \"" + best + "\"?";
}

bool apply_preset(std::string_view name, GpuSpec& gpu, std::string& error) {
  const GpuPreset* p = find_gpu_preset(name);
  if (!p) {
    error = "unknown GPU preset \"" + std::string(name) + "\" (`meshwork presets` lists them)" + preset_hint(name, gpu_presets());
    return false;
  }
  gpu = p->spec;
  return true;
}

bool apply_preset(std::string_view name, ModelConfig& model, std::string& error) {
  const ModelPreset* p = find_model_preset(name);
  if (!p) {
    error = "unknown model preset \"" + std::string(name) + "\" (`meshwork presets` lists them)" + preset_hint(name, model_presets());
    return false;
  }
  model = p->model;
  return true;
}

template <class S>
concept HasPreset = requires(S& s, std::string& e) { apply_preset(std::string_view{}, s, e); };

class SectionReader {
 public:
  SectionReader(const json& obj, std::string path, std::string written, ReadContext& ctx)
      : obj_(obj), path_(std::move(path)), written_(std::move(written)), ctx_(ctx) {}

  template <class T>
  void field(T& member, const FieldInfo& info) {
    if (const json* j = find(info)) {
      // An explicit null is the same as leaving the key out.
      if (j->is_null()) return;
      T value = member;
      const std::string path = join_path(path_, info.key);
      const std::size_t errors_before = ctx_.diagnostics.error_count();
      if (read_value(*j, value, Where{path, info, ctx_})) {
        if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>) {
          check_bounds(static_cast<double>(value), info, path, ctx_.diagnostics);
        }
      }
      // A value that is wrong keeps the default: no rule computes with an out-of-range number.
      if (ctx_.diagnostics.error_count() != errors_before) {
        ++ctx_.value_errors;
        return;
      }
      member = std::move(value);
    }
  }

  template <class S>
  void section(S& member, const FieldInfo& info) {
    const json* j = find(info);
    const std::string path = join_path(path_, info.key);
    if (!j || j->is_null()) {
      if (info.required) {
        ctx_.diagnostics.error(path, "required section is missing");
        ctx_.missing_sections.push_back(path);
      }
      return;
    }
    if constexpr (HasPreset<S>) {
      if (j->is_string()) {  // `gpu: h100-sxm`
        std::string error;
        if (!apply_preset(j->get<std::string>(), member, error)) {
          ctx_.diagnostics.error(path, error);
          ctx_.unsourced_sections.push_back(path);
        }
        return;
      }
    }
    if (!j->is_object()) {
      ctx_.diagnostics.error(path, "expected a mapping of fields, got " + describe_json(*j));
      return;
    }
    SectionReader child(*j, path, written_key_path(info), ctx_);
    describe(child, member);
    child.finish();
  }

  template <class S>
  void list(std::vector<S>& member, const FieldInfo& info) {
    const json* j = find(info);
    if (!j || j->is_null()) return;
    const std::string path = join_path(path_, info.key);
    if (!j->is_array()) {
      ctx_.diagnostics.error(path, "expected a list, got " + describe_json(*j));
      return;
    }
    std::vector<S> items;
    for (std::size_t i = 0; i < j->size(); ++i) {
      const std::string item_path = index_path(path, i);
      S item{};
      if (!(*j)[i].is_object()) {
        ctx_.diagnostics.error(item_path, "expected a mapping of fields, got " + describe_json((*j)[i]));
        continue;
      }
      SectionReader child((*j)[i], item_path, index_path(written_key_path(info), i), ctx_);
      describe(child, item);
      child.finish();
      items.push_back(std::move(item));
    }
    member = std::move(items);
  }

  template <class S>
  void preset(S& member, const FieldInfo& info) {
    const json* j = find(info);
    if (!j || j->is_null()) return;
    const std::string path = join_path(path_, info.key);
    if (!j->is_string()) {
      ctx_.diagnostics.error(path, "expected a preset name, got " + describe_json(*j));
      return;
    }
    std::string error;
    if (!apply_preset(j->get<std::string>(), member, error)) {
      ctx_.diagnostics.error(path, error);
      ctx_.unsourced_sections.push_back(path_);
    }
  }

  void hf_config(ModelConfig& member, const FieldInfo& info) {
    const json* j = find(info);
    if (!j || j->is_null()) return;
    const std::string path = join_path(path_, info.key);
    if (obj_.contains("preset")) {
      ctx_.diagnostics.error(path, "give either a preset or an hf_config, not both");
      ++ctx_.value_errors;
      return;
    }
    if (!j->is_string() || j->get<std::string>().empty()) {
      ctx_.diagnostics.error(path, "expected the path of a config.json, got " + describe_json(*j));
      return;
    }
    std::filesystem::path file = j->get<std::string>();
    if (file.is_relative()) file = ctx_.base_dir / file;
    HfImportNotes notes;
    if (!import_hf_config_file(file, member, ctx_.diagnostics, path, &notes)) {
      ctx_.unsourced_sections.push_back(path_);
      return;
    }
    warn_hf_import_notes(notes, member.seq_length == 0 && !obj_.contains("seq_length") && !obj_.contains("seq_len"),
                         "give model.seq_length", ctx_.diagnostics, path);
  }

  // A field of that key (or alias) in another section: "cluster.gpu.hbm_gib".
  std::string field_elsewhere(const std::string& key) const {
    for (const auto& f : field_catalogue().fields) {
      if (f.section == path_) continue;
      bool match = f.key == key;
      std::string_view aliases = f.aliases;
      while (!match && !aliases.empty()) {
        const std::size_t comma = aliases.find(',');
        std::string_view a = aliases.substr(0, comma);
        while (!a.empty() && a.front() == ' ') a.remove_prefix(1);
        match = a == key;
        aliases = comma == std::string_view::npos ? std::string_view() : aliases.substr(comma + 1);
      }
      if (match) return f.path;
    }
    return {};
  }

  // Keys that no field claimed are errors, with the nearest known key as a suggestion.
  void finish() {
    for (const auto& [key, value] : obj_.items()) {
      if (claimed_.count(key)) continue;
      std::string message = "unknown key";
      std::string best;
      std::size_t best_distance = std::max<std::size_t>(2, key.size() / 3) + 1;
      for (const auto& known : known_) {
        const std::size_t d = edit_distance(key, known);
        if (d < best_distance) {
          best_distance = d;
          best = known;
        }
      }
      if (!best.empty()) {
        message += "; did you mean \"" + best + "\"?";
      } else if (const std::string elsewhere = field_elsewhere(key); !elsewhere.empty()) {
        message += "; did you mean " + elsewhere + "? (the field belongs there)";
      }
      ctx_.diagnostics.error(join_path(path_, key), message);
      ctx_.written_paths.emplace(join_path(path_, key), join_path(written_, key));
    }
  }

 private:
  const json* find(const FieldInfo& info) {
    // Keys and aliases are views of the field catalogue's literals, and the keys claimed views
    // of the object's own: no string is made for a field the plan does not give (a sweep reads
    // thousands of plans, issue 18).
    const json* found = nullptr;
    std::string_view found_key;
    auto look = [&](std::string_view key) {
      known_.push_back(key);
      auto it = obj_.find(key);
      if (it == obj_.end()) return;
      claimed_.insert(std::string_view(it.key()));
      if (found) {
        ctx_.diagnostics.error(join_path(path_, info.key), "given twice, as \"" + std::string(found_key) + "\" and \"" +
                                                               std::string(key) + "\"");
        return;
      }
      found = &*it;
      found_key = key;
    };
    look(info.key);
    for_each_alias(info, look);
    if (found) {
      ctx_.written_paths.emplace(join_path(path_, info.key), join_path(written_, found_key));
      if (found_key != info.key) written_keys_.emplace(info.key, found_key);
    }
    return found;
  }

  std::string written_key_path(const FieldInfo& info) const {
    auto it = written_keys_.find(info.key);
    return join_path(written_, it == written_keys_.end() ? info.key : it->second);
  }

  const json& obj_;
  std::string path_;
  std::string written_;
  ReadContext& ctx_;
  std::set<std::string_view, std::less<>> claimed_;  // views of obj_'s keys
  std::vector<std::string_view> known_;              // the fields' keys and aliases
  std::map<std::string_view, std::string_view, std::less<>> written_keys_;  // a field's key: the alias the plan wrote
};

}  // namespace

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    // A prefix of one name ("h100" of "h100-sxm") is as good as a near miss.
    const std::size_t d = c.rfind(std::string(word), 0) == 0 && !word.empty() ? 1 : edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void read_plan(const json& root, Plan& plan, ReadContext& ctx) {
  SectionReader reader(root, "", "", ctx);
  describe(reader, plan);
  reader.finish();
}

}  // namespace meshwork::plan
