// phos send-image DIR --to HOST:PORT --peer-token FILE [--name N] [--json]:
// streams an image directory straight from this process to a phosd started
// with --listen (the migration transport, docs/migration.md). No local
// daemon is needed. Prints the destination's path of the committed copy on
// stdout (one line, for scripts) — or with --json one object: path, name,
// destination, files, bytes, seconds, mb_per_s, transport — and a summary
// and, on a terminal, progress on stderr. Errors go to stderr, exit 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <google/protobuf/struct.pb.h>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "peer/peer_client.h"
#include "peer/peer_token.h"

namespace phos::cli {
namespace {

struct SendImageArgs {
  std::string dir, to, token_file, name;
  std::uint64_t chunk_bytes = 2ull << 20;
  std::uint64_t max_rate = 0;
  std::string transport = "auto";
  bool json = false;
};

int RunSendImage(const SendImageArgs& a) {
  std::string token;
  if (Status s = peer::LoadPeerToken(a.token_file, &token); !s.ok()) {
    std::cerr << "phos: send-image: " << s.message() << "\n";
    return 1;
  }
  std::string name = a.name;
  if (name.empty()) {
    std::filesystem::path p(a.dir);
    name = (p.filename().empty() ? p.parent_path() : p).filename().string();
  }
  const bool tty = isatty(2) != 0;
  auto last = std::chrono::steady_clock::now();
  peer::SendProgress progress = [&](std::uint64_t done, std::uint64_t total) {
    if (!tty) return;
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last < std::chrono::milliseconds(200)) return;
    last = now;
    std::fprintf(stderr, "\rsend-image: %s / %s", HumanBytes(done).c_str(), HumanBytes(total).c_str());
    if (done == total) std::fprintf(stderr, "\n");
  };
  peer::SendImageOptions options;
  options.chunk_bytes = a.chunk_bytes;
  options.max_bytes_per_sec = a.max_rate;
  options.transport = a.transport == "grpc"   ? peer::SendImageOptions::Transport::kGrpc
                      : a.transport == "data" ? peer::SendImageOptions::Transport::kDataChannel
                                              : peer::SendImageOptions::Transport::kAuto;
  peer::SendImageResult result;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = peer::SendImage(a.to, token, a.dir, name, progress, &result, options);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) {
    if (tty) std::fprintf(stderr, "\n");
    std::cerr << "phos: send-image: " << s.message() << "\n";
    return 1;
  }
  const double rate = static_cast<double>(result.bytes) / 1e6 / (secs > 0 ? secs : 1e-9);
  if (a.json) {
    google::protobuf::Struct out;
    auto& f = *out.mutable_fields();
    f["path"].set_string_value(result.path);
    f["name"].set_string_value(name);
    f["destination"].set_string_value(a.to);
    f["files"].set_number_value(result.files);
    f["bytes"].set_number_value(static_cast<double>(result.bytes));
    f["seconds"].set_number_value(secs);
    f["mb_per_s"].set_number_value(rate);
    f["transport"].set_string_value(result.transport);
    PrintJson(out);
    std::cout << std::endl;
  } else {
    std::cout << result.path << std::endl;
  }
  std::fprintf(stderr, "send-image OK: %s -> %s:%s, %s in %u files, %.3f s, %.0f MB/s (%s)\n", a.dir.c_str(),
               a.to.c_str(), result.path.c_str(), HumanBytes(result.bytes).c_str(), result.files, secs, rate,
               result.transport.c_str());
  return 0;
}

}  // namespace

void AddSendImageCommand(CLI::App* app, int* exit_code) {
  auto args = std::make_shared<SendImageArgs>();
  CLI::App* cmd = app->add_subcommand(
      "send-image",
      "Stream a checkpoint image directory to another phosd (started with --listen) as "
      "<its checkpoint root>/incoming/NAME; prints that path. No local daemon needed.");
  cmd->add_option("DIR", args->dir, "The image directory (every regular file under it is sent)")->required();
  cmd->add_option("--to", args->to, "The destination daemon's --listen address, HOST:PORT")->required();
  cmd->add_option("--peer-token", args->token_file, "File holding the destination's peer token (mode 0600)")
      ->required();
  cmd->add_option("--name", args->name, "Name on the destination (default: DIR's last component)");
  cmd->add_option("--chunk-size", args->chunk_bytes, "Bytes per message, e.g. 1M, 4M")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("2M");
  cmd->add_option("--max-rate", args->max_rate, "Cap on bytes per second, e.g. 100M (default: no cap)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--transport", args->transport,
                  "How the bytes travel: data = a raw TCP data channel beside the gRPC connection (the "
                  "peer's OpenDataChannel), grpc = inside gRPC messages, auto = data when the peer offers "
                  "it, else grpc")
      ->check(CLI::IsMember({"auto", "data", "grpc"}))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the result as one JSON object (path, bytes, seconds, transport, ...)");
  cmd->callback([args, exit_code] { *exit_code = RunSendImage(*args); });
}

}  // namespace phos::cli
