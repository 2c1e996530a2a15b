#include "kernels/cpu/attention_quant.h"

// GCC 12 warns about the undefined pass-through operand inside several
// AVX-512 intrinsics of its own headers (inlined into the templates below,
// also through vec_math.h); nothing here reads one.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif


#include "kernels/cpu/attend_row_ref.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"

namespace strata::cpu {

namespace {

constexpr int64_t kKeyBlock = kAttentionKeyBlock;

// Bytes of one (token, kv head) row of a page.
size_t head_row_bytes(const KvPages& kv) {
  return row_bytes(kv.dtype, kv.head_dim);
}

inline const uint8_t* kv_row(const KvPages& kv, const void* const* pages, const int32_t* ids,
                             int64_t key, int64_t g, size_t hrb) {
  const char* page = static_cast<const char*>(pages[ids[key / kv.page_size]]);
  return reinterpret_cast<const uint8_t*>(page) +
         static_cast<size_t>(key % kv.page_size * kv.n_kv_head + g) * hrb;
}

// ---- keys per channel (see the header) ----

constexpr uint16_t kF16NaN = 0x7e00;

// The f16 next to h towards -inf / +inf (h finite or infinite, not NaN).
inline uint16_t f16_step_down(uint16_t h) {
  if (h & 0x8000) return (h & 0x7fff) == 0x7c00 ? h : static_cast<uint16_t>(h + 1);
  return h == 0 ? uint16_t{0x8001} : static_cast<uint16_t>(h - 1);
}
inline uint16_t f16_step_up(uint16_t h) {
  if (h & 0x8000) return h == 0x8000 ? uint16_t{0x0001} : static_cast<uint16_t>(h - 1);
  return h == 0x7c00 ? h : static_cast<uint16_t>(h + 1);
}
// x rounded to an f16 no greater (no less) than x.
inline uint16_t f16_floor(float x) {
  const uint16_t h = f32_to_f16(x);
  return f16_to_f32(h) > x ? f16_step_down(h) : h;
}
inline uint16_t f16_ceil(float x) {
  const uint16_t h = f32_to_f16(x);
  return f16_to_f32(h) < x ? f16_step_up(h) : h;
}

// f16 -> f32, exact for every value (as core's f16_to_f32), branch-free
// and inline for the per-channel loops.
inline float half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized =
      std::bit_cast<float>((two_w >> 4) + (uint32_t{0xE0} << 23)) * 0x1.0p-112f;
  const float denormalized =
      std::bit_cast<float>((two_w >> 17) | (uint32_t{126} << 23)) - 0.5f;
  const uint32_t bits = two_w < (uint32_t{1} << 27) ? std::bit_cast<uint32_t>(denormalized)
                                                    : std::bit_cast<uint32_t>(normalized);
  return std::bit_cast<float>(sign | bits);
}

struct KeyLayout {
  int bits = 4;
  int levels = 15;
  int64_t page_size = 0, n_kv_head = 0, head_dim = 0;
  size_t channel_bytes = 0;  // code bytes of one channel
  KeyLayout(DType t, int64_t ps, int64_t nkv, int64_t hd)
      : bits(kv_key_bits(t)),
        levels((1 << bits) - 1),
        page_size(ps),
        n_kv_head(nkv),
        head_dim(hd),
        channel_bytes(static_cast<size_t>((ps * bits + 7) / 8)) {}
  size_t grids_bytes() const { return static_cast<size_t>(n_kv_head * head_dim) * 4; }
  uint16_t* grid(void* page, int64_t g, int64_t d) const {
    return reinterpret_cast<uint16_t*>(static_cast<char*>(page) +
                                       static_cast<size_t>(g * head_dim + d) * 4);
  }
  const uint16_t* grid(const void* page, int64_t g, int64_t d) const {
    return grid(const_cast<void*>(page), g, d);
  }
  uint8_t* codes(void* page, int64_t g, int64_t d) const {
    return reinterpret_cast<uint8_t*>(static_cast<char*>(page) + grids_bytes() +
                                      static_cast<size_t>(g * head_dim + d) * channel_bytes);
  }
  const uint8_t* codes(const void* page, int64_t g, int64_t d) const {
    return codes(const_cast<void*>(page), g, d);
  }
  int get(const uint8_t* c, int64_t t) const {
    return bits == 8 ? c[t] : (c[t >> 1] >> (4 * (t & 1))) & 15;
  }
  void set(uint8_t* c, int64_t t, int v) const {
    if (bits == 8) {
      c[t] = static_cast<uint8_t>(v);
    } else {
      const int sh = 4 * static_cast<int>(t & 1);
      c[t >> 1] = static_cast<uint8_t>((c[t >> 1] & ~(15 << sh)) | (v << sh));
    }
  }
};

// The code of x on grid (m, d): (x - m) / d rounded to nearest (ties to
// even, by adding and subtracting 1.5 * 2^23 in the default rounding mode),
// clamped to [0, levels].
inline int key_code(float x, float m, float d, int levels) {
  if (!(d > 0.0f)) return 0;
  const float v = (x - m) / d;
  if (!(v > 0.0f)) return 0;  // also NaN
  if (v >= static_cast<float>(levels)) return levels;
  constexpr float kRound = 12582912.0f;  // no -ffast-math here: not folded away
  return static_cast<int>((v + kRound) - kRound);
}

inline float key_value(int c, float m, float d) {
  const float v = d * static_cast<float>(c);
  return v + m;
}

// Appends n new keys x[i * x_stride] at page offsets off[i] to channel
// (g, d) of a K page whose offsets below n_old hold keys already.
void append_key_channel(const KeyLayout& L, void* page, int64_t g, int64_t d, int64_t n_old,
                        const float* x, int64_t x_stride, const int64_t* off, int64_t n) {
  uint16_t* grid = L.grid(page, g, d);
  uint8_t* codes = L.codes(page, g, d);
  bool bad = false;
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i * x_stride];
    if (!std::isfinite(v)) bad = true;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  float d0 = 0.0f, m0 = 0.0f;
  if (n_old > 0) {
    d0 = half_to_float(grid[0]);
    m0 = half_to_float(grid[1]);
    if (std::isnan(d0) || std::isnan(m0)) bad = true;
  }
  if (bad) {
    grid[0] = grid[1] = kF16NaN;
    for (int64_t i = 0; i < n; ++i) L.set(codes, off[i], 0);
    return;
  }
  const float top0 = m0 + static_cast<float>(L.levels) * d0;
  float m = m0, dd = d0;
  if (n_old == 0 || lo < m0 || hi > top0) {
    if (n_old > 0) {
      lo = std::min(lo, m0);
      hi = std::max(hi, top0);
    }
    const uint16_t m16 = f16_floor(lo);
    m = half_to_float(m16);
    const uint16_t d16 = f16_ceil((hi - m) / static_cast<float>(L.levels));
    dd = half_to_float(d16);
    if (!std::isfinite(m) || !std::isfinite(dd)) {  // beyond f16's range
      grid[0] = grid[1] = kF16NaN;
      for (int64_t i = 0; i < n; ++i) L.set(codes, off[i], 0);
      return;
    }
    for (int64_t t = 0; t < n_old; ++t) {
      L.set(codes, t, key_code(key_value(L.get(codes, t), m0, d0), m, dd, L.levels));
    }
    grid[0] = d16;
    grid[1] = m16;
  }
  for (int64_t i = 0; i < n; ++i) L.set(codes, off[i], key_code(x[i * x_stride], m, dd, L.levels));
}

