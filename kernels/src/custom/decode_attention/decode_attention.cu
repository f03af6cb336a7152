// Body of the decode-attention kernels (MLX's custom-kernel primitive wraps it in a __global__
// function whose parameters are the inputs q, keys, values, lo, hi, scale (the paged kernel
// adds table) and the output out; T, D, HQ, HKV, S, GH, SPLITS and WARPS are template
// constants, with P for a contiguous buffer and NB, BS, M for a block pool). Two lines are
// generated (see mod.rs): ROWS, where a key's row lies, and WRITE, whether a block
// writes its rows' results or its split's partial sums for combine_splits.cu.
//
// One block per (b, key head, group of GH query heads, s, split): the GH query heads of one key
// head read each key and value once. Each warp walks its own keys of the block's share and keeps
// its own online softmax, so the walk has no barrier: the lanes of a warp split a key's row into
// 16-byte chunks (one coalesced load a key, a warp sum for its score), a warp reads SLOTS rows
// side by side when a row is narrower than 32 chunks, and issues KEYS_AT_ONCE steps' loads
// before using any, so several memory round trips overlap. The slots and warps merge their
// softmax states once, at the end. SPLITS > 1 splits a long key range over blocks
// (flash-decoding).
const int block = blockIdx.x;
const int tid = threadIdx.x;
const int warp = tid / 32;
const int lane = tid % 32;
#define SHARED __shared__
#define BARRIER __syncthreads()
#define SHUFFLE_XOR(value, offset) __shfl_xor_sync(0xffffffffu, value, offset)
// A step's chunks stay 16 raw bytes each until used, so that all their loads are in flight
// together; rows off a 16-byte boundary are read an element at a time (block-uniform branch).
const bool aligned = ((reinterpret_cast<size_t>(keys) | reinterpret_cast<size_t>(values)) %
                      16) == 0;
#define CHUNK_AT(base, j, c) (base + ROW_START(j) + (c) * E)
auto load_raw = [&](const T* at) {
  if (aligned) return *reinterpret_cast<const uint4*>(at);
  uint4 chunk;
  T* items = reinterpret_cast<T*>(&chunk);
#pragma unroll
  for (int e = 0; e < 16 / static_cast<int>(sizeof(T)); ++e) items[e] = at[e];
  return chunk;
};
#define STEP_CHUNKS uint4 key_chunks[KEYS_AT_ONCE][LANE_CHUNKS], value_chunks[KEYS_AT_ONCE][LANE_CHUNKS]
#define LOAD_CHUNK(u, c, j)                                        \
  key_chunks[u][c] = load_raw(CHUNK_AT(keys, j, CHUNK(c)));        \
  value_chunks[u][c] = load_raw(CHUNK_AT(values, j, CHUNK(c)))
#define CLEAR_CHUNK(u, c) key_chunks[u][c] = value_chunks[u][c] = make_uint4(0, 0, 0, 0)
#define WIDEN(chunk, to)                                       \
  for (int e = 0; e < E; ++e) to[e] = static_cast<float>(reinterpret_cast<const T*>(&chunk)[e])
#define WIDEN_KEY(u, c, to) WIDEN(key_chunks[u][c], to)
#define WIDEN_VALUE(u, c, to) WIDEN(value_chunks[u][c], to)

// COMMON: the same lines as decode_attention.metal from here on
constexpr int THREADS = WARPS * 32;
constexpr int E = 16 / sizeof(T);                     // elements in a 16-byte chunk
constexpr int CHUNKS = D / E;                         // chunks in a row (D is a multiple of E)
constexpr int LANE_CHUNKS = (CHUNKS + 31) / 32;       // chunks of a row one lane holds
constexpr int LANE_ELEMENTS = LANE_CHUNKS * E;
constexpr int LANES_NEEDED = (CHUNKS + LANE_CHUNKS - 1) / LANE_CHUNKS;
// Lanes that share a row: a power of two, so that the score's sum stays inside the slot.
constexpr int ROW_LANES = LANES_NEEDED <= 1   ? 1
                          : LANES_NEEDED <= 2 ? 2
                          : LANES_NEEDED <= 4 ? 4
                          : LANES_NEEDED <= 8 ? 8
                          : LANES_NEEDED <= 16 ? 16
                                               : 32;
