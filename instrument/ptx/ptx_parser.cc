// Recursive-descent PTX parser over the token stream of ptx_lexer.
#include "ptx/ptx_parser.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>

#include "ptx/ptx_lexer.h"

namespace phos::ptx {
namespace {

using K = Token::Kind;

constexpr int kMaxNesting = 64;

bool IsSpaceName(std::string_view s) { return SpaceFromName(s) != Space::kNone; }

Linkage LinkageFromName(std::string_view s) {
  if (s == "visible") return Linkage::kVisible;
  if (s == "extern") return Linkage::kExtern;
  if (s == "weak") return Linkage::kWeak;
  if (s == "common") return Linkage::kCommon;
  return Linkage::kNone;
}

std::vector<std::string_view> SplitDots(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '.') {
      if (i > start) parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

// Joins tokens back into text with PTX-friendly spacing.
std::string JoinTokens(const std::vector<Token>& toks, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    const Token& t = toks[i];
    bool no_space_before = t.Is(',') || t.Is(';') || t.Is(')') || t.Is(']');
    bool prev_open = i > begin && (toks[i - 1].Is('(') || toks[i - 1].Is('['));
    if (i > begin && !no_space_before && !prev_open) out += ' ';
    if (t.kind == K::kString) {
      out += '"';
      out.append(t.text);
      out += '"';
    } else {
      out.append(t.text);
    }
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : toks_(Lex(text)) {}

  Status ParseModule(Module* m) {
    while (!At(K::kEof)) {
      PHOS_RETURN_IF_ERROR(ParseTopItem(m));
    }
    if (m->version.empty()) return ErrorAt(Cur(), "`.version` directive");
    if (m->target.empty()) return ErrorAt(Cur(), "`.target` directive");
    return Status::Ok();
  }

  Status ParseSingleInstruction(Instruction* out) {
    PHOS_RETURN_IF_ERROR(ParseInstructionStmt(out, /*require_semicolon=*/false));
    if (!At(K::kEof)) return ErrorAt(Cur(), "end of instruction");
    return Status::Ok();
  }

 private:
  // ------------------------------------------------------------ tokens ---
  const Token& Cur() const { return toks_[pos_]; }
  const Token& PeekTok(size_t k = 1) const {
    size_t i = pos_ + k;
    return i < toks_.size() ? toks_[i] : toks_.back();
  }
  bool At(K k) const { return Cur().kind == k; }
  bool AtPunct(char c) const { return Cur().Is(c); }
  bool AtDirective(std::string_view name) const { return At(K::kDirective) && Cur().text == name; }
  void Advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }

  Status ErrorAt(const Token& t, std::string_view expected) const {
    std::string msg = "ptx:" + std::to_string(t.line) + ":" + std::to_string(t.col) + ": expected ";
    msg.append(expected);
    msg += ", got ";
    msg += Describe(t);
    return Status::Corruption(std::move(msg));
  }

  Status ExpectPunct(char c) {
    if (!AtPunct(c)) return ErrorAt(Cur(), std::string("`") + c + "`");
    Advance();
    return Status::Ok();
  }

  // Unsigned integer literal -> magnitude/radix/suffix.
  Status ParseIntToken(const Token& t, Operand* o) {
    std::string_view s = t.text;
    o->kind = Operand::Kind::kImmInt;
    o->unsigned_suffix = false;
    if (!s.empty() && (s.back() == 'U' || s.back() == 'u')) {
      o->unsigned_suffix = true;
      s.remove_suffix(1);
    }
    unsigned base = 10;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
      base = 16;
      s.remove_prefix(2);
    } else if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) {
      base = 2;
      s.remove_prefix(2);
    } else if (s.size() > 1 && s[0] == '0') {
      base = 8;
      s.remove_prefix(1);
    }
    uint64_t v = 0;
    for (char c : s) {
      unsigned d;
      if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
      else return ErrorAt(t, "an integer literal");
      if (d >= base) return ErrorAt(t, "an integer literal");
      if (v > (UINT64_MAX - d) / base) return ErrorAt(t, "an integer that fits in 64 bits");
      v = v * base + d;
    }
    o->bits = v;
    o->radix = static_cast<uint8_t>(base);
    return Status::Ok();
  }

