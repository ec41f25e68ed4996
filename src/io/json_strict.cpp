#include "io/json_strict.h"

#include "core/error.h"

#include <set>
#include <vector>

namespace minigpt::io {

nlohmann::json parse_json_strict(std::string_view text, const std::string& source, const std::string& what) {
  using json = nlohmann::json;
  // One key set per open container (arrays get an unused set) so duplicates are found at
  // every level.
  std::vector<std::set<std::string>> open;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        MINIGPT_CHECK(open.size() < static_cast<size_t>(kJsonMaxDepth), "{}: {}: JSON nested deeper than {} levels",
                      source, what, kJsonMaxDepth);
        open.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        MINIGPT_CHECK(!open.empty() && open.back().insert(key).second, "{}: {}: duplicate key '{}'", source, what, key);
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    MINIGPT_FAIL("{}: {}: invalid JSON: {}", source, what, e.what());
  }
}

}  // namespace minigpt::io