constexpr int SLOTS = 32 / ROW_LANES;  // rows a warp reads side by side
// Steps of a warp whose loads are in flight together: fewer when a lane holds more.
constexpr int KEYS_AT_ONCE = GH * LANE_CHUNKS > 4 ? 2 : 4;
constexpr int WARP_KEYS = SLOTS * KEYS_AT_ONCE;  // keys a warp reads in one walk step
constexpr int HEAD_GROUPS = HQ / HKV / GH;
const int split = block % SPLITS;
const int cell = block / SPLITS;  // ((b * HKV + kv_head) * HEAD_GROUPS + group) * S + s
const int s_index = cell % S;
const int head_group = (cell / S) % HEAD_GROUPS;
const int kv_head = (cell / (S * HEAD_GROUPS)) % HKV;
const int batch = cell / (S * HEAD_GROUPS * HKV);
const int first_head = kv_head * (HQ / HKV) + head_group * GH;
// q and out are row-contiguous [B, HQ, S, D]: the row of member g of the head group.
#define Q_ROW(g) ((static_cast<size_t>(batch) * HQ + first_head + (g)) * S + s_index)
const int slot = lane / ROW_LANES;
const int row_lane = lane % ROW_LANES;
// ROWS: the key rows' count and ROW_START(j) (generated, see mod.rs)
// Clamped before any arithmetic: extreme lo/hi cannot overflow.
const int visible_first = min(max(lo[batch * S + s_index], 0), ROWS);
const int visible_end = max(min(hi[batch * S + s_index], ROWS), visible_first);
// This split's share of the visible keys (empty when the range is short).
const int share = (visible_end - visible_first + SPLITS - 1) / SPLITS;
const int first = min(visible_first + split * share, visible_end);
const int end = min(first + share, visible_end);
const float scaling = scale[0];
SHARED float warp_max[GH][WARPS];
SHARED float warp_sum[GH][WARPS];
SHARED float partial[WARPS][D];

// Chunk `c` of this lane is chunk `row_lane + c * ROW_LANES` of a row, when the row has it.
#define HOLDS(c) (row_lane + (c) * ROW_LANES < CHUNKS)
#define CHUNK(c) (row_lane + (c) * ROW_LANES)
float q_lane[GH][LANE_ELEMENTS];
float acc[GH][LANE_ELEMENTS];
float running_max[GH];  // of the finite scores this slot saw (fmax skips NaN)
float running_sum[GH];
#pragma unroll
for (int g = 0; g < GH; ++g) {
  running_max[g] = -INFINITY;
  running_sum[g] = 0.f;
  #pragma unroll
  for (int c = 0; c < LANE_CHUNKS; ++c) {
    #pragma unroll
    for (int e = 0; e < E; ++e) {
      q_lane[g][c * E + e] =
          HOLDS(c) ? static_cast<float>(q[Q_ROW(g) * D + CHUNK(c) * E + e]) : 0.f;
      acc[g][c * E + e] = 0.f;
    }
  }
}

