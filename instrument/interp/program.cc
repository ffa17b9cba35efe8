// Decoder: ptx::Module -> Program (program.h).
#include "interp/program.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_set>

#include "interp/exec.h"
#include "ptx/device_runtime.h"
#include "interp/numeric.h"
#include "interp/memory.h"

#include <xxhash.h>

namespace phos::interp {

using ptx::Opcode;
using ptx::Space;
using ptx::Type;

namespace {

constexpr size_t kOperandPadding = 64;  // more than any handler's fixed operand count

// Why a call of an external function cannot run, naming what it is for
// where the name says (docs/instrument.md lists what stays unsupported).
std::string ExternalCallRefusal(const std::string& name) {
  if (name.find("cudaCDP") != std::string::npos || name.rfind("cudaLaunchDevice", 0) == 0 ||
      name.rfind("cudaGetParameterBuffer", 0) == 0 || name.rfind("cudaDeviceSynchronize", 0) == 0) {
    return "dynamic parallelism (a device-side launch through " + name + ") is not supported";
  }
  return "call to external function " + name + " (no body in this module)";
}

// The external functions the interpreter implements itself (null: none):
// CUDA's device-side assert (the kernel fails with cudaErrorAssert), printf,
// the device heap's functions (ops_heap.cc) and cudaGraphSetConditional
// (ptx/device_runtime.h names them).
ExecFn BuiltinExternal(const std::string& name) {
  if (name == "__assertfail") return &ExecAssertFail;
  if (name == "vprintf") return &ExecVprintf;
  if (name == "malloc") return &ExecDeviceMalloc;
  if (ptx::IsAlignedDeviceMalloc(name)) return &ExecDeviceAlignedMalloc;
  if (name == "free") return &ExecDeviceFree;
  if (ptx::IsGraphConditionalFunction(name)) return &ExecGraphSetConditional;
  return nullptr;
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return a <= 1 ? v : (v + a - 1) / a * a; }

// Bytes of one declared variable (vector and array dims included); arrays
// declared [] count their initializer elements (or 0).
uint64_t VarBytes(const ptx::VarDecl& v) {
  uint64_t elem = static_cast<uint64_t>(TypeBytes(v.type)) * v.vec;
  uint64_t n = 1;
  for (int64_t d : v.dims) {
    if (d < 0) {
      d = (v.init && v.init->kind == ptx::Operand::Kind::kVector) ? static_cast<int64_t>(v.init->elems.size()) : 0;
    }
    n *= static_cast<uint64_t>(d);
  }
  return elem * n;
}
uint64_t VarAlign(const ptx::VarDecl& v) {
  if (v.align) return *v.align;
  uint64_t a = static_cast<uint64_t>(TypeBytes(v.type)) * v.vec;
  return a ? a : 1;
}
bool IsDynamicShared(const ptx::VarDecl& v) {
  return !v.dims.empty() && v.dims[0] < 0 && !v.init;
}
bool IsInteger32(Type t) { return t == Type::kU32 || t == Type::kS32; }
bool IsSharedSpace(Space s) { return s == Space::kShared || s == Space::kSharedCta || s == Space::kSharedCluster; }

struct SregName { const char* name; SregId id; };
constexpr SregName kSregs[] = {
  {"%tid.x", kTidX}, {"%tid.y", kTidY}, {"%tid.z", kTidZ},
  {"%ntid.x", kNtidX}, {"%ntid.y", kNtidY}, {"%ntid.z", kNtidZ},
  {"%ctaid.x", kCtaidX}, {"%ctaid.y", kCtaidY}, {"%ctaid.z", kCtaidZ},
  {"%nctaid.x", kNctaidX}, {"%nctaid.y", kNctaidY}, {"%nctaid.z", kNctaidZ},
  {"%laneid", kLaneid}, {"%warpid", kWarpid}, {"%nwarpid", kNwarpid},
  {"%smid", kSmid}, {"%nsmid", kNsmid}, {"%gridid", kGridid},
  {"%clock", kClock}, {"%clock_hi", kClockHi}, {"%clock64", kClock64},
  {"%globaltimer", kGlobaltimer}, {"%globaltimer_lo", kGlobaltimerLo}, {"%globaltimer_hi", kGlobaltimerHi},
  {"%lanemask_eq", kLanemaskEq}, {"%lanemask_lt", kLanemaskLt}, {"%lanemask_le", kLanemaskLe},
  {"%lanemask_gt", kLanemaskGt}, {"%lanemask_ge", kLanemaskGe},
  {"%dynamic_smem_size", kDynamicSmemSize}, {"%total_smem_size", kTotalSmemSize}, {"WARP_SZ", kWarpSz},
};

}  // namespace

class ProgramBuilder {
 public:
  ProgramBuilder(const ptx::Module& m, Program* p, const StorageAllocator* storage)
      : m_(m), p_(p), storage_(storage) {}

  Status Run() {
    // Function indices first: calls may be forward references, and module
    // variables' initializers may hold function addresses.
    for (const auto& item : m_.items) {
      if (const auto* f = std::get_if<ptx::Function>(&item)) {
        auto it = p_->function_index_.find(f->name);
        if (it != p_->function_index_.end()) {
          if (f->has_body) fns_[it->second] = f;  // a prototype then its definition
          continue;
        }
        p_->function_index_[f->name] = static_cast<int>(p_->functions_.size());
        p_->functions_.emplace_back();
        fns_.push_back(f);
      }
    }
    std::string names;
    for (const ptx::Function* f : fns_) names += f->name + '\n';
    p_->code_tag_ = XXH64(names.data(), names.size(), 0) & 0xFFFFFF;
    PHOS_RETURN_IF_ERROR(LayoutModuleVars());
    LayoutShared();
    SizeKernelShared();
    for (size_t i = 0; i < fns_.size(); ++i) {
      PHOS_RETURN_IF_ERROR(DecodeFunction(*fns_[i], &p_->functions_[i]));
      if (p_->functions_[i].is_entry) FindRegistersReadUnset(&p_->functions_[i]);
    }
    return Status::Ok();
  }

 private:
  struct Sym {
    enum Kind { kReg, kParam, kLocal, kShared } kind;
    uint64_t value;
    bool pred = false;  // kReg: declared .pred
  };

  Status LayoutModuleVars() {
    // .const first (a contiguous range, for isspacep.const), then .global.
    uint64_t size = 0;
    std::vector<std::pair<const ptx::VarDecl*, uint64_t>> placed;
    for (Space want : {Space::kConst, Space::kGlobal}) {
      for (const auto& item : m_.items) {
        const auto* v = std::get_if<ptx::VarDecl>(&item);
        if (!v || v->space != want) continue;
        size = AlignUp(size, std::max<uint64_t>(VarAlign(*v), 1));
        placed.emplace_back(v, size);
        size += VarBytes(*v);
      }
      if (want == Space::kConst) const_bytes_ = size;
    }
    const uint64_t alloc = AlignUp(size, 256) + 256;
    uint8_t* raw = nullptr;
    if (storage_ != nullptr && storage_->allocate && size > 0) {
      PHOS_RETURN_IF_ERROR(storage_->allocate(alloc, &raw));
      p_->external_storage_ = raw;
      p_->release_storage_ = storage_->release;
    } else {
      p_->storage_.reset(new uint8_t[alloc]);
      raw = p_->storage_.get();
    }
    std::memset(raw, 0, alloc);
    uint64_t base = AlignUp(reinterpret_cast<uint64_t>(raw), 256);
    p_->storage_base_ = base;
    p_->storage_size_ = size;
    p_->const_begin_ = base;
    p_->const_end_ = base + const_bytes_;
    for (auto& [v, off] : placed) p_->vars_[v->name] = {base + off, VarBytes(*v)};
    for (auto& [v, off] : placed) {
      if (!v->init) continue;
      PHOS_RETURN_IF_ERROR(WriteInit(*v, reinterpret_cast<uint8_t*>(base + off)));
    }
    return Status::Ok();
  }

