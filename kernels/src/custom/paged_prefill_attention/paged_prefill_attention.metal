// Metal twin of paged_prefill_attention.cu: the same algorithm, line for line, in Metal's
// dialect (MLX's metal_kernel wraps it in a [[kernel]] function templated on the same
// constants). Only the spelling differs: threadgroup memory and barriers, SIMD-group shuffles,
// and element loads where CUDA moves 16-byte chunks. Apple GPUs give a threadgroup 32 KiB, so
// the wrapper sends it heads of at most 256 bytes.
constexpr int RPW = 4;              // rows a warp owns
constexpr int TQ = WARPS * RPW;     // tokens a block serves
constexpr int KT = 32;              // keys a tile: one per lane
constexpr int E = 16 / sizeof(T);   // elements in a 16-byte chunk
constexpr int CHUNKS = D / E;       // chunks in a row (D is a multiple of E)
constexpr int KSTRIDE = D + E;      // a key row in shared memory, padded a chunk: no bank conflicts
constexpr int COLS = (D + 31) / 32; // value columns a lane mixes
constexpr int ROWS = M * BS;        // keys a sequence may address
const int tile = int(threadgroup_position_in_grid.x) / HQ;
const int head = int(threadgroup_position_in_grid.x) % HQ;
const int kv_head = head / (HQ / HKV);
const int tid = int(thread_position_in_threadgroup.x);
const int warp = int(simdgroup_index_in_threadgroup);
const int lane = int(thread_index_in_simdgroup);
const float scaling = (SCALE_NEGATIVE ? -1.f : 1.f) * as_type<float>(SCALE_MAGNITUDE);

threadgroup T q_tile[TQ][D];
threadgroup T k_tile[KT][KSTRIDE];
threadgroup T v_tile[KT][D];
threadgroup float p_tile[WARPS][RPW][KT];
threadgroup int row_sequence[TQ];  // -1 past the last token
threadgroup int row_first[TQ];
threadgroup int row_end[TQ];

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
threadgroup_barrier(mem_flags::mem_threadgroup);

float acc[RPW][COLS];
float running_max[RPW];  // of the finite scores so far (fmax skips NaN)
float running_sum[RPW];
for (int i = 0; i < RPW; ++i) {
  running_max[i] = -INFINITY;
  running_sum[i] = 0.f;
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
  const size_t table_offset = static_cast<size_t>(seq) * M;
  for (int base = keys_first; base < keys_end; base += KT) {
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous tile is read
    for (int i = tid; i < KT * CHUNKS; i += WARPS * 32) {
      const int k = i / CHUNKS;
      const int c = i % CHUNKS;
      const int j = base + k;
      // Zeros past the run's keys: weight 0, no NaN.
      if (j < keys_end) {
        const int block = min(max(table[table_offset + j / BS], 0), NB - 1);
        const size_t at = ((static_cast<size_t>(block) * BS + j % BS) * HKV + kv_head) * D + c * E;
        for (int e = 0; e < E; ++e) {
          k_tile[k][c * E + e] = key_pool[at + e];
          v_tile[k][c * E + e] = value_pool[at + e];
        }
      } else {
        for (int e = 0; e < E; ++e) {
          k_tile[k][c * E + e] = static_cast<T>(0.f);
          v_tile[k][c * E + e] = static_cast<T>(0.f);
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    const int j = base + lane;
    // Scores of this lane's key against the warp's rows of the run.
    float x[RPW];
    for (int i = 0; i < RPW; ++i) x[i] = 0.f;
    for (int c = 0; c < CHUNKS; ++c) {
      for (int i = 0; i < RPW; ++i) {
        for (int e = 0; e < E; ++e) {
          x[i] += static_cast<float>(q_tile[warp * RPW + i][c * E + e]) *
                  static_cast<float>(k_tile[lane][c * E + e]);
        }
      }
    }
    for (int i = 0; i < RPW; ++i) {
      const int r = warp * RPW + i;
      // Warp-uniform: a row outside the run takes no part (its lanes all skip together).
      if (r < run_start || r >= run_end) continue;
      const bool visible = j >= row_first[r] && j < row_end[r];
      float score = visible ? x[i] * scaling : -INFINITY;
      // A +inf score makes the whole row NaN in a max-subtracted softmax (inf - inf).
      if (score == INFINITY) score = NAN;
      float tile_max = score;
      for (int offset = 16; offset > 0; offset /= 2) {
        tile_max = fmax(tile_max, simd_shuffle_xor(tile_max, ushort(offset)));
      }
      const float next_max = fmax(running_max[i], tile_max);
      // -inf scores weigh 0 (also while every score so far is -inf); NaN ones poison the sums.
      const float p = (visible && score != -INFINITY) ? exp(score - next_max) : 0.f;
      float tile_sum = p;
      for (int offset = 16; offset > 0; offset /= 2) {
        tile_sum += simd_shuffle_xor(tile_sum, ushort(offset));
      }
      const float rescale = running_max[i] == -INFINITY ? 0.f : exp(running_max[i] - next_max);
      running_sum[i] = running_sum[i] * rescale + tile_sum;
      running_max[i] = next_max;
      for (int c = 0; c < COLS; ++c) acc[i][c] *= rescale;
      // Keys another row of the run sees are in the tile too: -1 marks them as not this
      // row's, so their values are not mixed at all (0 · inf would be NaN).
      p_tile[warp][i][lane] = visible ? p : -1.f;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);  // the warp's probabilities are written
    for (int k = 0; k < KT; ++k) {
      float v[COLS];
      for (int c = 0; c < COLS; ++c) {
        const int d = lane + 32 * c;
        v[c] = d < D ? static_cast<float>(v_tile[k][d]) : 0.f;
      }
      for (int i = 0; i < RPW; ++i) {
        const int r = warp * RPW + i;
        if (r < run_start || r >= run_end) continue;
        const float weight = p_tile[warp][i][k];
        if (weight < 0.f) continue;
        for (int c = 0; c < COLS; ++c) acc[i][c] += weight * v[c];
      }
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);  // the probabilities are read before the next tile writes them
  }
  run_start = run_end;
}

for (int i = 0; i < RPW; ++i) {
  const int r = warp * RPW + i;
  const int t = tile * TQ + r;
  if (t >= TOKENS) continue;
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
