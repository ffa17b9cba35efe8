// CUDA graphs: stream capture, explicit construction, instantiation and
// launch (graphs.h; docs/interposer.md "CUDA graphs"). The runtime API
// lives here; the driver's cuGraph* / cuStream*Capture* call it
// (graph_driver.cc).
#include "interposer/client/graphs.h"

#include <cuda.h>
#include <cuda_runtime.h>  // make_cudaPitchedPtr, make_cudaExtent

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "interposer/client/arrays.h"
#include "interposer/client/client_internal.h"
#include "interposer/client/devices.h"
#include "interposer/client/connection.h"
#include "interposer/client/handles.h"
#include "interposer/client/user_objects.h"

namespace phos::client {
struct GraphMemory;  // graph memory nodes' allocations (below)
}  // namespace phos::client

// The handle types the app holds (cudaGraph_t == CUgraph, and so on).
struct CUgraphNode_st {
  CUgraph_st* graph = nullptr;
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  std::vector<CUgraphNode_st*> deps;  // nodes of the same graph this one runs after
  phos::client::StreamOp op;          // empty for empty nodes and child graphs
  std::unique_ptr<CUgraph_st> child;  // child-graph nodes: the graph's own copy
  // What the parameter getters return (explicit nodes of these types).
  cudaHostNodeParams host{};
  cudaMemsetParams memset{};
  cudaMemcpy3DParms copy{};                 // explicit memcpy nodes (copy.kind set)
  bool has_copy = false;
  cudaEvent_t event = nullptr;              // event record / wait nodes
  // Kernel nodes of registered kernels (explicit or captured): what
  // cudaGraphKernelNodeGetParams answers (immutable, shared by clones), and
  // the argument pointers it hands out (into the record's block; rebuilt by
  // each call of the getter).
  std::shared_ptr<const phos::client::KernelNodeRecord> kernel;
  std::vector<void*> kernel_args;
  // Memory alloc nodes: the allocation (shared with the execs' steps) and
  // the parameters as the getter returns them; memory free nodes: the
  // pointer they free.
  std::shared_ptr<phos::client::GraphMemory> mem;
  cudaMemAllocNodeParams alloc{};
  void* free_ptr = nullptr;
  const CUgraphNode_st* cloned_from = nullptr;  // cudaGraphNodeFindInClone
  // Conditional nodes: the handle whose value picks what runs, the kind,
  // and the bodies (graphs the node owns and the app fills; registered as
  // children, handed out through cudaConditionalNodeParams::phGraph_out,
  // which points at body_handles).
  cudaGraphConditionalHandle cond_handle = 0;
  cudaGraphConditionalNodeType cond_type = cudaGraphCondTypeIf;
  std::vector<std::unique_ptr<CUgraph_st>> bodies;
  std::vector<cudaGraph_t> body_handles;
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in creation order
  phos::client::UserObjectRefs user_objects;            // cudaGraphRetainUserObject
  // cudaGraphConditionalHandleCreate: handles made for this graph, with the
  // value each launch starts from (when `assign_default`).
  struct Conditional {
    cudaGraphConditionalHandle handle = 0;
    unsigned default_value = 0;
    bool assign_default = false;
  };
  std::vector<Conditional> conditionals;
};

struct CUgraphExec_st {
  // The operations in launch order (child graphs inlined), with the node
  // each came from. Replaced whole by an update (copy on write): a launch
  // holds the list it started with.
  struct Step {
    const CUgraphNode_st* node = nullptr;  // compared only: its graph may be gone
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    phos::client::StreamOp op;
    bool enabled = true;  // cudaGraphNodeSetEnabled
  };
  std::shared_ptr<const std::vector<Step>> steps;
  std::vector<cudaGraphNodeType> shape;  // the graph's node types in creation order (ExecUpdate's check)
  cudaEvent_t serial = nullptr;          // orders launches of this exec after one another
  bool launched = false;
  unsigned long long flags = 0;          // as instantiated
  phos::client::UserObjectRefs user_objects;  // its graph's (and child graphs') references, retained
};

