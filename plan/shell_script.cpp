#include "plan/shell_script.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <optional>
#include <set>
#include <tuple>

#include "plan/shell_arithmetic.hpp"
#include "plan/shell_lexer.hpp"

namespace meshwork::plan {
namespace {

using shell::is_name_char;
using shell::is_name_start;
using shell::lex;
using shell::shell_arithmetic;
using shell::skip_balanced;
using shell::Tok;
using shell::Token;

// Bounds on what a hostile or runaway script can make the reader do: nesting followed
// (shell::kMaxNesting), and the size of one variable's value.
using shell::kMaxNesting;
constexpr std::size_t kMaxValueBytes = 64 * 1024;
constexpr std::size_t kMaxArrayItems = 4096;

struct Value {
  bool array = false;
  std::vector<std::string> items;
  [[nodiscard]] std::string scalar() const { return items.empty() ? std::string() : items.front(); }
  [[nodiscard]] std::string joined() const {
    std::string s;
    for (std::size_t i = 0; i < items.size(); ++i) s += (i ? " " : "") + items[i];
    return s;
  }
};

// A field being built: its text, and whether a quoted part made it a word even when empty.
struct Field {
  std::string text;
  bool quoted = false;
};

class Reader {
 public:
  explicit Reader(const std::map<std::string, std::string>& given) {
    for (const auto& [k, v] : given) {
      vars_[k] = {false, {v}};
      fixed_.insert(k);
    }
  }

  ShellReading run(std::string_view script) {
    tokens_ = lex(script);
    while (pos_ < tokens_.size()) statement(true);
    ShellReading out;
    out.commands = std::move(commands_);
    for (const auto& [name, value] : vars_) out.variables[name] = value.array ? value.joined() : value.scalar();
    out.unknowns = std::move(unknowns_);
    return out;
  }

 private:
  // ---- expansion ----
  void unknown(const std::string& what) {
    const std::string entry = std::to_string(line_) + ": " + what;
    if (seen_.insert(entry).second) unknowns_.push_back(entry);
  }

  // Stores `value` as NAME unless it has grown past what a launch script's variable holds
  // (kMaxValueBytes, kMaxArrayItems): then NAME is dropped and named, so that `A=$A$A` in a
  // loop-like run of lines cannot eat the machine.
  void store(const std::string& name, Value value) {
    std::size_t bytes = 0;
    for (const auto& item : value.items) bytes += item.size();
    if (bytes > kMaxValueBytes || value.items.size() > kMaxArrayItems) {
      vars_.erase(name);
      unknown(name + " grows past " + std::to_string(kMaxValueBytes / 1024) + " KiB or " + std::to_string(kMaxArrayItems) +
              " items; treated as unset from here");
      return;
    }
    vars_[name] = std::move(value);
  }

  const Value* lookup(const std::string& name) {
    auto it = vars_.find(name);
    return it == vars_.end() ? nullptr : &it->second;
  }

  std::optional<long long> arithmetic(std::string_view e) {
    return shell_arithmetic(e, [this](const std::string& name) -> std::optional<std::string> {
      const Value* v = lookup(name);
      if (!v) return std::nullopt;
      return v->scalar();
    });
  }

