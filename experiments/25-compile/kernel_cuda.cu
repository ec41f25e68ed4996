// cuda_fused_softmax_1
//   ops: reduce_max sub exp reduce_sum div
//   from: softmax (cpu::softmax)
//   in_ptr0 = 'fc.out' (2, 600)
//   out_ptr0 = 'y' (2, 600)
//   kept on chip (never stored): 4 tensors, 9616 bytes
//   bytes read 4800, written 4800; FLOPs 6000
//   launch: grid 2, block 32 (2 rows of 600 columns; 32 threads per row, 1 row per block)
//   each thread: columns lane + j * 32, j < 19 (masked: c < C); the row stays in registers between loops (persistent)
extern "C" __global__ void __launch_bounds__(32) cuda_fused_softmax_1(
    const float* __restrict__ in_ptr0,
    float* __restrict__ out_ptr0) {
  const int lane = threadIdx.x % 32;  // this thread's place in its row
  const i64 r = (i64)blockIdx.x * 1 + threadIdx.x / 32;  // the row
  float x4[19];  // fc.out: row r in registers
  #pragma unroll
  for (int j = 0; j < 19; ++j) {
    const int c = lane + j * 32;
    x4[j] = c < 600 ? in_ptr0[r * 600 + c] : 0.0f;
  }
  // max of fc.out over the row: per thread, then across the row's threads
  float acc6 = -MG_INF;
  #pragma unroll
  for (int j = 0; j < 19; ++j) {
    const int c = lane + j * 32;
    if (c < 600) {  // mask: the row's last step is partial
      acc6 = mg_max(acc6, x4[j]);
    }
  }
  acc6 = mg_warp_max(acc6);
  const float row6 = (float)acc6;  // y.max
  // sum of y.exp over the row: per thread, then across the row's threads
  float acc9 = 0;
  float v7[19];  // y.sub, kept in registers
  float v8[19];  // y.exp, kept in registers
  #pragma unroll
  for (int j = 0; j < 19; ++j) {
    const int c = lane + j * 32;
    if (c < 600) {  // mask: the row's last step is partial
      v7[j] = x4[j] - row6;
      v8[j] = mg_exp2e(v7[j]);
      acc9 += v8[j];
    }
  }
  acc9 = mg_warp_sum(acc9);
  const float row9 = (float)acc9;  // y.sum
  const float rcp9 = 1.0f / row9;  // divisions by it become products
  // outputs: y
  float v5[19];  // y, kept in registers
  #pragma unroll
  for (int j = 0; j < 19; ++j) {
    const int c = lane + j * 32;
    if (c < 600) {  // mask: the row's last step is partial
      v5[j] = v8[j] * rcp9;
      out_ptr0[r * 600 + c] = v5[j];
    }
  }
}
