// A policy file (--policy FILE): YAML, every field checked.
#include "fuzz_input.h"
#include "policy/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  return fuzz::guarded([&] {
    const Policy p = parse_policy(std::string(fuzz::as_text(data, size)), "fuzz.yaml");
    (void)policy_to_yaml(p);
  });
}