namespace phos::client {

std::atomic<int> g_active_captures{0};

namespace {

using Node = CUgraphNode_st;
using Graph = CUgraph_st;
using Exec = CUgraphExec_st;

// A capture in progress: the graph it builds and, per stream that joined
// it, the nodes the stream's next operation depends on.
struct Capture {
  unsigned long long id = 0;
  std::unique_ptr<Graph> graph;  // the graph it builds, or
  Graph* into = nullptr;         // the app's graph it adds to (cudaStreamBeginCaptureToGraph)
  Graph* target() { return into != nullptr ? into : graph.get(); }
  uint32_t origin = 0;  // the stream cudaStreamBeginCapture named
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  bool invalidated = false;
  std::map<uint32_t, std::vector<Node*>> frontier;
};

// Lock: mu guards everything below and every graph, node and exec object
// (CUDA does not make one graph safe for concurrent use either; the lock
// keeps libphos.so's own structures whole). Replays run outside it.
struct Graphs {
  std::mutex mu;
  std::set<Graph*> graphs;  // live graphs the app holds (not capture-owned, not children)
  std::set<const Graph*> children;  // child graphs of live nodes (cudaGraphChildGraphNodeGetGraph)
  std::set<Exec*> execs;
  std::map<uint32_t, std::shared_ptr<Capture>> by_stream;  // every stream of a capture
  // An event recorded on a captured stream: the nodes it stands for.
  struct CapturedEvent {
    std::weak_ptr<Capture> capture;
    std::vector<Node*> nodes;
  };
  std::map<uint32_t, CapturedEvent> events;
  unsigned long long next_capture_id = 1;
};
Graphs& G() {
  static auto* g = new Graphs;  // never destroyed: calls may come during exit
  return *g;
}

// Caller holds mu.
Node* AddNode(Graph* g, cudaGraphNodeType type, const std::vector<Node*>& deps, StreamOp op) {
  auto n = std::make_unique<Node>();
  n->graph = g;
  n->type = type;
  n->deps = deps;
  n->op = std::move(op);
  g->nodes.push_back(std::move(n));
  return g->nodes.back().get();
}

// Caller holds mu. A copy of `src`; `map` (may be null) gets old -> new.
std::unique_ptr<Graph> CloneGraph(const Graph& src, std::map<const Node*, Node*>* map) {
  auto g = std::make_unique<Graph>();
  g->user_objects = src.user_objects;  // a clone holds references of its own
  std::map<const Node*, Node*> local;
  std::map<const Node*, Node*>& m = map ? *map : local;
  // Nodes first, edges second: an edge may point to a node made later
  // (cudaGraphAddDependencies).
  for (const auto& n : src.nodes) {
    Node* c = AddNode(g.get(), n->type, {}, n->op);
    if (n->child) c->child = CloneGraph(*n->child, nullptr);
    c->host = n->host;
    c->memset = n->memset;
    c->copy = n->copy;
    c->has_copy = n->has_copy;
    c->event = n->event;
    c->kernel = n->kernel;
    c->mem = n->mem;
    c->alloc = n->alloc;
    c->free_ptr = n->free_ptr;
    c->cloned_from = n.get();
    m[n.get()] = c;
  }
  for (const auto& n : src.nodes) {
    for (Node* d : n->deps) m.at(n.get())->deps.push_back(m.at(d));
  }
  return g;
}

// Caller holds mu. The nodes of `g` in an order that respects every edge
// (creation order among the ready ones), child graphs inlined. False if
// the edges form a cycle.
StreamOp ConditionalOp(const Node& n, bool* ok);  // below

bool LaunchOrder(const Graph& g, std::vector<Exec::Step>* out) {
  std::map<const Node*, size_t> pending;
  std::map<const Node*, std::vector<const Node*>> dependents;
  for (const auto& n : g.nodes) {
    pending[n.get()] = n->deps.size();
    for (const Node* d : n->deps) dependents[d].push_back(n.get());
  }
  std::vector<const Node*> ready;
  for (const auto& n : g.nodes) {
    if (n->deps.empty()) ready.push_back(n.get());
  }
  size_t done = 0;
  while (!ready.empty()) {
    const Node* n = ready.front();
    ready.erase(ready.begin());
    ++done;
    if (n->child) {
      if (!LaunchOrder(*n->child, out)) return false;
    } else if (!n->bodies.empty()) {
      bool ok = false;
      StreamOp op = ConditionalOp(*n, &ok);
      if (!ok) return false;
      out->push_back({n, n->type, std::move(op)});
    } else if (n->op) {
      out->push_back({n, n->type, n->op});
    }
    for (const Node* d : dependents[n]) {
      if (--pending[d] == 0) ready.push_back(d);
    }
  }
  return done == g.nodes.size();
}

// Reads a conditional handle's value once the work stream `s` holds so far
// has run (the kernels before the node may set it).
cudaError_t ReadConditional(cudaGraphConditionalHandle h, uint32_t s, unsigned* value) {
  auto* stream = static_cast<cudaStream_t>(StreamHandleOf(s));
  if (cudaError_t e = cudaMemcpyAsync(value, reinterpret_cast<void*>(h), sizeof *value, cudaMemcpyDeviceToHost, stream);
      e != cudaSuccess) {
    return e;
  }
  return cudaStreamSynchronize(stream);
}

// Caller holds mu. A conditional node as one step. CUDA evaluates it on the
// device; phos replays graphs from the app's side, so when a launch gets to
// the node it waits for the stream's work so far, reads the handle's value
// back (a kernel may have set it with cudaGraphSetConditional) and replays
// the body it picks: if (body 0 when non-zero, body 1 — the else — when
// zero), while (body 0 until the value reads 0), switch (body `value`, none
// past the last). Cost: a launch is synchronous up to its last conditional
// node. The bodies are laid out once, here (instantiation).
StreamOp ConditionalOp(const Node& n, bool* ok) {
  using Steps = std::vector<Exec::Step>;
  std::vector<std::shared_ptr<const Steps>> bodies;
  for (const auto& b : n.bodies) {
    auto steps = std::make_shared<Steps>();
    if (!LaunchOrder(*b, steps.get())) {
      *ok = false;
      return nullptr;
    }
    bodies.push_back(std::move(steps));
  }
  *ok = true;
  const cudaGraphConditionalHandle h = n.cond_handle;
  const cudaGraphConditionalNodeType type = n.cond_type;
  return [h, type, bodies](uint32_t s) -> cudaError_t {
    auto run = [s](const Steps& steps) -> cudaError_t {
      for (const Exec::Step& step : steps) {
        if (!step.enabled) continue;
        if (cudaError_t e = step.op(s); e != cudaSuccess) return e;
      }
      return cudaSuccess;
    };
    unsigned value = 0;
    if (cudaError_t e = ReadConditional(h, s, &value); e != cudaSuccess) return e;
    switch (type) {
      case cudaGraphCondTypeIf:
        if (value != 0) return run(*bodies[0]);
        return bodies.size() > 1 ? run(*bodies[1]) : cudaSuccess;
      case cudaGraphCondTypeWhile:
        while (value != 0) {
          if (cudaError_t e = run(*bodies[0]); e != cudaSuccess) return e;
          if (cudaError_t e = ReadConditional(h, s, &value); e != cudaSuccess) return e;
        }
        return cudaSuccess;
      case cudaGraphCondTypeSwitch:
        return value < bodies.size() ? run(*bodies[value]) : cudaSuccess;
      default:
        return cudaErrorInvalidValue;
    }
  };
}

// Caller holds mu. Steps that give every conditional handle made for `g`
// (or a graph inside it) with cudaGraphCondAssignDefault its default value,
// first thing in each launch.
void DefaultValueSteps(const Graph& g, std::vector<Exec::Step>* out) {
  for (const auto& c : g.conditionals) {
    if (!c.assign_default) continue;
    const cudaGraphConditionalHandle h = c.handle;
    const unsigned v = c.default_value;
    out->push_back({nullptr, cudaGraphNodeTypeMemset,
                    [h, v](uint32_t s) { return SubmitMemset(reinterpret_cast<void*>(h), v, 1, sizeof v, s); }});
  }
  for (const auto& n : g.nodes) {
    if (n->child) DefaultValueSteps(*n->child, out);
    for (const auto& b : n->bodies) DefaultValueSteps(*b, out);
  }
}

// A graph's launch order with its conditional defaults first. False: a cycle.
bool ExecSteps(const Graph& g, std::vector<Exec::Step>* out) {
  DefaultValueSteps(g, out);
  return LaunchOrder(g, out);
}

// Caller holds mu. An app-held graph, or a child graph of one's node.
bool IsLiveGraph(const Graphs& s, const Graph* g) {
  return g != nullptr && (s.graphs.count(const_cast<Graph*>(g)) || s.children.count(g));
}
// Caller holds mu: `g` (and the child graphs inside it) are being deleted.
void ForgetChildren(Graphs& s, const Graph& g) {
  for (const auto& n : g.nodes) {
    if (n->child) {
      ForgetChildren(s, *n->child);
      s.children.erase(n->child.get());
    }
    for (const auto& b : n->bodies) {
      ForgetChildren(s, *b);
      s.children.erase(b.get());
    }
  }
}
// Caller holds mu. Whether `g` (or a graph inside it) has a conditional
// node: CUDA neither clones such a graph nor embeds it as a child graph.
bool HasConditionalNodes(const Graph& g) {
  for (const auto& n : g.nodes) {
    if (!n->bodies.empty() || (n->child && HasConditionalNodes(*n->child))) return true;
  }
  return false;
}
bool IsNodeOf(const Graph* g, const Node* n) {
  if (n == nullptr) return false;
  for (const auto& m : g->nodes) {
    if (m.get() == n) return true;
  }
  return false;
}

// Caller holds mu. Ends `c` for every stream that joined it.
void EndCaptureLocked(Graphs& s, const std::shared_ptr<Capture>& c) {
  for (auto it = s.by_stream.begin(); it != s.by_stream.end();) {
    it = it->second == c ? s.by_stream.erase(it) : std::next(it);
  }
  for (auto it = s.events.begin(); it != s.events.end();) {
    it = it->second.capture.lock() == c ? s.events.erase(it) : std::next(it);
  }
  g_active_captures.fetch_sub(1, std::memory_order_relaxed);
}

// Adds a node of `type` replaying `op` after `deps`; `init` (may be empty)
// fills the node's parameter fields, under the lock like the rest.
cudaError_t AddNodeChecked(cudaGraphNode_t* out, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t ndeps,
                           cudaGraphNodeType type, StreamOp op, std::unique_ptr<Graph> child = nullptr,
                           const std::function<void(Node*)>& init = nullptr) {
  if (out == nullptr || (ndeps > 0 && deps == nullptr)) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  std::vector<Node*> d;
  for (size_t i = 0; i < ndeps; ++i) {
    if (!IsNodeOf(graph, deps[i])) return SetError(cudaErrorInvalidValue);
    d.push_back(deps[i]);
  }
  Node* n = AddNode(graph, type, d, std::move(op));
  if (init) init(n);
  n->child = std::move(child);
  if (n->child) {
    std::vector<const Graph*> todo{n->child.get()};  // the child and the children inside it
    while (!todo.empty()) {
      const Graph* c = todo.back();
      todo.pop_back();
      s.children.insert(c);
      for (const auto& m : c->nodes) {
        if (m->child) todo.push_back(m->child.get());
      }
    }
  }
  *out = n;
  return cudaSuccess;
}

// Caller holds mu. `node` of a live graph with type `type`.
// Caller holds mu. Whether `node` is a node of a graph the app may name
// (its own graphs, their children, graphs being captured), found by
// address: a destroyed or made-up handle is refused, never read.
bool IsLiveNode(const Graphs& s, const Node* node) {
  if (node == nullptr) return false;
  for (const Graph* g : s.graphs) {
    if (IsNodeOf(g, node)) return true;
  }
  for (const Graph* g : s.children) {
    if (IsNodeOf(g, node)) return true;
  }
  for (const auto& [stream, c] : s.by_stream) {
    if (IsNodeOf(c->target(), node)) return true;
  }
  return false;
}

bool IsNodeOfType(const Graphs& s, const Node* node, cudaGraphNodeType type) {
  return IsLiveNode(s, node) && IsLiveGraph(s, node->graph) && node->type == type;
}

// Fills a (possibly null) node array the CUDA way: null -> the count only;
// else up to *count entries, the rest nulled, *count = entries written.
cudaError_t ListNodes(const std::vector<Node*>& nodes, cudaGraphNode_t* out, cudaGraphEdgeData* edges, size_t* count) {
  if (count == nullptr) return SetError(cudaErrorInvalidValue);
  if (out == nullptr) {
    *count = nodes.size();
    return cudaSuccess;
  }
  const size_t n = std::min(*count, nodes.size());
  for (size_t i = 0; i < *count; ++i) {
    out[i] = i < n ? nodes[i] : nullptr;
    if (edges != nullptr) edges[i] = cudaGraphEdgeData{};  // phos's edges are all default ones
  }
  *count = n;
  return cudaSuccess;
}

// Caller holds mu. Replaces the operation of `node`'s steps in `exec`
// (copy on write); false if the exec has no step of that node and type.
bool ReplaceStepOp(Exec* exec, const Node* node, cudaGraphNodeType type, const StreamOp& op) {
  auto steps = std::make_shared<std::vector<Exec::Step>>(*exec->steps);
  bool found = false;
  for (Exec::Step& step : *steps) {
    if (step.node == node && step.type == type) {
      step.op = op;
      found = true;
    }
  }
  if (found) exec->steps = std::move(steps);
  return found;
}

// cudaGraphExec*NodeSetParams: the exec's steps of `node` replay `op` now.
cudaError_t SetExecStep(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeType type, const StreamOp& op) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.execs.count(exec) || node == nullptr) return SetError(cudaErrorInvalidValue);
  return ReplaceStepOp(exec, node, type, op) ? cudaSuccess : SetError(cudaErrorInvalidValue);
}

// ---- the operations nodes replay

StreamOp EventRecordOp(cudaEvent_t e) {
  return [e](uint32_t s) { return cudaEventRecord(e, static_cast<cudaStream_t>(StreamHandleOf(s))); };
}
StreamOp EventWaitOp(cudaEvent_t e) {
  return [e](uint32_t s) { return cudaStreamWaitEvent(static_cast<cudaStream_t>(StreamHandleOf(s)), e, 0); };
}
StreamOp HostOp(cudaHostFn_t fn, void* data) {
  return [fn, data](uint32_t s) { return LaunchHostFunctionOn(s, [fn, data] { fn(data); }); };
}
// A memset node: rows of `width` elements of `element_size` bytes, `pitch`
// bytes apart.
StreamOp MemsetOp(const cudaMemsetParams& p) {
  return [p](uint32_t s) -> cudaError_t {
    if (p.height <= 1) return SubmitMemset(p.dst, p.value, p.width, p.elementSize, s);  // pitch unused
    return SubmitMemset2D(p.dst, p.pitch, p.value, p.elementSize, p.width * p.elementSize, p.height, s, false);
  };
}
// `record` (may be null): where to keep what the getter answers.
StreamOp KernelOp(const cudaKernelNodeParams& p, cudaError_t* error,
                  std::shared_ptr<const KernelNodeRecord>* record = nullptr) {
  std::vector<std::byte> payload;
  bool call = false;
  *error = PackKernelLaunch(p.func, p.gridDim, p.blockDim, p.kernelParams, p.sharedMemBytes, &payload, &call);
  if (*error != cudaSuccess) return nullptr;
  if (p.extra != nullptr) {
    *error = cudaErrorNotSupported;  // the `extra` form: the driver's cuGraphAddKernelNode has it
    return nullptr;
  }
  if (record != nullptr) {
    auto r = std::make_shared<KernelNodeRecord>();
    if (KernelRecordOf(p.func, p.gridDim, p.blockDim, p.sharedMemBytes, payload, r.get())) *record = std::move(r);
  }
  return KernelLaunchOp(std::move(payload), call);
}