for (int step = first + warp * WARP_KEYS; step < end; step += WARPS * WARP_KEYS) {
  // This step's key and value chunks, all in flight before any is used.
  STEP_CHUNKS;
  #pragma unroll
  for (int u = 0; u < KEYS_AT_ONCE; ++u) {
    const int j = step + u * SLOTS + slot;
    #pragma unroll
    for (int c = 0; c < LANE_CHUNKS; ++c) {
      if (j < end && HOLDS(c)) {
        LOAD_CHUNK(u, c, j);
      } else {
        CLEAR_CHUNK(u, c);
      }
    }
  }
  float x[KEYS_AT_ONCE][GH];
  #pragma unroll
  for (int u = 0; u < KEYS_AT_ONCE; ++u) {
    #pragma unroll
    for (int g = 0; g < GH; ++g) x[u][g] = 0.f;
    #pragma unroll
    for (int c = 0; c < LANE_CHUNKS; ++c) {
      float k[E];
      WIDEN_KEY(u, c, k);
      #pragma unroll
      for (int g = 0; g < GH; ++g) {
        #pragma unroll
        for (int e = 0; e < E; ++e) x[u][g] += q_lane[g][c * E + e] * k[e];
      }
    }
    // The slot's lanes sum their parts: every lane of the slot gets the same score.
    #pragma unroll
    for (int g = 0; g < GH; ++g) {
      #pragma unroll
      for (int offset = ROW_LANES / 2; offset > 0; offset /= 2) {
        x[u][g] += SHUFFLE_XOR(x[u][g], offset);
      }
    }
  }
  #pragma unroll
  for (int g = 0; g < GH; ++g) {
    float step_max = -INFINITY;
    #pragma unroll
    for (int u = 0; u < KEYS_AT_ONCE; ++u) {
      const bool visible = step + u * SLOTS + slot < end;
      x[u][g] = visible ? x[u][g] * scaling : -INFINITY;
      // A +inf score makes the whole row NaN in a max-subtracted softmax (inf - inf).
      if (x[u][g] == INFINITY) x[u][g] = NAN;
      step_max = fmax(step_max, x[u][g]);
    }
    const float next_max = fmax(running_max[g], step_max);
    const float rescale = running_max[g] == -INFINITY ? 0.f : exp(running_max[g] - next_max);
    running_max[g] = next_max;
    running_sum[g] *= rescale;
    #pragma unroll
    for (int i = 0; i < LANE_ELEMENTS; ++i) acc[g][i] *= rescale;
    #pragma unroll
    for (int u = 0; u < KEYS_AT_ONCE; ++u) {
      // -inf scores weigh 0 (also while every score so far is -inf); NaN ones poison the sums.
      // A key past the range was not loaded: its chunks are zeros.
      const float p = x[u][g] != -INFINITY ? exp(x[u][g] - next_max) : 0.f;
      running_sum[g] += p;
      #pragma unroll
      for (int c = 0; c < LANE_CHUNKS; ++c) {
        float v[E];
        WIDEN_VALUE(u, c, v);
        #pragma unroll
        for (int e = 0; e < E; ++e) acc[g][c * E + e] += p * v[e];
      }
    }
  }
}

// The slots of a warp merge their states (lanes of one chunk column meet by shuffles)...
#pragma unroll
for (int offset = ROW_LANES; offset < 32; offset *= 2) {
  #pragma unroll
  for (int g = 0; g < GH; ++g) {
    const float other_max = SHUFFLE_XOR(running_max[g], offset);
    const float other_sum = SHUFFLE_XOR(running_sum[g], offset);
    const float merged = fmax(running_max[g], other_max);
    const float mine = running_max[g] == -INFINITY ? 0.f : exp(running_max[g] - merged);
    const float theirs = other_max == -INFINITY ? 0.f : exp(other_max - merged);
    running_max[g] = merged;
    running_sum[g] = running_sum[g] * mine + other_sum * theirs;
    #pragma unroll
    for (int i = 0; i < LANE_ELEMENTS; ++i) {
      acc[g][i] = acc[g][i] * mine + SHUFFLE_XOR(acc[g][i], offset) * theirs;
    }
  }
}
// ...then the warps, through block memory: each head's largest score, then each head in turn.
if (lane == 0) {
  #pragma unroll
  for (int g = 0; g < GH; ++g) warp_max[g][warp] = running_max[g];
}
BARRIER;
#pragma unroll
for (int g = 0; g < GH; ++g) {
  float head_max = -INFINITY;
  #pragma unroll
  for (int w = 0; w < WARPS; ++w) head_max = fmax(head_max, warp_max[g][w]);
  const float weight = running_max[g] == -INFINITY ? 0.f : exp(running_max[g] - head_max);
  if (slot == 0) {
    #pragma unroll
    for (int c = 0; c < LANE_CHUNKS; ++c) {
      #pragma unroll
      for (int e = 0; e < E; ++e) {
        if (HOLDS(c)) partial[warp][CHUNK(c) * E + e] = acc[g][c * E + e] * weight;
      }
    }
  }
  if (lane == 0) warp_sum[g][warp] = running_sum[g] * weight;
  BARRIER;
  float head_sum = 0.f;
  #pragma unroll
  for (int w = 0; w < WARPS; ++w) head_sum += warp_sum[g][w];
  for (int d = tid; d < D; d += THREADS) {
    float mixed = 0.f;
    #pragma unroll
    for (int w = 0; w < WARPS; ++w) mixed += partial[w][d];
    // WRITE: the row's result or the split's partial sums (generated, see mod.rs)
  }
  BARRIER;  // `partial` and `warp_sum` are read before the next head writes them
}
