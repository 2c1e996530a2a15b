// Writing weight packs (staged through the disk I/O layer, requantizing on the
// way) and the source identity that decides when a pack is stale.
#include "offload/pack_build.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "core/log.h"
#include "core/units.h"
#include "io/gguf.h"
#include "model/config_json.h"
#include "model/model.h"
#include "offload/aligned_buffer.h"
#include "offload/checksum.h"
#include "offload/disk_io.h"
#include "quant/convert.h"
#include "quant/quant.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

// XXH64 of a source file's header: the GGUF metadata and tensor infos (up to
// the data section), or a safetensors file's length prefix and JSON header.
uint64_t header_checksum(const Model& model, size_t file_index) {
  const SourceFile& f = model.desc().files[file_index];
  if (const GgufFile* g = model.gguf()) {
    const auto bytes = g->file().bytes();
    return xxh64(bytes.data(), std::min<uint64_t>(g->data_offset(), bytes.size()));
  }
  std::ifstream in(f.path, std::ios::binary);
  unsigned char len8[8] = {};
  if (!in.read(reinterpret_cast<char*>(len8), 8))
    fail("{}: cannot read the safetensors header", f.path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  if (n > f.size - 8)
    fail("{}: the safetensors header length {} runs past the end of the file", f.path, n);
  std::vector<char> buf(8 + n);
  std::memcpy(buf.data(), len8, 8);
  if (!in.read(buf.data() + 8, static_cast<std::streamsize>(n)))
    fail("{}: cannot read the safetensors header", f.path);
  return xxh64(buf.data(), buf.size());
}

// Appends bytes at increasing file offsets through two staging buffers: one
// fills while the other is written.
class StagedWriter {
 public:
  StagedWriter(DiskIo& engine, const DiskFile& file, size_t buf_bytes)
      : engine_(engine), file_(file), bufs_{AlignedBuffer(buf_bytes), AlignedBuffer(buf_bytes)} {}
  ~StagedWriter() {
    // The buffers must outlive their writes, also when unwinding.
    for (auto& t : tickets_) {
      try {
        engine_.wait(t);
      } catch (const Error&) {
      }
    }
  }

  uint64_t pos() const { return base_ + fill_; }

  void append(const void* p, size_t n) {
    const auto* src = static_cast<const std::byte*>(p);
    while (n > 0) {
      const size_t k = std::min(n, bufs_[cur_].size() - fill_);
      std::memcpy(bufs_[cur_].data() + fill_, src, k);
      fill_ += k;
      src += k;
      n -= k;
      if (fill_ == bufs_[cur_].size()) flush();
    }
  }

  void zeros(size_t n) {
    while (n > 0) {
      const size_t k = std::min(n, bufs_[cur_].size() - fill_);
      std::memset(bufs_[cur_].data() + fill_, 0, k);
      fill_ += k;
      n -= k;
      if (fill_ == bufs_[cur_].size()) flush();
    }
  }

  void finish() {
    if (fill_ > 0) flush();
    for (auto& t : tickets_) {
      engine_.wait(t);
      t = Ticket();
    }
  }

 private:
  void flush() {
    tickets_[cur_] = engine_.write(file_, base_, bufs_[cur_].data(), fill_);
    base_ += fill_;
    fill_ = 0;
    cur_ ^= 1;
    engine_.wait(tickets_[cur_]);  // the buffer to fill next must be written out
    tickets_[cur_] = Ticket();
  }

  DiskIo& engine_;
  const DiskFile& file_;
  AlignedBuffer bufs_[2];
  Ticket tickets_[2];
  int cur_ = 0;
  uint64_t base_ = 0;  // file offset of bufs_[cur_]
  size_t fill_ = 0;
};

// Removes the temporary files (and a weights.bin without its manifest) unless
// the build committed.
struct PartialFiles {
  std::vector<std::string> paths;
  bool committed = false;
  ~PartialFiles() {
    if (committed) return;
    for (const auto& p : paths) ::unlink(p.c_str());
  }
};

void sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return;  // best effort for directories; files were just written by us
  const int rc = directory ? ::fsync(fd) : ::fdatasync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0 && !directory) fail("{}: cannot flush to disk: {}", path, std::strerror(e));
}


}  // namespace

