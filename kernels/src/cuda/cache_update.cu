// Body of the cache-update kernel (MLX's custom-kernel primitive wraps it in a __global__
// function whose parameters are the inputs past, rows, row_past and the outputs present, held;
// B, H, P, S and CHUNKS are template constants). See cache_update.rs.
//
// One thread per 16-byte chunk of the [B, H, P, D] buffer (CHUNKS chunks a row): the element
// type does not matter, so the chunks are copied as bytes, as one 16-byte access when every
// pointer allows it.
const size_t chunk = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
const size_t total = static_cast<size_t>(B) * H * P * CHUNKS;
if (chunk >= total) return;
const size_t row = chunk / CHUNKS;  // (b * H + h) * P + j
const int part = static_cast<int>(chunk % CHUNKS);
const int j = static_cast<int>(row % P);
const size_t head_row = row / P;  // b * H + h
const int batch = static_cast<int>(head_row / H);
const int offset = j - row_past[batch];

const unsigned char* from;  // the chunk's source in held; nullptr: zeros
bool in_present = true;     // whether present keeps it (present has zeros after the new rows)
if (offset >= 0 && offset < S) {
  from = reinterpret_cast<const unsigned char*>(rows) +
         ((head_row * S + offset) * CHUNKS + part) * 16;
} else {
  from = reinterpret_cast<const unsigned char*>(past) + chunk * 16;
  in_present = offset < 0;
}
unsigned char* to_present = reinterpret_cast<unsigned char*>(present) + chunk * 16;
unsigned char* to_held = reinterpret_cast<unsigned char*>(held) + chunk * 16;
const bool aligned = ((reinterpret_cast<size_t>(past) | reinterpret_cast<size_t>(rows) |
                       reinterpret_cast<size_t>(present) | reinterpret_cast<size_t>(held)) %
                      16) == 0;
if (aligned) {
  const uint4 bytes = *reinterpret_cast<const uint4*>(from);
  *reinterpret_cast<uint4*>(to_held) = bytes;
  *reinterpret_cast<uint4*>(to_present) = in_present ? bytes : make_uint4(0, 0, 0, 0);
} else {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const unsigned char byte = from[i];
    to_held[i] = byte;
    to_present[i] = in_present ? byte : 0;
  }
}
