// The preset YAML files of policies/ (hardware/*.yaml, models/*.yaml),
// compiled into the library so that preset names work from any directory.
// The files under policies/ are the single source; presets_data.cpp is
// generated from them at build time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata {

struct EmbeddedPreset {
  std::string_view path;  // relative to policies/: "models/opt-30b.yaml"
  std::string_view text;  // the file's contents
};

const std::vector<EmbeddedPreset>& embedded_presets();

// The presets in one folder ("hardware" or "models"), in path order.
std::vector<EmbeddedPreset> presets_in(std::string_view folder);

// Lower-cases a preset name and drops an organisation prefix
// ("facebook/OPT-30B" -> "opt-30b"), for matching user input to presets.
std::string normalize_preset_name(std::string_view name);

// True when `arg` names a file rather than a preset: it contains a '/' that
// is not an organisation prefix of a known name, or ends in .yaml/.yml/.json/.gguf,
// or exists on disk.
bool looks_like_path(std::string_view arg);

}  // namespace strata