  Status WriteInit(const ptx::VarDecl& v, uint8_t* dst) {
    const int eb = TypeBytes(v.type);
    const uint64_t total = VarBytes(v);
    std::vector<const ptx::Operand*> elems;
    // Flatten nested {..} initializers in order.
    std::function<void(const ptx::Operand&)> flatten = [&](const ptx::Operand& o) {
      if (o.kind == ptx::Operand::Kind::kVector) {
        for (const auto& e : o.elems) flatten(e);
      } else {
        elems.push_back(&o);
      }
    };
    flatten(*v.init);
    uint64_t off = 0;
    for (const ptx::Operand* o : elems) {
      if (off + eb > total) break;
      uint64_t bits = 0;
      switch (o->kind) {
        case ptx::Operand::Kind::kImmInt:
          bits = static_cast<uint64_t>(o->value());
          if (v.type == Type::kF32) bits = F32Bits(static_cast<float>(o->value()));
          if (v.type == Type::kF64) bits = F64Bits(static_cast<double>(o->value()));
          break;
        case ptx::Operand::Kind::kImmF32:
          bits = v.type == Type::kF64 ? F64Bits(AsF32(o->bits)) : o->bits;
          break;
        case ptx::Operand::Kind::kImmF64:
          bits = v.type == Type::kF32 ? F32Bits(static_cast<float>(AsF64(o->bits))) : o->bits;
          break;
        case ptx::Operand::Kind::kSymbol: {
          if (auto fi = p_->function_index_.find(o->name); fi != p_->function_index_.end()) {
            bits = p_->FunctionAddress(fi->second) + static_cast<uint64_t>(o->offset);  // a vtable, a table of functions
            p_->address_taken_.insert(fi->second);
            break;
          }
          auto it = p_->vars_.find(o->name);
          if (it == p_->vars_.end()) {
            return Status::NotSupported("ptx interp: initializer of " + v.name + " names " + o->name +
                                        ", which is not a module .global/.const variable");
          }
          bits = it->second.addr + static_cast<uint64_t>(o->offset);
          break;
        }
        default:
          return Status::NotSupported("ptx interp: unsupported initializer in " + v.name);
      }
      std::memcpy(dst + off, &bits, static_cast<size_t>(eb));
      off += static_cast<uint64_t>(eb);
    }
    return Status::Ok();
  }

  // Static shared memory: module-level variables, then every function's
  // .shared declarations; one layout for the whole program. Dynamic
  // (`.extern .shared x[]`) variables all start at the end of it.
  void LayoutShared() {
    uint64_t size = 0;
    auto place = [&](const ptx::VarDecl& v) {
      if (!IsSharedSpace(v.space) || IsDynamicShared(v)) return;
      size = AlignUp(size, VarAlign(v));
      shared_off_[&v] = size;
      size += VarBytes(v);
    };
    for (const auto& item : m_.items) {
      if (const auto* v = std::get_if<ptx::VarDecl>(&item)) place(*v);
    }
    for (const ptx::Function* f : fns_) {
      for (const auto& st : f->body) {
        if (const auto* v = std::get_if<ptx::VarDecl>(&st)) place(*v);
      }
    }
    dyn_shared_ = AlignUp(size, 16);
    p_->shared_size_ = static_cast<uint32_t>(dyn_shared_);
    for (const auto& item : m_.items) {
      if (const auto* v = std::get_if<ptx::VarDecl>(&item); v && IsSharedSpace(v->space)) {
        module_shared_[v->name] = IsDynamicShared(*v) ? dyn_shared_ : shared_off_[v];
      }
    }
  }

  // Every symbol name an operand mentions (callees, variables, address
  // bases), nested operands included.
  static void NamesIn(const ptx::Operand& o, std::vector<const std::string*>* out) {
    if (o.kind == ptx::Operand::Kind::kSymbol || (o.kind == ptx::Operand::Kind::kAddress && !o.base_is_reg)) {
      if (!o.name.empty()) out->push_back(&o.name);
    }
    for (const ptx::Operand& e : o.elems) NamesIn(e, out);
  }

  // Program::kernel_shared_: per entry, the .shared bytes of what it can
  // reach (its body, the functions it calls, the module-level variables
  // they name), laid out in that order with each variable's alignment. The
  // interpreter still gives every block the program-wide layout; this is
  // what the kernel's attributes report (a module of many kernels must not
  // make each of them look too big to launch).
  void SizeKernelShared() {
    std::unordered_map<std::string, const ptx::VarDecl*> module_shared;
    for (const auto& item : m_.items) {
      if (const auto* v = std::get_if<ptx::VarDecl>(&item); v && IsSharedSpace(v->space) && !IsDynamicShared(*v))
        module_shared[v->name] = v;
    }
    for (const ptx::Function* entry : fns_) {
      if (!entry->is_entry) continue;
      std::vector<const ptx::Function*> todo = {entry};
      std::unordered_set<const ptx::Function*> seen = {entry};
      std::unordered_set<const ptx::VarDecl*> counted;
      uint64_t size = 0;
      const auto add = [&](const ptx::VarDecl& v) {
        if (!counted.insert(&v).second) return;
        size = AlignUp(size, VarAlign(v)) + VarBytes(v);
      };
      while (!todo.empty()) {
        const ptx::Function* f = todo.back();
        todo.pop_back();
        for (const auto& st : f->body) {
          if (const auto* v = std::get_if<ptx::VarDecl>(&st)) {
            if (IsSharedSpace(v->space) && !IsDynamicShared(*v)) add(*v);
            continue;
          }
          const auto* in = std::get_if<ptx::Instruction>(&st);
          if (in == nullptr) continue;
          std::vector<const std::string*> names;
          for (const ptx::Operand& o : in->operands) NamesIn(o, &names);
          for (const std::string* n : names) {
            if (auto v = module_shared.find(*n); v != module_shared.end()) add(*v->second);
            if (auto fi = p_->function_index_.find(*n); fi != p_->function_index_.end()) {
              const ptx::Function* callee = fns_[static_cast<size_t>(fi->second)];
              if (seen.insert(callee).second) todo.push_back(callee);
            }
          }
        }
      }
      p_->kernel_shared_[entry->name] = static_cast<uint32_t>(std::min<uint64_t>(size, p_->shared_size_));
    }
  }

