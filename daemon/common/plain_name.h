// The names users give things phosd keeps by name (templates, `phos run
// --name`): 1-100 characters of A-Z a-z 0-9 _ . -, not starting with '.'
// (so a name is a safe single path component and never hidden). Each user
// adds its own rule on top (a template name does not end in .tmp, a run
// name is not all digits).
#pragma once

#include <algorithm>
#include <string>

namespace phos {

inline bool IsPlainName(const std::string& name) {
  const bool chars_ok = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
  return !name.empty() && name.size() <= 100 && chars_ok && name[0] != '.';
}

}  // namespace phos
