#include "interp/launch.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "interp/executor.h"

namespace phos::interp {

namespace {

// State shared by the workers of one launch.
struct LaunchShared {
  std::atomic<uint64_t> next_block{0};   // block index handed out next
  std::atomic<bool> stop{false};         // set on the first error
  std::atomic<uint64_t> instructions{0};
  std::atomic<uint64_t> blocks_done{0};
  std::mutex mu;
  Status first_error;                    // guarded by mu
};

void Worker(const Program& program, int kernel, Dim3 grid, Dim3 block, unsigned dyn_smem, const uint8_t* params,
            size_t params_size, GlobalMemory* global, const LaunchOptions& options, unsigned smid,
            LaunchShared* s) {
  Block b;  // owned by this worker thread
  b.prog = &program;
  b.gmem = global;
  b.opts = &options;
  b.dyn_smem = dyn_smem;
  b.ntid[0] = block.x;
  b.ntid[1] = block.y;
  b.ntid[2] = block.z;
  b.nctaid[0] = grid.x;
  b.nctaid[1] = grid.y;
  b.nctaid[2] = grid.z;
  b.nthreads = block.x * block.y * block.z;
  b.nwarps = (b.nthreads + 31) / 32;
  b.smid = smid;
  const uint64_t nblocks = uint64_t{grid.x} * grid.y * grid.z;
  uint64_t icount = 0, done = 0;
  while (!s->stop.load(std::memory_order_relaxed)) {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
      std::lock_guard lock(s->mu);
      if (s->first_error.ok()) s->first_error = Status::Unavailable("ptx interp: launch abandoned");
      s->stop.store(true, std::memory_order_relaxed);
      break;
    }
    const uint64_t i = s->next_block.fetch_add(1, std::memory_order_relaxed);
    if (i >= nblocks) break;
    b.ctaid[0] = static_cast<uint32_t>(i % grid.x);
    b.ctaid[1] = static_cast<uint32_t>((i / grid.x) % grid.y);
    b.ctaid[2] = static_cast<uint32_t>(i / (uint64_t{grid.x} * grid.y));
    b.shared.assign(program.static_shared_bytes() + dyn_smem, 0);
    Status st = RunBlock(b, kernel, params, params_size, &icount);
    ++done;
    if (!st.ok()) {
      std::lock_guard lock(s->mu);
      if (s->first_error.ok()) s->first_error = st;
      s->stop.store(true, std::memory_order_relaxed);
      break;
    }
  }
  s->instructions.fetch_add(icount, std::memory_order_relaxed);
  s->blocks_done.fetch_add(done, std::memory_order_relaxed);
}

}  // namespace

Status LaunchKernel(const Program& program, const std::string& kernel, Dim3 grid, Dim3 block,
                    unsigned dynamic_shared_bytes, const uint8_t* params, size_t params_size,
                    GlobalMemory* global, const LaunchOptions& options) {
  const int k = program.FindFunction(kernel);
  if (k < 0 || !program.function(k).is_entry) {
    return Status::NotFound("ptx interp: no kernel named " + kernel + " in the module");
  }
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > 1024 || block.z > 64 ||
      grid.y > 65535 || grid.z > 65535) {
    return Status::InvalidArgument("ptx interp: invalid launch dimensions for " + kernel);
  }
  const Function& f = program.function(k);
  size_t need = 0;
  for (const ParamSlot& p : f.params) need = std::max<size_t>(need, p.offset + p.size);
  if (params_size < need || (need && !params)) {
    return Status::InvalidArgument("ptx interp: " + kernel + " takes " + std::to_string(need) +
                                   " bytes of parameters, got " + std::to_string(params_size));
  }
  if (!global) return Status::InvalidArgument("ptx interp: no GlobalMemory");
  PHOS_RETURN_IF_ERROR(program.CheckRunnable(k));

  const uint64_t nblocks = uint64_t{grid.x} * grid.y * grid.z;
  unsigned workers = options.workers ? options.workers : std::max(1u, std::thread::hardware_concurrency());
  // Cooperative: one host thread per block, so that every block is resident
  // at once, as the launch promises (the caller bounded the grid).
  if (options.cooperative) workers = static_cast<unsigned>(nblocks);
  workers = static_cast<unsigned>(std::min<uint64_t>(workers, nblocks));
  LaunchShared shared;
  if (workers <= 1) {
    Worker(program, k, grid, block, dynamic_shared_bytes, params, params_size, global, options, 0, &shared);
  } else {
    std::vector<std::thread> pool;
    pool.reserve(workers);
    for (unsigned w = 0; w < workers; ++w) {
      pool.emplace_back(Worker, std::cref(program), k, grid, block, dynamic_shared_bytes, params, params_size,
                        global, std::cref(options), w, &shared);
    }
    for (auto& t : pool) t.join();
  }
  if (options.stats) {
    options.stats->thread_instructions = shared.instructions.load();
    options.stats->blocks = shared.blocks_done.load();
  }
  std::lock_guard lock(shared.mu);
  return shared.first_error;
}

}  // namespace phos::interp
