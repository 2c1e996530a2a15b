// The sharded index (model.safetensors.index.json) over two small real
// shards written beside it once: the input is the index JSON.
#include <fstream>

#include "fuzz_input.h"
#include "io/safetensors.h"

namespace {

// A shard with tensors `a` and `b` (f32 [2], [1, 2]) and one with `c`.
void write_shard(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
}

const std::string& shards_ready() {
  static const std::string dir = [] {
    const std::string d = strata::fuzz::scratch_dir();
    write_shard(d + "/model-00001-of-00002.safetensors",
                R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]}})",
                16);
    write_shard(d + "/model-00002-of-00002.safetensors",
                R"({"c":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", 8);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const std::string& dir = shards_ready();
  (void)dir;
  return fuzz::guarded([&] {
    const SafetensorsSet s =
        SafetensorsSet::open_index(fuzz::write_scratch("model.safetensors.index.json", data, size));
    for (const std::string& name : s.names()) (void)s.find(name);
  });
}