// A memcpy node of linear memory (cudaMemcpy3DParms without arrays): each
// slice of `extent.depth` is a 2D copy of `extent.height` rows of
// `extent.width` bytes, replayed through the 2D copy path (it reads host
// memory when the node runs). CUDA arrays on either side go through
// arrays.h's Memcpy3D, which lays them out the same way.
bool LinearCopy(const cudaMemcpy3DParms& p) {
  return p.srcArray == nullptr && p.dstArray == nullptr && p.srcPtr.ptr != nullptr && p.dstPtr.ptr != nullptr &&
         p.extent.width > 0 && p.extent.height > 0 && p.extent.depth > 0 && p.extent.width <= p.srcPtr.pitch &&
         p.extent.width <= p.dstPtr.pitch;
}
StreamOp CopyOp(const cudaMemcpy3DParms& p) {
  // arrays.h's 3D copy: pitched linear memory or CUDA arrays on either side.
  return [p](uint32_t s) -> cudaError_t {
    return Memcpy3D(&p, static_cast<cudaStream_t>(StreamHandleOf(s)), true, false);
  };
}
cudaMemcpy3DParms Linear1D(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  cudaMemcpy3DParms p{};
  p.srcPtr = make_cudaPitchedPtr(const_cast<void*>(src), count, count, 1);
  p.dstPtr = make_cudaPitchedPtr(dst, count, count, 1);
  p.extent = make_cudaExtent(count, 1, 1);
  p.kind = kind;
  return p;
}
// Refuses a copy phos cannot replay, saying why once.
cudaError_t CheckCopy(const cudaMemcpy3DParms* p) {
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->srcArray != nullptr || p->dstArray != nullptr) {
    // A live array on each array side; the extents are checked when the
    // node runs (arrays.h's Memcpy3D), as for any copy.
    const bool src_ok = p->srcArray == nullptr ? p->srcPtr.ptr != nullptr : FindArray(p->srcArray) != nullptr;
    const bool dst_ok = p->dstArray == nullptr ? p->dstPtr.ptr != nullptr : FindArray(p->dstArray) != nullptr;
    return src_ok && dst_ok ? cudaSuccess : cudaErrorInvalidValue;
  }
  return LinearCopy(*p) ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t Instantiate(cudaGraphExec_t* out, cudaGraph_t graph, unsigned long long flags) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  if (flags & ~static_cast<unsigned long long>(cudaGraphInstantiateFlagAutoFreeOnLaunch |
                                                cudaGraphInstantiateFlagUpload |
                                                cudaGraphInstantiateFlagUseNodePriority)) {
    return SetError(cudaErrorInvalidValue);  // device launch: phos has no device-side graph launch
  }
  auto exec = std::make_unique<Exec>();
  {
    Graphs& s = G();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
    auto steps = std::make_shared<std::vector<Exec::Step>>();
    if (!ExecSteps(*graph, steps.get())) return SetError(cudaErrorInvalidValue);  // a cycle
    exec->steps = std::move(steps);
    for (const auto& n : graph->nodes) exec->shape.push_back(n->type);
    // The exec holds the graph's user objects, and its child graphs'.
    std::vector<const Graph*> todo{graph};
    while (!todo.empty()) {
      const Graph* g = todo.back();
      todo.pop_back();
      exec->user_objects.Merge(g->user_objects);
      for (const auto& n : g->nodes) {
        if (n->child) todo.push_back(n->child.get());
        for (const auto& b : n->bodies) todo.push_back(b.get());
      }
    }
  }
  exec->flags = flags;
  if (cudaError_t e = cudaEventCreateWithFlags(&exec->serial, cudaEventDisableTiming); e != cudaSuccess) return e;
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  *out = exec.get();
  s.execs.insert(exec.release());
  return cudaSuccess;
}

cudaError_t LaunchExec(cudaGraphExec_t exec, uint32_t stream_id) {
  std::shared_ptr<const std::vector<Exec::Step>> steps;
  cudaEvent_t serial = nullptr;
  bool after_previous = false;
  {
    Graphs& s = G();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.execs.count(exec)) return SetError(cudaErrorInvalidValue);
    steps = exec->steps;
    serial = exec->serial;
    after_previous = exec->launched;
    exec->launched = true;
  }
  auto* stream = static_cast<cudaStream_t>(StreamHandleOf(stream_id));
  // One launch of an exec runs after the previous one (CUDA's rule), also
  // when they are on different streams.
  if (after_previous) {
    if (cudaError_t e = cudaStreamWaitEvent(stream, serial, 0); e != cudaSuccess) return e;
  }
  for (const Exec::Step& step : *steps) {
    if (!step.enabled) continue;  // cudaGraphNodeSetEnabled(0): an empty node until enabled again
    if (cudaError_t e = step.op(stream_id); e != cudaSuccess) return e;
  }
  return cudaEventRecord(serial, stream);
}

cudaError_t Launch(cudaGraphExec_t exec, cudaStream_t stream, DefaultStream zero) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (cudaError_t e = StickyError(); e != cudaSuccess) return SetError(e);
  const uint32_t id = StreamIdOf(stream, zero);
  if (!IsKnownStream(id)) return SetError(cudaErrorInvalidResourceHandle);
  {
    Graphs& s = G();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.execs.count(exec)) return SetError(cudaErrorInvalidValue);
  }
  // A graph launched into a capture becomes one node of it.
  cudaError_t captured = cudaSuccess;
  if (MaybeCapture(id, cudaGraphNodeTypeGraph, [exec](uint32_t s) { return LaunchExec(exec, s); }, &captured)) {
    return captured == cudaSuccess ? cudaSuccess : SetError(captured);
  }
  return LaunchExec(exec, id);
}

// `into` (may be null): capture into that graph of the app, after `deps`.
cudaError_t BeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode, DefaultStream zero, cudaGraph_t into = nullptr,
                         const cudaGraphNode_t* deps = nullptr, size_t ndeps = 0) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed) {
    return SetError(cudaErrorInvalidValue);
  }
  const uint32_t id = StreamIdOf(stream, zero);
  if (!IsKnownStream(id)) return SetError(cudaErrorInvalidResourceHandle);
  // The legacy default stream cannot be captured (it synchronises with
  // every blocking stream).
  if (id == 0) return SetError(cudaErrorStreamCaptureUnsupported);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.by_stream.count(id)) return SetError(cudaErrorIllegalState);
  auto c = std::make_shared<Capture>();
  c->id = s.next_capture_id++;
  c->frontier[id] = {};
  if (into != nullptr) {
    if (!IsLiveGraph(s, into) || (ndeps > 0 && deps == nullptr)) return SetError(cudaErrorInvalidValue);
    for (size_t i = 0; i < ndeps; ++i) {
      if (!IsNodeOf(into, deps[i])) return SetError(cudaErrorInvalidValue);
      c->frontier[id].push_back(deps[i]);
    }
    c->into = into;
  } else {
    c->graph = std::make_unique<Graph>();
  }
  c->origin = id;
  c->mode = mode;
  s.by_stream[id] = c;
  g_active_captures.fetch_add(1, std::memory_order_relaxed);
  return cudaSuccess;
}

cudaError_t EndCapture(cudaStream_t stream, cudaGraph_t* out, DefaultStream zero) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  const uint32_t id = StreamIdOf(stream, zero);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.by_stream.find(id);
  if (it == s.by_stream.end()) return SetError(cudaErrorIllegalState);
  std::shared_ptr<Capture> c = it->second;
  if (c->origin != id) return SetError(cudaErrorStreamCaptureUnmatched);
  EndCaptureLocked(s, c);
  *out = nullptr;
  if (c->invalidated) return SetError(cudaErrorStreamCaptureInvalidated);
  if (c->into != nullptr) {  // the app's graph, with the captured nodes added
    *out = c->into;
    return cudaSuccess;
  }
  Graph* g = c->graph.release();
  s.graphs.insert(g);
  *out = g;
  return cudaSuccess;
}

}  // namespace

// ---------------------------------------------------------------- capture hooks (graphs.h)

namespace {

// If stream `stream_id` is being captured: runs add(capture, frontier) under
// mu (unless the capture was invalidated: cudaErrorStreamCaptureInvalidated)
// and returns true with *result = what it returned; else false. `add`
// appends the stream's next node after `frontier` and makes it the
// frontier (AppendNode).
template <typename Add>
bool OnCapturedStream(uint32_t stream_id, cudaError_t* result, Add&& add) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.by_stream.find(stream_id);
  if (it == s.by_stream.end()) return false;
  Capture& c = *it->second;
  *result = c.invalidated ? cudaErrorStreamCaptureInvalidated : add(c, c.frontier[stream_id]);
  return true;
}

// Caller holds mu. A node of `type` after the stream's frontier, which it becomes.
Node* AppendNode(Capture& c, std::vector<Node*>& frontier, cudaGraphNodeType type, StreamOp op) {
  Node* n = AddNode(c.target(), type, frontier, std::move(op));
  frontier.assign(1, n);
  return n;
}

}  // namespace

bool CaptureKernel(uint32_t stream_id, StreamOp op, KernelNodeRecord record, cudaError_t* result) {
  auto shared = std::make_shared<const KernelNodeRecord>(std::move(record));
  return OnCapturedStream(stream_id, result, [&](Capture& c, std::vector<Node*>& frontier) {
    AppendNode(c, frontier, cudaGraphNodeTypeKernel, std::move(op))->kernel = shared;
    return cudaSuccess;
  });
}

bool CaptureOp(uint32_t stream_id, cudaGraphNodeType type, StreamOp op, cudaError_t* result) {
  return OnCapturedStream(stream_id, result, [&](Capture& c, std::vector<Node*>& frontier) {
    AppendNode(c, frontier, type, std::move(op));
    return cudaSuccess;
  });
}

bool RefuseInCapture(uint32_t stream_id, const char* what, cudaError_t* result) {
  if (!AnyCapture()) return false;
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.by_stream.find(stream_id);
  if (it == s.by_stream.end()) return false;
  if (!it->second->invalidated) {
    it->second->invalidated = true;
    std::fprintf(stderr, "phos: %s on a stream being captured: the capture is invalidated\n", what);
  }
  *result = cudaErrorStreamCaptureUnsupported;
  return true;
}

