#include "cli/operation_stream.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include <google/protobuf/util/json_util.h>

#include "cli/client.h"
#include "cli/format.h"

namespace phos::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string Line(const v1::Progress& p) {
  std::string s = p.phase();
  if (p.bytes_total() > 0) {
    s += " " + HumanBytes(p.bytes_done()) + "/" + HumanBytes(p.bytes_total());
    if (p.bytes_per_second() > 0) s += " (" + HumanBytes(static_cast<std::uint64_t>(p.bytes_per_second())) + "/s)";
  }
  if (!p.message().empty()) s += ": " + p.message();
  return s;
}

void DrawBar(const v1::Progress& p) {
  constexpr int kWidth = 30;
  const double frac = p.bytes_total() > 0 ? static_cast<double>(p.bytes_done()) / p.bytes_total() : 0;
  const int fill = static_cast<int>(frac * kWidth);
  std::string bar(fill, '#');
  bar.resize(kWidth, '.');
  std::string text = "\r[" + bar + "] " + std::to_string(static_cast<int>(frac * 100)) + "% " + Line(p);
  if (text.size() > 110) text.resize(110);
  std::fprintf(stderr, "%s\033[K", text.c_str());
  std::fflush(stderr);
}

std::string JsonLine(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

}  // namespace

int ShowOperation(grpc::ClientReaderInterface<v1::OperationEvent>* reader, const std::string& rpc,
                  const std::string& what, bool json, v1::OperationResult* result,
                  grpc::ClientContext* stop_at_running) {
  const bool tty = !json && isatty(STDERR_FILENO) == 1;
  std::string last_phase;
  Clock::time_point last_line{};
  bool bar_drawn = false;
  // Plain mode: the last event not printed, so a phase's final byte count
  // is shown when the next phase starts.
  v1::Progress unprinted;
  bool have_unprinted = false;
  v1::OperationEvent ev;
  v1::OperationEvent terminal;
  bool have_terminal = false;
  while (reader->Read(&ev)) {
    if (json) std::cout << JsonLine(ev) << std::endl;
    if (ev.has_progress()) {
      if (json) continue;
      if (ev.progress().phase() == "running") {
        // The operation's process runs now (restore without --detach): say
        // so at once, on stdout, while the stream waits for its exit.
        if (bar_drawn) std::fprintf(stderr, "\r\033[K");
        bar_drawn = false;
        std::cout << ev.progress().message() << std::endl;
        if (stop_at_running != nullptr) {
          stop_at_running->TryCancel();
          (void)reader->Finish();  // CANCELLED: we asked for it
          return 0;
        }
        continue;
      }
      if (tty) {
        DrawBar(ev.progress());
        bar_drawn = true;
      } else if (ev.progress().phase() != last_phase || Clock::now() - last_line > std::chrono::seconds(1)) {
        if (have_unprinted && ev.progress().phase() != last_phase && unprinted.bytes_total() > 0) {
          std::cerr << what << ": " << Line(unprinted) << "\n";
        }
        std::cerr << what << ": " << Line(ev.progress()) << "\n";
        last_line = Clock::now();
        have_unprinted = false;
      } else {
        unprinted = ev.progress();
        have_unprinted = true;
      }
      last_phase = ev.progress().phase();
    } else {
      terminal = ev;
      have_terminal = true;
    }
  }
  if (bar_drawn) std::fprintf(stderr, "\r\033[K");
  grpc::Status st = reader->Finish();
  if (have_terminal && terminal.has_done()) {
    const v1::OperationResult& r = terminal.done();
    if (result != nullptr) *result = r;
    if (!json) {
      std::cout << what << " OK: " << r.image_dir() << "\n"
                << "  pid " << r.pid() << ", " << HumanBytes(r.bytes_written()) << " of GPU state";
      for (const auto& [k, v] : r.counters()) std::cout << ", " << v << " " << k;
      // The stall is what the app felt (how long its calls were held); the
      // total is how long the operation took, the app running meanwhile.
      std::cout << "\n  stall " << HumanMicros(r.stall_us()) << " (the app was held this long), took "
                << HumanMicros(r.total_ms() * 1000) << "\n";
      if (r.rank_pids_size() > 0) {
        std::cout << "  job of " << r.rank_pids_size() << " ranks, pids";
        for (int p : r.rank_pids()) std::cout << " " << p;
        std::cout << " (rank order)\n";
      }
    }
    return 0;
  }
  const std::string message =
      have_terminal && terminal.has_failed() ? terminal.failed().message() : st.error_message();
  if (!json || !have_terminal) std::cerr << "phos: " << what << " failed: " << message << "\n";
  if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) return 2;
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE && !have_terminal) {
    // The stream broke before its terminal event: phosd went away (exited,
    // was killed, or crashed) while the operation ran.
    std::cerr << "phos: " << what << ": phosd closed the connection before the " << what
              << " finished (" << st.error_message()
              << "): did it exit or crash? Check its log. An incomplete image is never committed; phosd removes "
                 "its leftovers (*.tmp) at its next start\n";
  }
  return 1;
}

}  // namespace phos::cli
