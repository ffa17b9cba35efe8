// PTX lexer.
#include "ptx/ptx_lexer.h"

namespace phos::ptx {
namespace {

bool IsIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '%';
}
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  std::vector<Token> Run() {
    std::vector<Token> out;
    for (;;) {
      SkipSpaceAndComments(out);
      if (!out.empty() && out.back().kind == Token::Kind::kError) break;
      if (i_ >= s_.size()) break;
      out.push_back(Next());
      if (out.back().kind == Token::Kind::kError) break;
    }
    Token eof;
    eof.kind = Token::Kind::kEof;
    eof.line = line_;
    eof.col = col_;
    out.push_back(eof);
    return out;
  }

 private:
  char Peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  void Advance() {
    if (s_[i_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++i_;
  }

  void SkipSpaceAndComments(std::vector<Token>& out) {
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
        Advance();
      } else if (c == '/' && Peek(1) == '/') {
        while (i_ < s_.size() && s_[i_] != '\n') Advance();
      } else if (c == '/' && Peek(1) == '*') {
        Token err = Make(Token::Kind::kError, i_);
        Advance();
        Advance();
        bool closed = false;
        while (i_ < s_.size()) {
          if (s_[i_] == '*' && Peek(1) == '/') {
            Advance();
            Advance();
            closed = true;
            break;
          }
          Advance();
        }
        if (!closed) {
          err.text = "unterminated /* comment";
          out.push_back(err);
          return;
        }
      } else {
        return;
      }
    }
  }

  Token Make(Token::Kind k, size_t start) const {
    Token t;
    t.kind = k;
    t.line = line_;
    t.col = col_;
    t.text = s_.substr(start, 0);
    return t;
  }

  // Identifier body: ident chars, '.'-separated parts and '::' joins.
  void ScanIdentBody() {
    for (;;) {
      char c = Peek();
      if (IsIdentChar(c)) {
        Advance();
      } else if (c == '.' && IsIdentChar(Peek(1))) {
        Advance();
      } else if (c == ':' && Peek(1) == ':' && IsIdentChar(Peek(2))) {
        Advance();
        Advance();
      } else {
        return;
      }
    }
  }

  Token Next() {
    size_t start = i_;
    Token t = Make(Token::Kind::kError, start);
    char c = s_[i_];
    if (IsIdentStart(c)) {
      t.kind = Token::Kind::kIdent;
      Advance();
      ScanIdentBody();
    } else if (c == '.' && IsIdentStart(Peek(1))) {
      t.kind = Token::Kind::kDirective;
      Advance();
      ScanIdentBody();
    } else if (IsDigit(c) || (c == '.' && IsDigit(Peek(1)))) {
      ScanNumber(t);
    } else if (c == '"') {
      Advance();
      size_t body = i_;
      while (i_ < s_.size() && s_[i_] != '"' && s_[i_] != '\n') {
        if (s_[i_] == '\\' && i_ + 1 < s_.size() && s_[i_ + 1] != '\n') Advance();
        Advance();
      }
      if (i_ >= s_.size() || s_[i_] != '"') {
        t.text = "unterminated string";
        return t;
      }
      t.kind = Token::Kind::kString;
      t.text = s_.substr(body, i_ - body);
      Advance();
      return t;
    } else if (std::string_view(",;:[]{}()<>+-!@|=*").find(c) != std::string_view::npos) {
      t.kind = Token::Kind::kPunct;
      Advance();
    } else {
      Advance();
      t.text = s_.substr(start, 1);
      return t;  // kError: stray character
    }
    t.text = s_.substr(start, i_ - start);
    return t;
  }

  void ScanNumber(Token& t) {
    char c = s_[i_];
    if (c == '0' && (Peek(1) == 'f' || Peek(1) == 'F' || Peek(1) == 'd' || Peek(1) == 'D') && IsHex(Peek(2))) {
      t.kind = Token::Kind::kFloat;
      Advance();
      Advance();
      while (IsHex(Peek())) Advance();
      return;
    }
    if (c == '0' && (Peek(1) == 'x' || Peek(1) == 'X') && IsHex(Peek(2))) {
      t.kind = Token::Kind::kInt;
      Advance();
      Advance();
      while (IsHex(Peek())) Advance();
      if (Peek() == 'U' || Peek() == 'u') Advance();
      return;
    }
    if (c == '0' && (Peek(1) == 'b' || Peek(1) == 'B') && (Peek(2) == '0' || Peek(2) == '1')) {
      t.kind = Token::Kind::kInt;
      Advance();
      Advance();
      while (Peek() == '0' || Peek() == '1') Advance();
      if (Peek() == 'U' || Peek() == 'u') Advance();
      return;
    }
    t.kind = Token::Kind::kInt;
    while (IsDigit(Peek())) Advance();
    if (Peek() == '.' && !IsIdentStart(Peek(1))) {
      t.kind = Token::Kind::kFloat;
      Advance();
      while (IsDigit(Peek())) Advance();
    }
    if ((Peek() == 'e' || Peek() == 'E') &&
        (IsDigit(Peek(1)) || ((Peek(1) == '+' || Peek(1) == '-') && IsDigit(Peek(2))))) {
      t.kind = Token::Kind::kFloat;
      Advance();
      if (Peek() == '+' || Peek() == '-') Advance();
      while (IsDigit(Peek())) Advance();
    }
    if (t.kind == Token::Kind::kInt && (Peek() == 'U' || Peek() == 'u')) Advance();
  }

  std::string_view s_;
  size_t i_ = 0;
  uint32_t line_ = 1;
  uint32_t col_ = 1;
};

}  // namespace

std::vector<Token> Lex(std::string_view src) { return Lexer(src).Run(); }

std::string Describe(const Token& t) {
  std::string text(t.text.substr(0, 40));
  switch (t.kind) {
    case Token::Kind::kIdent: return "identifier `" + text + "`";
    case Token::Kind::kDirective: return "directive `" + text + "`";
    case Token::Kind::kInt: return "integer `" + text + "`";
    case Token::Kind::kFloat: return "number `" + text + "`";
    case Token::Kind::kString: return "string \"" + text + "\"";
    case Token::Kind::kPunct: return "`" + text + "`";
    case Token::Kind::kEof: return "end of input";
    case Token::Kind::kError: {
      if (t.text.size() == 1) {
        unsigned char c = static_cast<unsigned char>(t.text[0]);
        if (c < 0x20 || c >= 0x7f) {
          static const char* kHex = "0123456789abcdef";
          return std::string("stray byte 0x") + kHex[c >> 4] + kHex[c & 15];
        }
        return "stray character `" + text + "`";
      }
      return text;
    }
  }
  return text;
}

}  // namespace phos::ptx