cudaError_t AddOpNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t ndeps,
                      cudaGraphNodeType type, StreamOp op) {
  return AddNodeChecked(node, graph, deps, ndeps, type, std::move(op));
}

cudaError_t SetNodeOp(cudaGraphNode_t node, cudaGraphNodeType type, StreamOp op) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, type)) return SetError(cudaErrorInvalidValue);
  node->op = std::move(op);
  return cudaSuccess;
}

cudaError_t SetExecNodeOp(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeType type, StreamOp op) {
  return SetExecStep(exec, node, type, op);
}

// ---------------------------------------------------------------- graph memory nodes
//
// CUDA gives a graph's allocation one address for the graph's whole life:
// the alloc node makes it usable, the free node (or a cudaFree/
// cudaFreeAsync after the launch) gives it back, and the next launch's
// alloc node brings it back at the same address. phos allocates it once,
// when the node is made (a captured cudaMallocAsync, cudaGraphAddMemAllocNode),
// as an ordinary buffer of the session (so checkpoints carry it), keeps it
// while any graph or executable graph holding the node lives, and makes
// the frees no-ops. Memory nodes replay as nothing.

struct GraphMemory {
  uintptr_t ptr = 0;
  size_t bytes = 0;
  ~GraphMemory();
};

namespace {

// Live graph allocations (start -> bytes) and their totals; its own mutex
// (taken inside G().mu when a node dies, never the other way round).
struct GraphMemoryRegistry {
  std::mutex mu;
  std::map<uintptr_t, size_t> live;
  uint64_t used = 0, high = 0;
};
GraphMemoryRegistry& GraphMem() {
  static auto* r = new GraphMemoryRegistry;
  return *r;
}

cudaError_t NewGraphMemory(size_t bytes, std::shared_ptr<GraphMemory>* out) {
  if (bytes == 0) return SetError(cudaErrorInvalidValue);
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return e;
  auto m = std::make_shared<GraphMemory>();
  m->ptr = reinterpret_cast<uintptr_t>(p);
  m->bytes = bytes;
  GraphMemoryRegistry& r = GraphMem();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live[m->ptr] = bytes;
  r.used += bytes;
  r.high = std::max(r.high, r.used);
  *out = std::move(m);
  return cudaSuccess;
}

// A memory node's replay: nothing to do; holding `mem` keeps the
// allocation alive while the executable graph lives.
StreamOp HoldMemory(std::shared_ptr<GraphMemory> mem) {
  return [mem = std::move(mem)](uint32_t) { return cudaSuccess; };
}

}  // namespace

GraphMemory::~GraphMemory() {
  {
    GraphMemoryRegistry& r = GraphMem();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.erase(ptr);
    r.used -= bytes;
  }
  (void)cudaFree(reinterpret_cast<void*>(ptr));  // no longer a graph allocation: really freed
}

bool IsGraphAllocation(const void* ptr) {
  GraphMemoryRegistry& r = GraphMem();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.live.count(reinterpret_cast<uintptr_t>(ptr)) != 0;
}

bool CaptureMemAlloc(uint32_t stream_id, size_t bytes, void** ptr, cudaError_t* result) {
  if (!AnyCapture()) return false;
  return OnCapturedStream(stream_id, result, [&](Capture& c, std::vector<Node*>& frontier) {
    std::shared_ptr<GraphMemory> mem;
    if (cudaError_t e = NewGraphMemory(bytes, &mem); e != cudaSuccess) return e;
    Node* n = AppendNode(c, frontier, cudaGraphNodeTypeMemAlloc, HoldMemory(mem));
    n->mem = mem;
    n->alloc.poolProps.allocType = cudaMemAllocationTypePinned;
    n->alloc.poolProps.location = {cudaMemLocationTypeDevice, 0};
    n->alloc.bytesize = bytes;
    n->alloc.dptr = reinterpret_cast<void*>(mem->ptr);
    *ptr = n->alloc.dptr;
    return cudaSuccess;
  });
}

bool CaptureMemFree(uint32_t stream_id, void* ptr, cudaError_t* result) {
  if (!AnyCapture()) return false;
  return OnCapturedStream(stream_id, result, [&](Capture& c, std::vector<Node*>& frontier) {
    // Only graph allocations can be freed inside a graph.
    if (!IsGraphAllocation(ptr)) return cudaErrorInvalidValue;
    AppendNode(c, frontier, cudaGraphNodeTypeMemFree, HoldMemory(nullptr))->free_ptr = ptr;
    return cudaSuccess;
  });
}

cudaError_t AddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t ndeps,
                            cudaMemAllocNodeParams* p) {
  if (p == nullptr || node == nullptr) return SetError(cudaErrorInvalidValue);
  if (p->poolProps.allocType != cudaMemAllocationTypePinned ||
      p->poolProps.location.type != cudaMemLocationTypeDevice || p->poolProps.location.id != 0) {
    SayOnce("graph memory nodes other than pinned device memory of device 0 are not supported");
    return SetError(cudaErrorNotSupported);
  }
  std::shared_ptr<GraphMemory> mem;
  if (cudaError_t e = NewGraphMemory(p->bytesize, &mem); e != cudaSuccess) return e;
  const cudaMemAllocNodeParams params = *p;
  cudaError_t e = AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeMemAlloc, HoldMemory(mem), nullptr,
                                 [&](Node* n) {
                                   n->mem = mem;
                                   n->alloc = params;
                                   n->alloc.accessDescs = nullptr;  // the app's array need not outlive the call
                                   n->alloc.accessDescCount = 0;
                                   n->alloc.dptr = reinterpret_cast<void*>(mem->ptr);
                                 });
  if (e == cudaSuccess) p->dptr = reinterpret_cast<void*>(mem->ptr);
  return e;
}

cudaError_t AddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t ndeps,
                           void* dptr) {
  if (!IsGraphAllocation(dptr)) return SetError(cudaErrorInvalidValue);
  return AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeMemFree, HoldMemory(nullptr), nullptr,
                        [dptr](Node* n) { n->free_ptr = dptr; });
}

cudaError_t MemAllocNodeParams(cudaGraphNode_t node, cudaMemAllocNodeParams* out) {
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeMemAlloc)) return SetError(cudaErrorInvalidValue);
  *out = node->alloc;
  return cudaSuccess;
}

cudaError_t MemFreeNodePointer(cudaGraphNode_t node, void** out) {
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeMemFree)) return SetError(cudaErrorInvalidValue);
  *out = node->free_ptr;
  return cudaSuccess;
}

cudaError_t GraphMemAttribute(int device, int attr, uint64_t* value, bool set) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return SetError(e);
  if (!IsCurrentDevice(device) || value == nullptr) {
    return SetError(!IsCurrentDevice(device) ? cudaErrorInvalidDevice : cudaErrorInvalidValue);
  }
  GraphMemoryRegistry& r = GraphMem();
  std::lock_guard<std::mutex> lock(r.mu);
  switch (attr) {
    case cudaGraphMemAttrUsedMemCurrent: case cudaGraphMemAttrReservedMemCurrent:
      if (set) return SetError(cudaErrorInvalidValue);
      *value = r.used;
      return cudaSuccess;
    case cudaGraphMemAttrUsedMemHigh: case cudaGraphMemAttrReservedMemHigh:
      if (set) {
        if (*value != 0) return SetError(cudaErrorInvalidValue);  // only a reset to 0
        r.high = r.used;
      } else {
        *value = r.high;
      }
      return cudaSuccess;
    default:
      return SetError(cudaErrorInvalidValue);
  }
}

bool CaptureEventRecord(uint32_t event_id, uint32_t stream_id, cudaError_t* result) {
  if (!AnyCapture()) return false;
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.by_stream.find(stream_id);
  if (it == s.by_stream.end()) {
    s.events.erase(event_id);  // recorded outside any capture again
    return false;
  }
  s.events[event_id] = {it->second, it->second->frontier[stream_id]};
  *result = it->second->invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
  return true;
}

bool CaptureStreamWaitEvent(uint32_t stream_id, uint32_t event_id, cudaError_t* result) {
  if (!AnyCapture()) return false;
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  auto ev = s.events.find(event_id);
  std::shared_ptr<Capture> c = ev != s.events.end() ? ev->second.capture.lock() : nullptr;
  auto st = s.by_stream.find(stream_id);
  if (!c) {
    if (st == s.by_stream.end()) return false;  // neither side captured: an ordinary wait
    // A captured stream waiting for work outside its capture.
    st->second->invalidated = true;
    *result = cudaErrorStreamCaptureIsolation;
    return true;
  }
  if (st != s.by_stream.end() && st->second != c) {
    st->second->invalidated = true;  // two captures cannot be merged
    c->invalidated = true;
    *result = cudaErrorStreamCaptureMerge;
    return true;
  }
  // Fork (the stream joins the capture) or join (its dependencies grow).
  s.by_stream[stream_id] = c;
  std::vector<Node*>& f = c->frontier[stream_id];
  for (Node* n : ev->second.nodes) {
    if (std::find(f.begin(), f.end(), n) == f.end()) f.push_back(n);
  }
  *result = c->invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
  return true;
}

cudaStreamCaptureStatus CaptureStatusOf(uint32_t stream_id, unsigned long long* id, cudaGraph_t* graph,
                                        const cudaGraphNode_t** deps, size_t* num_deps) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.by_stream.find(stream_id);
  if (it == s.by_stream.end()) return cudaStreamCaptureStatusNone;
  Capture& c = *it->second;
  if (id) *id = c.id;
  if (graph) *graph = c.target();
  const std::vector<Node*>& f = c.frontier[stream_id];
  if (deps) *deps = f.empty() ? nullptr : const_cast<const cudaGraphNode_t*>(f.data());
  if (num_deps) *num_deps = f.size();
  return c.invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
}