PackSource pack_source_of(const Model& model) {
  const ModelDesc& d = model.desc();
  PackSource s;
  s.path = d.path;
  s.format = d.format == ModelFormat::kGguf ? "gguf" : "hf";
  for (size_t i = 0; i < d.files.size(); ++i) {
    const SourceFile& f = d.files[i];
    s.files.push_back(PackSourceFile{f.path, f.size, f.mtime_ns, header_checksum(model, i)});
  }
  return s;
}

Pack build_pack(const Model& model, const std::string& dir, const PackOptions& options,
                DiskIo* engine) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelDesc& d = model.desc();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    fail("{}: cannot create the pack directory ({}); choose a directory you can write to", dir,
         ec ? ec.message() : "a file of that name exists");
  }
  const std::string mpath = (fs::path(dir) / kPackManifestName).string();
  const std::string wpath = (fs::path(dir) / kPackWeightsName).string();
  const std::string wtmp = wpath + ".tmp";

  // Layout: units at kPackUnitAlign, tensors at kPackTensorAlign.
  PackManifest m;
  m.source = pack_source_of(model);
  m.options = options;
  m.config = config_to_json(d.config);
  const std::vector<PackLayoutUnit> layout = pack_layout(d);
  uint64_t pos = 0;
  int n_kept = 0;
  for (const PackLayoutUnit& lu : layout) {
    PackUnit u;
    u.name = lu.name;
    u.layer = lu.layer;
    pos = align_up(pos, kPackUnitAlign);
    u.offset = pos;
    for (const TensorInfo* ti : lu.tensors) {
      PackTensor t;
      t.name = ti->name;
      t.shape = ti->shape;
      t.dtype = pack_dtype(ti->name, ti->shape, ti->dtype, options);
      if (options.weight_dtype && t.dtype != *options.weight_dtype && ti->shape.size() == 2 &&
          ti->name != "position_embd.weight") {
        ++n_kept;
      }
      const int64_t row = t.shape.back();
      t.nbytes = static_cast<uint64_t>(ti->n_elems() / row) * row_bytes(t.dtype, row);
      pos = align_up(pos, kPackTensorAlign);
      t.offset = pos;
      pos += t.nbytes;
      u.tensors.push_back(std::move(t));
    }
    u.length = pos - u.offset;
    m.units.push_back(std::move(u));
  }
  m.weights_bytes = align_up(pos, kPackUnitAlign);
  if (n_kept > 0) {
    spdlog::info(
        "{}: {} matrices keep their source dtype: their rows are not a multiple of the {} group of "
        "{}",
        d.path, n_kept, dtype_info(*options.weight_dtype).block_elems,
        dtype_name(*options.weight_dtype));
  }

  // An old manifest goes first: from here on the directory is not a pack
  // until the new manifest is renamed into place.
  if (::unlink(mpath.c_str()) != 0 && errno != ENOENT) {
    fail("{}: cannot remove the old manifest ({}); choose a directory you can write to", mpath,
         std::strerror(errno));
  }
  PartialFiles partial{{wtmp, wpath}};

  std::unique_ptr<DiskIo> own_engine;
  if (!engine) {
    DiskIoOptions eo;
    eo.queue_depth = 8;
    own_engine = std::make_unique<DiskIo>(eo);
    engine = own_engine.get();
  }
  {
    const DiskFile f = DiskFile::open(wtmp, OpenMode::kCreate);
    f.allocate(m.weights_bytes);
    StagedWriter w(*engine, f, size_t{16} << 20);
    std::vector<float> f32;
    std::vector<std::byte> qrow;
    for (PackUnit& u : m.units) {
      w.zeros(u.offset - w.pos());
      Xxh64Stream h;
      const PackLayoutUnit& lu = layout[&u - m.units.data()];
      for (size_t k = 0; k < u.tensors.size(); ++k) {
        const PackTensor& t = u.tensors[k];
        const TensorInfo& src = *lu.tensors[k];
        const size_t gap = t.offset - w.pos();
        w.zeros(gap);
        h.update_zeros(gap);
        Xxh64Stream th;
        const std::span<const std::byte> bytes = model.bytes(src);
        if (t.dtype == src.dtype) {
          w.append(bytes.data(), bytes.size());
          h.update(bytes.data(), bytes.size());
          th.update(bytes.data(), bytes.size());
          u.tensors[k].checksum = th.digest();
          continue;
        }
        const int64_t n = t.shape.back(), rows = src.n_elems() / n;
        const size_t src_row = row_bytes(src.dtype, n), dst_row = row_bytes(t.dtype, n);
        f32.resize(n);
        qrow.resize(dst_row);
        for (int64_t r = 0; r < rows; ++r) {
          row_to_f32(src.dtype, bytes.data() + r * src_row, f32.data(), n);
          quantize_row(t.dtype, f32.data(), qrow.data(), n);
          w.append(qrow.data(), dst_row);
          h.update(qrow.data(), dst_row);
          th.update(qrow.data(), dst_row);
        }
        u.tensors[k].checksum = th.digest();
      }
      STRATA_ASSERT(w.pos() == u.offset + u.length);
      u.checksum = h.digest();
    }
    w.zeros(m.weights_bytes - w.pos());
    w.finish();
    f.sync();
  }
  replace_file(wtmp, wpath);

  write_file_atomically(mpath, m.to_json().dump(1) + "\n", "the pack manifest", true);
  sync_path(dir, true);
  partial.committed = true;

  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("{}: wrote the weight pack: {} units, {} ({}) in {:.2f} s", dir, m.units.size(),
               format_bytes(static_cast<double>(m.weights_bytes)), options.to_string(), s);
  return Pack::open(dir, &model);
}

