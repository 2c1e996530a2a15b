// Causal paged attention on the GPU (prefill and decode alike), flash style:
// no score matrix in memory, an online softmax in registers. The split plan
// and its key ranges are launch_plan.h's (plan_attention, split_keys).
//
// Work unit: a warp owns up to R = attn_rows_per_warp(HD) query rows of one
// kv head (row = token * group + head in group, so GQA heads share every K/V
// read) and keeps per row its running max m, sum l and unnormalised output
// acc (lane l holds dims l, l + 32, ...). A fold takes a tile of 32 keys:
// lane j fetches the page pointers of key j (then broadcast), each key's row
// is read once by the warp (coalesced), each row's score is a warp reduction,
// lane j keeps the score of key j; the tile's max rescales the state once;
// then the V rows are read once and multiply-added with the probabilities.
//
// Modes (one kernel, chosen per launch; each sequence is handled by one):
//   decode  sequences with one new token: block (s, g, z) covers the keys of
//           split z; its warps take the split's tiles in turn, then merge
//           their states in shared memory; with one split the block writes
//           the output, else a partial (m, l, o) that
//           attention_merge_kernel combines over the splits.
//   prefill sequences with several new tokens: the warps of all blocks
//           (s, g, *) take the sequence's row chunks in turn; a chunk folds
//           every key up to its last row's causal limit and writes its rows.
// Each block first validates its sequence's layout and the pages it will
// read; a bad one is reported in the DeviceError and the block writes
// nothing. NaN scores propagate (a NaN-aware max), as in the reference.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.h"

