// Strict JSON parsing for file headers: nlohmann::json, plus the checks it does not make.
//
// Rejects duplicate keys in any object (nlohmann keeps the last one silently, which would let
// two header entries claim one name) and nesting deeper than kJsonMaxDepth. Parse errors become
// minigpt::Error naming `source` and `what` (e.g. "model.safetensors: header: ...").
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace minigpt::io {

inline constexpr int kJsonMaxDepth = 64;

nlohmann::json parse_json_strict(std::string_view text, const std::string& source, const std::string& what);

}  // namespace minigpt::io