  Status DecodeFunction(const ptx::Function& pf, Function* f) {
    f->name = pf.name;
    f->is_entry = pf.is_entry;
    f->has_body = pf.has_body;
    scopes_.assign(1, {});
    uint64_t psize = 0;
    auto add_param = [&](const ptx::VarDecl& v, std::vector<ParamSlot>* slots) {
      psize = AlignUp(psize, VarAlign(v));
      slots->push_back({static_cast<uint32_t>(psize), static_cast<uint32_t>(VarBytes(v))});
      scopes_.back()[v.name] = {Sym::kParam, psize};
      psize += VarBytes(v);
    };
    for (const auto& v : pf.returns) add_param(v, &f->returns);
    for (const auto& v : pf.params) add_param(v, &f->params);
    f->formal_bytes = static_cast<uint32_t>(psize);
    if (!pf.has_body) {
      f->param_size = static_cast<uint32_t>(psize);
      return Status::Ok();
    }
    // Labels -> index of the next op; `name: .branchtargets L0, L1, ...;`
    // lists (the parser gives a label, then the directive as raw text).
    labels_.clear();
    branch_lists_.clear();
    {
      uint32_t n = 0;
      const ptx::Label* last_label = nullptr;
      for (const auto& st : pf.body) {
        if (std::holds_alternative<ptx::Instruction>(st)) ++n;
        const auto* raw = std::get_if<ptx::RawStatement>(&st);
        if (raw != nullptr && last_label != nullptr) {
          std::vector<std::string> names;
          if (ParseBranchTargets(raw->text, &names)) branch_lists_[last_label->name] = std::move(names);
        }
        last_label = std::get_if<ptx::Label>(&st);
        if (last_label != nullptr) labels_[last_label->name] = n;
      }
    }
    uint32_t nregs = 0;
    uint64_t lsize = 0;
    int64_t line = -1;
    for (size_t si = 0; si < pf.body.size(); ++si) {
      const auto& st = pf.body[si];
      if (std::holds_alternative<ptx::BlockBegin>(st)) {
        scopes_.emplace_back();
      } else if (std::holds_alternative<ptx::BlockEnd>(st)) {
        if (scopes_.size() > 1) scopes_.pop_back();
      } else if (const auto* loc = std::get_if<ptx::Loc>(&st)) {
        line = loc->line;
      } else if (const auto* v = std::get_if<ptx::VarDecl>(&st)) {
        switch (v->space) {
          case Space::kReg:
            if (v->range) {
              for (uint32_t i = 0; i < *v->range; ++i) {
                scopes_.back()[v->name + std::to_string(i)] = {Sym::kReg, nregs++, v->type == Type::kPred};
              }
            } else {
              scopes_.back()[v->name] = {Sym::kReg, nregs++, v->type == Type::kPred};
            }
            break;
          case Space::kParam:
            psize = AlignUp(psize, VarAlign(*v));
            scopes_.back()[v->name] = {Sym::kParam, psize};
            psize += VarBytes(*v);
            break;
          case Space::kLocal:
            lsize = AlignUp(lsize, VarAlign(*v));
            scopes_.back()[v->name] = {Sym::kLocal, lsize};
            lsize += VarBytes(*v);
            break;
          case Space::kShared: case Space::kSharedCta: case Space::kSharedCluster:
            scopes_.back()[v->name] = {Sym::kShared, IsDynamicShared(*v) ? dyn_shared_ : shared_off_[v]};
            break;
          default:
            break;  // .global/.const inside a function: not emitted by nvcc
        }
      } else if (const auto* in = std::get_if<ptx::Instruction>(&st)) {
        DecodeInstruction(*in, f);
        f->op_stmt.push_back(static_cast<uint32_t>(si));
        f->op_line.push_back(line);
        f->op_text.push_back(in->FullOpcode());
      }
    }
    // Handlers read a fixed number of operands per opcode; PTX with fewer
    // (which ptxas would reject, but a module is untrusted input) must not
    // make them read past the vector: they read these kNone operands (0;
    // writes dropped) or the next op's, never freed memory.
    f->operands.resize(f->operands.size() + kOperandPadding);
    f->num_regs = nregs;
    f->param_size = static_cast<uint32_t>(AlignUp(psize, 8));
    f->has_callsite_params = psize > f->formal_bytes;
    f->local_size = static_cast<uint32_t>(AlignUp(lsize, 16));
    return Status::Ok();
  }

  const Sym* Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  // Resolves a register or symbol name (+offset) into *o. False: *why says.
  bool ResolveName(const std::string& name, int64_t offset, Operand* o, std::string* why) {
    o->imm = static_cast<uint64_t>(offset);
    if (name == "_") {
      o->kind = Operand::kSink;
      return true;
    }
    if (const Sym* s = Lookup(name)) {
      switch (s->kind) {
        case Sym::kReg: o->kind = Operand::kReg; o->reg = static_cast<uint32_t>(s->value); return true;
        case Sym::kParam: case Sym::kShared: o->kind = Operand::kImm; o->imm += s->value; return true;
        case Sym::kLocal: o->kind = Operand::kLocalSym; o->imm += s->value; return true;
      }
    }
    if (auto it = p_->vars_.find(name); it != p_->vars_.end()) {
      o->kind = Operand::kImm;
      o->imm += it->second.addr;
      return true;
    }
    if (auto it = module_shared_.find(name); it != module_shared_.end()) {
      o->kind = Operand::kImm;
      o->imm += it->second;
      return true;
    }
    for (const auto& s : kSregs) {
      if (name == s.name) {
        o->kind = Operand::kSreg;
        o->reg = s.id;
        return true;
      }
    }
    if (name.rfind("%envreg", 0) == 0 && name.size() > 7 && name.size() <= 9 &&
        name.find_first_not_of("0123456789", 7) == std::string::npos && std::stoi(name.substr(7)) < 32) {
      o->kind = Operand::kSreg;
      o->reg = kEnvreg0 + static_cast<uint32_t>(std::stoi(name.substr(7)));
      return true;
    }
    if (auto fi = p_->function_index_.find(name); fi != p_->function_index_.end()) {
      o->kind = Operand::kImm;  // mov.u64 %rd, func: a function pointer
      o->imm += p_->FunctionAddress(fi->second);
      p_->address_taken_.insert(fi->second);
      return true;
    }
    *why = "unknown name " + name;
    return false;
  }

  bool AddOperand(const ptx::Operand& po, Type imm_type, Function* f, Op* op, std::string* why) {
    using K = ptx::Operand::Kind;
    if (op->nshape >= sizeof(op->shape)) {
      *why = "too many operands";
      return false;
    }
    if (po.kind == K::kAddress && !po.elems.empty()) {
      // [handle, {coordinates}] of tex/tld4/suld/sust: the handle, then
      // each coordinate (ops_texture.cc reads them in that order).
      if (!po.base_is_reg || po.offset != 0) {
        *why = "a texture or surface named by a module-scope reference (only bindless handles are supported)";
        return false;
      }
      // The parser keeps `{x, y}` as one vector element after the handle.
      std::vector<const ptx::Operand*> coords;
      for (const auto& e : po.elems) {
        if (e.kind == K::kVector) {
          for (const auto& c : e.elems) coords.push_back(&c);
        } else {
          coords.push_back(&e);
        }
      }
      if (coords.size() > 8) {
        *why = "too many texture coordinates";
        return false;
      }
      op->shape[op->nshape++] = static_cast<uint8_t>(1 + coords.size());
      Operand h;
      if (!ResolveName(po.name, 0, &h, why)) return false;
      f->operands.push_back(h);
      for (const ptx::Operand* c : coords) {
        if (!AddScalar(*c, imm_type, f, why)) return false;
      }
      return true;
    }
    if (po.kind == K::kVector || po.kind == K::kPair || po.kind == K::kList) {
      op->shape[op->nshape++] = static_cast<uint8_t>(po.elems.size());
      for (const auto& e : po.elems) {
        if (!AddScalar(e, imm_type, f, why)) return false;
      }
      return true;
    }
    op->shape[op->nshape++] = 1;
    return AddScalar(po, imm_type, f, why);
  }

