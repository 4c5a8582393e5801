#include "plan/shell_arithmetic.hpp"

#include <cctype>
#include <limits>

#include "plan/shell_lexer.hpp"

namespace meshwork::plan::shell {

std::optional<long long> shell_arithmetic(std::string_view e, const std::function<std::optional<std::string>(const std::string&)>& value_of) {
  std::size_t i = 0;
  bool ok = true;
  int depth = 0;
  std::function<long long()> sum;
  auto space = [&] {
    while (i < e.size() && std::isspace(static_cast<unsigned char>(e[i]))) ++i;
  };
  std::function<long long()> atom = [&]() -> long long {
    space();
    if (!ok || depth >= kMaxNesting) {
      ok = false;
      return 0;
    }
    ++depth;
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth};
    if (i < e.size() && e[i] == '(') {
      ++i;
      const long long v = sum();
      space();
      if (i < e.size() && e[i] == ')') ++i; else ok = false;
      return v;
    }
    if (i < e.size() && (e[i] == '-' || e[i] == '+')) {
      const bool neg = e[i++] == '-';
      const long long v = atom();
      long long out = v;
      if (neg && __builtin_sub_overflow(0LL, v, &out)) ok = false;
      return ok ? out : 0;
    }
    if (i < e.size() && e[i] == '$') ++i;
    if (i < e.size() && std::isdigit(static_cast<unsigned char>(e[i]))) {
      long long v = 0;
      while (i < e.size() && std::isdigit(static_cast<unsigned char>(e[i]))) {
        if (__builtin_mul_overflow(v, 10LL, &v) || __builtin_add_overflow(v, static_cast<long long>(e[i] - '0'), &v)) ok = false;
        ++i;
      }
      return ok ? v : 0;
    }
    bool braced = i < e.size() && e[i] == '{';
    if (braced) ++i;
    std::string name;
    while (i < e.size() && is_name_char(e[i])) name += e[i++];
    if (braced) {
      if (i < e.size() && e[i] == '}') ++i; else ok = false;
    }
    const std::optional<std::string> value = name.empty() ? std::nullopt : value_of(name);
    if (!value) {
      ok = false;
      return 0;
    }
    const std::string& s = *value;
    try {
      std::size_t used = 0;
      const long long n = std::stoll(s, &used);
      if (used != s.size()) ok = false;
      return n;
    } catch (...) {
      ok = false;
      return 0;
    }
  };
  auto product = [&]() -> long long {
    long long v = atom();
    for (;;) {
      space();
      if (i >= e.size() || (e[i] != '*' && e[i] != '/' && e[i] != '%')) return v;
      const char op = e[i++];
      const long long r = atom();
      if (!ok) return 0;
      if (op == '*') {
        if (__builtin_mul_overflow(v, r, &v)) ok = false;
      } else if (r == 0 || (r == -1 && v == std::numeric_limits<long long>::min())) {
        ok = false;
      } else {
        v = op == '/' ? v / r : v % r;
      }
    }
  };
  sum = [&]() -> long long {
    long long v = product();
    for (;;) {
      space();
      if (i >= e.size() || (e[i] != '+' && e[i] != '-')) return v;
      const char op = e[i++];
      const long long r = product();
      if (!ok) return 0;
      if (op == '+' ? __builtin_add_overflow(v, r, &v) : __builtin_sub_overflow(v, r, &v)) ok = false;
    }
  };
  const long long v = sum();
  space();
  if (!ok || i != e.size()) return std::nullopt;
  return v;
}

}  // namespace meshwork::plan::shell
