#pragma once
// The tokens of a bash script as plan/shell_script.cpp reads it: words (quotes and expansions
// still in them), separators, parentheses and redirections; comments and line continuations
// gone, here-document bodies skipped. Internal to the shell reader.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshwork::plan::shell {

// How deep the reader follows nesting (of ${...:-${...}}, $(( )) and if) before it names the
// rest as not followed: far past any launch script, far short of the stack.
inline constexpr int kMaxNesting = 64;

enum class Tok { word, newline, semi, lparen, rparen, and_op, or_op, pipe, amp, redirect };

struct Token {
  Tok kind = Tok::word;
  std::string text;  // a word as written: quotes and expansions still in it
  std::int64_t line = 1;
};

bool is_name_start(char c);
bool is_name_char(char c);

// Where the bracketed run that opens at text[i] ("$(", "${", "$((") closes, quotes respected.
std::size_t skip_balanced(std::string_view text, std::size_t i, char open, char close);

// The script's tokens, ending with a newline token.
std::vector<Token> lex(std::string_view text);

}  // namespace meshwork::plan::shell
