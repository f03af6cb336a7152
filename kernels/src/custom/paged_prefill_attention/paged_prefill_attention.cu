// Body of the paged prefill-attention kernel (MLX's custom-kernel primitive wraps it in a
// __global__ function whose parameters are the inputs q [TOKENS, HQ, D], key_pool and value_pool
// [NB, BS, HKV, D], table [B, M], sequence, lo and hi [TOKENS] (int32) and the output out
// [TOKENS, HQ, D]; T (the element type), TOKENS, B, D, HQ, HKV, NB, BS, M, WARPS,
// SCALE_MAGNITUDE and SCALE_NEGATIVE (the score scale, see float_constant in custom/mod.rs) are
// template constants). See mod.rs.
//
// One block per (tile of TQ consecutive tokens, query head); each warp owns RPW of the tile's
// rows. Packed tokens come sequence by sequence, so a tile holds one or a few runs of tokens
// of one sequence. For each run the block streams the union of its rows' visible keys through
// shared memory in tiles of KT keys, read from the pools through the sequence's block-table
// row, and every row of the run scores the tile (one key per lane), updates its online softmax
// and mixes the tile's values (D / 32 columns per lane). A key tile is read from memory once
// for the run's rows instead of once per row.
constexpr int RPW = 4;              // rows a warp owns
constexpr int TQ = WARPS * RPW;     // tokens a block serves
constexpr int KT = 32;              // keys a tile: one per lane
constexpr int E = 16 / sizeof(T);   // elements in a 16-byte chunk
constexpr int CHUNKS = D / E;       // chunks in a row (D is a multiple of E)
constexpr int KSTRIDE = D + E;      // a key row in shared memory, padded a chunk: no bank conflicts
constexpr int COLS = (D + 31) / 32; // value columns a lane mixes
constexpr int ROWS = M * BS;        // keys a sequence may address
const int tile = blockIdx.x / HQ;
const int head = blockIdx.x % HQ;
const int kv_head = head / (HQ / HKV);
const int tid = threadIdx.x;
const int warp = tid / 32;
const int lane = tid % 32;
const float scaling = (SCALE_NEGATIVE ? -1.f : 1.f) * __int_as_float(SCALE_MAGNITUDE);
const bool aligned = ((reinterpret_cast<size_t>(key_pool) |
                       reinterpret_cast<size_t>(value_pool)) % 16) == 0;

__shared__ __align__(16) T q_tile[TQ][D];
__shared__ __align__(16) T k_tile[KT][KSTRIDE];
__shared__ __align__(16) T v_tile[KT][D];
__shared__ float p_tile[WARPS][RPW][KT];
__shared__ int row_sequence[TQ];  // -1 past the last token
__shared__ int row_first[TQ];
__shared__ int row_end[TQ];

for (int i = tid; i < TQ * D; i += WARPS * 32) {
  const int r = i / D;
  const int t = tile * TQ + r;
  q_tile[r][i % D] = t < TOKENS ? q[(static_cast<size_t>(t) * HQ + head) * D + i % D]
                                : static_cast<T>(0.f);
}
for (int r = tid; r < TQ; r += WARPS * 32) {
  const int t = tile * TQ + r;
  const bool real = t < TOKENS;
  row_sequence[r] = real ? min(max(sequence[t], 0), B - 1) : -1;
  row_first[r] = real ? max(lo[t], 0) : 0;
  row_end[r] = real ? min(hi[t], ROWS) : 0;
}
__syncthreads();

float acc[RPW][COLS];
float running_max[RPW];  // of the finite scores so far (fmaxf skips NaN)
float running_sum[RPW];
#pragma unroll
for (int i = 0; i < RPW; ++i) {
  running_max[i] = -INFINITY;
  running_sum[i] = 0.f;
#pragma unroll
  for (int c = 0; c < COLS; ++c) acc[i][c] = 0.f;
}