// The keys of one call grouped by page: runs of token indices (in slot
// order within a page), with the offsets they write and the number of keys
// the page held before.
struct KeyRun {
  int64_t page = 0, n_old = 0;
  std::vector<int64_t> tokens, offsets;
};
std::vector<KeyRun> key_runs(const int64_t* slots, int64_t n_tokens, int64_t page_size) {
  std::vector<int64_t> order(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) order[static_cast<size_t>(t)] = t;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return slots[a] < slots[b]; });
  std::vector<KeyRun> runs;
  for (int64_t t : order) {
    const int64_t page = slots[t] / page_size;
    if (runs.empty() || runs.back().page != page) {
      runs.push_back({page, slots[t] % page_size, {}, {}});
    }
    runs.back().tokens.push_back(t);
    runs.back().offsets.push_back(slots[t] % page_size);
  }
  return runs;
}

// Appends the keys of one run for kv head g (every channel).
void append_key_run(const KeyLayout& L, void* page, const KeyRun& r, int64_t g, const float* k,
                    int64_t k_stride, std::vector<float>& xs) {
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  xs.resize(static_cast<size_t>(n));
  for (int64_t d = 0; d < L.head_dim; ++d) {
    for (int64_t i = 0; i < n; ++i) {
      xs[static_cast<size_t>(i)] = k[r.tokens[static_cast<size_t>(i)] * k_stride + g * L.head_dim + d];
    }
    append_key_channel(L, page, g, d, r.n_old, xs.data(), 1, r.offsets.data(), n);
  }
}

