// Runs tests/data/tokenizer/golden.json (written by scripts/make_fixtures.py
// with Hugging Face transformers): {"header": {...}, "tokenizers": [{"name",
// "source" (relative to tests/data), "kind" ("json" | "gguf"), "add_bos",
// "requires_model"?, "bos_id"?, "cases": [{"text", "ids", "ids_pre_smollm"?}]}]}.
// Every case of every selected tokenizer must give exactly the recorded ids;
// the entries that need the demo model run in the `model` suite, the others in
// the `cpu` suite. "ids" of a GGUF entry come from the tokenizer transformers
// rebuilds from the file, which ignores tokenizer.ggml.pre; where honouring
// pre = "smollm" (digits split off first, as llama.cpp and SmolLM2's own
// tokenizer.json do) changes the result, the case also records
// "ids_pre_smollm", and that is what Strata, which honours the pre-tokenizer,
// must give.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace strata::test {

inline void run_golden(bool model_entries) {
  namespace fs = std::filesystem;
  const fs::path data(STRATA_TEST_DATA);
  const fs::path golden = data / "tokenizer" / "golden.json";
  if (!fs::exists(golden)) {
    GTEST_SKIP() << golden.string() << " does not exist yet (scripts/make_fixtures.py writes it)";
  }
  std::ifstream in(golden);
  const nlohmann::json root = nlohmann::json::parse(in);
  ASSERT_TRUE(root.contains("tokenizers")) << golden.string();
  size_t n_run = 0, n_cases = 0, n_pass = 0;
  std::vector<std::string> skipped;
  for (const auto& entry : root["tokenizers"]) {
    const bool requires_model = entry.value("requires_model", false);
    if (requires_model != model_entries) continue;
    const std::string name = entry.value("name", std::string("?"));
    const fs::path source = data / entry.at("source").get<std::string>();
    if (!fs::exists(source)) {
      skipped.push_back(name + " (" + source.string() + " absent)");
      continue;
    }
    SCOPED_TRACE(name + " from " + source.string());
    std::unique_ptr<Tokenizer> tok;
    if (entry.value("kind", std::string()) == "gguf") {
      tok = Tokenizer::from_gguf_file(source.string());
    } else {
      tok = Tokenizer::from_path(source.string());
    }
    const bool add_bos = entry.value("add_bos", false);
    if (entry.contains("bos_id")) {
      EXPECT_EQ(tok->bos_id(), entry["bos_id"].get<int32_t>()) << name;
    }
    ++n_run;
    size_t pass = 0, total = 0;
    for (const auto& c : entry.at("cases")) {
      const std::string text = c.at("text").get<std::string>();
      const std::vector<int32_t> expected =
          c.at(c.contains("ids_pre_smollm") ? "ids_pre_smollm" : "ids").get<std::vector<int32_t>>();
      const std::vector<int32_t> got = tok->encode(text, add_bos);
      ++total;
      if (got == expected) {
        ++pass;
      } else {
        ADD_FAILURE() << name << ": text " << nlohmann::json(text).dump() << "\n  expected "
                      << join_ids(expected) << "\n  got      " << join_ids(got);
      }
    }
    std::printf("[ golden   ] %s: %zu/%zu match\n", name.c_str(), pass, total);
    n_cases += total;
    n_pass += pass;
  }
  for (const std::string& s : skipped) std::printf("[ golden   ] skipped %s\n", s.c_str());
  if (n_run == 0) {
    GTEST_SKIP() << "no tokenizer in " << golden.string() << " could run here"
                 << (skipped.empty() ? "" : " (sources absent)");
  }
  EXPECT_EQ(n_pass, n_cases);
}

}  // namespace strata::test