cudaError_t UpdateCaptureDependencies(uint32_t stream_id, const cudaGraphNode_t* deps, size_t n, unsigned flags) {
  if (n > 0 && deps == nullptr) return SetError(cudaErrorInvalidValue);
  if (flags != cudaStreamAddCaptureDependencies && flags != cudaStreamSetCaptureDependencies) {
    return SetError(cudaErrorInvalidValue);
  }
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.by_stream.find(stream_id);
  if (it == s.by_stream.end()) return SetError(cudaErrorIllegalState);
  Capture& c = *it->second;
  std::vector<Node*>& f = c.frontier[stream_id];
  if (flags == cudaStreamSetCaptureDependencies) f.clear();
  for (size_t i = 0; i < n; ++i) {
    if (!IsNodeOf(c.target(), deps[i])) return SetError(cudaErrorInvalidValue);
    if (std::find(f.begin(), f.end(), deps[i]) == f.end()) f.push_back(deps[i]);
  }
  return cudaSuccess;
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

// ---------------------------------------------------------------- capture

PHOS_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return BeginCapture(stream, mode, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return BeginCapture(stream, mode, DefaultStream::kPerThread);
}
PHOS_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                      const cudaGraphNode_t* deps, const cudaGraphEdgeData* edges,
                                                      size_t ndeps, cudaStreamCaptureMode mode) {
  if (edges != nullptr) return SetError(cudaErrorNotSupported);  // edge data (programmatic dependent launch)
  if (graph == nullptr) return SetError(cudaErrorInvalidValue);
  return BeginCapture(stream, mode, DefaultStream::kLegacy, graph, deps, ndeps);
}
PHOS_EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                           const cudaGraphNode_t* deps,
                                                           const cudaGraphEdgeData* edges, size_t ndeps,
                                                           cudaStreamCaptureMode mode) {
  if (edges != nullptr) return SetError(cudaErrorNotSupported);
  if (graph == nullptr) return SetError(cudaErrorInvalidValue);
  return BeginCapture(stream, mode, DefaultStream::kPerThread, graph, deps, ndeps);
}
PHOS_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  return EndCapture(stream, graph, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  return EndCapture(stream, graph, DefaultStream::kPerThread);
}
PHOS_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t* deps,
                                                            const cudaGraphEdgeData* edges, size_t n,
                                                            unsigned int flags) {
  if (edges != nullptr) return SetError(cudaErrorNotSupported);  // edge data (programmatic dependent launch)
  return UpdateCaptureDependencies(StreamIdOf(stream), deps, n, flags);
}
PHOS_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t stream, cudaGraphNode_t* deps,
                                                                 const cudaGraphEdgeData* edges, size_t n,
                                                                 unsigned int flags) {
  if (edges != nullptr) return SetError(cudaErrorNotSupported);
  return UpdateCaptureDependencies(StreamIdOf(stream, DefaultStream::kPerThread), deps, n, flags);
}

// ---------------------------------------------------------------- graphs and nodes

PHOS_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) {
  if (graph == nullptr || flags != 0) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* g = new CUgraph_st;
  s.graphs.insert(g);
  *graph = g;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.graphs.erase(graph)) return SetError(cudaErrorInvalidValue);
  ForgetChildren(s, *graph);
  delete graph;  // its execs keep their own operations
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t graph) {
  if (clone == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  if (HasConditionalNodes(*graph)) return SetError(cudaErrorNotSupported);  // CUDA clones no such graph
  Graph* c = CloneGraph(*graph, nullptr).release();
  s.graphs.insert(c);
  std::vector<const Graph*> todo{c};
  while (!todo.empty()) {
    const Graph* g = todo.back();
    todo.pop_back();
    for (const auto& n : g->nodes) {
      if (n->child) {
        s.children.insert(n->child.get());
        todo.push_back(n->child.get());
      }
    }
  }
  *clone = c;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                              size_t ndeps) {
  return AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeEmpty, nullptr);
}

PHOS_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                               size_t ndeps, const cudaKernelNodeParams* params) {
  if (params == nullptr) return SetError(cudaErrorInvalidValue);
  cudaError_t e = cudaSuccess;
  std::shared_ptr<const KernelNodeRecord> record;
  StreamOp op = KernelOp(*params, &e, &record);
  if (e != cudaSuccess) return SetError(e);
  return AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeKernel, std::move(op), nullptr,
                        [&](Node* n) { n->kernel = std::move(record); });
}

// The kernel's parameters as the node holds them: kernelParams points at
// the node's copy of each argument (valid until the node's parameters
// change or the node goes, as in CUDA). A node of a driver function is
// answered by the driver's getter, not this one.
PHOS_EXPORT cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* out) {
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeKernel)) return SetError(cudaErrorInvalidValue);
  if (node->kernel == nullptr) return SetError(cudaErrorInvalidDeviceFunction);  // a driver function's node
  const KernelNodeRecord& r = *node->kernel;
  node->kernel_args.clear();
  auto* base = const_cast<std::byte*>(r.block_bytes.data());
  for (uint32_t off : r.offsets) node->kernel_args.push_back(base + off);
  *out = cudaKernelNodeParams{};
  out->func = const_cast<void*>(r.func);
  out->gridDim = r.grid;
  out->blockDim = r.block;
  out->sharedMemBytes = r.shared_bytes;
  out->kernelParams = node->kernel_args.empty() ? nullptr : node->kernel_args.data();
  out->extra = nullptr;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const cudaKernelNodeParams* params) {
  if (node == nullptr || params == nullptr) return SetError(cudaErrorInvalidValue);
  cudaError_t e = cudaSuccess;
  std::shared_ptr<const KernelNodeRecord> record;
  StreamOp op = KernelOp(*params, &e, &record);
  if (e != cudaSuccess) return SetError(e);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeKernel)) return SetError(cudaErrorInvalidValue);
  node->op = std::move(op);
  node->kernel = std::move(record);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                               size_t ndeps, const cudaMemsetParams* p) {
  if (p == nullptr || p->dst == nullptr || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) ||
      (p->height > 1 && p->pitch < p->width * p->elementSize)) {
    return SetError(cudaErrorInvalidValue);
  }
  return AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeMemset, MemsetOp(*p), nullptr,
                        [p](Node* n) { n->memset = *p; });
}

PHOS_EXPORT cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph,
                                                 const cudaGraphNode_t* deps, size_t ndeps, void* dst,
                                                 const void* src, size_t count, cudaMemcpyKind kind) {
  if ((dst == nullptr || src == nullptr) && count > 0) return SetError(cudaErrorInvalidValue);
  // The copy reads its source when the node runs (host memory included).
  StreamOp op = [dst, src, count, kind](uint32_t s) { return DoMemcpy(dst, src, count, kind, s, false); };
  const cudaMemcpy3DParms p = Linear1D(dst, src, count, kind);
  return AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeMemcpy, std::move(op), nullptr, [p](Node* n) {
    n->copy = p;
    n->has_copy = true;
  });
}

PHOS_EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                               size_t ndeps, const cudaMemcpy3DParms* p) {
  if (cudaError_t e = CheckCopy(p); e != cudaSuccess) return SetError(e);
  const cudaMemcpy3DParms copy = *p;
  return AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeMemcpy, CopyOp(copy), nullptr, [copy](Node* n) {
    n->copy = copy;
    n->has_copy = true;
  });
}

PHOS_EXPORT cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, cudaMemcpy3DParms* p) {
  if (p == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeMemcpy) || !node->has_copy) {
    return SetError(cudaErrorInvalidValue);  // a captured copy keeps no parameters
  }
  *p = node->copy;
  return cudaSuccess;
}

static cudaError_t SetCopy(cudaGraphNode_t node, const cudaMemcpy3DParms& p, StreamOp op) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeMemcpy)) return SetError(cudaErrorInvalidValue);
  node->copy = p;
  node->has_copy = true;
  node->op = std::move(op);
  return cudaSuccess;
}
PHOS_EXPORT cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const cudaMemcpy3DParms* p) {
  if (cudaError_t e = CheckCopy(p); e != cudaSuccess) return SetError(e);
  return SetCopy(node, *p, CopyOp(*p));
}
PHOS_EXPORT cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void* dst, const void* src, size_t count,
                                                       cudaMemcpyKind kind) {
  if ((dst == nullptr || src == nullptr) && count > 0) return SetError(cudaErrorInvalidValue);
  return SetCopy(node, Linear1D(dst, src, count, kind),
                 [dst, src, count, kind](uint32_t s) { return DoMemcpy(dst, src, count, kind, s, false); });
}

PHOS_EXPORT cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                             size_t ndeps, const cudaHostNodeParams* p) {
  if (p == nullptr || p->fn == nullptr) return SetError(cudaErrorInvalidValue);
  return AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeHost, HostOp(p->fn, p->userData), nullptr,
                        [p](Node* n) { n->host = *p; });
}

static cudaError_t AddEventNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t ndeps,
                                cudaEvent_t e, cudaGraphNodeType type) {
  if (e == nullptr) return SetError(cudaErrorInvalidResourceHandle);
  StreamOp op = type == cudaGraphNodeTypeEventRecord ? EventRecordOp(e) : EventWaitOp(e);
  return AddNodeChecked(node, graph, deps, ndeps, type, std::move(op), nullptr, [e](Node* n) { n->event = e; });
}
PHOS_EXPORT cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                                    const cudaGraphNode_t* deps, size_t ndeps, cudaEvent_t e) {
  return AddEventNode(node, graph, deps, ndeps, e, cudaGraphNodeTypeEventRecord);
}
PHOS_EXPORT cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                                  const cudaGraphNode_t* deps, size_t ndeps, cudaEvent_t e) {
  return AddEventNode(node, graph, deps, ndeps, e, cudaGraphNodeTypeWaitEvent);
}

PHOS_EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                                   const cudaGraphNode_t* deps, size_t ndeps, cudaGraph_t child) {
  std::unique_ptr<CUgraph_st> copy;
  {
    Graphs& s = G();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!IsLiveGraph(s, child) || child == graph) return SetError(cudaErrorInvalidValue);
    if (HasConditionalNodes(*child)) return SetError(cudaErrorNotSupported);  // CUDA embeds no such graph
    copy = CloneGraph(*child, nullptr);  // CUDA copies the child graph
  }
  return AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeGraph, nullptr, std::move(copy));
}