  bool AddScalar(const ptx::Operand& po, Type imm_type, Function* f, std::string* why) {
    using K = ptx::Operand::Kind;
    Operand o;
    switch (po.kind) {
      case K::kRegister:
        if (!ResolveName(po.name, 0, &o, why)) return false;
        o.neg = po.neg;
        break;
      case K::kImmInt:
        o.kind = Operand::kImm;
        o.imm = static_cast<uint64_t>(po.value());
        if (imm_type == Type::kF32) o.imm = F32Bits(static_cast<float>(po.value()));
        if (imm_type == Type::kF64) o.imm = F64Bits(static_cast<double>(po.value()));
        break;
      case K::kImmF32:
        o.kind = Operand::kImm;
        o.imm = imm_type == Type::kF64 ? F64Bits(AsF32(po.bits)) : po.bits;
        break;
      case K::kImmF64:
        o.kind = Operand::kImm;
        o.imm = imm_type == Type::kF32 ? F32Bits(static_cast<float>(AsF64(po.bits))) : po.bits;
        break;
      case K::kSymbol:
        if (!ResolveName(po.name, po.offset, &o, why)) return false;
        break;
      case K::kAddress:
        if (!po.elems.empty()) {
          *why = "texture/surface address operand";
          return false;
        }
        if (po.name.empty()) {
          o.kind = Operand::kImm;
          o.imm = static_cast<uint64_t>(po.offset);
        } else if (!ResolveName(po.name, po.offset, &o, why)) {
          return false;
        }
        break;
      default:
        *why = "unexpected operand kind";
        return false;
    }
    f->operands.push_back(o);
    return true;
  }

  void DecodeInstruction(const ptx::Instruction& in, Function* f) {
    Op op;
    const ptx::InstrInfo& d = in.info;
    op.opcode = d.op;
    op.type = d.types.size() > 0 ? d.types[0] : Type::kNone;
    op.type2 = d.types.size() > 1 ? d.types[1] : Type::kNone;
    op.space = d.space;
    op.rounding = d.rounding;
    op.cmp = d.cmp;
    op.bool_op = d.bool_op;
    op.atom_op = d.atom_op;
    op.mul_mode = d.mul_mode;
    op.shfl = d.shfl;
    op.vote = d.vote;
    op.sem = d.sem;
    op.vec = d.vec;
    op.sat = d.sat;
    op.ftz = d.ftz;
    op.approx = d.approx;
    op.cc = d.cc;
    op.to = d.to;
    op.uni = d.uni;
    op.first = static_cast<uint32_t>(f->operands.size());
    std::string why;
    if (!in.guard.empty()) {
      Operand g;
      if (!ResolveName(in.guard, 0, &g, &why) || g.kind != Operand::kReg) {
        if (why.empty()) why = "guard " + in.guard + " is not a register";
      } else {
        op.guard = static_cast<int32_t>(g.reg);
        op.guard_neg = in.guard_neg;
      }
    }
    if (why.empty()) op.fn = Bind(in, &op, &why);
    if (why.empty() && op.fn != &ExecCall) {
      const Type imm_type = (d.op == Opcode::kCvt || d.op == Opcode::kSet || d.op == Opcode::kSlct) ? op.type2 : op.type;
      for (const auto& po : in.operands) {
        if (po.kind == ptx::Operand::Kind::kLabel && op.fn == &ExecBrx) {
          if (!BranchList(po.name, f, &op.target, &why)) break;
          continue;
        }
        if (po.kind == ptx::Operand::Kind::kLabel) {
          auto it = labels_.find(po.name);
          if (it == labels_.end()) {
            why = "unknown label " + po.name;
            break;
          }
          op.target = it->second;
          continue;
        }
        if (!AddOperand(po, imm_type, f, &op, &why)) break;
      }
    } else if (why.empty()) {
      DecodeCall(in, f, &op, &why);
    }
    op.count = static_cast<uint8_t>(std::min<size_t>(f->operands.size() - op.first, 255));
    if (!why.empty()) {
      op.fn = &ExecUnsupported;
      op.guard = -1;
    } else {
      op.warp_fn = BindWarp(op, f->operands);
    }
    f->unsupported.push_back(why);
    f->ops.push_back(op);
  }

  void DecodeCall(const ptx::Instruction& in, Function* f, Op* op, std::string* why) {
    using K = ptx::Operand::Kind;
    const ptx::Operand* rets = nullptr;
    const ptx::Operand* callee = nullptr;
    const ptx::Operand* args = nullptr;
    for (const auto& o : in.operands) {
      if (o.kind == K::kList && !callee) rets = &o;
      else if ((o.kind == K::kSymbol || o.kind == K::kRegister) && !callee) callee = &o;
      else if (o.kind == K::kList && callee && !args) args = &o;
    }
    if (callee && callee->kind == K::kRegister) {
      // call (rets), %reg, (args), prototype: through a function pointer.
      // The pointer register follows the returns and arguments.
      op->fn = &ExecCallIndirect;
      f->calls_indirect = true;
      op->nshape = 3;
      op->shape[0] = static_cast<uint8_t>(rets ? rets->elems.size() : 0);
      op->shape[1] = static_cast<uint8_t>(args ? args->elems.size() : 0);
      op->shape[2] = 1;
      for (const ptx::Operand* list : {rets, args}) {
        if (!list) continue;
        for (const auto& e : list->elems) {
          if (!AddScalar(e, Type::kNone, f, why)) return;
        }
      }
      AddScalar(*callee, Type::kNone, f, why);
      return;
    }
    if (!callee || callee->kind != K::kSymbol) {
      *why = "call without a callee";
      return;
    }
    auto it = p_->function_index_.find(callee->name);
    if (it == p_->function_index_.end()) {
      *why = "call to unknown function " + callee->name;
      return;
    }
    const bool external = !fns_[it->second]->has_body;
    if (external) {
      op->fn = BuiltinExternal(callee->name);
      if (op->fn == nullptr) {
        *why = ExternalCallRefusal(callee->name);
        return;
      }
    }
    op->target = static_cast<uint32_t>(it->second);
    if (!external && std::find(f->callees.begin(), f->callees.end(), op->target) == f->callees.end()) {
      f->callees.push_back(op->target);
    }
    op->nshape = 2;
    op->shape[0] = static_cast<uint8_t>(rets ? rets->elems.size() : 0);
    op->shape[1] = static_cast<uint8_t>(args ? args->elems.size() : 0);
    for (const ptx::Operand* list : {rets, args}) {
      if (!list) continue;
      for (const auto& e : list->elems) {
        // Arguments are call-site .param variables (or, rarely, registers
        // and immediates): keep them as operands; ExecCall copies.
        if (!AddScalar(e, Type::kNone, f, why)) return;
      }
    }
  }

