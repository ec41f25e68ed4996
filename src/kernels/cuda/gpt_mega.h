// The grammar MiniGPT's whole forward (or KV-cache decode step) as ONE kernel launch: a
// "megakernel" run by one thread-block cluster of R CTAs (Hopper; R up to 16 with the
// non-portable cluster size). For the launch-bound sizes (a decode step, a forward of a few dozen
// rows) the 9 whole-layer kernels of gpt_layer.h spend most of their time in launch gaps and in
// serial L2 round trips; here each CTA's slices of the weights come into its shared memory at the
// start, as ONE bulk copy per layer (the copy engine) from an image of that shared memory built
// once per plan (gpt_mega_pack), so layer 0 starts while the later layers still arrive, and the
// activations move between CTAs through distributed shared memory, with a cluster barrier
// between stages ("| barrier" below; the forward of the shipped architecture hands each stage
// over point to point instead: every remote store an st.async completing on the receiver's
// mbarrier for the stage, the receiver waiting for its own mbarrier only, gpt_mega_parts.cuh's
// Net; gpt_mega_p2p):
//
//   start      every CTA: x = wte[ids] + wpe[pos] for all N = B*T rows (a replica per CTA);
//              decode: the earlier positions' k, v of its head, every layer, into shared memory
//   per layer  A  per (sequence b, head h) item: ln1 + the head's q, k, v + causal attention;
//                 att (b's rows, h's columns) pushed to every CTA                      | barrier
//              B  proj, CTA r's C/R columns: x += att proj^T + b, pushed to every CTA  | barrier
//                 (head_proj: A pushes each head's partial of proj instead, and every CTA adds
//                 them up locally: no barrier; point to point: each partial's 4 columns to the
//                 CTA owning them only, which adds the heads' partials in head order and pushes
//                 x to every CTA as B does; the default for those forwards)
//              C  ln2 (all rows, locally) + fc1 + GELU, r's F/R columns of h, kept locally;
//                 fc2 by k: r's h columns times fc2.weight's, a partial of every output per
//                 16-k slice, each pushed to the CTA owning the output's column         | barrier
//              D  r's C/R columns: x += (the F/16 partials in slice order) + b, pushed    | barrier
//                 (the decode step, split_k: h pushed to every CTA in C, and D computes r's
//                 columns over all of k, k in slices of 64 summed in order)
//   head       ln_f (locally) + lm_head, r's vocabulary columns -> logits; with probs: a
//              half-warp per row, each CTA's per-row (max, sum of exp), lane q pushing it to CTA
//              q | barrier, lane q reading CTA q's pair, combined by butterflies, probs written.
//
// Numerics: sums over k in float in k order (fc2: by k, sixteen k-slices of 16 added in slice
// order; the whole-layer kernels add four slices of 64; proj by heads: each head's 16 k in order,
// the heads' partials added in head order), LayerNorm statistics in double in one pass (sum and
// sum of squares; layernorm.cuh's are two-pass: double's last bits differ; 1/sigma a float rsqrtf), exact-erf GELU: logits within ~1e-5 of the CPU engine; the work split (R)
// changes who computes a value, never how (fc2's slices are 16 wide at every R), so logits are
// the same bitwise for every cluster size. The probs' row total is a 16-lane butterfly of the
// CTAs' terms, itself of the lanes' sums (a fixed order for each R; not bitwise across R, as
// the CTAs' column ranges change with R). The decode step (MegaDims::split_k) splits
// each sum over k across 8 or 32 lanes (partials added by a shuffle butterfly: one row has too
// few outputs to keep the CTA busy, and a 64-long chain of dependent FMAs per thread was most of
// a layer's time): within 1e-6 of the forward's row, not bitwise; without split_k
// (MINIGPT_MEGA_SPLITK=0 in cuda_gpt.cpp) a decode step is the forward's row bitwise
// (tests/cuda/model_cuda_test.cpp checks both).
//
// Limits (gpt_mega_cluster says whether a shape runs): C, F, d_head multiples of 4; R a multiple
// of H with C and F multiples of 4R; every CTA's weight slices and the activations of all N rows
// in its shared memory (the shipped model: N <= ~40 at R = 16); decode (a KV cache) at most one
// (sequence, head) item per CTA (B*H <= R). Launchers check and never synchronise.
//
// Measured (H200 at 1980 MHz, `minigpt bench model --device cuda --no-peers --runs 1000 --warmup
// 100`, the shipped model, weights L2-resident; all figures per call, launch latency included).
//   history    first version (generic dims, copies out of line): forward (2, 16) 120.7 us, decode
//              graph 64.5 us. Specialised on the shipped dims (Fixed<64, 4, 256>): forward 100 us,
//              decode graph 50.3 us, step() 54.7 us = 18.3k tokens/s.
//   floor      an empty kernel of the same cluster and shared memory, replayed the same way:
//              3.2 us per forward graph, 3.5 us per decode graph, 6.6 us per step() (the host's
//              launch + wait: ~3 us over the graph).
//   where      stage timestamps (MINIGPT_MEGA_TRACE=1, gpt_mega.cu) of that version: ~29k cycles
//              (15 us, in the forward AND the decode) went to bringing the weights in before
//              layer 0: 16-byte cp.async from every thread moved ~4 bytes per cycle per CTA, the
//              issuing threads stalled (as a bulk copy per weight row it took ~60k cycles: the
//              copy engine's cost per copy, ~200 cycles, not per byte). And the GEMMs' lanes took
//              4-column groups fastest: weight rows 4 apart, 2 of 8 bank groups, ~25 shared-memory
//              wavefronts per k-step where rows-fastest takes 6-8 (the forward's q, k, v stage
//              6.7k cycles, fc2 6.6k, lm_head 12.7k).
//   this       weights as a per-plan image, one bulk copy per layer (start 29k -> 5k cycles);
//              rows fastest over the lanes (q, k, v 6.7k -> 1.7k cycles, fc2 6.6k -> 2.3k, lm_head
//              12.7k -> 4.7k); the ids read with the position; no register spill (was 248 bytes).
//              Same run, main vs this: forward (2, 16) 99.1 -> 63.0 us (back to back 97.6 ->
//              61.4), decode graph 50.3 -> 34.9 us (R = 8 now the fastest; 16: 37.9), step()
//              54.7 -> 39.8 us = 25.1k tokens/s; logits 8.58e-6 from the CPU, decode = forward
//              row bitwise. torch.compile reduce-overhead: ~296 us. ncu (forward): 1.55M
//              instructions (was 1.72M), 21.7 cycles per issued instruction (was 35.5), 10.8 of
//              them at CTA barriers (was 20.5).
//   before     forward R = 16, ~120k cycles: start 5k; per layer ~23.5k: ln1 1.1k, q k v 1.7k,
//              attention 2.9k, push att 1.1k, barrier + proj + barrier 3.9k, ln2 1.3k, fc1 + GELU +
//              push h 5-6.4k, barrier 1.2-2.5k, fc2 2.3k, barrier 1.6k; head: ln_f + lm_head 4.7k,
//              probs (incl. the barrier) 13.8k. Decode R = 8, ~66-73k cycles: start 8-9k (the
//              position and ids from mapped host memory: one PCIe round trip, ~5k cycles); per
//              layer ~13.7k: ln1 1.05k, q k v 1.65k (12 threads, 64-FMA chains), attention 2-3.3k,
//              push 1.1k, barrier + proj sum 1.2k, ln2 0.94k, fc1 2.0k, barrier 0.64k, fc2 2.0k,
//              barrier 0.63k; head 3.2k.
//   now        (same run, `bench model` twice each, base = the version above, R = 8 by heads):
//              decode step() 39.5 / 39.6 -> 33.7 / 35.0 us, its graph alone 34.5 / 34.6 -> 30.0 /
//              29.9 us (the run's defaults: k split, arguments, done flag); the defaults now (k
//              split, arguments, sync; one run, --runs 300): step() 34.3 us = 29.2k tokens/s,
//              graph 28.2 us. The gain is from the k-split sums (MegaDims::split_k; with MINIGPT_MEGA_SPLITK=0 the same build
//              ran step() 42.2, graph 36.1); the token and position as kernel arguments: graph 32.0
//              -> 30.0 us, step() about even (34.8 -> 33.7 / 35.0: the node update's host cost);
//              a done flag per CTA that step() spun on: step() no faster (34.3 with sync), graph
//              1.8 us slower (its system-scope fence, ~3.8k cycles), so removed. The forward measured 64.4 us against 63.0 with the
//              k-split as a run-time branch (register spills); it is now an instance of its own
//              (kSplit), not yet measured on the GPU. Decode stages now (R = 8, trace): ~56-61k
//              cycles: start 5-7.7k; per layer ~11k: ln1 1.05-1.18k, q k v 0.77k (was 1.65k),
//              attention 2-2.9k, push 1.1k, barrier + proj sum 1.0k, ln2 0.93k, fc1 + GELU + push
//              1.5k (was 2.0k), barrier 0.57k, fc2 1.13k (was 2.0k), barrier 0.56k; head: ln_f +
//              lm_head 2.0k, logits stores + done flag 3.8k (the flag's fence; without it a few
//              hundred). Forward probs phase, broken down: stats + push 4.6k, barrier 1.1k, the
//              combine and the stores 7.5k (logits now stored there, coalesced, not before the
//              barrier).
//   forward    (one run, `minigpt bench model --device cuda --no-peers --runs 300`, 3 rounds
//              alternating base / probs only / both; R = 16) forward graph 62.3 / 62.9 / 62.6 ->
//              58.3 / 58.0 / 58.0 -> 50.5 / 49.7 / 49.8 us; 100 replays back to back, per
//              replay, 60.6 -> 56.3 -> 47.9 us; host API 100 -> 94 us. The decode step's code
//              is unchanged, yet its graph measured 0.3-0.6 us slower in the same run (8 heads
//              27.9-28.4 -> 28.3-28.8 us, 8 columns 29.1-29.3 -> 29.7-29.9; probs only: in
//              between): not explained (the layout's new fields? code placement?). Trace: ~118k -> ~93k cycles (wall 59.7 -> 47.1 us). The probs
//              phase, a half-warp per row (pairs pushed and read a lane per CTA, butterflies):
//              stats + push 4.8k -> 1.1k, barrier 1.2k -> 1.5k, combine + stores 7.1k -> 2.2k.
//              fc2 by k: fc1 + GELU + push h 5.5-5.9k -> fc1 + fc2 partials + push 3.2k, the
//              barrier after it 1.8-2.1k -> 1.3-1.5k, fc2 2.3k -> 1.0k (the owners' sums + the
//              x push). Shipped model vs the CPU: 6.7e-6 (was 8.6e-6). Tried and reverted:
//              writing h and x locally and pushing them with all 512 threads (not each output's
//              thread to all R CTAs): 1-1.5k cycles per layer SLOWER (the remote stores'
//              bandwidth is the limit, not the threads issuing them).
//              Stages now (R = 16, ~93k cycles): start 5.3k; per layer ~21k: ln1 1.1k, q k v
//              1.7-1.9k, attention 2.7-2.9k, push 1.1k, barrier + proj + barrier 3.9k, ln2 1.3k,
//              fc1 + fc2 partials 3.2k, barrier 1.3-1.5k, fc2 sums + x push 1.0k, barrier 1.5k;
//              head: ln_f + lm_head 4.1k, probs 4.8k (stats + push 1.1k, barrier 1.5k, rest 2.2k).
//              fc2 by k costs shared memory: its partials (F/16 x N x C/R floats) and fc2's
//              rows padded to F/R + 4: the shipped model at N = 32 needs 197 KB at R = 16 (was
//              185), the small test model by heads no longer fits at R = 4 (258 KB).
//   loop       the device decode loop (gpt_mega_generate, below; same run as step() 36.6 us =
//              27.3k tokens/s): 64 tokens per launch, greedy 18.6 us per token = 53.7k tokens/s,
//              top-k 40 24.5 us = 40.8k tokens/s (figures and the open leads below).
//   p2p        (issue 14; H200, `minigpt bench model --device cuda --no-peers --runs 1000 --warmup
//              100`, main's build and this one alternated twice in one run) forward graph (2, 16)
//              49.8 / 49.5 -> 43.4 / 43.8 us (100 back to back, per replay 47.9 / 47.8 -> 41.6 /
//              41.8); decode graph alone (R = 8) 28.4 / 28.4 -> 26.9 / 27.1 us (its LayerNorms),
//              step() 36.4 / 34.5 -> 33.0 / 34.7 (noisy), the device loop unchanged (greedy 18.7 /
//              18.6 -> 18.5 / 18.4, top-k 40 24.8 / 24.7 -> 24.6 / 24.6). Shipped model vs the CPU:
//              forward 6.7e-6, decode 4.8e-6 (as before). What each part gave (an earlier run,
//              --runs 300, the variants selected at run time in one build): main 50.1 us ->
//              one-pass LayerNorms + the weight copies issued before the ids load 48.6 -> + the
//              stages point to point (proj by columns) 44.6; then proj by heads with each item's
//              partial sent to the columns' owner (a quarter of att's bytes, one remote store per
//              thread instead of 16 from each of 64 threads; proj's GEMM moves into the attention
//              CTAs) 43.4-43.8 against 44.7-45.0 by columns in the same run: the forwards' default
//              now (218 KB of shared memory at N = 32, R = 16; by columns 199 KB: Auto falls back
//              to columns where heads do not fit). Tried and reverted: LayerNorms on 8 lanes per
//              row (3 shuffle steps, 8 values per lane): 43.6 / 43.4 us, the same as 16 lanes.
//              Stages now (R = 16, trace: ~79k cycles, 40 us inside the kernel; was ~93k): start
//              6.0k (4.1k of it before the first __syncthreads: the ids' global load and the
//              copies' issue); per layer ~16k: ln1 0.88k, q k v 1.7-1.9k, attention + proj
//              partials + sends 2.0-2.3k, the slowest warp 1.35-1.47k, wait + x1 (sum of the heads,
//              push) + wait 2.5k, ln2 1.06-1.11k, fc1 + fc2 partials 3.2-3.3k, wait 0.75-0.8k, fc2
//              sums + x push 1.2k, wait 0.71-0.73k; head: ln_f + lm_head 4.05k, probs 5k (stats +
//              sends 1.2-1.3k, wait 1.2k, combine + stores 2.6k).
//   wide       (issue 14, tried and reverted; H200, `minigpt bench model --device cuda --no-peers
//              --runs 1000 --warmup 100`, main's form and the variant alternated twice in one run,
//              picked by an environment variable between two kernel instances) the forward's sums
//              split over lanes as the decode step's split_k does, at widths fixed per stage (not
//              from R: still bitwise across cluster sizes): q, k, v, lm_head and proj by heads'
//              partials on 2 lanes, fc1 and proj by columns on 4 (fc1: all 512 threads busy where
//              128 ran 64-long FMA chains), att by keys over the whole warp (att_row_split).
//              SLOWER: forward graph (2, 16) 43.1 / 43.3 -> 47.4 / 47.0 us (100 back to back 41.5
//              / 41.5 -> 45.6 / 45.5; proj by columns 44.6 / 44.6 -> 48.0 / 47.6); trace ~79.3k ->
//              ~88.2k cycles: q k v 1.75-1.92k -> 2.16-2.27k, fc1 + fc2 partials 3.16-3.32k ->
//              4.40-4.65k, ln_f + lm_head 4.0-4.1k -> 5.1-5.2k, attention and the proj partials
//              unchanged (1.9-2.4k, 1.2-1.5k). The decode rows the same in both (different
//              kernels); all of model_cuda_test passed with the variant (a decode step with
//              MINIGPT_MEGA_SPLITK=0 took the same widths: still the forward's row bitwise). So
//              these stages are not bound by the chains' latency (likely instead by issue: the
//              split adds shuffles, and the epilogue (GELU, the stores' index math) runs on 1 of
//              W lanes, W times the warp issues; the shared-memory reads per FMA are the same).
//              The bench's note, shipped model at its (2, 16) ids (seed 42) vs the CPU: 1.05e-5
//              in main's form (issue 14 asks 1e-5; the tests' probes, B = 1: 7.6e-6), 8.58e-6
//              with the split.
//   accuracy   the 1.05e-5 is proj by heads' summation order, and it is not an error: at the
//              bench's ids (`bench/forward_accuracy.py`, gpu-check's forward-accuracy step, H200,
//              the merged tree at f2777e3), max |logit difference| against a float64 forward /
//              against the CPU engine: CPU engine 6.28e-6 / 0; megakernel proj by heads (the
//              default) 5.73e-6 / 1.05e-5; proj by columns (k in order, as the CPU) 5.17e-6 /
//              6.68e-6. Both GPU orders are nearer the exact result than the CPU engine; they and
//              the CPU err in different directions. So 1e-5 against the CPU holds for proj by
//              columns; the default is held to what issue 14 allows where a reduction order
//              differs (1e-4, stated); model_cuda_test's probes measure 7.6e-6.
//   start      (issue 14; H200, two runs, variants picked by an environment variable between kernel
//              instances of one build, run 2 against main's own build; `minigpt bench model
//              --device cuda --no-peers --runs 1000 --warmup 100` and MINIGPT_MEGA_TRACE=1) the
//              forward's start: its ten mbarriers (5 weight groups, 5 of Net) behind ONE fence,
//              then the copies; warps 1.. embed meanwhile, each row's id loaded by the threads
//              that use it (no shared-memory round trip and CTA barrier first); and no CTA barrier
//              where Net::wait's follows (the attention item's last, the layer top after layer 0).
//              Trace, same run, main -> this: ~79.4k -> ~77.9k cycles, the kernel's wall 40.16 ->
//              39.36 us (both samples); start 6.05k -> 4.74k, wait + x1 + wait 2.5k -> 2.3k. Not
//              timed alone by the 1000-run bench: its combinations with the column changes below
//              (which cost about what it saves) measured 44.00 / 43.65 us against main's 43.81 /
//              43.62; the 100-run rows beside the traces, main 45.14, this 44.27 us. Before the
//              first CTA barrier still 4.1k cycles, now with the embedding inside (main: as long
//              without it). Tried and reverted (trace cycles per stage, main's
//              form -> variant; all of model_cuda_test passed with each, logits bitwise as
//              before, 1.05e-5 from the CPU at the bench's ids): GEMM tiles of 2 rows per thread,
//              each weight float4 read once for both (lead "2 rows per thread"): q k v 1.8k ->
//              2.9k, fc1 + fc2 partials 3.3k -> 4.4k, whole kernel 79k -> 90k (4 rows: 105k);
//              fewer columns per thread (more threads, shorter streams): q k v on 2 (384 threads)
//              1.8k -> 2.0k, fc1 on 1 (512 threads) 3.3k -> 3.6k, on 2 the same, lm_head on 2 /
//              1: 4.0-4.2k -> 4.9k / 6.1k, the proj partials on 2 (8-byte st.async) push 1.35k ->
//              1.55k. So the GEMM stages sit at an optimum of threads x outputs per thread:
//              neither fewer warps with longer chains nor more warps with more instructions per
//              output. x pushed before layer l + 1 only to the CTAs whose ln1 reads its rows (a
//              quarter of the bytes): fc2 sums + push 1.3k -> 2.7k; the owner sums' sends over
//              all 16 warps (a warp per destination) instead of one warp sending to all: the
//              wait after them 0.73k -> 1.1-1.45k. Remote stores: fewer bytes or more senders
//              were both slower, so what they cost is not plain bandwidth.
//              Stages now (R = 16, ~78k cycles): start 4.7k (4.1k before the first CTA barrier);
//              per layer ~16k: ln1 0.9k, q k v 1.7-1.8k, attention + proj partials 2.2-2.4k, the
//              slowest warp 1.3-1.45k, wait + x1 + wait 2.3-2.4k, ln2 1.05-1.1k, fc1 + fc2
//              partials 3.25-3.3k, wait 0.8k, fc2 sums + x push 1.2k, wait 0.7k; head: ln_f +
//              lm_head 4.0-4.4k, probs 4.5-5k.
//   fences     (issue 14, mega14d; H200, experiments/25-compile/gpu_mega14d) why a stage costs
//              ~1k cycles, measured: ncu (forward, main's form, --cache-control none, warp sampling)
//              15.95 cycles per issued instruction: long_scoreboard 4.59 (the mbarrier try_waits:
//              waiting for other CTAs; the 8 CTAs without attention items wait ~6k per layer),
//              barrier 4.19 (CTA barriers: idle warps waiting for the few that work, e.g. fc1's 4
//              warps, the owner sums' 1), wait 2.04, short_scoreboard 1.55, membar 0.56,
//              no_instruction 0.24: instruction fetch is NOT it (the code is ~95 KB, ~46 KB per
//              layer, yet ln1, q k v, ln2, fc1 run twice each, the second pass warm, cost twice:
//              0.9k -> 1.78k, 1.75k -> 3.6k, 1.09k -> 2.26k, 3.27k -> 5.13k with fc2's partials). The
//              stages are latency chains (an LDS, F2F to double, 4 shuffle + DADD steps, a double
//              rsqrt per LayerNorm row: ~150 dependent instructions) plus the waits. And the
//              hand-overs paid fences: Net::wait's arrival as release.cluster compiles to MEMBAR.ALL.GPU
//              + ERRBAR + CGAERRBAR by thread 0 before every arrival (the round trip of its own remote
//              stores on each stage's critical path), the start's barrier.cluster.arrive.release to
//              the same in every thread after the embedding's loads (~1.5k of the first 4.1k
//              cycles). Both relaxed (see Net::wait, cluster_arrive_relaxed; the data's ordering is
//              the __syncthreads and the st.async complete_tx, acquired at cluster scope as
//              before): forward graph (2, 16) 42.72 / 42.85 -> 39.49 / 39.30 us (main's form and
//              this alternated in one build, --runs 1000; 100 back to back 41.2 -> 37.9 us), decode
//              graph (R = 8) ~26.8 -> ~26.2 us (the start's arrival only); the wait's acquire at CTA
//              scope too (no CCTL.IVALL): 39.33 / 39.52, no gain, not kept; logits unchanged (1.05e-5
//              from the CPU at the bench's ids), all of model_cuda_test passed. Trace, main -> this
//              (~78.1k -> ~72.1k cycles, wall 39.5 -> 36.4 us): start 4.1k -> 2.4-2.7k; wait + x1 +
//              wait 2.3k -> 1.43k; the last wait 0.7k -> 0.165k; layer 0's ln1 0.9k -> 1.9-2.2k (the
//              later layers' weight copies still landing). Per issued instruction 15.95 -> 14.91
//              cycles (membar 0.56 -> 0). Stages now (R = 16, ~72k cycles): start 2.4-2.7k; per
//              layer ~15k: ln1 0.85-0.9k, q k v 1.7-1.85k, attention 2.1-2.35k, the slowest warp
//              1.35-1.5k, wait + x1 + wait 1.42-1.5k, ln2 1.03-1.15k, fc1 + fc2 partials 3.25-3.3k,
//              wait 0.82-1.05k, fc2 sums + x push 1.2-1.3k, wait 0.165k; head 4.1-4.3k, probs ~5k.
//   layernorm  (issue 14, mega14e; H200, experiments/25-compile/gpu_mega14e, one build, variants
//              picked by MINIGPT_MEGA_VARIANT, `minigpt bench model --device cuda --no-peers --runs
//              1000 --warmup 100` alternated twice) 1/sigma as a float rsqrtf of the double variance
//              (was a double rsqrt: MUFU.RSQ64H + 5 dependent DFMA/DMUL + a slow-path branch) and the
//              row's values kept in registers (row_stats): forward graph (2, 16) 40.06 / 39.94 ->
//              39.10 / 39.42 us (the same instance again: 39.30 / 39.30), 100 back to back 38.1 ->
//              37.25; decode graph (R = 8) 26.43 / 26.18 -> 26.14 / 26.46, device loop greedy 18.39 /
//              18.53 -> 18.15 / 18.38 us per token: unchanged. Trace ~72.2k -> ~70.0k cycles: ln1
//              0.87-0.89k -> 0.74-0.77k (layer 0's 1.9-2.3k -> 0.8k), ln2 1.05-1.07k -> 0.9-0.94k.
//              Logits vs the CPU at the bench's ids 1.05e-5 -> 7.63e-6, the 127 probes 6.68e-6 ->
//              5.72e-6; all of model_cuda_test passed (decode with MINIGPT_MEGA_SPLITK=0 the forward's
//              rows bitwise; the device loop the step's logits, 0 apart). Not kept: float statistics,
//              two-pass (forward 39.42 / 39.30, decode graph 25.63 / 25.82, greedy 17.91 / 18.22) or
//              one pass shifted by the row's first value (38.27 / 38.30, 25.76 / 25.76, 17.56 /
//              17.59): their rounding depends on the lanes' split, so the device loop's 32-lane
//              LayerNorms left the step's 16-lane ones by 3.8e-6 / 4.8e-6 (the test's bound 1e-6),
//              and the shifted one's logits moved from the CPU's (1.5e-5 at the bench's ids). The
//              decode step's and the loop's cluster barriers with one fence per CTA (__syncthreads,
//              thread 0's fence.acq_rel.cluster, relaxed arrivals; the loop's start arrival
//              relaxed): decode graph 26.85 / 26.78, greedy 18.69 / 18.63: slower, not kept.
// Open (largest first), against issue 14's 20 us (the forward's figures above): the decode step's
// cluster barriers (cluster_sync_all: a release.cluster arrival, MEMBAR.ALL.GPU + ERRBAR in every
// thread, 4 per layer; each orders plain remote stores, and one fence per CTA measured slower
// ("layernorm"): st.async + mbarriers as the forward's Net<true> would drop them) and the device
// loop's start arrival (gpt_mega_generate.cu, still .release; relaxed only measured together with
// the one-fence barriers); the stages'
// remote stores and their waits (fewer bytes or more senders did not help, "start" above; to
// try: bulk copies shared::cta -> shared::cluster of contiguous per-owner blocks, x stored as
// (C/4, N, 4)); the attention CTAs' serial chain (8 of 16 CTAs, ~6.5k cycles per layer while the
// others wait: fewer steps, as no split shortens a thread's chain); the start's remaining
// ~2.4k cycles (the embedding's global loads, the copies' issue); the GEMM stages (rows and
// columns per thread explored: only fewer instructions per output in the same order would help);
// the LayerNorms (~0.75-0.95k each, 9 per forward; float statistics measured ~0.1-1 us faster,
// "layernorm": they would need the device loop's LayerNorms on the step's 16-lane split);
// lm_head 4.0k; the probs' combine + stores 2.1-2.5k; the decode step's start (an mbarrier fence
// each, as before: the forward's single fence unmeasured there) and attention.
// What 20 us asks (an estimate from the stage costs above, not measured): ~40k cycles in all,
// and every stage here costs ~0.7-1k cycles before its arithmetic (a CTA barrier, a shared-memory
// round trip, a hand-over; "fences": dependent latency and idle warps, not instruction fetch),
// ~7 stages per layer: ~28k cycles of fixed cost alone. Column slices (C/R per CTA) make every
// GEMM end in an all-to-all of all N rows. A 2-D split (16 CTAs = 4 row groups of 8 rows x 4
// column groups = the heads) would keep the attention inside a CTA (its
// head, its rows; k, v of the sequence's earlier row group from one peer), exchange 8-row blocks
// among 4 CTAs (a quarter of the bytes, 3 peers not 15) and hand over 3 times per layer (k, v;
// proj's head partials; fc2's K partials, each summed in order by every receiver) instead of 5,
// at the same FMAs per CTA, with a quarter of the weights per CTA (256 KB: streamed a layer
// ahead, not resident). By the costs above ~10k cycles per layer, ~30 us per forward: a rewrite
// of this kernel that would still miss 20 us; fewer stages per layer, not faster ones, are the
// lever.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

