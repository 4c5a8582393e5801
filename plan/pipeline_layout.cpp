#include "plan/pipeline_layout.hpp"

#include <cctype>

namespace meshwork::plan {
namespace {

// Recursive descent over  sequence := item*,  item := ( '(' sequence ')' | letter | '|' ) ['*' N].
// The result is the unrolled text, `|` included; splitting into stages comes after.
class Parser {
 public:
  Parser(std::string_view text, std::size_t max_letters) : text_(text), max_(max_letters) {}

  std::optional<std::string> run(std::string& error) {
    std::string out;
    if (!sequence(out, 0) || (pos_ < text_.size() && !fail("a ')' without its '('"))) {
      error = error_;
      return std::nullopt;
    }
    return out;
  }

 private:
  bool fail(const std::string& message) {
    if (error_.empty()) error_ = message + " at character " + std::to_string(pos_ + 1);
    return false;
  }
  void skip_cosmetic() {
    while (pos_ < text_.size() && (text_[pos_] == ',' || std::isspace(static_cast<unsigned char>(text_[pos_])))) ++pos_;
  }
  // `*N` after an item, if there is one: the repeat count, 1 without.
  std::optional<std::size_t> repeat() {
    skip_cosmetic();
    if (pos_ >= text_.size() || text_[pos_] != '*') return 1;
    ++pos_;
    skip_cosmetic();
    std::size_t n = 0, digits = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      n = n * 10 + static_cast<std::size_t>(text_[pos_] - '0');
      ++pos_;
      if (++digits > 9) {
        fail("a repeat count of more than 9 digits");
        return std::nullopt;
      }
    }
    if (digits == 0) {
      fail("'*' without a count");
      return std::nullopt;
    }
    return n;
  }
  bool append(std::string& out, const std::string& item, std::size_t times) {
    if (!item.empty() && times > (max_ - out.size()) / item.size()) {
      return fail("the layout unrolls to more than " + std::to_string(max_) + " letters");
    }
    for (std::size_t i = 0; i < times; ++i) out += item;
    return true;
  }
  bool sequence(std::string& out, int depth) {
    if (depth > 64) return fail("parentheses nested more than 64 deep");
    for (;;) {
      skip_cosmetic();
      if (pos_ >= text_.size() || text_[pos_] == ')') return true;
      const char c = text_[pos_];
      std::string item;
      if (c == '(') {
        ++pos_;
        if (!sequence(item, depth + 1)) return false;
        if (pos_ >= text_.size()) return fail("a '(' without its ')'");
        ++pos_;  // ')'
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        item = std::string(1, c);
        ++pos_;
      } else {
        return fail(std::string("'") + c + "' is not a layer letter (E embedding, t decoder layer, m MTP layer, L loss) nor |, (, ), *");
      }
      const auto n = repeat();
      if (!n) return false;
      if (!append(out, item, *n)) return false;
    }
  }

  std::string_view text_;
  std::size_t max_;
  std::size_t pos_ = 0;
  std::string error_;
};

}  // namespace

std::optional<std::vector<std::string>> parse_pipeline_layout(std::string_view text, std::string& error,
                                                              std::size_t max_letters) {
  auto flat = Parser(text, max_letters).run(error);
  if (!flat) return std::nullopt;
  std::vector<std::string> stages(1);
  for (const char c : *flat) {
    if (c == '|') stages.emplace_back();
    else stages.back() += c;
  }
  return stages;
}

}  // namespace meshwork::plan