  // cp.async (ops_mem.cc: copies at issue) and its group commit/waits.
  // vadd/vsub/vabsdiff/vmin/vmax/vshl/vshr (ops_video.cc): 32-bit types,
  // whole-word operands, an optional secondary add/min/max.
  ExecFn BindVideo(const ptx::Instruction& in, Op* op, std::string* why) {
    const std::vector<Type>& t = in.info.types;
    const bool shift = op->opcode == Opcode::kVshl || op->opcode == Opcode::kVshr;
    const auto word = [](Type x) { return x == Type::kU32 || x == Type::kS32; };
    if (t.size() != 3 || !word(t[0]) || !word(t[1]) || !word(t[2]) || (shift && t[2] != Type::kU32)) {
      *why = "video instruction types (supported: .dtype.atype.btype of .u32/.s32; shifts: .btype .u32)";
      return nullptr;
    }
    op->type = t[0];
    op->type2 = t[1];
    op->type3 = t[2];
    uint8_t sub = in.HasMod("add") ? kVideoOp2Add : in.HasMod("min") ? kVideoOp2Min : in.HasMod("max") ? kVideoOp2Max : 0;
    if (shift) {
      if (in.HasMod("clamp") == in.HasMod("wrap")) {
        *why = "video shift without exactly one of .clamp/.wrap";
        return nullptr;
      }
      if (in.HasMod("wrap")) sub |= kVideoWrap;
    }
    if (in.operands.size() != (sub & kVideoOp2Mask ? 4u : 3u)) {
      *why = "video instruction form (supported: d, a, b and d, a, b, c with .add/.min/.max; not the data-merge form)";
      return nullptr;
    }
    op->sub = sub;
    return &ExecVideo;
  }

  ExecFn BindCp(const ptx::Instruction& in, Op* op, std::string* why) {
    if (!in.HasMod("async")) {
      *why = "unsupported instruction";
      return nullptr;
    }
    if (in.HasMod("commit_group") || in.HasMod("wait_group") || in.HasMod("wait_all")) return &ExecNop;
    if (in.HasMod("tensor") || in.HasMod("reduce") || in.HasMod("multicast::cluster")) {
      *why = "cp.async.bulk.tensor/.reduce/.multicast (tensor maps and clusters are not supported)";
      return nullptr;
    }
    if (in.HasMod("mbarrier") && in.HasMod("arrive")) {  // cp.async.mbarrier.arrive{.noinc}
      op->target = in.HasMod("noinc") ? kMbarFlagNoInc : 0;
      return &ExecCpAsyncMbarrierArrive;
    }
    if (in.HasMod("bulk")) {
      if (in.HasMod("prefetch")) return &ExecNop;
      // The first space named is the destination's.
      size_t global_at = in.mods.size(), shared_at = in.mods.size();
      for (size_t i = 0; i < in.mods.size(); ++i) {
        if (in.mods[i] == "global" && global_at == in.mods.size()) global_at = i;
        if (in.mods[i].rfind("shared", 0) == 0 && shared_at == in.mods.size()) shared_at = i;
      }
      const bool to_shared = shared_at < global_at;
      if (global_at == in.mods.size() || shared_at == in.mods.size() ||
          (to_shared && !in.HasMod("mbarrier::complete_tx::bytes")) || (!to_shared && !in.HasMod("bulk_group"))) {
        *why = "cp.async.bulk form (supported: global to shared with mbarrier::complete_tx::bytes, shared to "
               "global with bulk_group)";
        return nullptr;
      }
      op->target = to_shared ? kBulkToShared : 0;
      return &ExecCpAsyncBulk;
    }
    if (!in.HasMod("shared") && !in.HasMod("shared::cta")) {
      *why = "cp.async to a space other than shared";
      return nullptr;
    }
    // Operands: [dst], [src], cp-size, then src-size or ignore-src (a
    // predicate), then a cache policy when .L2::cache_hint is given.
    const size_t hint = in.HasMod("L2::cache_hint") ? 1 : 0;
    const size_t extra = in.operands.size() >= 3 + hint ? in.operands.size() - 3 - hint : 99;
    if (extra > 1) {
      *why = "cp.async operands";
      return nullptr;
    }
    if (extra == 1) {
      const ptx::Operand& o = in.operands[3];
      const Sym* s = o.kind == ptx::Operand::Kind::kRegister ? Lookup(o.name) : nullptr;
      op->sub = s != nullptr && s->pred ? kCpAsyncIgnoreSrc : kCpAsyncSrcSize;
    }
    return &ExecCpAsync;
  }

  // CTA barriers (ops_barrier.cc): bar/barrier .sync, .arrive and .red
  // (popc, and, or), with or without a thread count.
  ExecFn BindBarrier(const ptx::Instruction& in, Op* op, std::string* why) {
    const size_t n = in.operands.size();
    if (in.HasMod("red")) {
      op->sub = kBarRed;
      op->target = in.HasMod("popc") ? kBarRedPopc : in.HasMod("and") ? kBarRedAnd : in.HasMod("or") ? kBarRedOr : 0;
      if (op->target == 0 || (n != 3 && n != 4)) {
        *why = "bar.red form (popc.u32, and.pred or or.pred; d, a{, b}, {!}c)";
        return nullptr;
      }
      if (n == 4) op->target |= kBarHasCount;
      return &ExecBarrier;
    }
    if (in.HasMod("arrive")) {
      op->sub = kBarArrive;
      if (n != 2) {
        *why = "bar.arrive needs a barrier and a thread count";
        return nullptr;
      }
      op->target = kBarHasCount;
      return &ExecBarArrive;
    }
    if (n != 1 && n != 2) {
      *why = "bar.sync form (a{, b})";
      return nullptr;
    }
    op->sub = kBarSync;
    op->target = n == 2 ? kBarHasCount : 0;
    return &ExecBarrier;
  }

  // mma.sync (ops_matrix.cc): the shapes and types with the ISA's m16n8 and
  // m8n8k4 .f64 layouts.
  ExecFn BindMma(const ptx::Instruction& in, Op* op, std::string* why) {
    WmmaShape shape;
    in.MatrixShape(&shape.m, &shape.n, &shape.k);  // an absent shape fails the check below
    const ptx::InstrInfo& d = in.info;
    if (!in.HasMod("sync") || d.types.size() != 4 || !in.HasMod("row") || !in.HasMod("col")) {
      *why = "mma form (supported: mma.sync.aligned.<shape>.row.col.dtype.atype.btype.ctype)";
      return nullptr;
    }
    op->type = d.types[0];
    op->type3 = d.types[1];
    op->type2 = d.types[3];
    const Type a = d.types[1];
    const bool half = a == Type::kF16 || a == Type::kBF16;
    const bool int8 = a == Type::kS8 || a == Type::kU8;
    const bool fp8 = a == Type::kE4M3 || a == Type::kE5M2;
    const bool ok =
        d.types[1] == d.types[2] &&
        ((half && shape.m == 16 && shape.n == 8 && (shape.k == 16 || shape.k == 8) &&
          (op->type == Type::kF32 || (a == Type::kF16 && op->type == Type::kF16))) ||
         (a == Type::kTF32 && shape.m == 16 && shape.n == 8 && (shape.k == 8 || shape.k == 4) && op->type == Type::kF32) ||
         (int8 && shape.m == 16 && shape.n == 8 && (shape.k == 32 || shape.k == 16) && op->type == Type::kS32) ||
         (fp8 && shape.m == 16 && shape.n == 8 && shape.k == 32 &&
          (op->type == Type::kF32 || op->type == Type::kF16) && op->type == d.types[3]) ||
         (a == Type::kF64 && shape.m == 8 && shape.n == 8 && shape.k == 4 && op->type == Type::kF64));
    if (!ok) {
      *why = "mma shape/type (supported: m16n8k16/k8 f16/bf16, m16n8k8/k4 tf32, m16n8k32/k16 s8/u8, "
             "m16n8k32 e4m3/e5m2, m8n8k4 f64)";
      return nullptr;
    }
    shape.satfinite = in.HasMod("satfinite");
    op->target = shape.Pack();
    return &ExecCollective;
  }