constexpr int kMegaMaxLayers = 8;

struct MegaLayer {  // weights as nn.Linear (out, in)
  const float *ln1_weight, *ln1_bias, *qkv_weight, *qkv_bias, *proj_weight, *proj_bias;
  const float *ln2_weight, *ln2_bias, *fc1_weight, *fc1_bias, *fc2_weight, *fc2_bias;
  float* k_cache;  // (B, capacity, C) (decode), or null: a forward from position 0
  float* v_cache;
};

struct MegaDims {
  int L = 0, B = 0, T = 0, C = 0, H = 0, F = 0, V = 0;
  int P = 0;         // wpe rows (block_size)
  int capacity = 0;  // KV-cache rows per sequence (decode); a forward: T
  bool cache = false;
  // proj by heads: each attention item multiplies its head's att by its C x dh block of
  // proj.weight and pushes that partial to every CTA, which sum the H partials in head order
  // (the whole-layer kernels' order): one cluster barrier and one stage less per layer, for
  // H x N x C floats pushed by each... item. Else proj by columns (stage B above).
  bool head_proj = false;
  // Sums over k split across lanes (the decode step; cuda_gpt.cpp sets it there): each output's
  // k = 64 (or 256) terms as W = 8 (or 32) lanes' partial sums of 8 terms, added by a shuffle
  // butterfly, instead of one thread's 64-long chain of dependent FMAs. Another summation order
  // than the forward's (k in order), so a decode step is no longer its forward row bitwise
  // (within ~1e-6; tests/cuda/model_cuda_test.cpp prints and bounds it).
  bool split_k = false;
};

