// phos inspect DIR [--json] [--no-verify] [--pread]: what a checkpoint image holds,
// and whether every checksum still matches (docs/image-format.md). A job
// image (DIR/job, docs/protocols.md "Job checkpoints"): its manifest, then
// every rank's image the same way.
//
// Runs without a daemon: it reads the directory directly. Exit status 0
// when the image is intact, 1 with the first problem otherwise (the
// buffer address, chunk and gpu.img offset for damaged data).
#include <time.h>
#include <unistd.h>

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/hex.h"
#include "common/logging.h"
#include "image.pb.h"
#include "image/image_reader.h"
#include "image/job_manifest.h"

namespace phos::cli {
namespace {

// Above this, VerifyAll prints a progress line on stderr (when it is a terminal).
constexpr std::uint64_t kProgressThreshold = 64ull << 20;

std::string KeepName(image::v1::KeepClass k) {
  switch (k) {
    case image::v1::KEEP_LATEST: return "latest";
    case image::v1::KEEP_BEST: return "best";
    case image::v1::KEEP_MANUAL: return "manual";
    default: return "unspecified";
  }
}

std::string UtcTime(std::int64_t unix_ns) {
  time_t secs = static_cast<time_t>(unix_ns / 1000000000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

void PrintSummary(const std::string& dir, const image::v1::Manifest& m) {
  std::uint64_t bytes = 0, chunks = 0;
  for (const auto& b : m.buffers()) {
    bytes += b.bytes();
    chunks += static_cast<std::uint64_t>(b.chunk_xxh3_size());
  }
  std::string cmd;
  for (const std::string& a : m.cmdline()) cmd += (cmd.empty() ? "" : " ") + a;
  std::vector<std::vector<std::string>> fields = {
      {"image", dir},
      {"format", std::to_string(m.format_version()) + " (written by phos " + m.phos_version() + ")"},
      {"created", UtcTime(m.created_unix_ns())},
      {"session", std::to_string(m.session_id()) + "  pid " + std::to_string(m.pid()) + "  mode " +
                      (m.mode().empty() ? "-" : m.mode())},
      {"keep", KeepName(m.keep()) + (m.has_metric() ? "  metric " + std::to_string(m.metric()) : "")},
      {"command", cmd.empty() ? "-" : cmd},
      {"device", m.device_name().empty() ? "-" : m.device_name()},
      {"image id", Hex(m.image_id())},
      {"gpu.img", HumanBytes(m.gpu_img_bytes()) + " file, " + HumanBytes(bytes) + " in " +
                      std::to_string(m.buffers_size()) + " buffers, " + std::to_string(chunks) +
                      " chunks"},
      {"sections", "session index " + std::to_string(m.session().buffers_size()) + " buffers, " +
                       std::to_string(m.session().globals_size()) + " globals, " +
                       std::to_string(m.session().functions_size()) + " functions; streams " +
                       HumanBytes(m.streams().size()) + ", modules " +
                       HumanBytes(m.modules().size()) + ", first-use order " +
                       std::to_string(m.first_use_order_size()) + " entries"},
  };
  if (image::v1::SessionHandles h; !m.streams().empty() && h.ParseFromString(m.streams())) {
    // The GPUs the process used, as phosd numbered them (phos ps), and the
    // app's ordinals that meant others (after a --device-map restore).
    std::string gpus = std::to_string(h.device()) + (h.other_devices_size() > 0 ? " (home)" : "");
    for (int d : h.other_devices()) gpus += ", " + std::to_string(d);
    for (const auto& a : h.device_aliases()) {
      gpus += "  app GPU " + std::to_string(a.app()) + " = " + std::to_string(a.phosd());
    }
    fields.push_back({"gpus", gpus});
  }
  if (m.has_process()) {  // a whole-process image (CRIU's images in criu/)
    const image::v1::ProcessRecord& p = m.process();
    std::string criu;
    for (const auto& [on, name] : {std::pair{p.shell_job(), "shell-job"}, std::pair{p.tcp_established(), "tcp-established"},
                                   std::pair{p.file_locks(), "file-locks"}, std::pair{p.pid_namespace(), "own pid namespace"}}) {
      if (on) criu += std::string(criu.empty() ? "" : ", ") + name;
    }
    fields.push_back({"process", "pid " + std::to_string(p.pid()) + "  uid " + std::to_string(p.uid()) + "  " +
                                     std::to_string(p.host_segments_size()) + " pinned host segments  " +
                                     (criu.empty() ? std::string("no CRIU options") : criu)});
  }
  if (m.has_template_info()) {  // a template's image (phos template save)
    const image::v1::TemplateRecord& t = m.template_info();
    fields.push_back({"template", t.name() + "  id " + Hex(t.id()) + "  saved " +
                                      UtcTime(static_cast<std::int64_t>(t.saved_unix_ms()) * 1000000) + " from pid " +
                                      std::to_string(t.source_pid()) + "  mode " + t.mode()});
  }
  for (const auto& f : fields) std::cout << f[0] << std::string(10 - f[0].size(), ' ') << f[1] << "\n";
  std::cout << "\n";
  // FIRST-USE: the buffer's place in first_use_order (a concurrent restore
  // loads buffers in that order, then the rest); "-" = not used during the
  // checkpoint.
  std::map<std::uint64_t, int> first_use;
  for (int k = 0; k < m.first_use_order_size(); ++k) first_use.emplace(m.first_use_order(k), k + 1);
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < m.buffers_size(); ++i) {
    const auto& b = m.buffers(i);
    const auto fu = first_use.find(b.device_address());
    rows.push_back({std::to_string(i), Hex(b.device_address()), std::to_string(b.bytes()),
                    std::to_string(b.chunk_xxh3_size()), HumanBytes(b.chunk_bytes()),
                    std::to_string(b.extent_offset()), fu == first_use.end() ? "-" : std::to_string(fu->second)});
  }
  std::cout << FormatTable({"#", "ADDRESS", "BYTES", "CHUNKS", "CHUNK-SIZE", "FILE-OFFSET", "FIRST-USE"}, rows);
}

int RunInspect(const std::string& dir, bool json, bool verify, bool pread) {
  image::v1::InspectReport report;
  report.set_dir(dir);
  auto finish = [&](bool intact, const std::string& problem) {
    report.set_intact(intact);
    report.set_problem(problem);
    if (json) {
      PrintJson(report);
      std::cout << "\n";
    } else if (intact) {
      std::cout << "\nOK: " << (verify ? "every checksum matches (" + HumanBytes(report.verified_bytes()) + " verified)"
                                       : std::string("manifest and layout valid (data not verified)"))
                << "\n";
    } else {
      std::cerr << "phos inspect: " << problem << "\n";
    }
    return intact ? 0 : 1;
  };

  Status s = image::ReadManifest(dir, report.mutable_manifest());
  if (!s.ok()) {
    report.clear_manifest();
    return finish(false, s.ToString());
  }
  if (!json) PrintSummary(dir, report.manifest());

  std::unique_ptr<image::ImageReader> reader;
  image::ImageReaderOptions options;
  options.io.force_pwrite = pread;
  s = image::ImageReader::Open(dir, options, &reader);
  if (!s.ok()) return finish(false, s.ToString());
  report.set_io_backend(std::string(reader->io_backend_name()));
  if (!verify) return finish(true, "");

  bool progress_shown = false;
  int last_pct = -1;
  s = reader->VerifyAll([&](std::uint64_t done, std::uint64_t total) {
    report.set_verified_bytes(done);
    if (json || total < kProgressThreshold || !isatty(STDERR_FILENO)) return;
    const int pct = static_cast<int>(done * 100 / total);
    if (pct == last_pct) return;
    last_pct = pct;
    progress_shown = true;
    std::cerr << "\rverifying: " << HumanBytes(done) << " / " << HumanBytes(total) << " (" << pct
              << "%)" << std::flush;
  });
  if (progress_shown) std::cerr << "\n";
  if (!s.ok()) return finish(false, s.ToString());
  return finish(true, "");
}

// A job image: the job's manifest, then each rank's image (--json: one
// object per line, the job's first). Intact only when every rank is.
int RunInspectJob(const std::string& dir, bool json, bool verify, bool pread) {
  image::v1::JobManifest jm;
  if (Status s = image::ReadJobManifest(dir, &jm); !s.ok()) {
    std::cerr << "phos inspect: " << s.ToString() << "\n";
    return 1;
  }
  if (json) {
    PrintJson(jm);
    std::cout << "\n";
  } else {
    std::cout << "job image " << dir << ": " << jm.ranks_size() << " ranks, mode " << jm.mode() << ", taken "
              << UtcTime(jm.created_unix_ns()) << " by phos " << jm.phos_version() << ", cut reached in "
              << HumanMicros(jm.cut_us()) << "\n";
    if (!jm.job_name().empty()) std::cout << "job " << jm.job_name() << " (its restored ranks keep the name)\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& r : jm.ranks()) {
      std::string cmd;
      for (const auto& a : r.cmdline()) cmd += (cmd.empty() ? "" : " ") + a;
      rows.push_back({r.dir(), std::to_string(r.pid()), r.phosd().empty() ? "-" : r.phosd(), cmd});
    }
    std::cout << FormatTable({"RANK IMAGE", "PID", "PHOSD", "COMMAND"}, rows);
    for (const auto& c : jm.cut()) {
      std::cout << "communicator of " << c.nranks() << " ranks: " << c.collectives()
                << " collectives enqueued by every rank at the cut\n";
    }
  }
  int rc = 0;
  for (const auto& r : jm.ranks()) {
    if (!json) std::cout << "\n=== " << r.dir() << " ===\n";
    rc |= RunInspect(dir + "/" + r.dir(), json, verify, pread);
  }
  return rc;
}

}  // namespace

void AddInspectCommand(CLI::App* app, int* exit_code) {
  auto dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto no_verify = std::make_shared<bool>(false);
  auto pread = std::make_shared<bool>(false);
  CLI::App* cmd = app->add_subcommand(
      "inspect",
      "Show what a checkpoint image holds and verify every checksum (no daemon needed). "
      "Exit status 0 when intact, 1 with the first problem otherwise.");
  cmd->add_option("DIR", *dir, "The checkpoint directory")->required();
  cmd->add_flag("--json", *json, "Print a JSON report (for tools)");
  cmd->add_flag("--no-verify", *no_verify, "Check manifest and layout only, not the data");
  cmd->add_flag("--pread", *pread, "Read with pread instead of io_uring + O_DIRECT");
  cmd->callback([dir, json, no_verify, pread, exit_code] {
    (void)InitLogging("warn");  // the pwrite fallback warning goes to stderr
    *exit_code = image::IsJobImage(*dir) ? RunInspectJob(*dir, *json, !*no_verify, *pread)
                                         : RunInspect(*dir, *json, !*no_verify, *pread);
  });
}

}  // namespace phos::cli
