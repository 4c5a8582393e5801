#include "plan/yaml_reader.hpp"

#include <charconv>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <yaml.h>

#include "plan/units.hpp"

namespace meshwork::plan {
namespace {

using nlohmann::json;

bool is_yaml_null(std::string_view s) { return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL"; }

// YAML 1.2 core schema resolution of a plain scalar: null, bool, int, float, else string.
// YAML 1.1's yes/no/on/off stay strings, so that `p2p: yes` is reported, not guessed.
json resolve_plain_scalar(const std::string& s) {
  if (is_yaml_null(s)) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  std::string_view v = s;
  const bool negative = !v.empty() && v.front() == '-';
  if (!v.empty() && (v.front() == '-' || v.front() == '+')) v.remove_prefix(1);
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  const bool all_digits = !v.empty() && std::all_of(v.begin(), v.end(), is_digit);
  if (all_digits) {
    std::int64_t i = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), i);
    if (ec == std::errc() && end == v.data() + v.size()) return negative ? -i : i;
    if (auto d = parse_number(s)) return *d;  // beyond int64: a float, reported as out of range
    return s;
  }
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'o')) {
    std::int64_t i = 0;
    auto [end, ec] = std::from_chars(v.data() + 2, v.data() + v.size(), i, v[1] == 'x' ? 16 : 8);
    if (ec == std::errc() && end == v.data() + v.size()) return negative ? -i : i;
    return s;
  }
  // Digits with '.', an exponent: a float. from_chars alone would also take "inf" and "nan",
  // which YAML spells .inf and .nan; those stay strings (a plan has no use for them).
  bool has_digit = false;
  for (char c : v) {
    if (is_digit(c)) {
      has_digit = true;
    } else if (c != '.' && c != 'e' && c != 'E' && c != '-' && c != '+') {
      return s;
    }
  }
  if (has_digit) {
    if (auto d = parse_number(s)) return *d;
  }
  return s;
}

std::size_t count_nodes(const json& j) {
  std::size_t n = 1;
  if (j.is_structured()) {
    for (const auto& child : j) n += count_nodes(child);
  }
  return n;
}

struct Frame {
  json value;  // an object or an array under construction
  std::string path;
  std::string anchor;
  std::optional<std::string> pending_key;  // objects: the key whose value comes next
  int pending_key_line = 0;
};

class TreeBuilder {
 public:
  TreeBuilder(Document& doc, Diagnostics& diags) : doc_(doc), diags_(diags) {}

  bool failed() const { return failed_; }

  // The next value's path, and whether it is a mapping key.
  bool expecting_key() const {
    return !stack_.empty() && stack_.back().value.is_object() && !stack_.back().pending_key;
  }

  void start(json container, const std::string& anchor, int line) {
    if (expecting_key()) {
      fail(stack_.back().path, "a key must be a plain name, not a list or mapping", line);
      return;
    }
    if (stack_.size() >= static_cast<std::size_t>(kMaxNestingDepth)) {
      fail(next_path(), "nested deeper than " + std::to_string(kMaxNestingDepth) + " levels", line);
      return;
    }
    stack_.push_back(Frame{std::move(container), next_path(), anchor, std::nullopt, 0});
  }

  void end() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    if (!frame.anchor.empty()) remember(frame.anchor, frame.value);
    add(std::move(frame.value), 0);
  }

  void scalar(const std::string& text, bool plain, const std::string& anchor, int line) {
    if (expecting_key()) {
      Frame& top = stack_.back();
      const std::string path = join_path(top.path, text);
      if (top.value.contains(text)) {
        fail(path, "duplicate key", line);
        return;
      }
      top.pending_key = text;
      top.pending_key_line = line;
      doc_.lines.emplace(path, line);
      return;
    }
    json value = plain ? resolve_plain_scalar(text) : json(text);
    if (!anchor.empty()) remember(anchor, value);
    add(std::move(value), line);
  }

  void alias(const std::string& anchor, int line) {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      fail(next_path(), "alias *" + anchor + " names no anchor defined before it", line);
      return;
    }
    if (expecting_key()) {
      if (!it->second.is_string()) {
        fail(stack_.back().path, "a key must be a plain name, not a list or mapping", line);
        return;
      }
      scalar(it->second.get<std::string>(), false, "", line);
      return;
    }
    nodes_ += count_nodes(it->second);
    if (!check_size(line)) return;
    add(json(it->second), line);
  }

  json take_root() { return std::move(root_); }

  void fail(const std::string& path, const std::string& message, int line) {
    if (failed_) return;
    failed_ = true;
    diags_.add({path, message, Severity::error, line});
  }

 private:
  std::string next_path() const {
    if (stack_.empty()) return "";
    const Frame& top = stack_.back();
    if (top.value.is_array()) return index_path(top.path, top.value.size());
    return join_path(top.path, top.pending_key.value_or(""));
  }

  void remember(const std::string& anchor, const json& value) { anchors_[anchor] = value; }

  bool check_size(int line) {
    if (nodes_ > kMaxNodes) {
      fail("", "the file expands to more than " + std::to_string(kMaxNodes) +
                   " values (anchors and aliases?); a plan is far smaller",
           line);
      return false;
    }
    return true;
  }

  void add(json value, int line) {
    ++nodes_;
    if (!check_size(line)) return;
    if (stack_.empty()) {
      root_ = std::move(value);
      return;
    }
    Frame& top = stack_.back();
    if (top.value.is_array()) {
      top.value.push_back(std::move(value));
    } else {
      top.value[*top.pending_key] = std::move(value);
      top.pending_key.reset();
    }
  }

  Document& doc_;
  Diagnostics& diags_;
  std::vector<Frame> stack_;
  std::map<std::string, json> anchors_;
  json root_;
  std::size_t nodes_ = 0;
  bool failed_ = false;
};

