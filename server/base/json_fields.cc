#include "server/base/json_fields.h"

#include <limits>

namespace ktune {

bool GetInt64(const nlohmann::json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (!v.is_number_integer()) return false;
  *out = v.get<int64_t>();
  return true;
}

bool GetUint32(const nlohmann::json& v, uint32_t* out) {
  int64_t x;
  if (!GetInt64(v, &x) || x < 0 || x > std::numeric_limits<uint32_t>::max()) return false;
  *out = static_cast<uint32_t>(x);
  return true;
}

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ktune
