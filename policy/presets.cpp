// Lookup helpers over the embedded preset files; see presets.h.
#include "policy/presets.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace strata {

std::vector<EmbeddedPreset> presets_in(std::string_view folder) {
  std::vector<EmbeddedPreset> out;
  const std::string prefix = std::string(folder) + "/";
  for (const EmbeddedPreset& p : embedded_presets()) {
    if (p.path.substr(0, prefix.size()) == prefix) out.push_back(p);
  }
  std::sort(out.begin(), out.end(),
            [](const EmbeddedPreset& a, const EmbeddedPreset& b) { return a.path < b.path; });
  return out;
}

std::string normalize_preset_name(std::string_view name) {
  const size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name = name.substr(slash + 1);
  std::string out;
  for (char c : name) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool looks_like_path(std::string_view arg) {
  auto ends_with = [&](std::string_view suffix) {
    return arg.size() >= suffix.size() && arg.substr(arg.size() - suffix.size()) == suffix;
  };
  if (ends_with(".yaml") || ends_with(".yml") || ends_with(".json") || ends_with(".gguf"))
    return true;
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(std::string(arg)), ec)) return true;
  // "facebook/opt-30b" is a preset with an organisation prefix; "./x", "/x"
  // and "a/b/c" are paths.
  const size_t n_slash = static_cast<size_t>(std::count(arg.begin(), arg.end(), '/'));
  return n_slash > 1 || (n_slash == 1 && (arg.front() == '/' || arg.front() == '.'));
}

}  // namespace strata
