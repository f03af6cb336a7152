// Metal twin of combine_splits.cu: the same lines after the thread indices, block memory and
// the barrier (see there).
const int row = int(threadgroup_position_in_grid.x);
const int tid = int(thread_position_in_threadgroup.x);
threadgroup float split_max[SPLITS];
threadgroup float split_sum[SPLITS];
threadgroup int split_seen[SPLITS];
#define BARRIER threadgroup_barrier(mem_flags::mem_threadgroup)
#define UNROLL _Pragma("clang loop unroll(full)")
// COMMON: the same lines as combine_splits.cu from here on
#define RECORD(i) ((static_cast<size_t>(row) * SPLITS + (i)) * (D + 3))
// Each split's running max, sum and whether it saw a visible key: one load a thread, all at
// once, where reading them split by split would wait on memory 3 · SPLITS times.
for (int i = tid; i < SPLITS; i += THREADS) {
  split_max[i] = parts[RECORD(i)];
  split_sum[i] = parts[RECORD(i) + 1];
  split_seen[i] = parts[RECORD(i) + 2] != 0.f ? 1 : 0;
}
BARRIER;
// A split weighs in when it saw a visible key: one whose scores were all -inf weighs
// exp(-inf - top) = 0 (top is finite below), and 0 times a NaN mix is NaN, as in one pass.
float top = -INFINITY;  // the largest finite score of the row
bool any_visible = false;
bool poisoned = false;  // a NaN score: the row is NaN, as in one pass
for (int i = 0; i < SPLITS; ++i) {
  if (split_seen[i] != 0) {
    any_visible = true;
    top = fmax(top, split_max[i]);
    poisoned = poisoned || isnan(split_sum[i]);
  }
}
float total = 0.f;
for (int i = 0; i < SPLITS; ++i) {
  if (split_seen[i] != 0) total += exp(split_max[i] - top) * split_sum[i];
}
for (int d = tid; d < D; d += THREADS) {
  float result;
  if (!any_visible) {
    result = 0.f;  // no visible key: zeros
  } else if (top == -INFINITY || poisoned) {
    result = NAN;  // no finite score (0/0), or a NaN one
  } else {
    // The splits' mixes are independent loads: unrolled, they are in flight together.
    float mixed = 0.f;
    UNROLL for (int i = 0; i < SPLITS; ++i) {
      const float mix = parts[RECORD(i) + 3 + d];
      if (split_seen[i] != 0) mixed += exp(split_max[i] - top) * mix;
    }
    result = mixed / total;
  }
  out[static_cast<size_t>(row) * D + d] = static_cast<T>(result);
}
