// Body of the byte-packing kernel (MLX's custom-kernel primitive wraps it in a __global__
// function whose parameters are the inputs part0 ... part{N-1}, offsets and the output out;
// N is a template constant). See pack_bytes.rs.
//
// One thread per output byte: it finds the part holding its byte (offsets ascend: part p
// holds bytes [offsets[p], offsets[p + 1])) and copies it. The parts are few and small (a
// run's checks, masks and new KV rows), so a linear scan costs less than a launch per part.
const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= offsets[N]) return;
int p = 0;
while (i >= offsets[p + 1]) ++p;
const unsigned char* from = nullptr;
switch (p) {
// PARTS: one case per part, generated (see pack_bytes.rs)
}
out[i] = from[i - offsets[p]];