// Quantized pages whose groups fit head_dim; the shape checks are
// check_attention_batch's (kernels/cpu/attention.h).
Status check_batch(const float* out, int64_t out_stride, const float* q, int64_t q_stride,
                   int64_t n_head, const KvPages& kv, const AttentionBatch& b, int64_t* n_tokens,
                   int64_t* max_new, int64_t* work) {
  if (kv.head_dim < 1 || !kv_quant_ok(kv.dtype, kv.head_dim)) return Status::kUnsupported;
  return check_attention_batch(out, out_stride, q, q_stride, n_head, kv, b, n_tokens, max_new,
                               work);
}

Status check_append(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                    int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                    int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                    int64_t n_tokens) {
  if (head_dim < 1 || !kv_quant_ok(dtype, head_dim)) return Status::kUnsupported;
  if (n_pages < 0 || page_size < 1 || n_kv_head < 1 || n_tokens < 0) {
    return Status::kInvalidArgument;
  }
  if (n_pages > 0 && (k_pages == nullptr || v_pages == nullptr)) return Status::kInvalidArgument;
  if (n_tokens == 0) return Status::kOk;
  const int64_t row = n_kv_head * head_dim;
  if (k == nullptr || v == nullptr || slots == nullptr || k_stride < row || v_stride < row) {
    return Status::kInvalidArgument;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (slots[t] < 0 || slots[t] / page_size >= n_pages) return Status::kInvalidArgument;
    const int64_t id = slots[t] / page_size;
    if (k_pages[id] == nullptr || v_pages[id] == nullptr) return Status::kInvalidArgument;
  }
  return Status::kOk;
}

// Folds key x into a min/max element: a NaN makes both NaN for good.
inline void fold(float x, float* mn, float* mx) {
  *mn = (x < *mn || x != x) ? x : *mn;
  *mx = (x > *mx || x != x) ? x : *mx;
}


#if defined(__x86_64__)
#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

// Keys t0 .. t0 + 15 of channel d of kv head g (a whole 16-aligned block of a
// page whose size is a multiple of 16), dequantized as kv_key_dequant does:
// d * c, then + m.
STRATA_AVX512 inline __m512 key16(const KeyLayout& L, const void* page, int64_t g, int64_t d,
                                  int64_t t0) {
  const uint16_t* grid = L.grid(page, g, d);
  const __m512 dd = _mm512_set1_ps(_cvtsh_ss(grid[0]));  // exact, as f16_to_f32
  const __m512 m = _mm512_set1_ps(_cvtsh_ss(grid[1]));
  const uint8_t* c = L.codes(page, g, d);
  __m128i bytes;
  if (L.bits == 8) {
    bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + t0));
  } else {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + t0 / 2));
    const __m128i nib = _mm_set1_epi8(15);
    bytes = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
  }
  const __m512 cf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
  return _mm512_add_ps(_mm512_mul_ps(dd, cf), m);
}