namespace strata::cuda {

namespace {

enum class AttnMode : int { kDecode, kPrefill };

__device__ __forceinline__ float quiet_nan() {
  return __int_as_float(0x7fc00000);
}

// max that returns NaN when either is NaN.
__device__ __forceinline__ float max_nan(float a, float b) {
  return (a != a || b != b) ? quiet_nan() : fmaxf(a, b);
}

__device__ __forceinline__ float warp_max_nan(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__device__ __forceinline__ const void* shfl_ptr(const void* p, int src) {
  const unsigned long long u = reinterpret_cast<unsigned long long>(p);
  return reinterpret_cast<const void*>(__shfl_sync(kFullMask, u, src));
}

struct SeqInfo {
  bool ok;
  int64_t q0;          // first query row of the sequence
  int64_t n_new;       // its new tokens
  int64_t len;         // its keys
  const int32_t* ids;  // its page ids
};

// Reads and checks sequence s (every thread of a block gets the same answer).
// g: the kv head whose page list is wanted (seqs.lists > 1: one per kv head).
__device__ SeqInfo seq_info(const AttentionSeqs& seqs, int64_t s, int64_t page_size,
                            int64_t g = 0) {
  const int64_t q_begin = seqs.q_indptr[s];
  const int64_t q_end = seqs.q_indptr[s + 1];
  const int64_t q_total = seqs.q_indptr[seqs.n_seq];
  const int64_t p_begin = seqs.page_indptr[s];
  const int64_t p_end = seqs.page_indptr[s + 1];
  const int64_t p_total = seqs.page_indptr[seqs.n_seq];
  const int64_t len = seqs.kv_len[s];
  SeqInfo r;
  const int64_t lists = seqs.lists;
  const int64_t n_pg = lists >= 1 ? (p_end - p_begin) / lists : 0;
  r.ok = seqs.q_indptr[0] == 0 && seqs.page_indptr[0] == 0 && q_begin >= 0 && q_begin <= q_end &&
         q_end <= q_total && p_begin >= 0 && p_begin <= p_end && p_end <= p_total && lists >= 1 &&
         (p_end - p_begin) % lists == 0 && len >= q_end - q_begin && n_pg * page_size >= len;
  r.q0 = q_begin;
  r.n_new = q_end - q_begin;
  r.len = len;
  r.ids = seqs.page_ids + p_begin + (lists > 1 ? g * n_pg : 0);
  return r;
}

// Checks the pages holding keys [k_begin, k_end) of a sequence; false (and
// the error reported) when one is out of range or null. Every thread of the
// block must call it.
__device__ bool pages_ok(const KvLayer& kv, const SeqInfo& si, int64_t s, int64_t k_begin,
                         int64_t k_end, DeviceError* err) {
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  if (k_end > k_begin) {
    const int64_t p_first = k_begin / kv.page_size;
    const int64_t p_last = (k_end - 1) / kv.page_size;
    for (int64_t p = p_first + threadIdx.x; p <= p_last; p += blockDim.x) {
      const int32_t id = si.ids[p];
      if (id < 0 || id >= kv.n_pages || kv.k_pages[id] == nullptr || kv.v_pages[id] == nullptr) {
        bad = 1;
        raise_error(err, DeviceErrorCode::kAttentionPage, s, id, kv.n_pages);
      }
    }
  }
  __syncthreads();
  return bad == 0;
}

// The state of one warp's rows.
template <int HD, int R>
struct RowState {
  static constexpr int C = (HD + 31) / 32;  // dims per lane
  float q[R][C];
  float acc[R][C];
  float m[R];
  float l[R];
  int64_t last[R];  // last key each row sees (causal limit)
};

template <int HD, int R>
__device__ __forceinline__ void init_state(RowState<HD, R>& st) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    st.m[r] = -INFINITY;
    st.l[r] = 0.0f;
    st.last[r] = -1;
#pragma unroll
    for (int c = 0; c < RowState<HD, R>::C; ++c) {
      st.q[r][c] = 0.0f;
      st.acc[r][c] = 0.0f;
    }
  }
}

// Folds keys [kt, kt_end) (at most 32) of kv head g into the nr rows of st.
template <int HD, int R, typename S>
__device__ __forceinline__ void fold_tile(RowState<HD, R>& st, int nr, int64_t kt, int64_t kt_end,
                                          const KvLayer& kv, const int32_t* ids, int64_t g,
                                          float scale, int lane) {
  constexpr int C = RowState<HD, R>::C;
  using T = typename S::type;
  // Lane j finds the K and V rows of key kt + j.
  const int64_t my_key = kt + lane;
  const void* my_k = nullptr;
  const void* my_v = nullptr;
  if (my_key < kt_end) {
    const int32_t id = ids[my_key / kv.page_size];
    const int64_t off = ((my_key % kv.page_size) * kv.n_kv_head + g) * HD;
    my_k = static_cast<const T*>(kv.k_pages[id]) + off;
    my_v = static_cast<const T*>(kv.v_pages[id]) + off;
  }

  float s[R];
#pragma unroll
  for (int r = 0; r < R; ++r) s[r] = -INFINITY;
#pragma unroll 4
  for (int j = 0; j < 32; ++j) {
    const T* krow = static_cast<const T*>(shfl_ptr(my_k, j));
    if (krow == nullptr) break;  // keys past kt_end (uniform: the pointer is the warp's)
    const int64_t key = kt + j;
    float kv_c[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int d = lane + 32 * c;
      kv_c[c] = d < HD ? S::load(krow, d) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        float part = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) part = fmaf(st.q[r][c], kv_c[c], part);
        const float dot = warp_sum(part);
        if (lane == j && key <= st.last[r]) s[r] = dot * scale;
      }
    }
  }

  float p[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    p[r] = 0.0f;
    if (r < nr) {
      const float m_new = max_nan(st.m[r], warp_max_nan(s[r]));
      if (m_new != -INFINITY) {  // some key of the tile is visible (or a NaN)
        p[r] = s[r] == -INFINITY ? 0.0f : expf(s[r] - m_new);
        const float corr = expf(st.m[r] - m_new);  // 0 while m is -inf
        st.l[r] = st.l[r] * corr + warp_sum(p[r]);
#pragma unroll
        for (int c = 0; c < C; ++c) st.acc[r][c] *= corr;
        st.m[r] = m_new;
      }
    }
  }

