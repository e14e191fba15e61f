// Exact readers of JSON numbers and an exception-free dump, shared by the JSON forms of
// server/base (config.h, launch_spec.h). Internal to ktune_base: nlohmann/json is its
// private dependency.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_BASE_JSON_FIELDS_H_
#define KTUNE_SERVER_BASE_JSON_FIELDS_H_

#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"

namespace ktune {

// nlohmann stores a non-negative literal as unsigned, and get<int64_t>() wraps one above
// INT64_MAX to a negative number; get<uint32_t>() also takes booleans and truncates floats.
// These readers take exact integers only: false, leaving *out alone, for anything else.
bool GetInt64(const nlohmann::json& v, int64_t* out);
bool GetUint32(const nlohmann::json& v, uint32_t* out);

// dump() throws on a string that is not UTF-8; this replaces such bytes instead, since no
// exception may leave a module.
std::string DumpJson(const nlohmann::json& j);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_JSON_FIELDS_H_
