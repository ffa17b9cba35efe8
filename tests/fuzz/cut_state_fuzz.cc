// libFuzzer target for the states the phosds of a job checkpoint across
// phosds publish in etcd (peer::v1::CutState under /phos/v1/cuts/<cut>/;
// docs/protocols.md "Jobs across phosds"): another machine's bytes, merged
// by the coordinator and every participant (jobs::MergeCounts) before the
// cut is chosen from them. No input may crash, and a merge that succeeds
// gives communicators whose ranks are in range, so choosing targets and
// checking them is safe.
//
// Input: a sequence of [length (2 bytes LE)][that many bytes: a serialized
// CutState], each published by another endpoint.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "jobs/cut_counts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, phos::peer::v1::CutState> states;
  int n = 0;
  while (size >= 2) {
    const size_t len = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
    phos::peer::v1::CutState st;
    if (!st.ParseFromArray(data + 2, static_cast<int>(len))) return 0;
    states["127.0.0.1:" + std::to_string(++n)] = std::move(st);
    data += 2 + len;
    size -= 2 + len;
  }
  phos::jobs::Book::Communicators all;
  if (!phos::jobs::MergeCounts(states, &all).ok()) return 0;
  for (const auto& [id, c] : all) {
    for (const auto& [rank, r] : c.ranks) {
      if (rank < 0 || rank >= c.nranks) std::abort();
    }
  }
  const phos::jobs::Targets t = phos::jobs::TargetsOf(all);
  std::string why;
  (void)phos::jobs::AllAtTargets(all, t, &why);
  return 0;
}