PHOS_EXPORT cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                                 const cudaGraphNode_t* to, const cudaGraphEdgeData* edges,
                                                 size_t n) {
  if (edges != nullptr) return SetError(cudaErrorNotSupported);  // edge data (programmatic dependent launch)
  if (n > 0 && (from == nullptr || to == nullptr)) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  for (size_t i = 0; i < n; ++i) {
    if (!IsNodeOf(graph, from[i]) || !IsNodeOf(graph, to[i]) || from[i] == to[i]) {
      return SetError(cudaErrorInvalidValue);
    }
    auto& d = to[i]->deps;
    if (std::find(d.begin(), d.end(), from[i]) != d.end()) return SetError(cudaErrorInvalidValue);  // exists
  }
  for (size_t i = 0; i < n; ++i) to[i]->deps.push_back(from[i]);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (count == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  if (nodes != nullptr) {
    for (size_t i = 0; i < std::min(*count, graph->nodes.size()); ++i) nodes[i] = graph->nodes[i].get();
  }
  *count = nodes != nullptr ? std::min(*count, graph->nodes.size()) : graph->nodes.size();
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (count == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  std::vector<Node*> roots;
  for (const auto& n : graph->nodes) {
    if (n->deps.empty()) roots.push_back(n.get());
  }
  if (nodes != nullptr) {
    for (size_t i = 0; i < std::min(*count, roots.size()); ++i) nodes[i] = roots[i];
  }
  *count = nodes != nullptr ? std::min(*count, roots.size()) : roots.size();
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (node == nullptr || type == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveNode(s, node)) return SetError(cudaErrorInvalidValue);
  *type = node->type;
  return cudaSuccess;
}

// ---------------------------------------------------------------- executable graphs

PHOS_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return Instantiate(exec, graph, flags);
}
PHOS_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                      unsigned long long flags) {
  return Instantiate(exec, graph, flags);
}
static cudaError_t InstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph, cudaGraphInstantiateParams* p) {
  if (p == nullptr) return SetError(cudaErrorInvalidValue);
  cudaError_t e = Instantiate(exec, graph, p->flags);
  p->errNode_out = nullptr;
  p->result_out = e == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
  return e;
}
PHOS_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                       cudaGraphInstantiateParams* p) {
  return InstantiateWithParams(exec, graph, p);
}
PHOS_EXPORT cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                            cudaGraphInstantiateParams* p) {
  return InstantiateWithParams(exec, graph, p);
}

PHOS_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  cudaEvent_t serial = nullptr;
  {
    Graphs& s = G();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.execs.erase(exec)) return SetError(cudaErrorInvalidValue);
    serial = exec->serial;
    delete exec;  // a launch in progress on another thread holds its own steps
  }
  return cudaEventDestroy(serial);
}

PHOS_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return Launch(exec, stream, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return Launch(exec, stream, DefaultStream::kPerThread);
}

// Uploading prepares device-side state CUDA keeps for a graph; a phos graph
// has none (its nodes are calls), so there is nothing to do ahead.
static cudaError_t Upload(cudaGraphExec_t exec, cudaStream_t stream, DefaultStream zero) {
  if (!IsKnownStream(StreamIdOf(stream, zero))) return SetError(cudaErrorInvalidResourceHandle);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.execs.count(exec) ? cudaSuccess : SetError(cudaErrorInvalidValue);
}
PHOS_EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  return Upload(exec, stream, DefaultStream::kLegacy);
}
PHOS_EXPORT cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return Upload(exec, stream, DefaultStream::kPerThread);
}

// The exec takes the operations of `graph` when both have the same nodes
// (same count and types, in creation order): what an app that rebuilt or
// re-captured the same work with new parameters passes.
PHOS_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                            cudaGraphExecUpdateResultInfo* info) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (info == nullptr || !s.execs.count(exec) || !IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  info->errorNode = nullptr;
  info->errorFromNode = nullptr;
  std::vector<cudaGraphNodeType> shape;
  for (const auto& n : graph->nodes) shape.push_back(n->type);
  if (shape.size() != exec->shape.size()) {
    info->result = cudaGraphExecUpdateErrorTopologyChanged;
    return SetError(cudaErrorGraphExecUpdateFailure);
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != exec->shape[i]) {
      info->result = cudaGraphExecUpdateErrorNodeTypeChanged;
      info->errorNode = graph->nodes[i].get();
      return SetError(cudaErrorGraphExecUpdateFailure);
    }
  }
  auto steps = std::make_shared<std::vector<Exec::Step>>();
  if (!ExecSteps(*graph, steps.get())) {
    info->result = cudaGraphExecUpdateErrorTopologyChanged;
    return SetError(cudaErrorGraphExecUpdateFailure);
  }
  exec->steps = std::move(steps);
  info->result = cudaGraphExecUpdateSuccess;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                         const cudaKernelNodeParams* params) {
  if (node == nullptr || params == nullptr) return SetError(cudaErrorInvalidValue);
  cudaError_t e = cudaSuccess;
  StreamOp op = KernelOp(*params, &e);
  if (e != cudaSuccess) return SetError(e);
  return SetExecStep(exec, node, cudaGraphNodeTypeKernel, op);
}

// ---------------------------------------------------------------- node queries and parameters

PHOS_EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* deps,
                                                     cudaGraphEdgeData* edges, size_t* count) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveNode(s, node) || !IsLiveGraph(s, node->graph)) {
    return SetError(cudaErrorInvalidValue);
  }
  return ListNodes(node->deps, deps, edges, count);
}

PHOS_EXPORT cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* dependents,
                                                       cudaGraphEdgeData* edges, size_t* count) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveNode(s, node) || !IsLiveGraph(s, node->graph)) {
    return SetError(cudaErrorInvalidValue);
  }
  std::vector<Node*> out;
  for (const auto& n : node->graph->nodes) {
    if (std::find(n->deps.begin(), n->deps.end(), node) != n->deps.end()) out.push_back(n.get());
  }
  return ListNodes(out, dependents, edges, count);
}

PHOS_EXPORT cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                                          cudaGraphEdgeData* edges, size_t* count) {
  if (count == nullptr || ((from == nullptr) != (to == nullptr))) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  std::vector<Node*> f, t;
  for (const auto& n : graph->nodes) {
    for (Node* d : n->deps) {
      f.push_back(d);
      t.push_back(n.get());
    }
  }
  if (from == nullptr) {
    *count = f.size();
    return cudaSuccess;
  }
  size_t want = *count;
  (void)ListNodes(f, from, edges, count);
  return ListNodes(t, to, nullptr, &want);
}

PHOS_EXPORT cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                                    const cudaGraphNode_t* to, const cudaGraphEdgeData* edges,
                                                    size_t n) {
  if (edges != nullptr) return SetError(cudaErrorNotSupported);  // edge data (programmatic dependent launch)
  if (n > 0 && (from == nullptr || to == nullptr)) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  for (size_t i = 0; i < n; ++i) {  // every edge must exist before any goes
    if (!IsNodeOf(graph, from[i]) || !IsNodeOf(graph, to[i])) return SetError(cudaErrorInvalidValue);
    auto& d = to[i]->deps;
    if (std::find(d.begin(), d.end(), from[i]) == d.end()) return SetError(cudaErrorInvalidValue);
  }
  for (size_t i = 0; i < n; ++i) {
    auto& d = to[i]->deps;
    d.erase(std::find(d.begin(), d.end(), from[i]));
  }
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveNode(s, node) || !IsLiveGraph(s, node->graph)) {
    return SetError(cudaErrorInvalidValue);
  }
  Graph* g = node->graph;
  for (const auto& n : g->nodes) {  // its edges go with it
    auto& d = n->deps;
    d.erase(std::remove(d.begin(), d.end(), node), d.end());
  }
  if (node->child) {
    ForgetChildren(s, *node->child);
    s.children.erase(node->child.get());
  }
  for (const auto& b : node->bodies) {
    ForgetChildren(s, *b);
    s.children.erase(b.get());
  }
  g->nodes.erase(std::find_if(g->nodes.begin(), g->nodes.end(), [&](const auto& n) { return n.get() == node; }));
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t* out, cudaGraphNode_t original, cudaGraph_t clone) {
  if (out == nullptr || original == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, clone)) return SetError(cudaErrorInvalidValue);
  for (const auto& n : clone->nodes) {
    if (n->cloned_from == original) {
      *out = n.get();
      return cudaSuccess;
    }
  }
  return SetError(cudaErrorInvalidValue);
}

PHOS_EXPORT cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t* graph) {
  if (graph == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeGraph)) return SetError(cudaErrorInvalidValue);
  *graph = node->child.get();  // owned by the node (CUDA's rule too)
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, cudaHostNodeParams* p) {
  if (p == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeHost) || node->host.fn == nullptr) return SetError(cudaErrorInvalidValue);
  *p = node->host;
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const cudaHostNodeParams* p) {
  if (p == nullptr || p->fn == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeHost)) return SetError(cudaErrorInvalidValue);
  node->host = *p;
  node->op = HostOp(p->fn, p->userData);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, cudaMemsetParams* p) {
  if (p == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeMemset) || node->memset.dst == nullptr) {
    return SetError(cudaErrorInvalidValue);  // a captured memset keeps no parameters
  }
  *p = node->memset;
  return cudaSuccess;
}

static bool ValidMemset(const cudaMemsetParams* p) {
  return p != nullptr && p->dst != nullptr && (p->elementSize == 1 || p->elementSize == 2 || p->elementSize == 4) &&
         (p->height <= 1 || p->pitch >= p->width * p->elementSize);
}

PHOS_EXPORT cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const cudaMemsetParams* p) {
  if (!ValidMemset(p)) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, cudaGraphNodeTypeMemset)) return SetError(cudaErrorInvalidValue);
  node->memset = *p;
  node->op = MemsetOp(*p);
  return cudaSuccess;
}

