// Which registers a thread of a kernel may read before it has written them
// (Function::zero_at_entry). A block's threads start with those zeroed —
// deterministic values for a program that reads a register it never set —
// and the others as the worker's previous block left them: no path reads
// them before an op that sets them, so nothing can tell. (Zeroing every
// register of every warp was a tenth of a short kernel's time.)
//
// A forward "definitely assigned" analysis over the function's ops. An op
// definitely writes only when it is not guarded and its handler is one
// whose leading operands are whole-register results (arithmetic,
// conversions, comparisons, moves, loads); every other register operand,
// any operand of any other op, and guards count as reads. Conservative in
// both directions: a register it cannot prove set is zeroed.
#include <vector>

#include "interp/exec.h"

namespace phos::interp {

namespace {

// How many leading operands of `op` it sets whole when it runs.
uint32_t Results(const Op& op) {
  if (op.guard >= 0) return 0;
  if (op.fn == &ExecIntArith || op.fn == &ExecFloatArith || op.fn == &ExecCvt || op.fn == &ExecCvta ||
      op.fn == &ExecSet || op.fn == &ExecSelp || op.fn == &ExecSlct) {
    return 1;
  }
  if (op.fn == &ExecSetp) return op.nshape > 0 ? op.shape[0] : 0;
  if (op.fn == &ExecMov) return op.nshape == 2 && op.shape[0] > 1 ? op.shape[0] : 1;
  if (op.fn == &ExecLd) return op.nshape == 2 ? op.shape[0] : 0;
  return 0;
}

// Beyond this many bits (ops x registers) the analysis is not worth its
// memory: every register is zeroed.
constexpr size_t kMaxBits = size_t{64} << 20;

}  // namespace

void FindRegistersReadUnset(Function* f) {
  f->zero_at_entry.clear();
  f->zero_all_at_entry = true;
  const size_t n = f->ops.size(), regs = f->num_regs;
  if (!f->has_body || n == 0 || regs == 0) {
    f->zero_all_at_entry = false;
    return;
  }
  if (n * regs > kMaxBits) return;
  const size_t words = (regs + 63) / 64;
  // set[i]: registers definitely written on every path to op i (all ones
  // until a path reaches it); reached[i]: some path from the entry does.
  std::vector<uint64_t> set(n * words, ~uint64_t{0});
  std::vector<bool> reached(n, false);
  std::fill(set.begin(), set.begin() + static_cast<std::ptrdiff_t>(words), 0);
  reached[0] = true;
  auto row = [&](size_t i) { return set.data() + i * words; };
  std::vector<uint64_t> out(words);
  std::vector<size_t> work{0};
  std::vector<bool> queued(n, false);
  queued[0] = true;
  auto flow_into = [&](size_t to) {  // meet: what every path into `to` has set
    if (to >= n) return;
    uint64_t* in = row(to);
    bool changed = !reached[to];
    reached[to] = true;
    for (size_t w = 0; w < words; ++w) {
      const uint64_t meet = in[w] & out[w];
      changed = changed || meet != in[w];
      in[w] = meet;
    }
    if (changed && !queued[to]) {
      queued[to] = true;
      work.push_back(to);
    }
  };
  while (!work.empty()) {
    const size_t i = work.back();
    work.pop_back();
    queued[i] = false;
    const Op& op = f->ops[i];
    std::copy(row(i), row(i) + words, out.begin());
    const uint32_t results = Results(op);
    for (uint32_t k = 0; k < results && k < op.count; ++k) {
      const Operand& o = f->operands[op.first + k];
      if (o.kind == Operand::kReg && o.reg < regs) out[o.reg / 64] |= uint64_t{1} << (o.reg % 64);
    }
    const bool jumps = op.fn == &ExecBra || op.fn == &ExecBrx;
    const bool ends = op.fn == &ExecRet || op.fn == &ExecExit || op.fn == &ExecTrap;
    if (op.fn == &ExecBra) flow_into(op.target);
    if (op.fn == &ExecBrx) {
      for (uint32_t to : f->branch_targets[op.target]) flow_into(to);
    }
    if ((!jumps && !ends) || op.guard >= 0) flow_into(i + 1);
  }
  // A register read where it may not have been set.
  std::vector<bool> zero(regs, false);
  auto read = [&](size_t i, uint32_t r) {
    if (r < regs && !((row(i)[r / 64] >> (r % 64)) & 1)) zero[r] = true;
  };
  for (size_t i = 0; i < n; ++i) {
    if (!reached[i]) continue;
    const Op& op = f->ops[i];
    if (op.guard >= 0) read(i, static_cast<uint32_t>(op.guard));
    const uint32_t results = Results(op);
    for (uint32_t k = results; k < op.count; ++k) {
      const Operand& o = f->operands[op.first + k];
      if (o.kind == Operand::kReg) read(i, o.reg);
    }
  }
  f->zero_all_at_entry = false;
  for (uint32_t r = 0; r < regs; ++r) {
    if (zero[r]) f->zero_at_entry.push_back(r);
  }
}

}  // namespace phos::interp