  // mbarrier.* (ops_mbarrier.cc).
  ExecFn BindMbarrier(const ptx::Instruction& in, Op* op, std::string* why) {
    static const struct { const char* mod; uint8_t sub; } kOps[] = {
        {"init", kMbarInit}, {"inval", kMbarInval}, {"arrive_drop", kMbarArriveDrop}, {"arrive", kMbarArrive},
        {"complete_tx", kMbarCompleteTx}, {"test_wait", kMbarTestWait}, {"try_wait", kMbarTryWait},
        {"pending_count", kMbarPendingCount}, {"expect_tx", kMbarExpectTx}};
    for (const auto& o : kOps) {
      if (in.HasMod(o.mod)) {
        op->sub = o.sub;
        break;
      }
    }
    if (op->sub == 0) {
      *why = "unsupported mbarrier operation";
      return nullptr;
    }
    if ((op->sub == kMbarArrive || op->sub == kMbarArriveDrop) && in.HasMod("expect_tx")) {
      op->target |= kMbarFlagExpectTx;
    }
    if (in.HasMod("parity")) op->target |= kMbarFlagParity;
    return &ExecMbarrier;
  }

  // wmma.load / wmma.store / wmma.mma (ops_matrix.cc).
  ExecFn BindWmma(const ptx::Instruction& in, Op* op, std::string* why) {
    WmmaShape shape;
    const bool have_shape = in.MatrixShape(&shape.m, &shape.n, &shape.k);
    const bool known = (shape.m == 16 && shape.n == 16 && (shape.k == 16 || shape.k == 8)) ||
                       (shape.m == 32 && shape.n == 8 && shape.k == 16) ||
                       (shape.m == 8 && shape.n == 32 && shape.k == 16) || (shape.m == 8 && shape.n == 8 && shape.k == 4);
    if (!have_shape || !known) {
      *why = "wmma shape (supported: m16n16k16, m32n8k16, m8n32k16, m16n16k8 .tf32, m8n8k4 .f64)";
      return nullptr;
    }
    const ptx::InstrInfo& d = in.info;
    auto element_ok = [](Type t) {
      return t == Type::kF16 || t == Type::kBF16 || t == Type::kS8 || t == Type::kU8 || t == Type::kTF32 ||
             t == Type::kF32 || t == Type::kS32 || t == Type::kF64;
    };
    shape.col = in.HasMod("col");
    shape.satfinite = in.HasMod("satfinite");
    if (in.HasMod("load") || in.HasMod("store")) {
      shape.matrix = in.HasMod("a") ? kWmmaA : in.HasMod("b") ? kWmmaB : kWmmaC;
      op->sub = in.HasMod("load") ? kWmmaLoad : kWmmaStore;
      if (!element_ok(op->type)) {
        *why = "wmma element type (sub-byte .s4/.u4/.b1 are not supported)";
        return nullptr;
      }
      op->target = shape.Pack();
      return in.HasMod("load") ? &ExecWmmaLoad : &ExecWmmaStore;
    }
    if (!in.HasMod("mma") || (d.types.size() != 2 && d.types.size() != 4)) {
      *why = "unsupported wmma form";
      return nullptr;
    }
    // .dtype.ctype (A and B .f16) or .dtype.atype.btype.ctype.
    op->type = d.types[0];
    op->type3 = d.types.size() == 2 ? Type::kF16 : d.types[1];
    op->type2 = d.types.back();
    if (!element_ok(op->type) || !element_ok(op->type2) || !element_ok(op->type3) ||
        (d.types.size() == 4 && d.types[1] != d.types[2])) {
      *why = "wmma.mma types (sub-byte and mixed A/B types are not supported)";
      return nullptr;
    }
    op->sub = kWmmaMma;
    op->target = shape.Pack();
    return &ExecCollective;
  }

  // The geometry modifier of a texture or surface instruction (0: none the
  // interpreter runs; *why names it).
  static uint8_t Geometry(const ptx::Instruction& in, std::string* why) {
    static const std::pair<const char*, uint8_t> kGeoms[] = {
        {"1d", kGeom1d},   {"2d", kGeom2d},   {"3d", kGeom3d},         {"a1d", kGeomA1d},
        {"a2d", kGeomA2d}, {"cube", kGeomCube}, {"acube", kGeomACube}};
    for (const auto& [name, g] : kGeoms) {
      if (in.HasMod(name)) return g;
    }
    *why = "texture/surface geometry (supported: .1d .2d .3d .a1d .a2d, tex.cube .acube; not multisample)";
    return 0;
  }

  // tex / tld4 (ops_texture.cc).
  ExecFn BindTexture(const ptx::Instruction& in, Op* op, std::string* why) {
    op->sub = Geometry(in, why);
    if (op->sub == 0) return nullptr;
    const bool gather = op->opcode == Opcode::kTld4;
    const bool cube = op->sub == kGeomCube || op->sub == kGeomACube;
    if (cube && (gather || op->type2 != Type::kF32)) {
      *why = "cube-map fetch form (supported: tex.cube/.acube with .f32 directions)";
      return nullptr;
    }
    if (gather) {
      static const char* kComp[] = {"r", "g", "b", "a"};
      op->target = 4;
      for (uint32_t i = 0; i < 4; ++i) {
        if (in.HasMod(kComp[i])) op->target = i;
      }
      if (op->target == 4 || (op->sub != kGeom2d && op->sub != kGeomA2d)) {
        *why = "tld4 form (supported: tld4.{r,g,b,a}.2d/.a2d)";
        return nullptr;
      }
    }
    const bool dtype_ok = op->type == Type::kF32 || op->type == Type::kS32 || op->type == Type::kU32;
    const bool ctype_ok = op->type2 == Type::kF32 || (!gather && op->type2 == Type::kS32);
    if (op->vec != 4 || !dtype_ok || !ctype_ok) {
      *why = "texture fetch types (supported: .v4 of .f32/.s32/.u32 from .f32 or .s32 coordinates)";
      return nullptr;
    }
    // tex.level has a level of detail, tex.grad two gradients: with no
    // mipmaps both read level 0. More operands are an offset or a depth
    // compare, which the interpreter does not model.
    const size_t expected = 2 + (in.HasMod("level") ? 1 : 0) + (in.HasMod("grad") ? 2 : 0);
    if (in.operands.size() != expected || in.operands[0].kind != ptx::Operand::Kind::kVector ||
        in.operands[0].elems.size() != 4) {
      *why = "texture fetch with an offset, a depth compare or a predicate result";
      return nullptr;
    }
    if (!gather) op->target = (in.HasMod("level") ? kTexLevel : 0) | (in.HasMod("grad") ? kTexGrad : 0);
    return gather ? &ExecTld4 : &ExecTex;
  }

