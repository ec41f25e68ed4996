// minigpt's generated fused softmax kernel for TinyHead (B=2), as dumped by
//   out/25-compile/minigpt/tinyhead: minigpt -t 1 compile --graph tinyhead --batch 2 --mode default --dump DIR --explain
// at commit 0b88dc8; the JIT compiled the whole output_code.cpp with
//   /usr/bin/c++ -O3 -march=native -std=c++20 -fPIC -shared -ffp-contract=fast (c++ (Debian 12.2.0-14+deb12u1) 12.2.0)
// Everything below this comment is the dump's kernels/ file, unchanged;
// MG_W (16), mg_vf, mg_load/mg_store, mg_max_v, mg_exp_v, mg_hmax, mg_hsum are the helpers at the
// top of the dump's output_code.cpp. KERNEL_ANNOTATION.md section 2 reads it line by line.

// cpp_fused_softmax_1
//   ops: reduce_max sub exp reduce_sum div
//   from: softmax (cpu::softmax)
//   in_ptr0 = 'fc.out' (2, 600)
//   out_ptr0 = 'y' (2, 600)
//   kept in registers (never stored): 4 tensors, 9616 bytes
//   bytes read 4800, written 4800; FLOPs 6000
//   loops: 2 rows x 600 columns, 16 lanes per vector step
struct cpp_fused_softmax_1_args {
  const float* in_ptr0;
  float* out_ptr0;
};
static void cpp_fused_softmax_1_rows(void* ctx, int64_t r0, int64_t r1) {
  const cpp_fused_softmax_1_args* a = (const cpp_fused_softmax_1_args*)ctx;
  const float* __restrict in_ptr0 = a->in_ptr0;
  float* __restrict out_ptr0 = a->out_ptr0;
  for (int64_t r = r0; r < r1; ++r) {
    // max of fc.out over the row: lane-wise, lanes combined in order
    mg_vf acc6 = mg_splat(-INFINITY);
    for (int64_t c0 = 0; c0 < 592; c0 += MG_W) {  // 16 lanes a step
      acc6 = mg_max_v(acc6, mg_load(&in_ptr0[r * 600 + c0]));
    }
    for (int64_t c = 592; c < 600; ++c) {  // scalar tail: columns [592, 600)
      const int64_t l = c - 592;  // the lane this column adds to
      acc6[l] = mg_max(acc6[l], in_ptr0[r * 600 + c]);
    }
    const float tot6 = mg_hmax(acc6);
    const float row6 = (float)tot6;  // y.max
    // sum of y.exp over the row: lane-wise, lanes combined in order
    mg_vf acc9 = {};
    for (int64_t c0 = 0; c0 < 592; c0 += MG_W) {  // 16 lanes a step
      const mg_vf tmp7 = mg_load(&in_ptr0[r * 600 + c0]) - row6;  // y.sub
      const mg_vf tmp8 = mg_exp_v(tmp7);  // y.exp
      acc9 += tmp8;
      mg_store(&out_ptr0[r * 600 + c0], tmp8);  // kept for the store loop
    }
    for (int64_t c = 592; c < 600; ++c) {  // scalar tail: columns [592, 600)
      const int64_t l = c - 592;  // the lane this column adds to
      const float tmp7 = in_ptr0[r * 600 + c] - row6;  // y.sub
      const float tmp8 = mg_exp(tmp7);  // y.exp
      acc9[l] += tmp8;
      out_ptr0[r * 600 + c] = tmp8;  // kept for the store loop
    }
    const float tot9 = mg_hsum(acc9);
    const float row9 = (float)tot9;  // y.sum
    // outputs: y
    for (int64_t c0 = 0; c0 < 592; c0 += MG_W) {  // 16 lanes a step
      const mg_vf tmp8 = mg_load(&out_ptr0[r * 600 + c0]);  // y.exp, stored there by the loop above
      const mg_vf tmp5 = tmp8 / row9;  // y
      mg_store(&out_ptr0[r * 600 + c0], tmp5);
    }
    for (int64_t c = 592; c < 600; ++c) {  // scalar tail: columns [592, 600)
      const int64_t l = c - 592;  // the lane this column adds to
      const float tmp8 = out_ptr0[r * 600 + c];  // y.exp, stored there by the loop above
      const float tmp5 = tmp8 / row9;  // y
      out_ptr0[r * 600 + c] = tmp5;
    }
  }
}
static void cpp_fused_softmax_1(const MgRuntime* rt, const cpp_fused_softmax_1_args* a) {
  (void)rt;  // 1200 elements: below the threading threshold, one thread
  cpp_fused_softmax_1_rows((void*)a, 0, 2);
}