#pragma unroll 4
  for (int j = 0; j < 32; ++j) {
    const T* vrow = static_cast<const T*>(shfl_ptr(my_v, j));
    if (vrow == nullptr) break;
    float v_c[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int d = lane + 32 * c;
      v_c[c] = d < HD ? S::load(vrow, d) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        const float pj = __shfl_sync(kFullMask, p[r], j);
#pragma unroll
        for (int c = 0; c < C; ++c) st.acc[r][c] = fmaf(pj, v_c[c], st.acc[r][c]);
      }
    }
  }
}

// Loads q rows r0 .. r0 + nr of sequence si (row = token * group + hh) of
// kv head g into st, with their causal limits.
template <int HD, int R>
__device__ __forceinline__ void load_rows(RowState<HD, R>& st, const float* q, int64_t q_stride,
                                          const SeqInfo& si, int64_t g, int64_t group, int64_t r0,
                                          int nr, int lane) {
  constexpr int C = RowState<HD, R>::C;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < nr) {
      const int64_t ri = r0 + r;
      const int64_t t = ri / group;
      const int64_t h = g * group + (ri - t * group);
      st.last[r] = si.len - si.n_new + t;
      const float* qr = q + (si.q0 + t) * q_stride + h * HD;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int d = lane + 32 * c;
        st.q[r][c] = d < HD ? qr[d] : 0.0f;
      }
    }
  }
}