// Decode: one query token, query heads h0 .. h0 + n_h - 1 (n_h <= 8) of kv
// head g, over n_keys keys in pages of a multiple of 16 tokens. Per block of
// 16 keys: the scores of every head from the channel-major keys (16 keys per
// register), one online-softmax fold per head (as the f32 kernels), then the
// values dequantized row by row and added in.
STRATA_AVX512 void decode_quant_avx512(float* out, int64_t out_stride, const float* q,
                                       int64_t q_stride, const KvPages& kv, const int32_t* ids,
                                       int64_t g, int64_t h0, int64_t n_h, int64_t tok,
                                       int64_t n_keys, float scale) {
  constexpr int kMaxH = 8;
  const int64_t hd = kv.head_dim;  // a multiple of 32
  const int64_t nv = hd / 16;
  const KeyLayout keys(kv.dtype, kv.page_size, kv.n_kv_head, hd);
  const size_t hrb = head_row_bytes(kv);
  alignas(64) float qs[kMaxH][kMaxHeadDim];
  alignas(64) float acc[kMaxH][kMaxHeadDim];
  alignas(64) float pj[kMaxH][kKeyBlock];
  alignas(64) float vt[kKeyBlock][kMaxHeadDim];
  float m[kMaxH], l[kMaxH];
  for (int64_t h = 0; h < n_h; ++h) {
    const float* qr = q + tok * q_stride + (h0 + h) * hd;
    for (int64_t d = 0; d < hd; ++d) qs[h][d] = qr[d] * scale;
    for (int64_t d = 0; d < hd; ++d) acc[h][d] = 0.0f;
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int64_t jn = std::min(kKeyBlock, n_keys - j0);
    const void* page = kv.k[ids[j0 / kv.page_size]];
    const int64_t t0 = j0 % kv.page_size;
    __m512 s[kMaxH];
    for (int64_t h = 0; h < n_h; ++h) s[h] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
      const __m512 k = key16(keys, page, g, d, t0);
      for (int64_t h = 0; h < n_h; ++h) s[h] = _mm512_fmadd_ps(_mm512_set1_ps(qs[h][d]), k, s[h]);
    }
    const __mmask16 valid = static_cast<__mmask16>((1u << jn) - 1u);
    for (int64_t h = 0; h < n_h; ++h) {
      const __m512 sc = _mm512_mask_blend_ps(valid, _mm512_set1_ps(-INFINITY), s[h]);
      const float m_new = std::max(m[h], _mm512_reduce_max_ps(sc));
      const __m512 p = exp_fast_avx512(_mm512_sub_ps(sc, _mm512_set1_ps(m_new)));
      _mm512_store_ps(pj[h], p);
      const float corr = exp_fast(m[h] - m_new);
      l[h] = l[h] * corr + _mm512_reduce_add_ps(p);
      m[h] = m_new;
      if (corr != 1.0f) {
        const __m512 cv = _mm512_set1_ps(corr);
        for (int64_t c = 0; c < nv; ++c) {
          _mm512_store_ps(acc[h] + 16 * c, _mm512_mul_ps(_mm512_load_ps(acc[h] + 16 * c), cv));
        }
      }
    }
    dequantize_rows(kv.dtype, kv_row(kv, kv.v, ids, j0, g, hrb), hrb * kv.n_kv_head, vt[0],
                    kMaxHeadDim, jn, hd);
    for (int64_t jj = 0; jj < jn; ++jj) {
      for (int64_t h = 0; h < n_h; ++h) {
        const __m512 pv = _mm512_set1_ps(pj[h][jj]);
        for (int64_t c = 0; c < nv; ++c) {
          _mm512_store_ps(acc[h] + 16 * c, _mm512_fmadd_ps(pv, _mm512_load_ps(vt[jj] + 16 * c),
                                                           _mm512_load_ps(acc[h] + 16 * c)));
        }
      }
    }
  }
  for (int64_t h = 0; h < n_h; ++h) {
    float* o = out + tok * out_stride + (h0 + h) * hd;
    const float inv = 1.0f / l[h];
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[h][d] * inv;
  }
}
#endif  // __x86_64__

}  // namespace