struct MegaParams {
  MegaDims dims;
  float eps = 1e-5f;
  const int32_t* ids = nullptr;  // (B, T): device or mapped host memory; null: `id` (B*T == 1)
  const int32_t* pos = nullptr;  // scalar, device or mapped host: rows are positions *pos + t; null: `position`
  // The decode state by value, for a launch whose arguments change per step (a graph's kernel node
  // updated by gpt_mega_set_node_params): read from the kernel's parameter space, no memory round
  // trip (from mapped host memory the position and token cost ~5k cycles, one PCIe round trip).
  int id = 0;
  int position = 0;
  const float *wte = nullptr, *wpe = nullptr;
  MegaLayer layers[kMegaMaxLayers] = {};
  const float *ln_f_weight = nullptr, *ln_f_bias = nullptr, *lm_head_weight = nullptr, *lm_head_bias = nullptr;
  float* logits = nullptr;  // (B*T, V): device or mapped host memory
  float* probs = nullptr;   // (B*T, V) or null
  // The weights above as every CTA's shared memory holds them (gpt_mega_pack), for the dims and
  // cluster size of the launch: each launch brings them in with a bulk copy per layer.
  const float* image = nullptr;
};

// Whether dims' stages hand over point to point (st.async + mbarriers, no cluster barriers): the
// forward (no cache, no split_k) of the shipped architecture (C 64, H 4, F 256).
bool gpt_mega_p2p(const MegaDims& d);
// Dynamic shared memory per CTA (bytes) for dims at cluster size R (0 if the split does not apply).
size_t gpt_mega_smem(const MegaDims& d, int R);
// The cluster size the megakernel runs dims with on the current device: `requested` (1..16) if
// it fits and can be resident, else 0; requested == 0: the largest of 16, 8, 4, 2, 1 that does.
int gpt_mega_cluster(const MegaDims& d, int requested = 0);
// Floats of the weight image for dims at cluster size R (0 if the split does not apply): R
// copies of the weight part of a CTA's shared memory, ~1.9 MB for the shipped model at R = 16.
size_t gpt_mega_image_floats(const MegaDims& d, int R);
// Enqueues the writing of p's weights (p.image unused) into `image` (gpt_mega_image_floats
// floats, 16-byte aligned) as the CTAs of a launch with p.dims and R find them: once per plan,
// before the launches that read it; the weights must not change while the image is in use.
void gpt_mega_pack(const MegaParams& p, int R, float* image, cudaStream_t stream);
// Enqueues the kernel with cluster size R (from gpt_mega_cluster), p.image packed for (p.dims,
// R). A position past capacity (or past P), or an id outside [0, V), gives NaN outputs (the host
// checks first).
void gpt_mega(const MegaParams& p, int R, cudaStream_t stream);
// Replaces the arguments of `node`, a kernel node of `exec` captured from gpt_mega(p0, R), with
// (p, R) for the following launches of exec (cudaGraphExecKernelNodeSetParams: launches already
// enqueued keep theirs). p must have p0's dims, image and cluster size: only values such as id,
// position or the output pointers may change. Checks nothing on the device; does not wait.
void gpt_mega_set_node_params(cudaGraphExec_t exec, cudaGraphNode_t node, const MegaParams& p, int R);