template <int HD, typename S>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(float* out, int64_t out_stride, const float* q, int64_t q_stride,
                     int64_t n_head, KvLayer kv, AttentionSeqs seqs, float scale, AttnMode mode,
                     int64_t n_splits, float* partials, size_t partial_ml_floats,
                     DeviceError* err) {
  constexpr int R = attn_rows_per_warp(HD);
  constexpr int C = RowState<HD, R>::C;
  const int64_t s = blockIdx.x;
  const int64_t g = blockIdx.y;
  const int64_t z = blockIdx.z;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t group = n_head / kv.n_kv_head;

  const SeqInfo si = seq_info(seqs, s, kv.page_size, g);
  if (!si.ok) {
    if (threadIdx.x == 0 && g == 0 && z == 0) {
      raise_error(err, DeviceErrorCode::kSequence, s, si.len, 0);
    }
    return;
  }
  RowState<HD, R> st;

  if (mode == AttnMode::kPrefill) {
    if (si.n_new < 2) return;
    if (!pages_ok(kv, si, s, 0, si.len, err)) return;
    const int64_t n_rows = si.n_new * group;
    const int64_t n_chunks = (n_rows + R - 1) / R;
    for (int64_t c = z * kAttnWarps + warp; c < n_chunks; c += n_splits * kAttnWarps) {
      const int64_t r0 = c * R;
      const int nr = static_cast<int>(n_rows - r0 < R ? n_rows - r0 : R);
      init_state(st);
      load_rows(st, q, q_stride, si, g, group, r0, nr, lane);
      // Rows ascend by token, so the chunk's last row sees the most keys.
      const int64_t k_end = si.len - si.n_new + (r0 + nr - 1) / group + 1;
      for (int64_t kt = 0; kt < k_end; kt += kAttnKeyTile) {
        const int64_t kt_end = kt + kAttnKeyTile < k_end ? kt + kAttnKeyTile : k_end;
        fold_tile<HD, R, S>(st, nr, kt, kt_end, kv, si.ids, g, scale, lane);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          const int64_t ri = r0 + r;
          const int64_t t = ri / group;
          const int64_t h = g * group + (ri - t * group);
          float* o = out + (si.q0 + t) * out_stride + h * HD;
          const float inv_l = 1.0f / st.l[r];
#pragma unroll
          for (int cc = 0; cc < C; ++cc) {
            const int d = lane + 32 * cc;
            if (d < HD) o[d] = st.acc[r][cc] * inv_l;
          }
        }
      }
    }
    return;
  }

  // Decode: one new token; the split's keys, the warps taking tiles in turn.
  if (si.n_new != 1) return;
  int64_t k0, k1;
  split_keys(si.len, n_splits, z, kAttnKeyTile, &k0, &k1);
  if (!pages_ok(kv, si, s, k0, k1, err)) return;
  extern __shared__ float smem[];
  float* sm_m = smem;                     // [kAttnWarps][R]
  float* sm_l = sm_m + kAttnWarps * R;    // [kAttnWarps][R]
  float* sm_acc = sm_l + kAttnWarps * R;  // [kAttnWarps][R][HD]
  for (int64_t r0 = 0; r0 < group; r0 += R) {
    const int nr = static_cast<int>(group - r0 < R ? group - r0 : R);
    init_state(st);
    load_rows(st, q, q_stride, si, g, group, r0, nr, lane);
    for (int64_t kt = k0 + warp * kAttnKeyTile; kt < k1; kt += kAttnWarps * kAttnKeyTile) {
      const int64_t kt_end = kt + kAttnKeyTile < k1 ? kt + kAttnKeyTile : k1;
      fold_tile<HD, R, S>(st, nr, kt, kt_end, kv, si.ids, g, scale, lane);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        if (lane == 0) {
          sm_m[warp * R + r] = st.m[r];
          sm_l[warp * R + r] = st.l[r];
        }
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const int d = lane + 32 * c;
          if (d < HD) sm_acc[(warp * R + r) * HD + d] = st.acc[r][c];
        }
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nr * HD; idx += blockDim.x) {
      const int r = idx / HD;
      const int d = idx - r * HD;
      float m_all = -INFINITY;
#pragma unroll
      for (int w = 0; w < kAttnWarps; ++w) m_all = max_nan(m_all, sm_m[w * R + r]);
      float l_all = 0.0f;
      float o_all = 0.0f;
      if (m_all != -INFINITY) {
#pragma unroll
        for (int w = 0; w < kAttnWarps; ++w) {
          const float f = expf(sm_m[w * R + r] - m_all);  // 0 for a warp without keys
          l_all = fmaf(sm_l[w * R + r], f, l_all);
          o_all = fmaf(sm_acc[(w * R + r) * HD + d], f, o_all);
        }
      }
      const int64_t h = g * group + r0 + r;
      if (n_splits == 1) {
        out[si.q0 * out_stride + h * HD + d] = o_all / l_all;
      } else {
        const int64_t pidx = (s * n_head + h) * n_splits + z;
        partials[partial_ml_floats + pidx * HD + d] = l_all == 0.0f ? 0.0f : o_all / l_all;
        if (d == 0) {
          partials[pidx * 2] = m_all;
          partials[pidx * 2 + 1] = l_all;
        }
      }
    }
    __syncthreads();  // the shared state is rewritten by the next rows
  }
}

// Combines the decode partials of the splits of every one-token sequence.
template <int HD>
__global__ void attention_merge_kernel(float* out, int64_t out_stride, int64_t n_head,
                                       int64_t page_size, AttentionSeqs seqs, int64_t n_splits,
                                       const float* partials, size_t partial_ml_floats) {
  const int64_t s = blockIdx.x;
  const SeqInfo si = seq_info(seqs, s, page_size);
  if (!si.ok || si.n_new != 1) return;
  for (int64_t idx = threadIdx.x; idx < n_head * HD; idx += blockDim.x) {
    const int64_t h = idx / HD;
    const int64_t d = idx - h * HD;
    const int64_t base = (s * n_head + h) * n_splits;
    float m_all = -INFINITY;
    for (int64_t z = 0; z < n_splits; ++z) m_all = max_nan(m_all, partials[(base + z) * 2]);
    float w_all = 0.0f;
    float o_all = 0.0f;
    for (int64_t z = 0; z < n_splits; ++z) {
      const float l = partials[(base + z) * 2 + 1];
      if (l == 0.0f) continue;  // an empty split
      const float w = l * expf(partials[(base + z) * 2] - m_all);
      w_all += w;
      o_all = fmaf(w, partials[partial_ml_floats + (base + z) * HD + d], o_all);
    }
    out[si.q0 * out_stride + h * HD + d] = o_all / w_all;
  }
}

}  // namespace