void kv_key_dequant(const void* k_page, DType dtype, int64_t page_size, int64_t n_kv_head,
                    int64_t head_dim, int64_t g, int64_t t, float* out) {
  const KeyLayout L(dtype, page_size, n_kv_head, head_dim);
  for (int64_t d = 0; d < head_dim; ++d) {
    const uint16_t* grid = L.grid(k_page, g, d);
    out[d] = key_value(L.get(L.codes(k_page, g, d), t), f16_to_f32(grid[1]), f16_to_f32(grid[0]));
  }
}

bool kv_quant_ok(DType dtype, int64_t head_dim) {
  if (static_cast<size_t>(dtype) >= static_cast<size_t>(DType::kCount)) return false;
  return is_quantized(dtype) && head_dim > 0 && row_elems_ok(dtype, head_dim);
}

namespace {

// Dequantizes page `id` (its first `filled` slots; the rest are zeros, never
// stale bytes) into f32 K and V pages of the same layout as f16/f32 pages.
void dequantize_page(const KvPages& kv, const KeyLayout& keys, int32_t id, int64_t filled,
                     float* kd, float* vd) {
  const int64_t page_elems = kv.page_size * kv.n_kv_head * kv.head_dim;
  for (int64_t g = 0; g < kv.n_kv_head; ++g) {
    for (int64_t d = 0; d < kv.head_dim; ++d) {
      const uint16_t* grid = keys.grid(kv.k[id], g, d);
      const float dd = half_to_float(grid[0]), m = half_to_float(grid[1]);
      const uint8_t* codes = keys.codes(kv.k[id], g, d);
      for (int64_t t = 0; t < filled; ++t) {
        kd[(t * kv.n_kv_head + g) * kv.head_dim + d] = key_value(keys.get(codes, t), m, dd);
      }
    }
  }
  dequantize_rows(kv.dtype, kv.v[id], head_row_bytes(kv), vd, kv.head_dim, filled * kv.n_kv_head,
                  kv.head_dim);
  const size_t done = static_cast<size_t>(filled * kv.n_kv_head * kv.head_dim);
  std::fill(kd + done, kd + page_elems, 0.0f);
  std::fill(vd + done, vd + page_elems, 0.0f);
}

}  // namespace

Status paged_attention_quant(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                             int64_t n_head, const KvPages& kv, const AttentionBatch& batch,
                             float scale) {
  int64_t n_tokens = 0, max_new = 0, work = 0;
  if (Status s =
          check_batch(out, out_stride, q, q_stride, n_head, kv, batch, &n_tokens, &max_new, &work);
      s != Status::kOk || n_tokens == 0) {
    return s;
  }
  const int64_t group = n_head / kv.n_kv_head;
#if defined(__x86_64__)
  // Decode: the AVX-512 kernel reads the quantized pages directly, whole
  // 16-key blocks of a page, one item per (sequence, kv head). (Pages the
  // sequences share are read per sequence: dequantizing them once into f32
  // pages for the f32 decode's product over shared pages, below, measured
  // slower, 155 against 136 ms a step for 16 sequences sharing 3072 of 3104
  // keys with the demo model's shape, and still slower with the keys'
  // dequantization vectorized.)
  if (max_new == 1 && group <= 8 && cpu_features().avx512 && kv.page_size % kKeyBlock == 0) {
    const int64_t n_items = batch.n_seq * kv.n_kv_head;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(work, int64_t{1} << 16))
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t sq = item / kv.n_kv_head, g = item % kv.n_kv_head;
      if (batch.q_indptr[sq + 1] == batch.q_indptr[sq]) continue;
      decode_quant_avx512(out, out_stride, q, q_stride, kv, seq_pages(batch, sq, g), g, g * group,
                          group, batch.q_indptr[sq], batch.kv_len[sq], scale);
    }
    return Status::kOk;
  }
