// Building weight packs (offload/pack.h) from a model's files, and deciding
// when an existing pack is still current. The source identity recorded in a
// manifest is each source file's size, modification time and a hash of its
// header (GGUF metadata or the safetensors JSON header), plus the model
// config and the pack options; any difference makes the pack stale.
//
// Writing goes to temporary names in the directory (weights.bin.tmp, and the
// manifest through io/atomic_file.h) and ends with renames, manifest last,
// after removing any old manifest first: an interrupted build never leaves a directory that
// looks like a complete pack. A failure (unwritable directory, full disk)
// throws Error naming the directory or file and removes the partial files.
#pragma once

#include <string>

#include "offload/pack.h"

namespace strata {

class DiskIo;
class Model;

// The identity of the model's source files, as a manifest records it.
PackSource pack_source_of(const Model& model);

// Builds the pack for `model` in `dir` (created when missing), replacing any
// pack there. `engine` may be null (one is made for the build).
Pack build_pack(const Model& model, const std::string& dir, const PackOptions& options,
                DiskIo* engine = nullptr);

// Why the pack in `dir` cannot serve (model, options), or "" when it can:
// missing, unreadable or damaged, another format version, a changed source
// file, other options, another config or tensors that do not match.
std::string pack_stale_reason(const Model& model, const std::string& dir,
                              const PackOptions& options);

struct PackOpenOptions {
  bool verify_checksums = false;  // read weights.bin once and check every unit
};

// The pack in `dir` when it is current; otherwise builds it, with a log line
// saying why.
Pack open_or_build_pack(const Model& model, const std::string& dir, const PackOptions& options,
                        const PackOpenOptions& open_options = {});

}  // namespace strata