static cudaError_t NodeEvent(cudaGraphNode_t node, cudaGraphNodeType type, cudaEvent_t* out) {
  if (out == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, type) || node->event == nullptr) return SetError(cudaErrorInvalidValue);
  *out = node->event;
  return cudaSuccess;
}
static cudaError_t SetNodeEvent(cudaGraphNode_t node, cudaGraphNodeType type, cudaEvent_t e) {
  if (e == nullptr) return SetError(cudaErrorInvalidResourceHandle);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsNodeOfType(s, node, type)) return SetError(cudaErrorInvalidValue);
  node->event = e;
  node->op = type == cudaGraphNodeTypeEventRecord ? EventRecordOp(e) : EventWaitOp(e);
  return cudaSuccess;
}
PHOS_EXPORT cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* e) {
  return NodeEvent(node, cudaGraphNodeTypeEventRecord, e);
}
PHOS_EXPORT cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t e) {
  return SetNodeEvent(node, cudaGraphNodeTypeEventRecord, e);
}
PHOS_EXPORT cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* e) {
  return NodeEvent(node, cudaGraphNodeTypeWaitEvent, e);
}
PHOS_EXPORT cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t e) {
  return SetNodeEvent(node, cudaGraphNodeTypeWaitEvent, e);
}

// ---------------------------------------------------------------- executable-graph parameters

PHOS_EXPORT cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                       const cudaHostNodeParams* p) {
  if (p == nullptr || p->fn == nullptr) return SetError(cudaErrorInvalidValue);
  return SetExecStep(exec, node, cudaGraphNodeTypeHost, HostOp(p->fn, p->userData));
}
PHOS_EXPORT cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                         const cudaMemsetParams* p) {
  if (!ValidMemset(p)) return SetError(cudaErrorInvalidValue);
  return SetExecStep(exec, node, cudaGraphNodeTypeMemset, MemsetOp(*p));
}
PHOS_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                         const cudaMemcpy3DParms* p) {
  if (cudaError_t e = CheckCopy(p); e != cudaSuccess) return SetError(e);
  return SetExecStep(exec, node, cudaGraphNodeTypeMemcpy, CopyOp(*p));
}
PHOS_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t exec, cudaGraphNode_t node, void* dst,
                                                           const void* src, size_t count, cudaMemcpyKind kind) {
  if ((dst == nullptr || src == nullptr) && count > 0) return SetError(cudaErrorInvalidValue);
  return SetExecStep(exec, node, cudaGraphNodeTypeMemcpy,
                     [dst, src, count, kind](uint32_t s) { return DoMemcpy(dst, src, count, kind, s, false); });
}
PHOS_EXPORT cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                             cudaEvent_t e) {
  if (e == nullptr) return SetError(cudaErrorInvalidResourceHandle);
  return SetExecStep(exec, node, cudaGraphNodeTypeEventRecord, EventRecordOp(e));
}
PHOS_EXPORT cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                           cudaEvent_t e) {
  if (e == nullptr) return SetError(cudaErrorInvalidResourceHandle);
  return SetExecStep(exec, node, cudaGraphNodeTypeWaitEvent, EventWaitOp(e));
}

// Kernel, memset and memcpy nodes can be disabled (CUDA's rule): the node
// then does nothing until enabled again.
PHOS_EXPORT cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int enabled) {
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.execs.count(exec) || node == nullptr) return SetError(cudaErrorInvalidValue);
  auto steps = std::make_shared<std::vector<Exec::Step>>(*exec->steps);
  bool found = false;
  for (Exec::Step& step : *steps) {
    if (step.node != node) continue;
    if (step.type != cudaGraphNodeTypeKernel && step.type != cudaGraphNodeTypeMemset &&
        step.type != cudaGraphNodeTypeMemcpy) {
      return SetError(cudaErrorInvalidValue);
    }
    step.enabled = enabled != 0;
    found = true;
  }
  if (!found) return SetError(cudaErrorInvalidValue);
  exec->steps = std::move(steps);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int* enabled) {
  if (enabled == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.execs.count(exec)) return SetError(cudaErrorInvalidValue);
  for (const Exec::Step& step : *exec->steps) {
    if (step.node == node) {
      *enabled = step.enabled ? 1 : 0;
      return cudaSuccess;
    }
  }
  return SetError(cudaErrorInvalidValue);
}

PHOS_EXPORT cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t exec, unsigned long long* flags) {
  if (flags == nullptr) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.execs.count(exec)) return SetError(cudaErrorInvalidValue);
  *flags = exec->flags;
  return cudaSuccess;
}

// A Graphviz description of the graph: one box per node (its type), one
// arrow per edge. The flags choose detail CUDA can add; phos writes the
// same outline for every value.
PHOS_EXPORT cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path, unsigned int /*flags*/) {
  if (path == nullptr) return SetError(cudaErrorInvalidValue);
  std::string dot = "digraph phos_graph {\n  node [shape=box];\n";
  {
    Graphs& s = G();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
    static const char* const kNames[] = {"kernel", "memcpy", "memset", "host", "graph", "empty", "wait event",
                                         "record event"};
    std::map<const Node*, size_t> index;
    for (size_t i = 0; i < graph->nodes.size(); ++i) {
      const Node& n = *graph->nodes[i];
      index[&n] = i;
      const int t = static_cast<int>(n.type);
      dot += "  n" + std::to_string(i) + " [label=\"" + std::to_string(i) + ": " +
             (t >= 0 && t < 8 ? kNames[t] : "node") + "\"];\n";
    }
    for (size_t i = 0; i < graph->nodes.size(); ++i) {
      for (const Node* d : graph->nodes[i]->deps) {
        dot += "  n" + std::to_string(index[d]) + " -> n" + std::to_string(i) + ";\n";
      }
    }
  }
  dot += "}\n";
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) return SetError(cudaErrorOperatingSystem);
  const bool ok = std::fwrite(dot.data(), 1, dot.size(), f) == dot.size();
  return std::fclose(f) == 0 && ok ? cudaSuccess : SetError(cudaErrorOperatingSystem);
}

// ---------------------------------------------------------------- the generic node forms (CUDA 12.2+)
// cudaGraphAddNode / cudaGraphNodeSetParams / cudaGraphExecNodeSetParams:
// one parameter union, dispatched to the typed calls above (conditional
// nodes: AddConditionalNode). External-semaphore and batch memory-operation
// nodes are refused by name.

// ---------------------------------------------------------------- conditional nodes
// A conditional handle is the device address of a 4-byte slot holding its
// value: the app's kernels set it (cudaGraphSetConditional, which the sim's
// interpreter implements as a store there; phosd refuses such kernels on a
// backend that does not: Backend::ImplementsConditionalHandles), the
// node's step reads it (ConditionalOp). The slots are carved from
// cudaMalloc'd chunks, ordinary buffers of the session, so checkpoints,
// restores and migration carry the values like any device memory. Slots
// are not reused (a graph keeps its handles for its life; 16384 per chunk).
namespace {
struct ConditionalSlots {
  std::mutex mu;           // guards chunk and used
  uintptr_t chunk = 0;     // the current chunk (0: none yet)
  size_t used = 0;         // bytes of it handed out
};
ConditionalSlots& Slots() {
  static auto* s = new ConditionalSlots;  // never destroyed: calls may come during exit
  return *s;
}
constexpr size_t kSlotChunkBytes = 64u << 10;

cudaError_t NewConditionalSlot(unsigned initial, uintptr_t* out) {
  ConditionalSlots& c = Slots();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.chunk == 0 || c.used + sizeof(unsigned) > kSlotChunkBytes) {
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, kSlotChunkBytes); e != cudaSuccess) return e;
    c.chunk = reinterpret_cast<uintptr_t>(p);
    c.used = 0;
  }
  const uintptr_t slot = c.chunk + c.used;
  if (cudaError_t e = cudaMemcpy(reinterpret_cast<void*>(slot), &initial, sizeof initial, cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    return e;
  }
  c.used += sizeof(unsigned);
  *out = slot;
  return cudaSuccess;
}

// Caller holds mu. Whether `h` was made for `g` or for a graph `g` lies in
// (the app may put a conditional node in a body, naming an outer graph's
// handle, as CUDA's nested conditionals do).
bool HandleOf(const Graphs& s, const Graph* g, cudaGraphConditionalHandle h) {
  for (const Graph* cur = g; cur != nullptr;) {
    for (const auto& c : cur->conditionals) {
      if (c.handle == h) return true;
    }
    // The graph whose node owns `cur` as a body or child, if any.
    const Graph* parent = nullptr;
    for (const Graph* candidate : s.graphs) {
      for (const auto& n : candidate->nodes) {
        for (const auto& b : n->bodies) {
          if (b.get() == cur) parent = candidate;
        }
        if (n->child.get() == cur) parent = candidate;
      }
    }
    for (const Graph* candidate : s.children) {
      for (const auto& n : candidate->nodes) {
        for (const auto& b : n->bodies) {
          if (b.get() == cur) parent = candidate;
        }
        if (n->child.get() == cur) parent = candidate;
      }
    }
    cur = parent;
  }
  return false;
}
}  // namespace

void phos::client::ForgetConditionalSlots() {
  ConditionalSlots& c = Slots();
  std::lock_guard<std::mutex> lock(c.mu);
  c.chunk = 0;  // freed by the reset with every buffer
  c.used = 0;
}

