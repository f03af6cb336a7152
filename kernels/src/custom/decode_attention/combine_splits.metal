// Metal twin of combine_splits.cu: the same lines after the thread indices (see there).
const int row = int(threadgroup_position_in_grid.x);
const int tid = int(thread_position_in_threadgroup.x);
// COMMON: the same lines as combine_splits.cu from here on
#define RECORD(i) ((static_cast<size_t>(row) * SPLITS + (i)) * (D + 3))
// A split weighs in when it saw a visible key: one whose scores were all -inf weighs
// exp(-inf - top) = 0 (top is finite below), and 0 times a NaN mix is NaN, as in one pass.
#define WEIGHS(i) (parts[RECORD(i) + 2] != 0.f)
float top = -INFINITY;  // the largest finite score of the row
bool any_visible = false;
bool poisoned = false;  // a NaN score: the row is NaN, as in one pass
for (int i = 0; i < SPLITS; ++i) {
  if (parts[RECORD(i) + 2] != 0.f) {
    any_visible = true;
    top = fmax(top, parts[RECORD(i)]);
    poisoned = poisoned || isnan(parts[RECORD(i) + 1]);
  }
}
float total = 0.f;
for (int i = 0; i < SPLITS; ++i) {
  if (WEIGHS(i)) total += exp(parts[RECORD(i)] - top) * parts[RECORD(i) + 1];
}
for (int d = tid; d < D; d += THREADS) {
  float result;
  if (!any_visible) {
    result = 0.f;  // no visible key: zeros
  } else if (top == -INFINITY || poisoned) {
    result = NAN;  // no finite score (0/0), or a NaN one
  } else {
    float mixed = 0.f;
    for (int i = 0; i < SPLITS; ++i) {
      if (WEIGHS(i)) mixed += exp(parts[RECORD(i)] - top) * parts[RECORD(i) + 3 + d];
    }
    result = mixed / total;
  }
  out[static_cast<size_t>(row) * D + d] = static_cast<T>(result);
}