#endif
  // Otherwise (prefill, where many query tiles read the same keys, or no
  // AVX-512): the pages the sequences read are dequantized once into f32
  // pages (a page several sequences read, such as a shared prompt prefix's,
  // once) and the f32 kernel runs on them, a run of sequences at a time
  // whose pages fit kKvDequantBytes (at least one sequence).
  const KeyLayout keys(kv.dtype, kv.page_size, kv.n_kv_head, kv.head_dim);
  const int64_t page_elems = kv.page_size * kv.n_kv_head * kv.head_dim;
  const uint64_t page_pair_bytes = 2 * static_cast<uint64_t>(page_elems) * sizeof(float);
  static thread_local std::vector<float> buf;
  for (int64_t s0 = 0; s0 < batch.n_seq;) {
    // The sub-batch s0 .. s1 - 1 with its pages renumbered 0, 1, ...
    std::vector<int32_t> q_indptr{0}, kv_len, page_indptr{0}, page_ids, src;
    std::vector<int64_t> filled;
    std::unordered_map<int32_t, int32_t> index_of;  // page id -> its f32 page
    int64_t s1 = s0;
    for (; s1 < batch.n_seq; ++s1) {
      const int64_t len = batch.kv_len[s1];
      const int64_t n_pg = (len + kv.page_size - 1) / kv.page_size;
      size_t n_new_src = 0;
      for (int64_t l = 0; l < batch.lists; ++l) {
        const int32_t* ids = seq_pages(batch, s1, l);
        for (int64_t i = 0; i < n_pg; ++i) n_new_src += index_of.count(ids[i]) == 0;
      }
      if (s1 > s0 && (src.size() + n_new_src) * page_pair_bytes > kKvDequantBytes) break;
      for (int64_t l = 0; l < batch.lists; ++l) {  // each kv head's list (or the one)
        const int32_t* ids = seq_pages(batch, s1, l);
        for (int64_t i = 0; i < n_pg; ++i) {
          const auto [it, fresh] = index_of.try_emplace(ids[i], static_cast<int32_t>(src.size()));
          const int64_t fill = std::min(kv.page_size, len - i * kv.page_size);
          if (fresh) {
            src.push_back(ids[i]);
            filled.push_back(fill);
          } else {
            filled[static_cast<size_t>(it->second)] =
                std::max(filled[static_cast<size_t>(it->second)], fill);
          }
          page_ids.push_back(it->second);
        }
      }
      q_indptr.push_back(batch.q_indptr[s1 + 1] - batch.q_indptr[s0]);
      kv_len.push_back(batch.kv_len[s1]);
      page_indptr.push_back(static_cast<int32_t>(page_ids.size()));
    }
    const int64_t n_src = static_cast<int64_t>(src.size());
    const size_t need = static_cast<size_t>(n_src) * 2 * static_cast<size_t>(page_elems);
    if (buf.size() < need) {
      // Grown to exactly what this run needs, the old buffer let go first:
      // never both at once, nor a vector's doubled capacity (the block
      // budget counts this buffer: kv_dequant_bytes, offload/block_budget.h).
      std::vector<float>().swap(buf);
      buf.resize(need);
    }
    float* const base = buf.data();  // the calling thread's, named before the threads start
    std::vector<const void*> kp(src.size()), vp(src.size());
#pragma omp parallel for schedule(static) num_threads(threads_for(n_src * page_elems * 4))
    for (int64_t u = 0; u < n_src; ++u) {
      float* kd = base + static_cast<size_t>(2 * u * page_elems);
      float* vd = kd + page_elems;
      dequantize_page(kv, keys, src[static_cast<size_t>(u)], filled[static_cast<size_t>(u)], kd, vd);
      kp[static_cast<size_t>(u)] = kd;
      vp[static_cast<size_t>(u)] = vd;
    }
    KvPages f = kv;
    f.k = kp.data();
    f.v = vp.data();
    f.n_pages = n_src;
    f.dtype = DType::kF32;
    AttentionBatch sub;
    sub.n_seq = s1 - s0;
    sub.q_indptr = q_indptr.data();
    sub.kv_len = kv_len.data();
    sub.page_indptr = page_indptr.data();
    sub.page_ids = page_ids.data();
    sub.lists = batch.lists;
    const int64_t row0 = batch.q_indptr[s0];
    if (Status st = paged_attention(out + row0 * out_stride, out_stride, q + row0 * q_stride,
                                    q_stride, n_head, f, sub, scale);
        st != Status::kOk) {
      return st;
    }
    s0 = s1;
  }
  // One long sequence's pages may have outgrown the cap: not kept.
  if (buf.size() * sizeof(float) > kKvDequantBytes) std::vector<float>().swap(buf);
  return Status::kOk;
}

