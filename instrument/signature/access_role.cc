#include "signature/access_role.h"

namespace phos::signature {

std::string_view AccessRoleName(AccessRole role) {
  switch (role) {
    case AccessRole::kNone:
      return "none";
    case AccessRole::kRead:
      return "read";
    case AccessRole::kReadWrite:
      return "readwrite";
    case AccessRole::kScanWords:
      return "scan";
  }
  return "?";
}

bool ParseAccessRole(std::string_view name, AccessRole* out) {
  for (AccessRole r : {AccessRole::kNone, AccessRole::kRead, AccessRole::kReadWrite,
                       AccessRole::kScanWords}) {
    if (AccessRoleName(r) == name) {
      *out = r;
      return true;
    }
  }
  return false;
}

}  // namespace phos::signature
