// A dynamically indexed local array lives in .local memory.
__global__ void local_array(const int* idx, int* out, int n) {
  int buf[64];
  for (int i = 0; i < 64; ++i) buf[i] = i * idx[i % n];
  int acc = 0;
  for (int i = 0; i < n; ++i) acc += buf[idx[i] & 63];
  out[threadIdx.x] = acc;
}
