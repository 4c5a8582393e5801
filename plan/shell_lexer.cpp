#include "plan/shell_lexer.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

namespace meshwork::plan::shell {
namespace {

// A here-document's delimiter word as the body's last line spells it: quotes removed.
std::string heredoc_delimiter(std::string_view word) {
  std::string d;
  for (char ch : word) {
    if (ch != '\'' && ch != '"' && ch != '\\') d += ch;
  }
  return d;
}

}  // namespace

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::size_t skip_balanced(std::string_view text, std::size_t i, char open, char close) {
  int depth = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      ++i;
    } else if (c == '\'') {
      const std::size_t end = text.find('\'', i + 1);
      if (end == std::string_view::npos) return text.size();
      i = end;
    } else if (c == open) {
      ++depth;
    } else if (c == close && --depth == 0) {
      return i + 1;
    }
  }
  return text.size();
}

std::vector<Token> lex(std::string_view text) {
  std::vector<Token> out;
  std::int64_t line = 1;
  std::size_t i = 0;
  auto count_lines = [&](std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < to && k < text.size(); ++k) line += text[k] == '\n';
  };
  // Here-documents opened on this line (delimiter, whether leading tabs are stripped); their
  // bodies start after the line's newline and are skipped, not read as script.
  std::vector<std::pair<std::string, bool>> heredocs;
  bool want_delimiter = false;
  bool strip_tabs = false;
  auto skip_heredoc_bodies = [&] {
    for (const auto& [delim, tabs] : heredocs) {
      while (i < text.size()) {
        std::size_t end = text.find('\n', i);
        if (end == std::string_view::npos) end = text.size();
        std::string_view body_line = text.substr(i, end - i);
        if (!body_line.empty() && body_line.back() == '\r') body_line.remove_suffix(1);
        if (tabs) {
          while (!body_line.empty() && body_line.front() == '\t') body_line.remove_prefix(1);
        }
        i = std::min(text.size(), end + 1);
        ++line;
        if (body_line == delim) break;
      }
    }
    heredocs.clear();
  };
  // A redirection operator at text[i]: [digits](<|>|>>|<<|<<-|<<<|<&|>&|>|) or &>, &>>.
  auto redirection_at = [&](std::size_t at) -> std::size_t {
    std::size_t j = at;
    if (text[j] == '&') {
      if (j + 1 < text.size() && text[j + 1] == '>') return (j + 2 < text.size() && text[j + 2] == '>') ? 3 : 2;
      return 0;
    }
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j >= text.size() || (text[j] != '<' && text[j] != '>')) return 0;
    const char op = text[j++];
    if (j < text.size() && (text[j] == op || text[j] == '&' || (op == '>' && text[j] == '|'))) {
      ++j;
      if (op == '<' && text[j - 1] == '<' && j < text.size() && (text[j] == '-' || text[j] == '<')) ++j;
    }
    return j - at;
  };
  while (i < text.size()) {
    const char c = text[i];
    if (const std::size_t n = redirection_at(i)) {
      std::string op(text.substr(i, n));
      i += n;
      const std::size_t lt = op.find("<<");
      if (lt != std::string::npos && op.find("<<<") == std::string::npos) {
        want_delimiter = true;
        strip_tabs = op.back() == '-';
      }
      out.push_back({Tok::redirect, std::move(op), line});
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      i += 2;  // a line continuation
      ++line;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '\n') {
      out.push_back({Tok::newline, "", line++});
      ++i;
      skip_heredoc_bodies();
    } else if (c == ';') {
      out.push_back({Tok::semi, ";", line});
      i += (i + 1 < text.size() && text[i + 1] == ';') ? 2 : 1;
    } else if (c == '(' || c == ')') {
      out.push_back({c == '(' ? Tok::lparen : Tok::rparen, std::string(1, c), line});
      ++i;
    } else if (c == '&' || c == '|') {
      const bool twice = i + 1 < text.size() && text[i + 1] == c;
      out.push_back({twice ? (c == '&' ? Tok::and_op : Tok::or_op) : (c == '&' ? Tok::amp : Tok::pipe),
                     std::string(twice ? 2 : 1, c), line});
      i += twice ? 2 : 1;
    } else {
      Token word{Tok::word, "", line};
      while (i < text.size()) {
        const char d = text[i];
        if (d == ' ' || d == '\t' || d == '\r' || d == '\n' || d == ';' || d == '&' || d == '|' || d == '(' || d == ')' ||
            d == '<' || d == '>') {
          break;  // a separator, or a redirection the next round reads
        }
        std::size_t end = i + 1;
        if (d == '\\') {
          if (i + 1 < text.size() && text[i + 1] == '\n') {
            i += 2;
            ++line;
            continue;
          }
          end = std::min(text.size(), i + 2);
        } else if (d == '\'') {
          const std::size_t close = text.find('\'', i + 1);
          end = close == std::string_view::npos ? text.size() : close + 1;
        } else if (d == '"') {
          end = i + 1;
          while (end < text.size() && text[end] != '"') {
            if (text[end] == '\\') {
              ++end;
            } else if (text[end] == '$' && end + 1 < text.size() && (text[end + 1] == '(' || text[end + 1] == '{')) {
              end = skip_balanced(text, end + 1, text[end + 1], text[end + 1] == '(' ? ')' : '}') - 1;
            }
            ++end;
          }
          end = std::min(text.size(), end + 1);
        } else if (d == '$' && i + 1 < text.size() && (text[i + 1] == '(' || text[i + 1] == '{')) {
          end = skip_balanced(text, i + 1, text[i + 1], text[i + 1] == '(' ? ')' : '}');
        } else if (d == '`') {
          const std::size_t close = text.find('`', i + 1);
          end = close == std::string_view::npos ? text.size() : close + 1;
        }
        count_lines(i, end);
        word.text += text.substr(i, end - i);
        i = end;
      }
      if (!word.text.empty()) {
        if (want_delimiter) {
          heredocs.emplace_back(heredoc_delimiter(word.text), strip_tabs);
          want_delimiter = false;
        }
        out.push_back(std::move(word));
      }
    }
  }
  out.push_back({Tok::newline, "", line});
  return out;
}

}  // namespace meshwork::plan::shell
