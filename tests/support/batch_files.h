// The files of batch-job tests through the executable: a prompt file of
// random words, and the whole records of an OUTPUT.partial
// (generate/output_file.h) a run left.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/files.h"

namespace strata::test {

// `n` text prompts of 3 to 22 words from a small vocabulary, one per line,
// the same for the same `seed`.
inline std::string word_prompts(int n, uint32_t seed) {
  const char* words[] = {"the",  "cat",   "sat", "on",  "a",   "mat", "once", "upon",
                         "time", "there", "was", "dog", "who", "ran", "far",  "away"};
  std::mt19937 rng(seed);
  std::string s;
  for (int i = 0; i < n; ++i) {
    const int len = 3 + static_cast<int>(rng() % 20);
    for (int w = 0; w < len; ++w) s += std::string(w ? " " : "") + words[rng() % 16];
    s += "\n";
  }
  return s;
}

// The record lines of a .partial after its header, parsed; a last line
// without its newline (a run killed inside the write) is left out. None when
// the file or its header is not there yet.
inline std::vector<nlohmann::json> partial_records(const std::string& path) {
  std::vector<nlohmann::json> records;
  if (!std::filesystem::exists(path)) return records;
  const std::string content = read_text(path);
  size_t pos = content.find('\n');
  if (pos == std::string::npos) return records;
  for (++pos; pos < content.size();) {
    const size_t end = content.find('\n', pos);
    if (end == std::string::npos) break;
    records.push_back(nlohmann::json::parse(content.substr(pos, end - pos)));
    pos = end + 1;
  }
  return records;
}

}  // namespace strata::test
