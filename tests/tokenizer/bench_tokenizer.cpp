// Encode throughput: tokenizer_bench TOKENIZER TEXT_FILE [REPEATS]
// Loads the tokenizer (GGUF, tokenizer.json or model directory), encodes the
// whole file once to warm up, then REPEATS times cold-cache (a fresh
// tokenizer, so the word cache starts empty) and warm-cache; prints median and
// spread of tokens/s and MB/s, with the machine and thread count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

struct Stats {
  double median, min, max;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER TEXT_FILE [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  try {
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) strata::fail("{}: cannot open the file", argv[2]);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    using clock = std::chrono::steady_clock;

    auto t0 = clock::now();
    auto tok = strata::Tokenizer::from_path(argv[1]);
    const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
    size_t n_tokens = tok->encode(text, false).size();  // warm-up

    std::vector<double> cold, warm;
    for (int r = 0; r < repeats; ++r) {
      auto fresh = strata::Tokenizer::from_path(argv[1]);
      t0 = clock::now();
      n_tokens = fresh->encode(text, false).size();
      cold.push_back(std::chrono::duration<double>(clock::now() - t0).count());
      t0 = clock::now();
      n_tokens = fresh->encode(text, false).size();
      warm.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    const Stats c = stats(cold), w = stats(warm);
    const double mb = text.size() / 1e6;
    std::printf("machine: %s, %u hardware threads; 1 encoding thread\n", cpu_model().c_str(),
                std::thread::hardware_concurrency());
    std::printf("tokenizer: %s (%d tokens), loaded in %.3f s\n", tok->kind().c_str(),
                tok->n_vocab(), load_s);
    std::printf("text: %s, %.3f MB -> %zu tokens (%.2f bytes/token)\n", argv[2], mb, n_tokens,
                text.size() / static_cast<double>(n_tokens));
    for (const auto& [name, s] : {std::pair{"cold cache", c}, std::pair{"warm cache", w}}) {
      std::printf("%s: median %.0f tokens/s (%.2f MB/s), spread %.0f..%.0f tokens/s over %d runs\n",
                  name, n_tokens / s.median, mb / s.median, n_tokens / s.max, n_tokens / s.min,
                  repeats);
    }
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