std::string str(const yaml_char_t* s) { return s ? reinterpret_cast<const char*>(s) : ""; }

int line_of(const yaml_mark_t& mark) { return static_cast<int>(mark.line) + 1; }

// Explicit tags that ask for a type keep YAML's meaning; any other tag makes a string.
bool resolves_as_plain(const yaml_event_t& e) {
  const auto& s = e.data.scalar;
  if (s.style == YAML_PLAIN_SCALAR_STYLE && s.plain_implicit) return true;
  const std::string tag = str(s.tag);
  return tag == YAML_INT_TAG || tag == YAML_FLOAT_TAG || tag == YAML_BOOL_TAG || tag == YAML_NULL_TAG;
}

}  // namespace

DocumentResult parse_yaml(std::string_view text) {
  DocumentResult out;
  Document doc;
  TreeBuilder builder(doc, out.diagnostics);

  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) {
    out.diagnostics.error("", "cannot start the YAML parser (out of memory)");
    return out;
  }
  std::unique_ptr<yaml_parser_t, void (*)(yaml_parser_t*)> guard(&parser, yaml_parser_delete);
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());

  int documents = 0;
  bool done = false;
  while (!done && !builder.failed()) {
    yaml_event_t event;
    if (!yaml_parser_parse(&parser, &event)) {
      std::string message = "YAML syntax error: " + str(reinterpret_cast<const yaml_char_t*>(parser.problem));
      if (parser.context) message += " " + str(reinterpret_cast<const yaml_char_t*>(parser.context));
      const int line = static_cast<int>(parser.problem_mark.line) + 1;
      message += " (line " + std::to_string(line) + ", column " + std::to_string(parser.problem_mark.column + 1) + ")";
      builder.fail("", message, line);
      break;
    }
    std::unique_ptr<yaml_event_t, void (*)(yaml_event_t*)> event_guard(&event, yaml_event_delete);
    const int line = line_of(event.start_mark);
    switch (event.type) {
      case YAML_STREAM_END_EVENT: done = true; break;
      case YAML_DOCUMENT_START_EVENT:
        if (++documents > 1) builder.fail("", "the file holds more than one YAML document; a plan file holds one", line);
        break;
      case YAML_MAPPING_START_EVENT:
        builder.start(json::object(), str(event.data.mapping_start.anchor), line);
        break;
      case YAML_SEQUENCE_START_EVENT:
        builder.start(json::array(), str(event.data.sequence_start.anchor), line);
        break;
      case YAML_MAPPING_END_EVENT:
      case YAML_SEQUENCE_END_EVENT:
        builder.end();
        break;
      case YAML_SCALAR_EVENT: {
        const std::string value(reinterpret_cast<const char*>(event.data.scalar.value), event.data.scalar.length);
        builder.scalar(value, resolves_as_plain(event), str(event.data.scalar.anchor), line);
        break;
      }
      case YAML_ALIAS_EVENT: builder.alias(str(event.data.alias.anchor), line); break;
      default: break;
    }
  }
  if (builder.failed()) return out;
  if (documents == 0) {
    out.diagnostics.error("", "the file holds no plan (it is empty or only comments)");
    return out;
  }
  doc.root = builder.take_root();
  if (doc.root.is_null()) {
    out.diagnostics.error("", "the file holds no plan (it is empty or only comments)");
    return out;
  }
  out.document = std::move(doc);
  return out;
}

}  // namespace meshwork::plan