// Runs of rows of one sequence; every thread walks them alike (block-uniform bounds).
int run_start = 0;
while (run_start < TQ && row_sequence[run_start] >= 0) {
  const int seq = row_sequence[run_start];
  int run_end = run_start;
  int keys_first = ROWS;
  int keys_end = 0;
  while (run_end < TQ && row_sequence[run_end] == seq) {
    if (row_first[run_end] < row_end[run_end]) {
      keys_first = min(keys_first, row_first[run_end]);
      keys_end = max(keys_end, row_end[run_end]);
    }
    ++run_end;
  }
  const int* block_ids = table + static_cast<size_t>(seq) * M;
  for (int base = keys_first; base < keys_end; base += KT) {
    __syncthreads();  // the previous tile is read
    for (int i = tid; i < KT * CHUNKS; i += WARPS * 32) {
      const int k = i / CHUNKS;
      const int c = i % CHUNKS;
      const int j = base + k;
      uint4 key_chunk = make_uint4(0, 0, 0, 0);  // zeros past the run's keys: weight 0, no NaN
      uint4 value_chunk = make_uint4(0, 0, 0, 0);
      if (j < keys_end) {
        const int block = min(max(block_ids[j / BS], 0), NB - 1);
        const size_t at = ((static_cast<size_t>(block) * BS + j % BS) * HKV + kv_head) * D + c * E;
        if (aligned) {
          key_chunk = *reinterpret_cast<const uint4*>(key_pool + at);
          value_chunk = *reinterpret_cast<const uint4*>(value_pool + at);
        } else {
          T* kc = reinterpret_cast<T*>(&key_chunk);
          T* vc = reinterpret_cast<T*>(&value_chunk);
#pragma unroll
          for (int e = 0; e < E; ++e) {
            kc[e] = key_pool[at + e];
            vc[e] = value_pool[at + e];
          }
        }
      }
      *reinterpret_cast<uint4*>(&k_tile[k][c * E]) = key_chunk;
      *reinterpret_cast<uint4*>(&v_tile[k][c * E]) = value_chunk;
    }
    __syncthreads();

    const int j = base + lane;
    // Scores of this lane's key against the warp's rows of the run.
    float x[RPW];
#pragma unroll
    for (int i = 0; i < RPW; ++i) x[i] = 0.f;
    for (int c = 0; c < CHUNKS; ++c) {
      const uint4 key_chunk = *reinterpret_cast<const uint4*>(&k_tile[lane][c * E]);
      const T* kc = reinterpret_cast<const T*>(&key_chunk);
#pragma unroll
      for (int i = 0; i < RPW; ++i) {
        const uint4 q_chunk = *reinterpret_cast<const uint4*>(&q_tile[warp * RPW + i][c * E]);
        const T* qc = reinterpret_cast<const T*>(&q_chunk);
#pragma unroll
        for (int e = 0; e < E; ++e) x[i] += static_cast<float>(qc[e]) * static_cast<float>(kc[e]);
      }
    }
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
      const int r = warp * RPW + i;
      // Warp-uniform: a row outside the run takes no part (its lanes all skip together).
      if (r < run_start || r >= run_end) continue;
      const bool visible = j >= row_first[r] && j < row_end[r];
      float score = visible ? x[i] * scaling : -INFINITY;
      // A +inf score makes the whole row NaN in a max-subtracted softmax (inf - inf).
      if (score == INFINITY) score = NAN;
      float tile_max = score;
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
      }
      const float next_max = fmaxf(running_max[i], tile_max);
      // -inf scores weigh 0 (also while every score so far is -inf); NaN ones poison the sums.
      const float p = (visible && score != -INFINITY) ? expf(score - next_max) : 0.f;
      float tile_sum = p;
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, offset);
      }
      const float rescale = running_max[i] == -INFINITY ? 0.f : expf(running_max[i] - next_max);
      running_sum[i] = running_sum[i] * rescale + tile_sum;
      running_max[i] = next_max;
#pragma unroll
      for (int c = 0; c < COLS; ++c) acc[i][c] *= rescale;
      // Keys another row of the run sees are in the tile too: -1 marks them as not this
      // row's, so their values are not mixed at all (0 · inf would be NaN).
      p_tile[warp][i][lane] = visible ? p : -1.f;
    }
    __syncwarp();  // the warp's probabilities are written
    for (int k = 0; k < KT; ++k) {
      float v[COLS];
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        const int d = lane + 32 * c;
        v[c] = d < D ? static_cast<float>(v_tile[k][d]) : 0.f;
      }
#pragma unroll
      for (int i = 0; i < RPW; ++i) {
        const int r = warp * RPW + i;
        if (r < run_start || r >= run_end) continue;
        const float weight = p_tile[warp][i][k];
        if (weight < 0.f) continue;
#pragma unroll
        for (int c = 0; c < COLS; ++c) acc[i][c] += weight * v[c];
      }
    }
    __syncwarp();  // the probabilities are read before the next tile writes them
  }
  run_start = run_end;
}

#pragma unroll
for (int i = 0; i < RPW; ++i) {
  const int r = warp * RPW + i;
  const int t = tile * TQ + r;
  if (t >= TOKENS) continue;
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    const int d = lane + 32 * c;
    if (d >= D) continue;
    float result;
    if (row_first[r] >= row_end[r]) {
      result = 0.f;  // no visible key: zeros
    } else if (running_max[i] == -INFINITY) {
      result = NAN;  // no finite score: the softmax is 0/0
    } else {
      result = acc[i][c] / running_sum[i];
    }
    out[(static_cast<size_t>(t) * HQ + head) * D + d] = static_cast<T>(result);
  }
}