  Status ParseFloatToken(const Token& t, Operand* o) {
    std::string_view s = t.text;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F' || s[1] == 'd' || s[1] == 'D')) {
      bool is_f32 = s[1] == 'f' || s[1] == 'F';
      std::string_view hex = s.substr(2);
      if (hex.size() != (is_f32 ? 8u : 16u)) {
        return ErrorAt(t, is_f32 ? "0f followed by 8 hex digits" : "0d followed by 16 hex digits");
      }
      uint64_t v = 0;
      for (char c : hex) {
        unsigned d = c <= '9' ? static_cast<unsigned>(c - '0')
                              : static_cast<unsigned>((c | 0x20) - 'a' + 10);
        v = (v << 4) | d;
      }
      o->kind = is_f32 ? Operand::Kind::kImmF32 : Operand::Kind::kImmF64;
      o->bits = v;
      return Status::Ok();
    }
    std::string copy(s);
    errno = 0;
    char* end = nullptr;
    double d = std::strtod(copy.c_str(), &end);
    if (end != copy.c_str() + copy.size()) return ErrorAt(t, "a floating-point literal");
    *o = Operand::F64(d);
    return Status::Ok();
  }

  // [-] int  ->  signed value (for directive arguments, offsets, dims).
  Status ParseSignedInt(int64_t* out, std::string_view what) {
    bool minus = false;
    if (AtPunct('-')) {
      minus = true;
      Advance();
    }
    if (!At(K::kInt)) return ErrorAt(Cur(), what);
    Operand o;
    PHOS_RETURN_IF_ERROR(ParseIntToken(Cur(), &o));
    if (o.bits > static_cast<uint64_t>(INT64_MAX) + (minus ? 1u : 0u)) {
      return ErrorAt(Cur(), "an integer that fits in 64 bits");
    }
    Advance();
    *out = minus ? static_cast<int64_t>(0 - o.bits) : static_cast<int64_t>(o.bits);
    return Status::Ok();
  }

  // After a '+' or '-' (minus): [-] int with |value| <= INT64_MAX.
  Status ParseOffset(bool minus, int64_t* out) {
    if (AtPunct('-')) {
      minus = !minus;
      Advance();
    }
    if (!At(K::kInt)) return ErrorAt(Cur(), "an offset");
    Operand o;
    PHOS_RETURN_IF_ERROR(ParseIntToken(Cur(), &o));
    if (o.bits > static_cast<uint64_t>(INT64_MAX)) return ErrorAt(Cur(), "an offset that fits in 63 bits");
    Advance();
    *out = minus ? -static_cast<int64_t>(o.bits) : static_cast<int64_t>(o.bits);
    return Status::Ok();
  }

  Status ParseU32(uint32_t* out, std::string_view what) {
    if (!At(K::kInt)) return ErrorAt(Cur(), what);
    Operand o;
    PHOS_RETURN_IF_ERROR(ParseIntToken(Cur(), &o));
    if (o.bits > UINT32_MAX) return ErrorAt(Cur(), what);
    Advance();
    *out = static_cast<uint32_t>(o.bits);
    return Status::Ok();
  }

  // Raw text from the current token through the first `;` at nesting 0
  // (or the `}` closing a `{` opened in it).
  Status ParseRaw(std::string* text) {
    size_t begin = pos_;
    int depth = 0;
    for (;;) {
      if (At(K::kEof) || At(K::kError)) return ErrorAt(Cur(), "`;`");
      if (AtPunct('{') || AtPunct('(') || AtPunct('[')) ++depth;
      if (AtPunct('}') || AtPunct(')') || AtPunct(']')) {
        if (depth == 0) return ErrorAt(Cur(), "`;`");
        --depth;
        if (depth == 0 && AtPunct('}') && toks_[begin].kind == K::kDirective &&
            toks_[begin].text == ".section") {
          Advance();
          break;
        }
      }
      if (depth == 0 && AtPunct(';')) {
        Advance();
        break;
      }
      Advance();
    }
    *text = JoinTokens(toks_, begin, pos_);
    return Status::Ok();
  }

  // ------------------------------------------------------- top level ---
  Status ParseTopItem(Module* m) {
    const Token& t = Cur();
    if (t.kind != K::kDirective) return ErrorAt(t, "a directive");
    std::string_view d = t.text;
    if (d == ".version") {
      Advance();
      if (!At(K::kFloat) && !At(K::kInt)) return ErrorAt(Cur(), "a version number");
      m->version = std::string(Cur().text);
      Advance();
      return Status::Ok();
    }
    if (d == ".target") {
      Advance();
      m->target.clear();
      for (;;) {
        if (!At(K::kIdent)) return ErrorAt(Cur(), "a target name");
        m->target.emplace_back(Cur().text);
        Advance();
        if (!AtPunct(',')) break;
        Advance();
      }
      return Status::Ok();
    }
    if (d == ".address_size") {
      Advance();
      uint32_t v = 0;
      PHOS_RETURN_IF_ERROR(ParseU32(&v, "32 or 64"));
      if (v != 32 && v != 64) return ErrorAt(toks_[pos_ - 1], "32 or 64");
      m->address_size = v;
      m->has_address_size = true;
      return Status::Ok();
    }
    if (d == ".file") {
      FileDirective f;
      PHOS_RETURN_IF_ERROR(ParseFile(&f));
      m->items.emplace_back(std::move(f));
      return Status::Ok();
    }
    if (d == ".pragma") {
      Pragma p;
      PHOS_RETURN_IF_ERROR(ParsePragma(&p));
      m->items.emplace_back(std::move(p));
      return Status::Ok();
    }
    // Look past linkage / attribute directives for .entry/.func.
    size_t k = 0;
    while (PeekTok(k).kind == K::kDirective && LinkageFromName(PeekTok(k).text.substr(1)) != Linkage::kNone) ++k;
    const Token& kw = PeekTok(k);
    if (kw.kind == K::kDirective && (kw.text == ".entry" || kw.text == ".func")) {
      Function f;
      PHOS_RETURN_IF_ERROR(ParseFunction(&f));
      m->items.emplace_back(std::move(f));
      return Status::Ok();
    }
    if (kw.kind == K::kDirective && IsSpaceName(kw.text.substr(1))) {
      std::vector<VarDecl> decls;
      PHOS_RETURN_IF_ERROR(ParseVarDeclStmt(&decls));
      for (auto& v : decls) m->items.emplace_back(std::move(v));
      return Status::Ok();
    }
    // Unknown directive (.section, .alias, ...): keep as text.
    RawDirective r;
    PHOS_RETURN_IF_ERROR(ParseRaw(&r.text));
    m->items.emplace_back(std::move(r));
    return Status::Ok();
  }

  Status ParseFile(FileDirective* f) {
    Advance();  // .file
    int64_t idx = 0;
    PHOS_RETURN_IF_ERROR(ParseSignedInt(&idx, "a file index"));
    f->index = idx;
    if (!At(K::kString)) return ErrorAt(Cur(), "a file name string");
    f->path = std::string(Cur().text);
    Advance();
    while (AtPunct(',')) {
      Advance();
      int64_t v = 0;
      PHOS_RETURN_IF_ERROR(ParseSignedInt(&v, "an integer"));
      f->extra.push_back(v);
    }
    return Status::Ok();
  }

  Status ParsePragma(Pragma* p) {
    Advance();  // .pragma
    for (;;) {
      if (!At(K::kString)) return ErrorAt(Cur(), "a pragma string");
      p->strings.emplace_back(Cur().text);
      Advance();
      if (!AtPunct(',')) break;
      Advance();
    }
    return ExpectPunct(';');
  }

  // ---------------------------------------------------- declarations ---

  // Attributes + one declarator (no initialiser, no terminator).
  Status ParseDeclHead(VarDecl* v, bool allow_ptr) {
    bool any = false;
    bool in_ptr = false;
    while (At(K::kDirective)) {
      const Token& t = Cur();
      auto parts = SplitDots(t.text);
      Advance();
      for (size_t i = 0; i < parts.size(); ++i) {
        std::string_view p = parts[i];
        if (Linkage l = LinkageFromName(p); l != Linkage::kNone && !any) {
          v->linkage = l;
        } else if (p == "ptr" && allow_ptr) {
          v->ptr = true;
          in_ptr = true;
        } else if (Space s = SpaceFromName(p); s != Space::kNone) {
          if (in_ptr) v->ptr_space = s;
          else if (v->space == Space::kNone) v->space = s;
          else return ErrorAt(t, "one state space");
        } else if (p == "align") {
          if (i + 1 != parts.size()) return ErrorAt(t, "`.align N`");
          uint32_t a = 0;
          PHOS_RETURN_IF_ERROR(ParseU32(&a, "an alignment"));
          if (in_ptr) v->ptr_align = a;
          else v->align = a;
        } else if (p == "v2" || p == "v4" || p == "v8") {
          v->vec = static_cast<uint8_t>(p[1] - '0');
        } else if (Type ty = TypeFromName(p); ty != Type::kNone && v->type == Type::kNone) {
          v->type = ty;
        } else if (v->type == Type::kNone && v->space != Space::kNone && !p.empty() &&
                   (std::isalpha(static_cast<unsigned char>(p[0])) || p[0] == '_')) {
          // A type phos does not model (.texref, .b128, ...), kept by name.
          // Only a name: `.6u4` would be emitted as `.6u4`, which lexes as
          // the number .6 (ptx_parser_fuzz found it).
          v->type = Type::kOther;
          v->type_name = std::string(p);
        } else {
          return ErrorAt(t, "a declaration attribute");
        }
        any = true;
      }
    }
    if (v->space == Space::kNone) return ErrorAt(Cur(), "a state space");
    return Status::Ok();
  }

  Status ParseDeclarator(VarDecl* v) {
    if (!At(K::kIdent)) return ErrorAt(Cur(), "a variable name");
    v->name = std::string(Cur().text);
    Advance();
    if (AtPunct('<')) {
      Advance();
      uint32_t n = 0;
      PHOS_RETURN_IF_ERROR(ParseU32(&n, "a register count"));
      v->range = n;
      PHOS_RETURN_IF_ERROR(ExpectPunct('>'));
    }
    v->dims.clear();
    while (AtPunct('[')) {
      Advance();
      if (AtPunct(']')) {
        v->dims.push_back(-1);
      } else {
        int64_t n = 0;
        PHOS_RETURN_IF_ERROR(ParseSignedInt(&n, "an array size"));
        if (n < 0) return ErrorAt(toks_[pos_ - 1], "a non-negative array size");
        v->dims.push_back(n);
      }
      PHOS_RETURN_IF_ERROR(ExpectPunct(']'));
      if (v->dims.size() > 16) return ErrorAt(Cur(), "at most 16 array dimensions");
    }
    if (AtPunct('=')) {
      Advance();
      Operand init;
      PHOS_RETURN_IF_ERROR(ParseInitializer(&init, 0));
      v->init = std::move(init);
    }
    return Status::Ok();
  }

  // A declaration statement: head, declarators separated by ',', ';'.
  Status ParseVarDeclStmt(std::vector<VarDecl>* out) {
    VarDecl head;
    PHOS_RETURN_IF_ERROR(ParseDeclHead(&head, /*allow_ptr=*/false));
    for (;;) {
      VarDecl v = head;
      PHOS_RETURN_IF_ERROR(ParseDeclarator(&v));
      out->push_back(std::move(v));
      if (!AtPunct(',')) break;
      Advance();
    }
    return ExpectPunct(';');
  }

  Status ParseInitializer(Operand* o, int depth) {
    if (depth > kMaxNesting) return ErrorAt(Cur(), "less deeply nested initialisers");
    if (AtPunct('{')) {
      Advance();
      o->kind = Operand::Kind::kVector;
      if (AtPunct('}')) {
        Advance();
        return Status::Ok();
      }
      for (;;) {
        Operand e;
        PHOS_RETURN_IF_ERROR(ParseInitializer(&e, depth + 1));
        o->elems.push_back(std::move(e));
        if (AtPunct('}')) break;
        PHOS_RETURN_IF_ERROR(ExpectPunct(','));
      }
      Advance();
      return Status::Ok();
    }
    if (At(K::kIdent) && Cur().text == "generic" && PeekTok().Is('(')) {
      Advance();
      Advance();
      if (!At(K::kIdent)) return ErrorAt(Cur(), "a symbol");
      *o = Operand::Sym(std::string(Cur().text));
      o->generic_wrap = true;
      Advance();
      PHOS_RETURN_IF_ERROR(ExpectPunct(')'));
      return ParseSymbolOffset(o);
    }
    if (At(K::kIdent)) {
      *o = Operand::Sym(std::string(Cur().text));
      Advance();
      return ParseSymbolOffset(o);
    }
    return ParseNumber(o);
  }

  Status ParseSymbolOffset(Operand* o) {
    if (AtPunct('+') || AtPunct('-')) {
      bool minus = AtPunct('-');
      Advance();
      PHOS_RETURN_IF_ERROR(ParseOffset(minus, &o->offset));
      o->has_offset = true;
    }
    return Status::Ok();
  }

  // [-] int | [-] float
  Status ParseNumber(Operand* o) {
    bool minus = false;
    if (AtPunct('-')) {
      minus = true;
      Advance();
    }
    if (At(K::kInt)) {
      PHOS_RETURN_IF_ERROR(ParseIntToken(Cur(), o));
      o->minus = minus;
      Advance();
      return Status::Ok();
    }
    if (At(K::kFloat)) {
      PHOS_RETURN_IF_ERROR(ParseFloatToken(Cur(), o));
      if (minus) {
        if (o->kind == Operand::Kind::kImmF32) o->bits ^= 0x80000000u;
        else o->bits ^= 0x8000000000000000ull;
      }
      Advance();
      return Status::Ok();
    }
    return ErrorAt(Cur(), "an operand");
  }

  // ------------------------------------------------------- functions ---

  Status ParseParamList(std::vector<VarDecl>* out) {
    PHOS_RETURN_IF_ERROR(ExpectPunct('('));
    if (AtPunct(')')) {
      Advance();
      return Status::Ok();
    }
    for (;;) {
      VarDecl v;
      PHOS_RETURN_IF_ERROR(ParseDeclHead(&v, /*allow_ptr=*/true));
      PHOS_RETURN_IF_ERROR(ParseDeclarator(&v));
      out->push_back(std::move(v));
      if (AtPunct(')')) break;
      PHOS_RETURN_IF_ERROR(ExpectPunct(','));
    }
    Advance();
    return Status::Ok();
  }

  Status ParseFunction(Function* f) {
    while (At(K::kDirective) && LinkageFromName(Cur().text.substr(1)) != Linkage::kNone) {
      f->linkage = LinkageFromName(Cur().text.substr(1));
      Advance();
    }
    f->is_entry = Cur().text == ".entry";
    Advance();
    if (AtPunct('(')) {
      if (f->is_entry) return ErrorAt(Cur(), "a kernel name");
      PHOS_RETURN_IF_ERROR(ParseParamList(&f->returns));
    }
    if (!At(K::kIdent)) return ErrorAt(Cur(), "a function name");
    f->name = std::string(Cur().text);
    Advance();
    if (AtPunct('(')) {
      f->has_param_list = true;
      PHOS_RETURN_IF_ERROR(ParseParamList(&f->params));
    }
    while (At(K::kDirective)) {
      PerfDirective pd;
      pd.name = std::string(Cur().text.substr(1));
      Advance();
      if (At(K::kInt)) {
        for (;;) {
          int64_t v = 0;
          PHOS_RETURN_IF_ERROR(ParseSignedInt(&v, "an integer"));
          pd.args.push_back(v);
          if (!AtPunct(',')) break;
          Advance();
        }
      }
      f->directives.push_back(std::move(pd));
    }
    if (AtPunct(';')) {
      Advance();
      return Status::Ok();
    }
    if (!AtPunct('{')) return ErrorAt(Cur(), "`{` or `;` after the function signature");
    Advance();
    f->has_body = true;
    int depth = 0;
    for (;;) {
      if (At(K::kEof)) return ErrorAt(Cur(), "`}` closing the function body");
      if (AtPunct('}')) {
        Advance();
        if (depth == 0) return Status::Ok();
        --depth;
        f->body.emplace_back(BlockEnd{});
        continue;
      }
      if (AtPunct('{')) {
        Advance();
        if (++depth > kMaxNesting) return ErrorAt(Cur(), "less deeply nested blocks");
        f->body.emplace_back(BlockBegin{});
        continue;
      }
      PHOS_RETURN_IF_ERROR(ParseBodyStatement(f));
    }
  }

  Status ParseBodyStatement(Function* f) {
    const Token& t = Cur();
    if (t.kind == K::kIdent && PeekTok().Is(':')) {
      if (PeekTok(2).kind == K::kDirective && PeekTok(2).text == ".callprototype") {  // proto : .callprototype ...;
        RawStatement r;
        PHOS_RETURN_IF_ERROR(ParseRaw(&r.text));
        f->body.emplace_back(std::move(r));
        return Status::Ok();
      }
      if (t.text[0] == '%') return ErrorAt(t, "a label name");
      f->body.emplace_back(Label{std::string(t.text)});
      Advance();
      Advance();
      return Status::Ok();
    }
    if (t.kind == K::kDirective) {
      if (t.text == ".pragma") {
        Pragma p;
        PHOS_RETURN_IF_ERROR(ParsePragma(&p));
        f->body.emplace_back(std::move(p));
        return Status::Ok();
      }
      if (t.text == ".loc") return ParseLoc(f);
      size_t k = 0;
      while (PeekTok(k).kind == K::kDirective && LinkageFromName(PeekTok(k).text.substr(1)) != Linkage::kNone) ++k;
      const Token& kw = PeekTok(k);
      if (kw.kind == K::kDirective && IsSpaceName(SplitDots(kw.text).empty() ? "" : SplitDots(kw.text)[0])) {
        std::vector<VarDecl> decls;
        PHOS_RETURN_IF_ERROR(ParseVarDeclStmt(&decls));
        for (auto& v : decls) f->body.emplace_back(std::move(v));
        return Status::Ok();
      }
      RawStatement r;
      PHOS_RETURN_IF_ERROR(ParseRaw(&r.text));
      f->body.emplace_back(std::move(r));
      return Status::Ok();
    }
    Instruction in;
    PHOS_RETURN_IF_ERROR(ParseInstructionStmt(&in, /*require_semicolon=*/true));
    f->body.emplace_back(std::move(in));
    return Status::Ok();
  }

  // .loc file line column [, function_name X, inlined_at a b c]  (one line)
  Status ParseLoc(Function* f) {
    uint32_t line = Cur().line;
    Advance();
    Loc loc;
    PHOS_RETURN_IF_ERROR(ParseSignedInt(&loc.file, "a file index"));
    PHOS_RETURN_IF_ERROR(ParseSignedInt(&loc.line, "a line number"));
    PHOS_RETURN_IF_ERROR(ParseSignedInt(&loc.column, "a column number"));
    if (AtPunct(',') && Cur().line == line) {
      size_t begin = pos_;
      while (!At(K::kEof) && !At(K::kError) && Cur().line == line && !AtPunct(';') && !AtPunct('{') &&
             !AtPunct('}')) {
        Advance();
      }
      loc.extra = JoinTokens(toks_, begin, pos_);
    }
    f->body.emplace_back(std::move(loc));
    return Status::Ok();
  }

  // ---------------------------------------------------- instructions ---

  Status ParseInstructionStmt(Instruction* in, bool require_semicolon) {
    if (AtPunct('@')) {
      Advance();
      if (AtPunct('!')) {
        in->guard_neg = true;
        Advance();
      }
      if (!At(K::kIdent)) return ErrorAt(Cur(), "a predicate register");
      in->guard = std::string(Cur().text);
      Advance();
    }
    const Token& op = Cur();
    if (op.kind != K::kIdent || op.text[0] == '%' || op.text[0] == '$') return ErrorAt(op, "an instruction");
    auto parts = SplitDots(op.text);
    if (parts.empty() || op.text.back() == '.') return ErrorAt(op, "an instruction");
    in->opcode = std::string(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) in->mods.emplace_back(parts[i]);
    Advance();
    const bool is_branch = in->opcode == "bra" || in->opcode == "brx";
    if (!AtPunct(';') && !(At(K::kEof) && !require_semicolon)) {
      for (;;) {
        Operand o;
        PHOS_RETURN_IF_ERROR(ParseOperand(&o, 0));
        if (is_branch && o.kind == Operand::Kind::kSymbol && !o.has_offset) o.kind = Operand::Kind::kLabel;
        in->operands.push_back(std::move(o));
        if (!AtPunct(',')) break;
        Advance();
      }
    }
    if (require_semicolon || AtPunct(';')) PHOS_RETURN_IF_ERROR(ExpectPunct(';'));
    in->Decode();
    return Status::Ok();
  }

  Status ParseOperand(Operand* o, int depth) {
    PHOS_RETURN_IF_ERROR(ParsePrimary(o, depth));
    if (AtPunct('|')) {
      Advance();
      Operand b;
      PHOS_RETURN_IF_ERROR(ParsePrimary(&b, depth));
      *o = Operand::Pair(std::move(*o), std::move(b));
    }
    return Status::Ok();
  }

  Status ParseOperandList(Operand* o, char close, int depth) {
    Advance();  // opening bracket
    if (AtPunct(close)) {
      Advance();
      return Status::Ok();
    }
    for (;;) {
      Operand e;
      PHOS_RETURN_IF_ERROR(ParseOperand(&e, depth + 1));
      o->elems.push_back(std::move(e));
      if (AtPunct(close)) break;
      PHOS_RETURN_IF_ERROR(ExpectPunct(','));
    }
    Advance();
    return Status::Ok();
  }

  Status ParsePrimary(Operand* o, int depth) {
    if (depth > kMaxNesting) return ErrorAt(Cur(), "less deeply nested operands");
    if (AtPunct('!')) {
      Advance();
      if (!At(K::kIdent)) return ErrorAt(Cur(), "a predicate register");
      *o = Operand::Reg(std::string(Cur().text), true);
      Advance();
      return Status::Ok();
    }
    if (AtPunct('{')) {
      o->kind = Operand::Kind::kVector;
      return ParseOperandList(o, '}', depth);
    }
    if (AtPunct('(')) {
      o->kind = Operand::Kind::kList;
      return ParseOperandList(o, ')', depth);
    }
    if (AtPunct('[')) return ParseAddress(o, depth);
    if (At(K::kIdent)) {
      std::string_view name = Cur().text;
      if (name == "generic" && PeekTok().Is('(')) return ParseInitializer(o, depth);
      if (name[0] == '%' || name == "_") {
        *o = Operand::Reg(std::string(name));
        Advance();
        return Status::Ok();
      }
      *o = Operand::Sym(std::string(name));
      Advance();
      return ParseSymbolOffset(o);
    }
    return ParseNumber(o);
  }

  Status ParseAddress(Operand* o, int depth) {
    Advance();  // [
    o->kind = Operand::Kind::kAddress;
    if (At(K::kIdent)) {
      o->name = std::string(Cur().text);
      o->base_is_reg = o->name[0] == '%';
      Advance();
      if (AtPunct('+') || AtPunct('-')) {
        bool minus = AtPunct('-');
        Advance();
        PHOS_RETURN_IF_ERROR(ParseOffset(minus, &o->offset));
        o->has_offset = true;
      }
    } else if (At(K::kInt) || AtPunct('-')) {
      PHOS_RETURN_IF_ERROR(ParseSignedInt(&o->offset, "an address"));
      o->has_offset = true;
    } else {
      return ErrorAt(Cur(), "an address");
    }
    while (AtPunct(',')) {
      Advance();
      Operand e;
      PHOS_RETURN_IF_ERROR(ParseOperand(&e, depth + 1));
      o->elems.push_back(std::move(e));
    }
    return ExpectPunct(']');
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
};

}  // namespace

Status ParseModule(std::string_view text, Module* out) {
  *out = Module{};
  return Parser(text).ParseModule(out);
}

Status ParseInstruction(std::string_view text, Instruction* out) {
  *out = Instruction{};
  return Parser(text).ParseSingleInstruction(out);
}

}  // namespace phos::ptx