  // The words of one ${...} or $NAME: `items` for an array in [@] form, else one string.
  // Returns nullopt (and names it) when the value cannot be known; the caller keeps the text.
  std::optional<Value> parameter(std::string_view body, bool braced) {
    if (!braced) {
      const std::string name(body);
      if (name.size() == 1 && (std::isdigit(static_cast<unsigned char>(name[0])) || name == "@" || name == "*" || name == "#")) {
        unknown("$" + name + ": the script's arguments are not known; taken as unset");
        return std::nullopt;
      }
      if (const Value* v = lookup(name)) return Value{false, {v->scalar()}};
      unknown("$" + name + " is not set by the script (an environment variable?); left as written");
      return std::nullopt;
    }
    std::size_t i = 0;
    const bool length = !body.empty() && body[0] == '#';
    if (length) ++i;
    std::string name;
    while (i < body.size() && (is_name_char(body[i]) || (name.empty() && (body[i] == '@' || body[i] == '*')))) name += body[i++];
    std::string index;
    if (i < body.size() && body[i] == '[') {
      const std::size_t close = body.find(']', i);
      if (close == std::string_view::npos) return std::nullopt;
      index = std::string(body.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    const std::string rest(body.substr(i));
    const bool positional = !name.empty() && std::isdigit(static_cast<unsigned char>(name[0]));
    const Value* v = positional ? nullptr : lookup(name);
    const bool unset = !v;
    const bool empty = unset || (index.empty() && v->scalar().empty() && !v->array);
    auto word_value = [&](std::string_view w) { return Value{false, {expand_one(w)}}; };
    if (length) {
      if (unset) return std::nullopt;
      return Value{false, {std::to_string(index == "@" || index == "*" ? v->items.size() : v->scalar().size())}};
    }
    if (!rest.empty()) {
      if (positional && (rest[0] == ':' || rest[0] == '-' || rest[0] == '=')) {
        unknown("${" + name + "}: the script's arguments are not known; taken as unset, so its default applies");
      }
      if (rest.rfind(":-", 0) == 0) return empty ? word_value(rest.substr(2)) : Value{false, {v->scalar()}};
      if (rest.rfind(":=", 0) == 0) {
        if (!empty) return Value{false, {v->scalar()}};
        Value d = word_value(rest.substr(2));
        if (!fixed_.count(name)) store(name, d);
        return d;
      }
      if (rest.rfind(":+", 0) == 0) return empty ? Value{false, {""}} : word_value(rest.substr(2));
      if (rest[0] == '-') return unset ? word_value(rest.substr(1)) : Value{false, {v->scalar()}};
      if (rest[0] == '=') {
        if (!unset) return Value{false, {v->scalar()}};
        Value d = word_value(rest.substr(1));
        if (!fixed_.count(name)) store(name, d);
        return d;
      }
      unknown("${" + std::string(body) + "}: this expansion is not followed; left as written");
      return std::nullopt;
    }
    if (unset) {
      unknown(positional ? "${" + name + "}: the script's arguments are not known; taken as unset"
                         : "${" + name + "} is not set by the script (an environment variable?); left as written");
      return std::nullopt;
    }
    if (index == "@" || index == "*") return Value{true, v->items};
    if (!index.empty()) {
      const auto n = arithmetic(index);
      if (!n || *n < 0 || static_cast<std::size_t>(*n) >= v->items.size()) return Value{false, {""}};
      return Value{false, {v->items[static_cast<std::size_t>(*n)]}};
    }
    return Value{false, {v->scalar()}};
  }

  // Expands `raw` into fields. With `split`, unquoted expansions split on blanks (as bash does
  // for a command's words); without, the result is one string (an assignment's value).
  std::vector<std::string> expand(std::string_view raw, bool split) {
    if (depth_ >= kMaxNesting) {
      unknown("expansions nested deeper than " + std::to_string(kMaxNesting) + " levels are not followed; left as written");
      return {std::string(raw)};
    }
    const Nested nested(depth_);
    std::vector<Field> fields(1);
    auto add_text = [&](const std::string& s, bool quoted) {
      fields.back().text += s;
      fields.back().quoted |= quoted;
    };
    auto add_unquoted = [&](const std::string& s) {
      if (!split) {
        fields.back().text += s;
        return;
      }
      for (char ch : s) {
        if (ch == ' ' || ch == '\t' || ch == '\n') {
          if (!fields.back().text.empty() || fields.back().quoted) fields.emplace_back();
        } else {
          fields.back().text += ch;
        }
      }
    };
    auto add_value = [&](const Value& v, bool quoted) {
      if (v.array && quoted && split) {
        // "${A[@]}": each element its own word.
        for (std::size_t k = 0; k < v.items.size(); ++k) {
          if (k) fields.emplace_back();
          add_text(v.items[k], true);
        }
        return;
      }
      const std::string s = v.array ? v.joined() : v.scalar();
      if (quoted) add_text(s, true); else add_unquoted(s);
    };
    // A "$..." at raw[i]: appends its value and returns the index after it.
    auto dollar = [&](std::size_t i, bool quoted) -> std::size_t {
      if (i + 1 >= raw.size()) {
        add_text("$", quoted);
        return i + 1;
      }
      const char n = raw[i + 1];
      if (n == '(' && i + 2 < raw.size() && raw[i + 2] == '(') {
        const std::size_t end = skip_balanced(raw, i + 1, '(', ')');
        const std::string_view expr = raw.substr(i + 3, end >= i + 5 ? end - i - 5 : 0);
        if (const auto v = arithmetic(expand_one(expr))) {
          add_value(Value{false, {std::to_string(*v)}}, quoted);
        } else {
          unknown("$((" + std::string(expr) + ")) cannot be evaluated statically; left as written");
          add_text(std::string(raw.substr(i, end - i)), quoted);
        }
        return end;
      }
      if (n == '(') {
        const std::size_t end = skip_balanced(raw, i + 1, '(', ')');
        unknown(std::string(raw.substr(i, end - i)) + " is a command substitution: not run; left as written");
        add_text(std::string(raw.substr(i, end - i)), quoted);
        return end;
      }
      if (n == '{') {
        const std::size_t end = skip_balanced(raw, i + 1, '{', '}');
        const std::string_view body = raw.substr(i + 2, end >= i + 3 ? end - i - 3 : 0);
        if (auto v = parameter(body, true)) add_value(*v, quoted); else add_text(std::string(raw.substr(i, end - i)), quoted);
        return end;
      }
      if (is_name_start(n) || std::isdigit(static_cast<unsigned char>(n)) || n == '@' || n == '*' || n == '#') {
        std::size_t end = i + 2;
        if (is_name_start(n)) {
          while (end < raw.size() && is_name_char(raw[end])) ++end;
        }
        const std::string_view name = raw.substr(i + 1, end - i - 1);
        if (auto v = parameter(name, false)) add_value(*v, quoted); else add_text(std::string(raw.substr(i, end - i)), quoted);
        return end;
      }
      add_text("$", quoted);
      return i + 1;
    };
    for (std::size_t i = 0; i < raw.size();) {
      const char c = raw[i];
      if (c == '\\') {
        if (i + 1 < raw.size()) add_text(std::string(1, raw[i + 1]), true);
        i += 2;
      } else if (c == '\'') {
        const std::size_t close = raw.find('\'', i + 1);
        const std::size_t end = close == std::string_view::npos ? raw.size() : close;
        add_text(std::string(raw.substr(i + 1, end - i - 1)), true);
        i = end + 1;
      } else if (c == '"') {
        fields.back().quoted = true;
        ++i;
        while (i < raw.size() && raw[i] != '"') {
          if (raw[i] == '\\' && i + 1 < raw.size() && std::string_view("\"\\$`").find(raw[i + 1]) != std::string_view::npos) {
            add_text(std::string(1, raw[i + 1]), true);
            i += 2;
          } else if (raw[i] == '$') {
            i = dollar(i, true);
          } else if (raw[i] == '`') {
            const std::size_t close = raw.find('`', i + 1);
            const std::size_t end = close == std::string_view::npos ? raw.size() : close + 1;
            unknown(std::string(raw.substr(i, end - i)) + " is a command substitution: not run; left as written");
            add_text(std::string(raw.substr(i, end - i)), true);
            i = end;
          } else {
            add_text(std::string(1, raw[i]), true);
            ++i;
          }
        }
        ++i;
      } else if (c == '$') {
        i = dollar(i, false);
      } else if (c == '`') {
        const std::size_t close = raw.find('`', i + 1);
        const std::size_t end = close == std::string_view::npos ? raw.size() : close + 1;
        unknown(std::string(raw.substr(i, end - i)) + " is a command substitution: not run; left as written");
        add_text(std::string(raw.substr(i, end - i)), false);
        i = end;
      } else {
        add_text(std::string(1, c), false);
        ++i;
      }
    }
    std::vector<std::string> out;
    for (auto& f : fields) {
      if (!f.text.empty() || f.quoted || !split) out.push_back(std::move(f.text));
    }
    if (!split && out.size() > 1) {
      std::string joined;
      for (const auto& s : out) joined += s;
      return {joined};
    }
    return out;
  }

  std::string expand_one(std::string_view raw) {
    auto v = expand(raw, false);
    return v.empty() ? std::string() : v.front();
  }

  // ---- statements ----
  [[nodiscard]] bool at_end() const { return pos_ >= tokens_.size(); }
  [[nodiscard]] bool is_separator(const Token& t) const {
    return t.kind == Tok::newline || t.kind == Tok::semi || t.kind == Tok::and_op || t.kind == Tok::or_op ||
           t.kind == Tok::pipe || t.kind == Tok::amp;
  }

  // NAME=, NAME+=: the name, whether it appends, and the value's text.
  static std::optional<std::tuple<std::string, bool, std::string>> assignment(const std::string& w) {
    if (w.empty() || !is_name_start(w[0])) return std::nullopt;
    std::size_t i = 0;
    while (i < w.size() && is_name_char(w[i])) ++i;
    bool append = false;
    if (i < w.size() && w[i] == '+') {
      append = true;
      ++i;
    }
    if (i >= w.size() || w[i] != '=') return std::nullopt;
    return std::tuple{w.substr(0, i - (append ? 1 : 0)), append, w.substr(i + 1)};
  }

  // The words of one simple command, up to a separator; an array assignment takes its
  // parenthesised list.
  void simple_command(bool active) {
    std::vector<const Token*> words;
    const std::int64_t line = tokens_[pos_].line;
    while (!at_end() && !is_separator(tokens_[pos_])) {
      const Token& t = tokens_[pos_];
      if (t.kind == Tok::word) {
        const auto a = assignment(t.text);
        if (a && std::get<2>(*a).empty() && pos_ + 1 < tokens_.size() && tokens_[pos_ + 1].kind == Tok::lparen &&
            (words.empty() || words.front()->text == "export" || words.front()->text == "declare" ||
             words.front()->text == "local" || words.front()->text == "readonly")) {
          pos_ += 2;
          std::vector<std::string> items;
          while (!at_end() && tokens_[pos_].kind != Tok::rparen) {
            if (tokens_[pos_].kind == Tok::word && active) {
              line_ = tokens_[pos_].line;
              for (auto& w : expand(tokens_[pos_].text, true)) items.push_back(std::move(w));
            }
            ++pos_;
          }
          ++pos_;  // ')'
          if (active && !fixed_.count(std::get<0>(*a))) {
            Value v;
            if (std::get<1>(*a)) {
              if (const Value* old = lookup(std::get<0>(*a))) v = *old;
            }
            v.array = true;
            v.items.insert(v.items.end(), std::make_move_iterator(items.begin()), std::make_move_iterator(items.end()));
            store(std::get<0>(*a), std::move(v));
          }
          continue;
        }
        words.push_back(&t);
      } else if (t.kind == Tok::redirect) {
        // A redirection and its target are not the command's words.
        if (active && t.text.find("<<") != std::string::npos && t.text.find("<<<") == std::string::npos) {
          line_ = t.line;
          unknown("a here-document is not read (its body is skipped)");
        }
        if (pos_ + 1 < tokens_.size() && tokens_[pos_ + 1].kind == Tok::word) ++pos_;
      } else if (t.kind == Tok::lparen || t.kind == Tok::rparen) {
        // A subshell or a function's "()": not followed.
        if (active) {
          line_ = t.line;
          unknown("a subshell or function definition is not followed");
        }
      }
      ++pos_;
    }
    if (!active || words.empty()) return;
    line_ = line;
    std::size_t first = 0;
    const std::string& head = words[0]->text;
    const bool declares = head == "export" || head == "declare" || head == "local" || head == "readonly" || head == "typeset";
    if (declares) first = 1;
    // Leading assignments; with a command after them they are that command's environment only.
    std::size_t k = first;
    std::vector<std::tuple<std::string, bool, std::string>> assigns;
    while (k < words.size()) {
      if (declares && !words[k]->text.empty() && words[k]->text[0] == '-') {
        ++k;
        continue;
      }
      const auto a = assignment(words[k]->text);
      if (!a) break;
      assigns.push_back(*a);
      ++k;
    }
    if (k == words.size() || declares) {
      for (const auto& [name, append, text] : assigns) {
        if (fixed_.count(name)) continue;  // given from outside: the user's value wins
        std::string value = expand_one(text);
        Value v;
        if (const Value* old = lookup(name)) v = *old;
        if (append && v.array) {
          v.items.push_back(std::move(value));
        } else {
          v = {false, {append ? v.scalar() + value : std::move(value)}};
        }
        store(name, std::move(v));
      }
      return;
    }
    ShellCommand cmd;
    cmd.line = line;
    for (std::size_t w = k; w < words.size(); ++w) {
      for (auto& x : expand(words[w]->text, true)) cmd.words.push_back(std::move(x));
    }
    if (!cmd.words.empty()) {
      const std::string& name = cmd.words.front();
      if (name == "source" || name == ".") unknown("`" + name + "` of another file is not followed");
      commands_.push_back(std::move(cmd));
    }
  }

  // `[[ a == b ]]`, `[ -n x ]`, `[ ! -f x ]`, `true`: nullopt when it cannot be known.
  std::optional<bool> test(const std::vector<std::string>& raw_words) {
    std::vector<std::string> w;
    for (const auto& r : raw_words) {
      auto v = expand(r, false);
      w.push_back(v.empty() ? std::string() : v.front());
    }
    if (w.size() == 1 && (w[0] == "true" || w[0] == ":")) return true;
    if (w.size() == 1 && w[0] == "false") return false;
    if (w.size() < 2) return std::nullopt;
    const bool double_bracket = w.front() == "[[" && w.back() == "]]";
    if (!double_bracket && !(w.front() == "[" && w.back() == "]")) return std::nullopt;
    std::vector<std::string> e(w.begin() + 1, w.end() - 1);
    bool negate = false;
    if (!e.empty() && e[0] == "!") {
      negate = true;
      e.erase(e.begin());
    }
    std::optional<bool> r;
    auto unresolved = [](const std::string& s) { return s.find('$') != std::string::npos || s.find('`') != std::string::npos; };
    if (e.size() == 2 && (e[0] == "-n" || e[0] == "-z")) {
      if (!unresolved(e[1])) r = e[0] == "-n" ? !e[1].empty() : e[1].empty();
    } else if (e.size() == 3 && (e[1] == "==" || e[1] == "=" || e[1] == "!=")) {
      if (!unresolved(e[0]) && !unresolved(e[2])) r = (e[0] == e[2]) == (e[1] != "!=");
    } else if (e.size() == 3 && (e[1] == "-eq" || e[1] == "-ne" || e[1] == "-gt" || e[1] == "-lt" || e[1] == "-ge" || e[1] == "-le")) {
      const auto a = arithmetic(e[0]), b = arithmetic(e[2]);
      if (a && b) {
        const std::string& op = e[1];
        r = op == "-eq" ? *a == *b : op == "-ne" ? *a != *b : op == "-gt" ? *a > *b : op == "-lt" ? *a < *b : op == "-ge" ? *a >= *b : *a <= *b;
      }
    } else if (e.size() == 1) {
      if (!unresolved(e[0])) r = !e[0].empty();
    }
    if (r && negate) r = !*r;
    return r;
  }

  // The condition of an if/elif, up to `then`: tests joined by && and ||. Not `active` (a
  // branch not taken, or one after a branch taken): its tokens are passed over, nothing expanded.
  std::optional<bool> condition(bool active) {
    std::optional<bool> value;
    bool have = false;
    Tok joiner = Tok::and_op;
    std::vector<std::string> words;
    std::string text;
    auto finish = [&] {
      if (!active) {
        words.clear();
        return;
      }
      const auto t = test(words);
      if (!have) {
        value = t;
        have = true;
      } else if (joiner == Tok::and_op) {
        value = (value && !*value) || (t && !*t) ? std::optional<bool>(false) : (value && t ? std::optional<bool>(true) : std::nullopt);
      } else {
        value = (value && *value) || (t && *t) ? std::optional<bool>(true) : (value && t ? std::optional<bool>(false) : std::nullopt);
      }
      words.clear();
    };
    while (!at_end()) {
      const Token& t = tokens_[pos_];
      if (t.kind == Tok::word && t.text == "then" && words.empty()) {
        ++pos_;
        break;
      }
      if (t.kind == Tok::and_op || t.kind == Tok::or_op) {
        finish();
        joiner = t.kind;
      } else if (t.kind == Tok::semi || t.kind == Tok::newline) {
        if (!words.empty()) finish();
      } else if (t.kind == Tok::redirect) {
        if (pos_ + 1 < tokens_.size() && tokens_[pos_ + 1].kind == Tok::word) ++pos_;
      } else if (t.kind == Tok::word) {
        words.push_back(t.text);
        text += (text.empty() ? "" : " ") + t.text;
      }
      ++pos_;
    }
    if (!active) return false;
    if (!value) unknown("the condition `" + text + "` cannot be decided statically; its branch is not taken");
    return value;
  }

  // Skips to the word `until` at this nesting (do/done, case/esac, { }).
  void skip_block(const std::string& open, const std::string& close) {
    int depth = 1;
    while (!at_end() && depth > 0) {
      const Token& t = tokens_[pos_++];
      if (t.kind != Tok::word) continue;
      if (t.text == open) ++depth;
      else if (t.text == close) --depth;
    }
  }

  // One statement at the top of a list; `active` is false inside a branch not taken.
  void statement(bool active) {
    while (!at_end() && is_separator(tokens_[pos_])) ++pos_;
    if (at_end()) return;
    const Token& t = tokens_[pos_];
    line_ = t.line;
    if (t.kind == Tok::word && t.text == "if") {
      ++pos_;
      if_statement(active);
      return;
    }
    if (t.kind == Tok::word && (t.text == "for" || t.text == "while" || t.text == "until")) {
      if (active) unknown("a `" + t.text + "` loop is not followed");
      while (!at_end() && !(tokens_[pos_].kind == Tok::word && tokens_[pos_].text == "do")) ++pos_;
      ++pos_;
      skip_block("do", "done");
      return;
    }
    if (t.kind == Tok::word && t.text == "case") {
      if (active) unknown("a `case` statement is not followed");
      ++pos_;
      skip_block("case", "esac");
      return;
    }
    const bool named = t.kind == Tok::word && !t.text.empty() && is_name_start(t.text[0]) &&
                       std::all_of(t.text.begin(), t.text.end(), [](char ch) { return is_name_char(ch); });
    if (t.kind == Tok::word && (t.text == "function" || (named && pos_ + 2 < tokens_.size() && tokens_[pos_ + 1].kind == Tok::lparen &&
                                                         tokens_[pos_ + 2].kind == Tok::rparen))) {
      if (active) unknown("the function `" + (t.text == "function" ? tokens_[pos_ + 1].text : t.text) + "` is not followed");
      while (!at_end() && !(tokens_[pos_].kind == Tok::word && tokens_[pos_].text == "{")) ++pos_;
      ++pos_;
      skip_block("{", "}");
      return;
    }
    simple_command(active);
  }

  void if_statement(bool active) {
    if (depth_ >= kMaxNesting) {
      if (active) unknown("`if` nested deeper than " + std::to_string(kMaxNesting) + " levels is not followed");
      skip_block("if", "fi");
      return;
    }
    const Nested nested(depth_);
    const std::optional<bool> cond = condition(active);
    bool undecided = !cond;  // then no later branch is known to run either
    bool branch = active && cond.value_or(false);
    bool taken = branch;
    for (;;) {
      while (!at_end() && is_separator(tokens_[pos_])) ++pos_;
      if (at_end()) return;
      const Token& t = tokens_[pos_];
      if (t.kind == Tok::word && t.text == "fi") {
        ++pos_;
        return;
      }
      if (t.kind == Tok::word && t.text == "elif") {
        ++pos_;
        const auto c = condition(active && !taken && !undecided);
        branch = active && !taken && !undecided && c.value_or(false);
        undecided |= !c;
        taken |= branch;
        continue;
      }
      if (t.kind == Tok::word && t.text == "else") {
        ++pos_;
        branch = active && !taken && !undecided;
        taken = true;
        continue;
      }
      statement(branch);
    }
  }

  // One level deeper for as long as it lives.
  struct Nested {
    explicit Nested(int& depth) : depth_(depth) { ++depth_; }
    ~Nested() { --depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;
    int& depth_;
  };

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;  // expansions and ifs being followed, one inside another
  std::int64_t line_ = 1;
  std::map<std::string, Value> vars_;
  std::vector<ShellCommand> commands_;
  std::vector<std::string> unknowns_;
  std::set<std::string> seen_;
  std::set<std::string> fixed_;  // given by the caller: the script's own assignments do not replace them
};

}  // namespace

ShellReading read_shell_script(std::string_view text, const std::map<std::string, std::string>& given) {
  return Reader(given).run(text);
}

}  // namespace meshwork::plan
