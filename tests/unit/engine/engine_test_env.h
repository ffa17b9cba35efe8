// What the engine tests share: a sim backend, a real SessionServer whose
// sessions get the engine's admission hook, fake apps (tests/unit/session/
// fake_app.h) connected to it and their sessions, a temporary directory;
// and the tests/apps fixtures (nvcc-built fatbins) with a launch geometry
// helper.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "fake_app.h"
#include "protocol/wire.h"
#include "session/session.h"
#include "session/session_server.h"

namespace phos::engine::testing {

/// The bytes of a tests/apps build output (e.g. "vector_add.fatbin");
/// empty (and a test failure) when it is missing.
std::vector<std::byte> ReadAppFixture(const std::string& name);

/// Deterministic test content: distinct per seed and per 4-byte word.
std::vector<std::byte> Pattern(int seed, std::uint64_t bytes);

/// A 1-D launch: `blocks` blocks of `threads` threads.
wire::LaunchRequest Grid(uint32_t blocks, uint32_t threads);

class EngineTestEnv {
 public:
  /// Creates /tmp/<prefix>-XXXXXX, a sim backend of `gpus` GPUs
  /// (`link_gbps` 0 = unthrottled) and a started SessionServer with
  /// EngineHook::Make.
  Status Start(const std::string& prefix, double link_gbps = 0, int gpus = 1);
  /// Stops the server and removes the directory (apps must be gone).
  ~EngineTestEnv();

  /// Connects a fake app and waits (up to 5 s) for its session: the newest
  /// session of this process.
  Status Connect(std::unique_ptr<session::testing::FakeApp>* app, std::shared_ptr<session::Session>* session);

  const std::string& dir() const { return dir_; }
  backend::Backend* backend() const { return backend_.get(); }
  session::SessionServer* server() const { return server_.get(); }

 private:
  std::string dir_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<session::SessionServer> server_;
};

}  // namespace phos::engine::testing
