#include "signature/demangle.h"
#include "signature/identifier_chars.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace phos::signature {
namespace {

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && s[b] == ' ') ++b;
  while (e > b && s[e - 1] == ' ') --e;
  return std::string(s.substr(b, e - b));
}

// Previous non-space character before position i, or '\0'.
char PrevNonSpace(std::string_view s, size_t i) {
  while (i > 0) {
    --i;
    if (s[i] != ' ') return s[i];
  }
  return '\0';
}

}  // namespace

bool IsMangledName(std::string_view name) { return name.size() > 2 && name.substr(0, 2) == "_Z"; }

Status Demangle(const std::string& mangled, std::string* out) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> buf(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || buf == nullptr) {
    return Status::Corruption("cannot demangle '" + mangled + "' (__cxa_demangle status " +
                              std::to_string(status) + ")");
  }
  *out = buf.get();
  return Status::Ok();
}

Status SplitDemangledSignature(std::string_view demangled, std::string* function,
                               std::vector<std::string>* params) {
  params->clear();
  size_t end = demangled.size();
  while (end > 0 && demangled[end - 1] == ' ') --end;
  if (end == 0 || demangled[end - 1] != ')') {
    return Status::InvalidArgument("demangled name '" + std::string(demangled) +
                                   "' does not end with a parameter list");
  }
  // The parameter list is the last balanced (...) group.
  size_t open = std::string_view::npos;
  int depth = 0;
  for (size_t i = end; i-- > 0;) {
    if (demangled[i] == ')') {
      ++depth;
    } else if (demangled[i] == '(') {
      if (--depth == 0) {
        open = i;
        break;
      }
    }
  }
  if (open == std::string_view::npos || open == 0) {
    return Status::InvalidArgument("unbalanced parameter list in '" + std::string(demangled) + "'");
  }
  *function = Trim(demangled.substr(0, open));
  std::string_view list = demangled.substr(open + 1, end - 1 - (open + 1));

  // Split at top-level commas. Brackets: (), [], {} always; '<' opens a
  // template argument list only right after a name (the demangler prints
  // operator< between parenthesised operands) and '>' closes one only when
  // the innermost open bracket is a '<' (the demangler parenthesises a '>'
  // operator inside template arguments).
  std::vector<char> stack;
  size_t start = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    switch (c) {
      case '(':
      case '[':
      case '{':
        stack.push_back(c);
        break;
      case ')':
      case ']':
      case '}': {
        char want = c == ')' ? '(' : c == ']' ? '[' : '{';
        while (!stack.empty() && stack.back() != want) stack.pop_back();
        if (stack.empty()) {
          return Status::InvalidArgument("unbalanced '" + std::string(1, c) + "' in '" +
                                         std::string(demangled) + "'");
        }
        stack.pop_back();
        break;
      }
      case '<':
        if (IsIdentChar(PrevNonSpace(list, i))) stack.push_back('<');
        break;
      case '>':
        if (!stack.empty() && stack.back() == '<' && PrevNonSpace(list, i) != '-') stack.pop_back();
        break;
      case ',':
        if (stack.empty()) {
          params->push_back(Trim(list.substr(start, i - start)));
          start = i + 1;
        }
        break;
      default:
        break;
    }
  }
  std::string last = Trim(list.substr(start));
  if (!stack.empty()) {
    return Status::InvalidArgument("unbalanced brackets in parameter list of '" +
                                   std::string(demangled) + "'");
  }
  if (params->empty() && (last.empty() || last == "void")) return Status::Ok();
  params->push_back(std::move(last));
  for (const auto& p : *params) {
    if (p.empty()) {
      return Status::InvalidArgument("empty parameter type in '" + std::string(demangled) + "'");
    }
  }
  return Status::Ok();
}

}  // namespace phos::signature