// ---- the device-resident decode loop: one launch generates up to n tokens ----
//
// Measured (H200, `minigpt bench model --device cuda --no-peers --runs 300`, twice; rows "kv
// decode, 64 tokens per launch on the device": one launch from a 1-token prompt to a full
// context, no stop token, wall clock per call over the tokens, launch and wait included):
//   first version (the step's stages as they are, a CTA-wide rank for the choice): greedy 28.7 us
//     per token = 34.9k tokens/s, top-k 40 32.2 us (step() 36.0, its graph alone 28.0 us);
//     per token ~56k cycles: the attention stage 5.3k per layer, the choice's rank 8k.
//   now: greedy 18.6 us = 53.7k tokens/s, top-k 40 24.5 us = 40.8k (step() 36.6 us = 27.3k in
//     the same run). What did it: the greedy choice by warp butterflies (8k -> 2.6k cycles with
//     its cluster barrier); one-warp, one-pass LayerNorms (~1k -> ~0.4k each); no global store
//     inside the loop (the k, v rows and tokens written at the end: a store before a cluster
//     barrier's release is waited for); scores and softmax in registers; the proj partial in the
//     attention warp; fc1/fc2 epilogues on four lanes; the layer-0 cluster wait and a CTA
//     barrier per token dropped; the next embedding issued by the choosing warp.
//   where (MINIGPT_MEGA_TRACE=1, cycles per token, 4 layers summed): ~36.8k: ln1 2.9k, qkv 2.7k,
//     scores + softmax 4.0k, att + proj + push 5.8k, barrier 1.7k, proj sum + ln2 2.8k, fc1 +
//     push 3.9k, barrier 2.0k, fc2 + barrier 5.3k; head 1.4k, choice's top + barrier 2.6k, draw +
//     embedding 0.6k; the start (weights, earlier k, v) 3k once per launch.
//   open: the three cluster barriers per layer (~0.5k each) and the attention warp's serial
//     chain (ln1 -> qkv -> scores -> softmax -> att -> proj, ~3.5k per layer on one warp of 4
//     CTAs); the top-k path (its union ranking and the draw's running sum: ~6 us per token over
//     greedy); top-k above 64 and top-k 0 (the whole vocabulary) run the host loop.
//
// The decode step's cluster (dims of a decode step: B = T = 1, cache, split_k; the shipped
// architecture C 64, H 4, F 256) loaded ONCE, then a loop on the device: feed a token at the
// next position, choose the next token from its logits exactly as model/sampling.cpp's
// Sampler::sample does (greedy: the largest logit, the lower id on ties; else the top-k by
// (logit descending, id ascending), weights exp((l - lmax) / temperature) in double summed in
// that order, the first whose running sum exceeds u * total, u the host's pre-drawn uniform:
// drawn only where the CPU draws one), and stop as `minigpt generate`'s host loop: at n tokens
// (after feeding the n-th, as the loop does), at the eos token (not fed, not kept), or when
// the context is full. No host round trip between tokens.
constexpr int kMegaGenMaxTopK = 64;  // the device loop's largest top-k (the host loop takes the rest)
struct MegaGenerate {
  int first_id = 0;             // the token fed first, at MegaParams::position (the prompt's last)
  int n = 0;                    // the most tokens to generate
  int eos = -1;                 // the stop token (-1: none)
  float temperature = 0.0f;     // 0: greedy
  int top_k = 1;                // with temperature > 0: k in [1, kMegaGenMaxTopK], <= V
  const double* uniforms = nullptr;  // (n) device memory: the sampler's uniform draws, in order
  int32_t* tokens = nullptr;    // (n) out (device or mapped host memory): the generated ids
  // out: {count, stop (0: n tokens, 1: eos, 2: context full), status (0 ok, 1: a NaN logit,
  // 2: every logit -inf), the position after the launch (positions fed)}
  int32_t* result = nullptr;
  float* step_logits = nullptr;  // ((n + 1), V) or null: the logits of every fed token, in order
  // Diagnostics, or null: 16 long longs (device or mapped host memory): the cycles of each phase
  // of the loop summed over the launch (CTA 0; slots as gpt_mega_generate.cu's mark(k) calls), the last
  // one the number of tokens fed.
  long long* trace = nullptr;
};
// Dynamic shared memory of the loop's kernel at cluster size R (0: it does not take d).
size_t gpt_mega_generate_smem(const MegaDims& d, int R);
// Whether the loop runs d at cluster size R on the current device (shared memory, residency).
bool gpt_mega_generate_fits(const MegaDims& d, int R);
// Enqueues the loop: p as for a decode step (its weight image for (p.dims, R); p.position the
// first position, the k, v cache rows before it filled). Does not wait; the host checks the
// token ids and positions first (Error here if out of range).
void gpt_mega_generate(const MegaParams& p, const MegaGenerate& g, int R, cudaStream_t stream);

}  // namespace minigpt::cuda
