// Internal to the decode attention (attention_decode.cpp, and
// attention_decode_lanes.cpp for units of sequences sharing pages): its work
// units, their context and the helpers both files compute with.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_rows.h"

namespace strata::cpu::decode {

// Work units are (sequence, range of kv heads, range of keys). A range of kv
// heads takes as many whole kv heads as fit kDecodeRows query rows (or, for
// larger groups, kDecodeRows query heads of one kv head), so a unit reads
// each key's K and V rows of those heads once, as one contiguous span, for all
// their query heads. A sequence longer than a thread's share of the keys is
// cut into key chunks (multiples of kAttentionKeyBlock keys, so blocks are the
// same as uncut) whose partial softmax states (running max, sum and value
// sums) are merged after the parallel loop. Each thread takes a contiguous
// run of units of about equal bytes and walks its keys in order, prefetching
// kDecodePrefetch blocks ahead across unit boundaries, so the stream from
// memory never starts cold.
constexpr int64_t kDecodeRows = 32;      // query rows of one unit
constexpr int64_t kDecodePrefetch = 2;   // blocks of 16 keys prefetched ahead
constexpr int64_t kMinChunkKeys = 64;    // shortest key chunk of a cut sequence
constexpr int64_t kMaxChunkKeys = 2048;  // longest key chunk (bounds a unit's time)
constexpr int64_t kLaneMinRows = 8;      // fewest rows of a shared unit computed in lanes
constexpr int64_t kLaneRows = 48;        // most rows of a lane_unit (3 vectors)
constexpr int64_t kPartRows = std::max(kDecodeRows, kLaneRows);  // rows of a partial state slot

// Query heads [h0, h1) reading kv heads [g0, g1).
struct HeadRange {
  int32_t g0, g1, h0, h1;
};

// A unit of a group of sequences sharing pages (kernels/cpu/shared_pages.h)
// covers keys of those pages for n_s of its members at once: its rows are
// kv-head major, (kv head, member, query head of the kv head), so that each
// kv head's rows are contiguous as in a unit of one sequence; its head range
// takes whole kv heads.
struct DecodeUnit {
  int32_t s;       // sequence (of a shared unit: its first member, whose pages it reads)
  int32_t hr;      // head range
  int32_t j0, j1;  // keys [j0, j1)
  int32_t part;    // slot of its partial state, -1 when it covers the whole sequence
  int32_t n_s;     // sequences whose queries it takes (1, or members of a shared group)
  int32_t s_list;  // n_s > 1: they are shared_seqs[s_list .. s_list + n_s)
};

// The K and V rows of kv head g of keys j0 .. j0 + jn - 1 (jn <= 16) of a
// sequence whose pages are ids; entries jn .. 15 repeat the first row. One
// division per block, not per key.
inline void block_rows(const KvPages& kv, const int32_t* ids, int64_t j0, int64_t jn, int64_t g,
                       const char** krow, const char** vrow) {
  const int64_t row_bytes = kv.n_kv_head * kv.head_dim * elem_bytes(kv.dtype);
  const int64_t g_bytes = g * kv.head_dim * elem_bytes(kv.dtype);
  int64_t page = j0 / kv.page_size, off = j0 - page * kv.page_size;
  for (int64_t i = 0; i < jn; ++i) {
    const int64_t b = off * row_bytes + g_bytes;
    krow[i] = static_cast<const char*>(kv.k[ids[page]]) + b;
    vrow[i] = static_cast<const char*>(kv.v[ids[page]]) + b;
    if (++off == kv.page_size) {
      off = 0;
      ++page;
    }
  }
  for (int64_t i = jn; i < 16; ++i) {
    krow[i] = krow[0];
    vrow[i] = vrow[0];
  }
}

#if defined(__x86_64__)

struct DecodeCtx {
  const KvPages* kv;
  const AttentionBatch* b;
  const HeadRange* ranges;
  int64_t group;  // query heads per kv head
  float* out;
  int64_t out_stride;
  const float* q;
  int64_t q_stride;
  float scale;
  float* parts;                // [n_parts, kPartRows, head_dim + 2]: value sums, max, sum per row
  const int32_t* shared_seqs;  // the members of the shared units
};

// Row r of unit u: its sequence and query head (see DecodeUnit).
inline void unit_row(const DecodeCtx& c, const DecodeUnit& u, const HeadRange& hr, int64_t r,
                     int64_t* seq, int64_t* head) {
  if (u.n_s == 1) {
    *seq = u.s;
    *head = hr.h0 + r;
    return;
  }
  const int64_t per_g = u.n_s * c.group;
  const int64_t rem = r % per_g;
  *seq = c.shared_seqs[u.s_list + rem / c.group];
  *head = (hr.g0 + r / per_g) * c.group + rem % c.group;
}

// A software prefetch into L1 that the compiler keeps (GCC's pure-function
// analysis drops calls of a function whose only effect is __builtin_prefetch).
inline void prefetch_l1(const char* p) {
  asm volatile("prefetcht0 %0" : : "m"(*p));
}

// Prefetches bytes [offset, offset + bytes) of each of n rows: every
// 64-byte line they touch.
inline void prefetch_rows(const char* const* rows, int64_t n, int64_t offset, int64_t bytes) {
  for (int64_t i = 0; i < n; ++i) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(rows[i] + offset) & ~uintptr_t{63};
    const uintptr_t last =
        (reinterpret_cast<uintptr_t>(rows[i] + offset) + bytes - 1) & ~uintptr_t{63};
    for (uintptr_t a = first; a <= last; a += 64) prefetch_l1(reinterpret_cast<const char*>(a));
  }
}

// prefetch_rows into L2 (prefetcht1), from the rows' start: for lane_unit,
// whose tiles fill most of L1.
inline void prefetch_rows_l2(const char* const* rows, int64_t n, int64_t bytes) {
  for (int64_t i = 0; i < n; ++i) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(rows[i]) & ~uintptr_t{63};
    const uintptr_t last = (reinterpret_cast<uintptr_t>(rows[i]) + bytes - 1) & ~uintptr_t{63};
    for (uintptr_t a = first; a <= last; a += 64) {
      asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(a)));
    }
  }
}

// Whether unit u runs lane_unit.
inline bool lane_unit_runs(const DecodeCtx& c, const DecodeUnit& u) {
  return u.n_s > 1 && u.n_s * c.group >= kLaneMinRows && c.kv->head_dim % 4 == 0 &&
         c.ranges[u.hr].g1 - c.ranges[u.hr].g0 == 1;
}

// Runs a shared unit with its query rows in the lanes (attention_decode_lanes.cpp):
// writes the rows' partial states.
void lane_unit(const DecodeCtx& c, const DecodeUnit& u);

#endif  // __x86_64__

}  // namespace strata::cpu::decode