std::string pack_stale_reason(const Model& model, const std::string& dir,
                              const PackOptions& options) {
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / kPackManifestName, ec))
    return fmt::format("there is no pack in {}", dir);
  Pack p;
  try {
    p = Pack::open(dir);
  } catch (const Error& e) {
    return fmt::format("the pack cannot be used: {}", e.what());
  }
  const PackManifest& m = p.manifest();
  if (m.options != options) {
    return fmt::format("it holds weights '{}' and '{}' is asked for", m.options.to_string(),
                       options.to_string());
  }
  const PackSource now = pack_source_of(model);
  if (m.source.format != now.format || m.source.files.size() != now.files.size()) {
    return fmt::format("it was built from other source files ({} {} file(s), now {} {})",
                       m.source.files.size(), m.source.format, now.files.size(), now.format);
  }
  for (size_t i = 0; i < now.files.size(); ++i) {
    const PackSourceFile& a = m.source.files[i];
    const PackSourceFile& b = now.files[i];
    if (fs::path(a.path).filename() != fs::path(b.path).filename()) {
      return fmt::format("it was built from {}, the model now has {}", a.path, b.path);
    }
    if (a.size != b.size)
      return fmt::format("{} changed size ({} -> {} bytes)", b.path, a.size, b.size);
    if (a.mtime_ns != b.mtime_ns)
      return fmt::format("{} was modified since the pack was built", b.path);
    if (a.header_checksum != b.header_checksum)
      return fmt::format("the header of {} changed", b.path);
  }
  try {
    p.check_against(model);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

Pack open_or_build_pack(const Model& model, const std::string& dir, const PackOptions& options,
                        const PackOpenOptions& open_options) {
  std::string why = pack_stale_reason(model, dir, options);
  if (why.empty()) {
    Pack p = Pack::open(dir, &model);
    if (!open_options.verify_checksums) {
      spdlog::info("{}: using the weight pack ({} units, {})", dir, p.units().size(),
                   format_bytes(static_cast<double>(p.weights_bytes())));
      return p;
    }
    try {
      p.verify();
      spdlog::info("{}: using the weight pack ({} units, {}, checksums verified)", dir,
                   p.units().size(), format_bytes(static_cast<double>(p.weights_bytes())));
      return p;
    } catch (const Error& e) {
      why = e.what();
    }
  }
  spdlog::info("{}: building the weight pack: {}", dir, why);
  return build_pack(model, dir, options);
}

}  // namespace strata
