// PTX lexer: text -> tokens with line:col. Never fails; bad characters
// become kError tokens that the parser reports.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace phos::ptx {

struct Token {
  enum class Kind : uint8_t {
    kIdent,      // ld.global.u32  %r1  %tid.x  $L__BB0_2  _Z3foo  shared::cta
    kDirective,  // .reg  .b32  .ptr.global.align  .shared::cluster
    kInt,        // 42  0x1F  0b101  017  5U
    kFloat,      // 0f3F800000  0d3FF0000000000000  1.5  1e-3
    kString,     // "nounroll" (text without quotes)
    kPunct,      // , ; : [ ] { } ( ) < > + - ! @ | =
    kEof,
    kError,      // unterminated comment/string or a stray character
  };
  Kind kind = Kind::kEof;
  std::string_view text;  // a view into the source (for kString: the contents)
  uint32_t line = 1;
  uint32_t col = 1;

  bool Is(char punct) const { return kind == Kind::kPunct && text.size() == 1 && text[0] == punct; }
};

// Splits `src` into tokens; the last token is always kEof. The returned
// tokens point into `src`, which must outlive them.
std::vector<Token> Lex(std::string_view src);

// "identifier `foo`", "`;`", "end of input" — for error messages.
std::string Describe(const Token& t);

}  // namespace phos::ptx