static cudaError_t AddConditionalNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                      size_t ndeps, cudaConditionalNodeParams* p) {
  const bool size_ok = (p->type == cudaGraphCondTypeIf && (p->size == 1 || p->size == 2)) ||
                       (p->type == cudaGraphCondTypeWhile && p->size == 1) ||
                       (p->type == cudaGraphCondTypeSwitch && p->size >= 1 && p->size <= 1024);
  if (!size_ok) return SetError(cudaErrorInvalidValue);
  {
    Graphs& s = G();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!IsLiveGraph(s, graph) || !HandleOf(s, graph, p->handle)) return SetError(cudaErrorInvalidValue);
  }
  std::vector<std::unique_ptr<Graph>> bodies;
  for (unsigned i = 0; i < p->size; ++i) bodies.push_back(std::make_unique<Graph>());
  Node* made = nullptr;
  cudaError_t e = AddNodeChecked(node, graph, deps, ndeps, cudaGraphNodeTypeConditional, nullptr, nullptr,
                                 [&](Node* n) {
                                   n->cond_handle = p->handle;
                                   n->cond_type = p->type;
                                   for (auto& b : bodies) {
                                     n->body_handles.push_back(b.get());
                                     G().children.insert(b.get());  // mu is held by AddNodeChecked
                                     n->bodies.push_back(std::move(b));
                                   }
                                   made = n;
                                 });
  if (e != cudaSuccess) return e;
  p->phGraph_out = made->body_handles.data();  // owned by the node, as CUDA's array is
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* out, cudaGraph_t graph,
                                                         unsigned int default_value, unsigned int flags) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return e;
  if (out == nullptr || (flags & ~static_cast<unsigned>(cudaGraphCondAssignDefault)) != 0) {
    return SetError(cudaErrorInvalidValue);
  }
  {
    Graphs& s = G();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  }
  // The slot outside the graphs' lock: cudaMalloc and cudaMemcpy may ask
  // whether a stream is being captured (which takes it).
  uintptr_t slot = 0;
  if (cudaError_t e = NewConditionalSlot(default_value, &slot); e != cudaSuccess) return e;
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);  // destroyed meanwhile
  graph->conditionals.push_back({slot, default_value, (flags & cudaGraphCondAssignDefault) != 0});
  *out = slot;
  return cudaSuccess;
}

static cudaError_t RefuseNodeType(cudaGraphNodeType type) {
  static std::atomic<uint64_t> said{0};
  if (FirstTimeFor(said, static_cast<unsigned>(type))) {
    std::fprintf(stderr, "phos: graph nodes of type %d (external-semaphore or batch memory-operation nodes) are not "
                         "supported (docs/interposer.md \"CUDA graphs\")\n", static_cast<int>(type));
  }
  return SetError(cudaErrorNotSupported);
}
static cudaKernelNodeParams KernelParamsOf(const cudaKernelNodeParamsV2& k) {
  cudaKernelNodeParams p{};
  p.func = k.func;
  p.gridDim = k.gridDim;
  p.blockDim = k.blockDim;
  p.sharedMemBytes = k.sharedMemBytes;
  p.kernelParams = k.kernelParams;
  p.extra = k.extra;
  return p;
}
static cudaMemsetParams MemsetParamsOf(const cudaMemsetParamsV2& m) {
  return cudaMemsetParams{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
}

PHOS_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                         const cudaGraphEdgeData* edges, size_t ndeps, cudaGraphNodeParams* p) {
  if (edges != nullptr) return SetError(cudaErrorNotSupported);  // edge data (programmatic dependent launch)
  if (p == nullptr) return SetError(cudaErrorInvalidValue);
  switch (p->type) {
    case cudaGraphNodeTypeKernel: {
      const cudaKernelNodeParams k = KernelParamsOf(p->kernel);
      return cudaGraphAddKernelNode(node, graph, deps, ndeps, &k);
    }
    case cudaGraphNodeTypeMemcpy:
      if (p->memcpy.flags != 0) return SetError(cudaErrorInvalidValue);
      return cudaGraphAddMemcpyNode(node, graph, deps, ndeps, &p->memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
      const cudaMemsetParams m = MemsetParamsOf(p->memset);
      return cudaGraphAddMemsetNode(node, graph, deps, ndeps, &m);
    }
    case cudaGraphNodeTypeHost: {
      const cudaHostNodeParams h{p->host.fn, p->host.userData};
      return cudaGraphAddHostNode(node, graph, deps, ndeps, &h);
    }
    case cudaGraphNodeTypeGraph: {
      cudaError_t e = cudaGraphAddChildGraphNode(node, graph, deps, ndeps, p->graph.graph);
      // Move: the node owns the child now; phos's node holds its own copy,
      // so the app's handle goes (it must not be used any more either way).
      if (e == cudaSuccess && p->graph.ownership == cudaGraphChildGraphOwnershipMove) {
        (void)cudaGraphDestroy(p->graph.graph);
      }
      return e;
    }
    case cudaGraphNodeTypeEmpty: return cudaGraphAddEmptyNode(node, graph, deps, ndeps);
    case cudaGraphNodeTypeMemAlloc: {
      cudaMemAllocNodeParams a{p->alloc.poolProps, p->alloc.accessDescs, p->alloc.accessDescCount,
                               p->alloc.bytesize, nullptr};
      cudaError_t e = AddMemAllocNode(node, graph, deps, ndeps, &a);
      p->alloc.dptr = a.dptr;
      return e;
    }
    case cudaGraphNodeTypeMemFree: return AddMemFreeNode(node, graph, deps, ndeps, p->free.dptr);
    case cudaGraphNodeTypeEventRecord: return cudaGraphAddEventRecordNode(node, graph, deps, ndeps, p->eventRecord.event);
    case cudaGraphNodeTypeWaitEvent: return cudaGraphAddEventWaitNode(node, graph, deps, ndeps, p->eventWait.event);
    case cudaGraphNodeTypeConditional: return AddConditionalNode(node, graph, deps, ndeps, &p->conditional);
    default: return RefuseNodeType(p->type);
  }
}

PHOS_EXPORT cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, cudaGraphNodeParams* p) {
  if (p == nullptr) return SetError(cudaErrorInvalidValue);
  switch (p->type) {
    case cudaGraphNodeTypeKernel: {
      const cudaKernelNodeParams k = KernelParamsOf(p->kernel);
      return cudaGraphKernelNodeSetParams(node, &k);
    }
    case cudaGraphNodeTypeMemcpy: return cudaGraphMemcpyNodeSetParams(node, &p->memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
      const cudaMemsetParams m = MemsetParamsOf(p->memset);
      return cudaGraphMemsetNodeSetParams(node, &m);
    }
    case cudaGraphNodeTypeHost: {
      const cudaHostNodeParams h{p->host.fn, p->host.userData};
      return cudaGraphHostNodeSetParams(node, &h);
    }
    case cudaGraphNodeTypeEventRecord: return cudaGraphEventRecordNodeSetEvent(node, p->eventRecord.event);
    case cudaGraphNodeTypeWaitEvent: return cudaGraphEventWaitNodeSetEvent(node, p->eventWait.event);
    default: return RefuseNodeType(p->type);
  }
}

PHOS_EXPORT cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                   cudaGraphNodeParams* p) {
  if (p == nullptr) return SetError(cudaErrorInvalidValue);
  switch (p->type) {
    case cudaGraphNodeTypeKernel: {
      const cudaKernelNodeParams k = KernelParamsOf(p->kernel);
      return cudaGraphExecKernelNodeSetParams(exec, node, &k);
    }
    case cudaGraphNodeTypeMemcpy: return cudaGraphExecMemcpyNodeSetParams(exec, node, &p->memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
      const cudaMemsetParams m = MemsetParamsOf(p->memset);
      return cudaGraphExecMemsetNodeSetParams(exec, node, &m);
    }
    case cudaGraphNodeTypeHost: {
      const cudaHostNodeParams h{p->host.fn, p->host.userData};
      return cudaGraphExecHostNodeSetParams(exec, node, &h);
    }
    case cudaGraphNodeTypeEventRecord: return cudaGraphExecEventRecordNodeSetEvent(exec, node, p->eventRecord.event);
    case cudaGraphNodeTypeWaitEvent: return cudaGraphExecEventWaitNodeSetEvent(exec, node, p->eventWait.event);
    default: return RefuseNodeType(p->type);
  }
}

// ---------------------------------------------------------------- graph memory nodes (runtime API)

PHOS_EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                                 const cudaGraphNode_t* deps, size_t ndeps,
                                                 cudaMemAllocNodeParams* p) {
  return AddMemAllocNode(node, graph, deps, ndeps, p);
}
PHOS_EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                                size_t ndeps, void* dptr) {
  return AddMemFreeNode(node, graph, deps, ndeps, dptr);
}
PHOS_EXPORT cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, cudaMemAllocNodeParams* out) {
  return MemAllocNodeParams(node, out);
}
PHOS_EXPORT cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void* dptr_out) {
  return MemFreeNodePointer(node, static_cast<void**>(dptr_out));
}
// Graph allocations are buffers of their own, released when their graph
// goes: there is no reserve to trim.
PHOS_EXPORT cudaError_t cudaDeviceGraphMemTrim(int device) {
  uint64_t ignored = 0;
  return GraphMemAttribute(device, cudaGraphMemAttrUsedMemCurrent, &ignored, false);
}
PHOS_EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, cudaGraphMemAttributeType attr, void* value) {
  return GraphMemAttribute(device, attr, static_cast<uint64_t*>(value), false);
}
PHOS_EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, cudaGraphMemAttributeType attr, void* value) {
  return GraphMemAttribute(device, attr, static_cast<uint64_t*>(value), true);
}

// ---------------------------------------------------------------- user objects (user_objects.h)

PHOS_EXPORT cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t obj, unsigned int count,
                                                  unsigned int flags) {
  if (count == 0 || (flags & ~unsigned{cudaGraphUserObjectMove}) != 0 || !IsLiveUserObject(obj)) {
    return SetError(cudaErrorInvalidValue);
  }
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph)) return SetError(cudaErrorInvalidValue);
  // Move: the caller's references become the graph's; else new ones.
  if (!(flags & cudaGraphUserObjectMove)) RetainUserObject(obj, count);
  graph->user_objects.Add(obj, count);
  return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t obj, unsigned int count) {
  if (count == 0) return SetError(cudaErrorInvalidValue);
  Graphs& s = G();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!IsLiveGraph(s, graph) || !graph->user_objects.Release(obj, count)) return SetError(cudaErrorInvalidValue);
  return cudaSuccess;
}
