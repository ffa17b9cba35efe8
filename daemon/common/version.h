#pragma once

#include <string>

namespace phos {

/// "0.1.0 (git abc1234)".
std::string VersionString();

}  // namespace phos