Status paged_attention_quant_ref(float* out, int64_t out_stride, const float* q,
                                 int64_t q_stride, int64_t n_head, const KvPages& kv,
                                 const AttentionBatch& batch, float scale) {
  int64_t n_tokens = 0, max_new = 0, work = 0;
  if (Status s =
          check_batch(out, out_stride, q, q_stride, n_head, kv, batch, &n_tokens, &max_new, &work);
      s != Status::kOk || n_tokens == 0) {
    return s;
  }
  const int64_t hd = kv.head_dim;
  const size_t hrb = head_row_bytes(kv);
  const int64_t group = n_head / kv.n_kv_head;
  std::vector<float> keys, values;  // [kv_len, hd] of one kv head, dequantized
  for (int64_t s = 0; s < batch.n_seq; ++s) {
    const int64_t n_new = batch.q_indptr[s + 1] - batch.q_indptr[s];
    const int64_t len = batch.kv_len[s];
    if (n_new == 0) continue;
    for (int64_t g = 0; g < kv.n_kv_head; ++g) {
      const int32_t* ids = seq_pages(batch, s, g);
      keys.resize(static_cast<size_t>(len * hd));
      values.resize(static_cast<size_t>(len * hd));
      for (int64_t j = 0; j < len; ++j) {
        kv_key_dequant(kv.k[ids[j / kv.page_size]], kv.dtype, kv.page_size, kv.n_kv_head, hd, g,
                       j % kv.page_size, &keys[j * hd]);
        dequantize_row_ref(kv.dtype, kv_row(kv, kv.v, ids, j, g, hrb), &values[j * hd], hd);
      }
      for (int64_t i = 0; i < n_new; ++i) {
        const int64_t tok = batch.q_indptr[s] + i;
        const int64_t p = len - n_new + i;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* qr = q + tok * q_stride + h * hd;
          attend_row_ref(
              out + tok * out_stride + h * hd, qr, hd, p, scale,
              [&](int64_t j, int64_t d) { return static_cast<double>(keys[j * hd + d]); },
              [&](int64_t j, int64_t d) { return static_cast<double>(values[j * hd + d]); });
        }
      }
    }
  }
  return Status::kOk;
}

Status kv_append_quant(void* const* k_pages, void* const* v_pages, int64_t n_pages, DType dtype,
                       int64_t page_size, int64_t n_kv_head, int64_t head_dim, const float* k,
                       int64_t k_stride, const float* v, int64_t v_stride, const int64_t* slots,
                       int64_t n_tokens, float* k_min, float* k_max) {
  if (Status s = check_append(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim, k,
                              k_stride, v, v_stride, slots, n_tokens);
      s != Status::kOk) {
    return s;
  }
  if (n_tokens == 0) return Status::kOk;
  const int64_t row = n_kv_head * head_dim;
  // Groups divide head_dim, so the token's whole row quantizes as its heads do.
  const size_t trb = row_bytes(dtype, row);
#pragma omp parallel for schedule(static) num_threads(threads_for(n_tokens * row))
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t id = slots[t] / page_size;
    const size_t off = static_cast<size_t>(slots[t] % page_size) * trb;
    quantize_row(dtype, v + t * v_stride, static_cast<char*>(v_pages[id]) + off, row);
  }
  const KeyLayout keys(dtype, page_size, n_kv_head, head_dim);
  const std::vector<KeyRun> runs = key_runs(slots, n_tokens, page_size);
  const int64_t n_items = static_cast<int64_t>(runs.size()) * n_kv_head;
  // Work per key element: a grid check, a division and a rounding, and now
  // and then a re-grid of the page's older codes: some 16 flops' worth.