Status attention(float* out, int64_t out_stride, const float* q, int64_t q_stride, int64_t n_head,
                 const KvLayer& kv, const AttentionSeqs& seqs, float scale,
                 const AttentionPlan& plan, float* partials, DeviceError* err,
                 cudaStream_t stream) {
  if (kv.dtype != DType::kF32 && kv.dtype != DType::kF16 && kv.dtype != DType::kBF16) {
    note_unsupported("kv dtype", dtype_name(kv.dtype), "f32, f16, bf16");
    return Status::kUnsupported;
  }
  if (kv.page_size < 1 || kv.n_kv_head < 1 || kv.head_dim < 1 || kv.n_pages < 0 || n_head < 1 ||
      n_head % kv.n_kv_head != 0 || seqs.n_seq < 0 ||
      (seqs.lists != 1 && seqs.lists != kv.n_kv_head) ||
      (kv.n_pages > 0 && (kv.k_pages == nullptr || kv.v_pages == nullptr))) {
    return Status::kInvalidArgument;
  }
  if (seqs.n_seq == 0) return Status::kOk;
  const int64_t hd = kv.head_dim;
  if (seqs.q_indptr == nullptr || seqs.kv_len == nullptr || seqs.page_indptr == nullptr ||
      seqs.page_ids == nullptr || out == nullptr || q == nullptr || out_stride < n_head * hd ||
      q_stride < n_head * hd) {
    return Status::kInvalidArgument;
  }
  if (plan.n_seq != seqs.n_seq || plan.n_head != n_head || plan.head_dim != hd ||
      plan.decode_splits < 1 || plan.decode_splits > kMaxDecodeSplits || plan.prefill_splits < 1 ||
      plan.prefill_splits > kMaxPrefillSplits || (plan.decode_splits > 1 && partials == nullptr)) {
    return Status::kInvalidArgument;
  }
  if (seqs.n_seq > 0x7fffffff || kv.n_kv_head > 65535) {
    note_unsupported("attention grid", std::max(seqs.n_seq, kv.n_kv_head),
                     "n_seq < 2^31, n_kv_head < 65536");
    return Status::kUnsupported;
  }
  const unsigned n_seq = static_cast<unsigned>(seqs.n_seq);
  const unsigned n_kv = static_cast<unsigned>(kv.n_kv_head);
  const size_t ml = plan.partial_ml_floats();
  STRATA_DISPATCH_HEAD_DIM(hd, kHd, {
    constexpr int R = attn_rows_per_warp(kHd);
    const size_t smem = static_cast<size_t>(kAttnWarps) * R * (kHd + 2) * sizeof(float);
    STRATA_DISPATCH_STORE(kv.dtype, S, {
      attention_kernel<kHd, S>
          <<<dim3(n_seq, n_kv, static_cast<unsigned>(plan.decode_splits)), kAttnWarps * 32, smem,
             stream>>>(out, out_stride, q, q_stride, n_head, kv, seqs, scale, AttnMode::kDecode,
                       plan.decode_splits, partials, ml, err);
      attention_kernel<kHd, S>
          <<<dim3(n_seq, n_kv, static_cast<unsigned>(plan.prefill_splits)), kAttnWarps * 32, 0,
             stream>>>(out, out_stride, q, q_stride, n_head, kv, seqs, scale, AttnMode::kPrefill,
                       plan.prefill_splits, partials, ml, err);
    })
    if (plan.decode_splits > 1) {
      attention_merge_kernel<kHd><<<n_seq, 128, 0, stream>>>(
          out, out_stride, n_head, kv.page_size, seqs, plan.decode_splits, partials, ml);
    }
  })
  return launch_status();
}

}  // namespace strata::cuda
