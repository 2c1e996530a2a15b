// Golden ids from Hugging Face for the fixture tokenizers (cpu suite).
#include "tokenizer/golden_runner.h"

namespace strata {
namespace {

TEST(Golden, FixtureTokenizersMatchHuggingFace) {
  test::run_golden(false);
}

}  // namespace
}  // namespace strata