  // suld.b / sust.b (ops_texture.cc).
  ExecFn BindSurface(const ptx::Instruction& in, Op* op, std::string* why) {
    if (!in.HasMod("b")) {
      *why = "formatted surface access (sust.p); only raw .b accesses are supported";
      return nullptr;
    }
    op->sub = Geometry(in, why);
    if (op->sub == 0) return nullptr;
    if (op->sub == kGeomCube || op->sub == kGeomACube) {
      *why = "surface geometry .cube (surfCubemap* compile to .a2d with the face as the layer)";
      return nullptr;
    }
    op->target = in.HasMod("zero") ? kSurfaceZero : in.HasMod("clamp") ? kSurfaceClamp : kSurfaceTrap;
    if (op->type != Type::kB8 && op->type != Type::kB16 && op->type != Type::kB32 && op->type != Type::kB64) {
      *why = "surface access type (supported: .b8 .b16 .b32 .b64)";
      return nullptr;
    }
    return op->opcode == Opcode::kSuld ? &ExecSuld : &ExecSust;
  }

  // txq / suq (ops_texture.cc).
  ExecFn BindTextureQuery(const ptx::Instruction& in, Op* op, std::string* why) {
    const bool surface = in.opcode == "suq";
    op->target = surface ? kQuerySurface : 0;
    static const std::pair<const char*, uint8_t> kQueries[] = {
        {"width", kQueryWidth},           {"height", kQueryHeight},
        {"depth", kQueryDepth},           {"array_size", kQueryArraySize},
        {"num_mipmap_levels", kQueryMipLevels}, {"normalized_coords", kQueryNormalized},
        {"filter_mode", kQueryFilter},    {"addr_mode_0", kQueryAddr0},
        {"addr_mode_1", kQueryAddr1},     {"addr_mode_2", kQueryAddr2}};
    for (const auto& [name, q] : kQueries) {
      if (in.HasMod(name)) op->sub = q;
    }
    if (op->sub == 0 || in.HasMod("level") || (surface && op->sub > kQueryArraySize) || in.operands.size() != 2) {
      *why = std::string(surface ? "suq" : "txq") + " query (supported: width, height, depth, array_size" +
             (surface ? ")" : ", num_mipmap_levels, normalized_coords, filter_mode, addr_mode_0..2)");
      return nullptr;
    }
    return &ExecTextureQuery;
  }

  // Picks the handler for an instruction and decodes opcode-specific modes.
  ExecFn Bind(const ptx::Instruction& in, Op* op, std::string* why) {
    const Type t = op->type;
    const bool flt = IsFloat(t) || t == Type::kF16x2 || t == Type::kBF16x2;
    auto unsupported_type = [&]() -> ExecFn {
      *why = "unsupported type";
      return nullptr;
    };
    switch (op->opcode) {
      case Opcode::kAdd: case Opcode::kSub: case Opcode::kMul: case Opcode::kMad: case Opcode::kDiv:
      case Opcode::kAbs: case Opcode::kNeg: case Opcode::kMin: case Opcode::kMax:
        if (!flt) return &ExecIntArith;
        op->sub = static_cast<uint8_t>((in.HasMod("relu") ? kFloatRelu : 0) | (in.HasMod("NaN") ? kFloatNaN : 0));
        return &ExecFloatArith;
      case Opcode::kFma: case Opcode::kRcp: case Opcode::kSqrt: case Opcode::kRsqrt: case Opcode::kEx2:
      case Opcode::kLg2: case Opcode::kSin: case Opcode::kCos: case Opcode::kTanh: case Opcode::kCopysign:
        if (!flt) return unsupported_type();
        op->sub = in.HasMod("relu") ? kFloatRelu : 0;
        return &ExecFloatArith;
      case Opcode::kShf:
        op->sub = static_cast<uint8_t>((in.HasMod("r") ? 1 : 0) | (in.HasMod("clamp") ? 2 : 0));
        return &ExecIntArith;
      case Opcode::kBfind:
        op->sub = in.HasMod("shiftamt") ? 1 : 0;
        return &ExecIntArith;
      case Opcode::kPrmt: {
        static const char* kModes[] = {"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"};
        for (int i = 0; i < 6; ++i) {
          if (in.HasMod(kModes[i])) op->sub = static_cast<uint8_t>(i + 1);
        }
        return &ExecIntArith;
      }
      case Opcode::kDp4a: case Opcode::kDp2a:
        if (!IsInteger32(op->type) || !IsInteger32(op->type2)) return unsupported_type();
        op->sub = in.HasMod("hi") ? 1 : 0;
        return &ExecIntArith;
      case Opcode::kAddc: case Opcode::kSubc: case Opcode::kMadc: case Opcode::kMul24: case Opcode::kMad24: case Opcode::kSad:
      case Opcode::kPopc: case Opcode::kClz: case Opcode::kBrev: case Opcode::kBfe: case Opcode::kBfi:
      case Opcode::kLop3: case Opcode::kShl: case Opcode::kShr: case Opcode::kAnd: case Opcode::kOr:
      case Opcode::kXor: case Opcode::kNot: case Opcode::kCnot: case Opcode::kRem:
        return &ExecIntArith;
      case Opcode::kCvt:
        op->sub = static_cast<uint8_t>((in.HasMod("relu") ? kCvtRelu : 0) | (in.HasMod("satfinite") ? kCvtSatFinite : 0));
        return &ExecCvt;
      case Opcode::kSetp: return &ExecSetp;
      case Opcode::kSet: return &ExecSet;
      case Opcode::kSelp: return &ExecSelp;
      case Opcode::kSlct: return &ExecSlct;
      case Opcode::kMov: return &ExecMov;
      case Opcode::kLd: case Opcode::kLdu: return &ExecLd;
      case Opcode::kSt: return &ExecSt;
      case Opcode::kCvta: return &ExecCvta;
      case Opcode::kIsspacep: return &ExecIsspacep;
      case Opcode::kPrefetch: case Opcode::kFence: case Opcode::kMembar: case Opcode::kNanosleep:
        return &ExecNop;
      case Opcode::kVadd: case Opcode::kVsub: case Opcode::kVabsdiff: case Opcode::kVmin: case Opcode::kVmax:
      case Opcode::kVshl: case Opcode::kVshr:
        return BindVideo(in, op, why);
      case Opcode::kGriddepcontrol:
        // Programmatic dependent launch (sm_90): .wait waits for the grids
        // this one depends on, .launch_dependents lets dependents start
        // early. The sim runs a stream's kernels one after another, each to
        // its end, so every prerequisite grid has finished (and its writes
        // are visible) before this one starts, and no dependent can start
        // early: both are no-ops here.
        if (!in.HasMod("wait") && !in.HasMod("launch_dependents")) {
          *why = "griddepcontrol form (supported: .wait, .launch_dependents)";
          return nullptr;
        }
        return &ExecNop;
      case Opcode::kCp: return BindCp(in, op, why);
      case Opcode::kWmma: return BindWmma(in, op, why);
      case Opcode::kMbarrier: return BindMbarrier(in, op, why);
      case Opcode::kMma: return BindMma(in, op, why);
      case Opcode::kLdmatrix: case Opcode::kStmatrix:
        if (!in.HasMod("m8n8") || !(in.HasMod("x1") || in.HasMod("x2") || in.HasMod("x4")) || !in.HasMod("b16")) {
          *why = "ldmatrix/stmatrix form (supported: .m8n8.x1/.x2/.x4{.trans}.b16)";
          return nullptr;
        }
        op->target = in.HasMod("trans") ? kLdmatrixTrans : 0;
        return &ExecCollective;
      case Opcode::kAtom: case Opcode::kRed:
        return &ExecAtom;
      case Opcode::kTex: case Opcode::kTld4:
        return BindTexture(in, op, why);
      case Opcode::kSuld: case Opcode::kSust:
        return BindSurface(in, op, why);
      case Opcode::kBra:
        if (in.operands.size() != 1 || in.operands[0].kind != ptx::Operand::Kind::kLabel) {
          *why = "branch target is not a label";
          return nullptr;
        }
        return &ExecBra;
      case Opcode::kBrx:
        // brx.idx{.uni} index, list (a register or immediate, a label of
        // a .branchtargets directive).
        if (!in.HasMod("idx") || in.operands.size() != 2 || in.operands[1].kind != ptx::Operand::Kind::kLabel) {
          *why = "brx form (supported: brx.idx index, list)";
          return nullptr;
        }
        return &ExecBrx;
      case Opcode::kCall: return &ExecCall;
      case Opcode::kRet: return &ExecRet;
      case Opcode::kExit: return &ExecExit;
      case Opcode::kTrap: return &ExecTrap;
      case Opcode::kBar: case Opcode::kBarrier:
        if (in.HasMod("warp")) {
          op->sub = 1;
          return &ExecCollective;
        }
        return BindBarrier(in, op, why);
      case Opcode::kMatch:
        op->sub = in.HasMod("all") ? 2 : 1;
        return &ExecCollective;
      case Opcode::kShfl: case Opcode::kVote: case Opcode::kActivemask: case Opcode::kRedux: case Opcode::kElect:
        return &ExecCollective;
      default:
        break;
    }
    if (in.opcode == "testp") {
      static const char* kModes[] = {"finite", "infinite", "number", "notanumber", "normal", "subnormal"};
      for (int i = 0; i < 6; ++i) {
        if (in.HasMod(kModes[i])) op->sub = static_cast<uint8_t>(i + 1);
      }
      if (!op->sub || !flt) return unsupported_type();
      return &ExecFloatArith;
    }
    if (in.opcode == "nop") return &ExecNop;
    if (in.opcode == "txq" || in.opcode == "suq") return BindTextureQuery(in, op, why);
    *why = "unsupported instruction";
    return nullptr;
  }

