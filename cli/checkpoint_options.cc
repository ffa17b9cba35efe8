#include "cli/checkpoint_options.h"

#include <algorithm>

namespace phos::cli {
namespace {

struct ModeDoc {
  const char* name;
  v1::CheckpointMode mode;
  const char* cost;  // one line: what the image holds and what the app pays
};

constexpr ModeDoc kModes[] = {
    {"cow", v1::MODE_COW,
     "image = state at the start; the app runs on while buffers are saved (stall: milliseconds; a write to an "
     "unsaved buffer first copies it aside)"},
    {"recopy", v1::MODE_RECOPY,
     "image = state at the end; buffers are copied while the app runs, then what it rewrote is copied again "
     "in a short final stop"},
    {"stop", v1::MODE_STOP, "the app is stopped for the whole copy (the baseline)"},
};

}  // namespace

void AddModeOption(CLI::App* cmd, std::string* mode, const std::vector<std::string>& allowed) {
  std::string help = "How the app is treated while its state is copied:";
  for (const ModeDoc& m : kModes) {
    if (std::find(allowed.begin(), allowed.end(), m.name) == allowed.end()) continue;
    help += std::string("\n  ") + m.name + ": " + m.cost;
  }
  cmd->add_option("--mode", *mode, help)->check(CLI::IsMember(allowed))->capture_default_str();
}

void AddEndOptions(CLI::App* cmd, bool* leave_running, bool* kill, bool kill_by_default) {
  *kill = kill_by_default;
  *leave_running = !kill_by_default;
  CLI::Option* leave = cmd->add_flag_callback(
      "--leave-running", [leave_running, kill] { *leave_running = true, *kill = false; },
      std::string("The process keeps running after its image is committed") +
          (kill_by_default ? "" : " (the default)"));
  CLI::Option* end = cmd->add_flag_callback(
      "--kill", [leave_running, kill] { *leave_running = false, *kill = true; },
      std::string("End the process (SIGKILL) once its image is committed, and return when its GPU memory is "
                  "free (preemption: save, then give the GPU to someone else)") +
          (kill_by_default ? " (the default)" : ""));
  leave->excludes(end);
}

v1::CheckpointMode ModeFromName(const std::string& name) {
  for (const ModeDoc& m : kModes) {
    if (name == m.name) return m.mode;
  }
  return v1::MODE_UNSPECIFIED;
}

}  // namespace phos::cli