#pragma omp parallel for schedule(static) num_threads(threads_for(n_tokens * row * 16))
  for (int64_t item = 0; item < n_items; ++item) {
    thread_local std::vector<float> xs;
    const KeyRun& r = runs[static_cast<size_t>(item / n_kv_head)];
    append_key_run(keys, k_pages[r.page], r, item % n_kv_head, k, k_stride, xs);
  }
  if (k_min == nullptr || k_max == nullptr) return Status::kOk;
  // Min/max from the f32 keys, in token order within each chunk of elements.
  constexpr int64_t kChunk = 64;
  const int64_t n_chunks = (row + kChunk - 1) / kChunk;
  const int n_threads =
      static_cast<int>(std::min<int64_t>(n_chunks, threads_for(n_tokens * row, int64_t{1} << 15)));
#pragma omp parallel for schedule(static) num_threads(n_threads)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t e0 = c * kChunk;
    const int64_t en = std::min(kChunk, row - e0);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int64_t page = slots[t] / page_size;
      const float* src = k + t * k_stride + e0;
      float* mn = k_min + page * row + e0;
      float* mx = k_max + page * row + e0;
      if (slots[t] % page_size == 0) {
        std::memcpy(mn, src, static_cast<size_t>(en) * 4);
        std::memcpy(mx, src, static_cast<size_t>(en) * 4);
        continue;
      }
      for (int64_t e = 0; e < en; ++e) fold(src[e], &mn[e], &mx[e]);
    }
  }
  return Status::kOk;
}

Status kv_append_quant_ref(void* const* k_pages, void* const* v_pages, int64_t n_pages,
                           DType dtype, int64_t page_size, int64_t n_kv_head, int64_t head_dim,
                           const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                           const int64_t* slots, int64_t n_tokens, float* k_min, float* k_max) {
  if (Status s = check_append(k_pages, v_pages, n_pages, dtype, page_size, n_kv_head, head_dim, k,
                              k_stride, v, v_stride, slots, n_tokens);
      s != Status::kOk) {
    return s;
  }
  const int64_t row = n_kv_head * head_dim;
  const size_t hrb = row_bytes(dtype, head_dim);
  const KeyLayout keys(dtype, page_size, n_kv_head, head_dim);
  std::vector<float> xs;
  for (const KeyRun& r : key_runs(slots, n_tokens, page_size)) {
    for (int64_t g = 0; g < n_kv_head; ++g) append_key_run(keys, k_pages[r.page], r, g, k, k_stride, xs);
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t id = slots[t] / page_size;
    const int64_t off = slots[t] % page_size;
    for (int64_t g = 0; g < n_kv_head; ++g) {
      const size_t at = static_cast<size_t>(off * n_kv_head + g) * hrb;
      quantize_row_ref(dtype, v + t * v_stride + g * head_dim, static_cast<char*>(v_pages[id]) + at,
                       head_dim);
    }
    if (k_min == nullptr || k_max == nullptr) continue;
    for (int64_t e = 0; e < row; ++e) {
      const float x = k[t * k_stride + e];
      float& mn = k_min[id * row + e];
      float& mx = k_max[id * row + e];
      if (off == 0) {
        mn = x;
        mx = x;
      } else if (std::isnan(x) || std::isnan(mn)) {
        mn = NAN;
        mx = NAN;
      } else {
        mn = std::min(mn, x);
        mx = std::max(mx, x);
      }
    }
  }
  return Status::kOk;
}

}  // namespace strata::cpu
