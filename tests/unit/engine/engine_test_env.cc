#include "engine_test_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "backend/backend_factory.h"
#include "engine/engine_hook.h"

namespace phos::engine::testing {

std::vector<std::byte> Pattern(int seed, std::uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  std::uint32_t x = 0x9E3779B9u * static_cast<std::uint32_t>(seed + 1);
  for (std::uint64_t off = 0; off < bytes; off += 4) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    std::memcpy(out.data() + off, &x, std::min<std::uint64_t>(4, bytes - off));
  }
  return out;
}

std::vector<std::byte> ReadAppFixture(const std::string& name) {
  std::ifstream f(std::string(PHOS_TEST_APPS_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

wire::LaunchRequest Grid(uint32_t blocks, uint32_t threads) {
  wire::LaunchRequest g{};
  g.grid[0] = blocks;
  g.grid[1] = g.grid[2] = 1;
  g.block[0] = threads;
  g.block[1] = g.block[2] = 1;
  return g;
}

Status EngineTestEnv::Start(const std::string& prefix, double link_gbps, int gpus) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return Status::FromErrno("mkdtemp " + tmpl, errno);
  dir_ = tmpl;
  backend::BackendOptions bo;
  bo.kind = backend::BackendKind::kSim;
  bo.sim.link_gbps = link_gbps;
  bo.sim.device_count = gpus;
  std::string why;
  PHOS_RETURN_IF_ERROR(backend::CreateBackend(bo, &backend_, &why));
  server_ = std::make_unique<session::SessionServer>(backend_.get(), session::SessionServerOptions{},
                                                     session::SessionCallbacks{});
  server_->SetHookFactory(EngineHook::Make);  // before any app connects: every session gets the hook
  return server_->Start(dir_ + "/phosd.sock.data");
}

EngineTestEnv::~EngineTestEnv() {
  if (server_) server_->Stop();
  server_.reset();
  backend_.reset();
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
}

Status EngineTestEnv::Connect(std::unique_ptr<session::testing::FakeApp>* app,
                              std::shared_ptr<session::Session>* session) {
  std::shared_ptr<session::Session> before = server_->FindByPid(getpid());
  PHOS_RETURN_IF_ERROR(session::testing::FakeApp::Connect(dir_ + "/phosd.sock.data", app));
  for (int i = 0; i < 500; ++i) {
    std::shared_ptr<session::Session> s = server_->FindByPid(getpid());
    if (s && s != before && !s->finished()) {
      *session = std::move(s);
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::Unavailable("no session appeared for the fake app within 5 s");
}

}  // namespace phos::engine::testing