  const ptx::Module& m_;
  Program* p_;
  std::vector<const ptx::Function*> fns_;
  std::unordered_map<const ptx::VarDecl*, uint64_t> shared_off_;
  std::unordered_map<std::string, uint64_t> module_shared_;
  uint64_t dyn_shared_ = 0, const_bytes_ = 0;
  std::vector<std::unordered_map<std::string, Sym>> scopes_;
  std::unordered_map<std::string, uint32_t> labels_;
  std::unordered_map<std::string, std::vector<std::string>> branch_lists_;  // .branchtargets by name

  // `.branchtargets a, b, c;` -> {a, b, c}; false for other text.
  static bool ParseBranchTargets(const std::string& text, std::vector<std::string>* names) {
    constexpr std::string_view kDirective = ".branchtargets";
    std::string_view t(text);
    const size_t start = t.find_first_not_of(" \t\n");
    if (start == std::string_view::npos || t.substr(start, kDirective.size()) != kDirective) return false;
    std::string name;
    for (char c : t.substr(start + kDirective.size())) {
      if (c == ',' || c == ';') {
        if (name.empty()) return false;
        names->push_back(name);
        name.clear();
        if (c == ';') return true;
      } else if (c != ' ' && c != '\t' && c != '\n') {
        name.push_back(c);
      }
    }
    if (name.empty()) return false;  // the raw text may stop before the ';'
    names->push_back(name);
    return true;
  }
  // The .branchtargets list `name` as op indices, added to f's lists;
  // *index is its place there.
  bool BranchList(const std::string& name, Function* f, uint32_t* index, std::string* why) {
    auto it = branch_lists_.find(name);
    if (it == branch_lists_.end()) {
      *why = "brx.idx names " + name + ", which is not a .branchtargets list of this function";
      return false;
    }
    std::vector<uint32_t> pcs;
    for (const std::string& label : it->second) {
      auto l = labels_.find(label);
      if (l == labels_.end()) {
        *why = ".branchtargets " + name + " names unknown label " + label;
        return false;
      }
      pcs.push_back(l->second);
    }
    *index = static_cast<uint32_t>(f->branch_targets.size());
    f->branch_targets.push_back(std::move(pcs));
    return true;
  }
  const StorageAllocator* storage_ = nullptr;  // null: host memory owned by the Program
};

Program::~Program() {
  if (external_storage_ != nullptr && release_storage_) release_storage_(external_storage_);
}

Status Program::Build(const ptx::Module& module, std::unique_ptr<Program>* out) {
  return Build(module, StorageAllocator{}, out);
}

Status Program::Build(const ptx::Module& module, const StorageAllocator& storage,
                      std::unique_ptr<Program>* out) {
  auto p = std::unique_ptr<Program>(new Program());
  ProgramBuilder b(module, p.get(), &storage);
  PHOS_RETURN_IF_ERROR(b.Run());
  *out = std::move(p);
  return Status::Ok();
}

uint64_t Program::FunctionAddress(int index) const {
  return kCodeWindow + (code_tag_ << 24) + static_cast<uint64_t>(index) * 16;
}

int Program::FunctionAt(uint64_t addr) const {
  const uint64_t base = kCodeWindow + (code_tag_ << 24);
  if (addr < base || (addr - base) % 16 != 0 || (addr - base) / 16 >= functions_.size()) return -1;
  return static_cast<int>((addr - base) / 16);
}

int Program::FindFunction(std::string_view name) const {
  auto it = function_index_.find(std::string(name));
  return it == function_index_.end() ? -1 : it->second;
}

bool Program::SymbolAddress(std::string_view name, uint64_t* addr, size_t* size) const {
  auto it = vars_.find(std::string(name));
  if (it == vars_.end()) return false;
  *addr = it->second.addr;
  *size = it->second.size;
  return true;
}

std::string Program::Where(int fn, uint32_t op) const {
  const Function& f = functions_[fn];
  std::string s = f.name + ": statement " + std::to_string(f.op_stmt[op]);
  if (f.op_line[op] >= 0) s += " (line " + std::to_string(f.op_line[op]) + ")";
  return s + " `" + f.op_text[op] + "`";
}

Status Program::CheckRunnable(int kernel) const {
  std::vector<bool> seen(functions_.size());
  std::vector<int> todo = {kernel};
  seen[kernel] = true;
  while (!todo.empty()) {
    const int fi = todo.back();
    todo.pop_back();
    const Function& f = functions_[fi];
    for (uint32_t i = 0; i < f.ops.size(); ++i) {
      if (!f.unsupported[i].empty()) {
        return Status::NotSupported("ptx interp: cannot run " + Where(fi, i) + ": " + f.unsupported[i]);
      }
    }
    auto visit = [&](uint32_t c) {
      if (!seen[c]) {
        seen[c] = true;
        todo.push_back(static_cast<int>(c));
      }
    };
    for (uint32_t c : f.callees) visit(c);
    if (f.calls_indirect) {
      for (int c : address_taken_) visit(static_cast<uint32_t>(c));
    }
  }
  return Status::Ok();
}

}  // namespace phos::interp
