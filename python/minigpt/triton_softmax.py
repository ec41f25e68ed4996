"""The Triton row softmax for (B, V) fp32 on the GPU, sound at any shape.

    from minigpt.triton_softmax import softmax, picked_config
    y = softmax(x)                 # x: torch.float32 (B, V) on CUDA; tuned on first use per bucket
    picked_config(B, V)            # {"kernel": "rows", "ROWS": 8, "BLOCK": 1024, "num_warps": 4}
    softmax(x, config={...})       # a given configuration, no tuning (the tests force each kernel)

Four kernels, because no single schedule holds up across shapes (the H200 figures in issue 19:
one program per row was 3.4x slower than torch.softmax at (65536, 128) and 2x slower at
(16, 1048576)):

- `rows`: V <= 16384. ROWS rows per program, each row read once into registers as a
  (ROWS, BLOCK) tile, BLOCK = V rounded up to a power of two; max, exp, sum and the write in
  one pass. Short rows get many rows per program, so a program moves kilobytes, not 512 bytes.
- `looped`: long rows, enough of them to fill the GPU. A program per row (or a persistent grid
  of PROGRAMS programs taking rows in turn); a first pass keeps a per-lane running max and sum
  over the row's BLOCK-wide pieces (online softmax), a second pass reads the row again and
  writes exp(x - M) / S. The first read asks L2 to keep the row, the second to drop it; with a
  persistent grid few enough rows are in flight for the second read to find them there.
- `split`: long rows, too few to fill the GPU ((16, 1048576): 16 programs for 132 SMs). The row
  is cut into CHUNK-wide chunks, one program per (row, chunk): a statistics kernel writes each
  chunk's (max, sum of exp) to a small (B, chunks) buffer, a second kernel combines a row's
  partials into (M, S) and writes its chunk. x is read twice, as `looped` does, but every SM
  has work.
- `resident`: long rows, x read once (the others read it twice, 1.3-1.7x behind our fused CUDA
  kernel, which holds a row in a thread-block cluster's shared memory). A row is cut into
  CHUNKS chunks of CHUNK floats, each held in one program's registers; each program publishes
  its chunk's (max, sum of exp) packed in one int64 (a relaxed atomic exchange: the value is
  its own "written" flag, so no fence waits for earlier stores to drain), waits until all of its
  row's are there, then scales what it holds and writes it. Waiting is safe only if every
  program of a row is on the GPU at once: the grid is persistent, PER_SM programs per SM (by
  default as many as the driver's occupancy of the compiled kernel allows; maxnreg caps the
  registers to fit more) and a multiple of CHUNKS, so a row's chunks are always taken in the
  same round. A chunk that holds the whole row waits for no one: a program per row.

`looped`, `split` and `resident` cut each row at 16-byte boundaries (a head and a tail of at
most 3 floats each, loaded one by one; a body whose offsets tl.multiple_of declares multiples of
4): rows of odd length start anywhere mod 16 bytes, and without the cut Triton, unable to prove
alignment, loads and stores them a float at a time (ld.global.b32 instead of .v4).

The configuration (kernel, block sizes, warps) is chosen by measuring the candidates of the
shape's bucket once (`tune`), and kept on disk in the project's own autotune cache keyed as the
CUDA autotuner's (triton_autotune.py): GPU, compute capability, Triton, CUDA runtime and driver,
the SHA-256 of this file, and the bucket (rows to the next power of two, V exactly).
MINIGPT_TRITON_TUNE=0 skips measuring and uses `default_config` (a rule of thumb).

Semantics (docs/ARCHITECTURE.md's numerics table): a row holding a NaN or +inf gives a NaN row,
an all -inf row gives a NaN row, [1e30, 0, -1e30] gives [1, 0, 0]; B == 0 launches nothing.

`python -m minigpt.triton_softmax graph-bench --shapes 64x600,512x600 --json` prints the
graph-mode times of torch.softmax, of this kernel and of minigpt's fused CUDA kernel (called on
the same torch tensors through minigpt.core.softmax_cuda_into when the C++ module is importable):
100 calls captured in one CUDA graph per kernel, the graphs replayed in turn, time per call.
`minigpt bench softmax --device cuda` merges them into its table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from minigpt import triton_autotune

MAX_ROW_BLOCK = 16384  # floats of one program's register tile in `rows` (64 KiB)
TUNED_SHAPES = ((64, 600), (512, 600), (4096, 600))
AUTOTUNE_CACHE = "minigpt triton_autotune.json (disk), keyed like the CUDA autotuner"
KERNELS = ("rows", "looped", "split", "resident")
_SOURCE_SHA256 = triton_autotune.source_sha256(Path(__file__).read_text())


@triton.jit
def _rows_kernel(x_ptr, y_ptr, B, V, stride_x, stride_y, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # rows (ROWS,), cols (BLOCK,): the program's tile is x[rows, cols], every row whole (V <= BLOCK).
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < B)[:, None] & (cols < V)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=-float("inf"))
    m = tl.max(x, axis=1)
    # all -inf: x - m = NaN -> NaN row; +inf: inf - inf = NaN; NaN propagates through the sum.
    # The padding lanes (-inf) of a finite row give exp(-inf) = 0; where() also clears them in a
    # NaN row, so the sum sees only the row's own columns.
    e = tl.where(mask, tl.exp(x - m[:, None]), 0.0)
    s = tl.sum(e, axis=1)
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], e / s[:, None], mask=mask)


@triton.jit
def _row_edges(row_start, V, ALIGN: tl.constexpr):
    """The row of V floats at element offset row_start, cut for 16-byte accesses (ALIGN = 4;
    ALIGN = 1 cuts nothing): a head of h < ALIGN floats up to the first offset that is a
    multiple of ALIGN, a body of `body` floats (a multiple of ALIGN) from there, a tail of
    < ALIGN floats. Returns (h, body, edge, edge_ok): edge (8,) the columns of the head and tail
    floats (6 at most), edge_ok where edge names one. Why: rows of V = 50257 start at every
    offset mod 4, so Triton can prove no alignment of x + row * V + col and loads and stores
    one float at a time; offsets of the body are multiples of 4 (tl.multiple_of says so) and
    its accesses are 16 bytes wide (ld.global.v4 in the PTX)."""
    tl.static_assert(ALIGN == 1 or ALIGN == 4)
    h = tl.minimum((ALIGN - row_start % ALIGN) % ALIGN, V).to(tl.int32)
    body = (V - h) // ALIGN * ALIGN
    k = tl.arange(0, 8)
    edge = tl.where(k < h, k, body + k)
    return h, body, edge, edge < V


@triton.jit
def _combine(m1, s1, m2, s2):
    """Two parts' (max, sum of exp(x - max)) merged; an all -inf part is (-inf, 0)."""
    m = tl.maximum(m1, m2)
    sh = tl.where(m == -float("inf"), 0.0, m)
    return m, s1 * tl.exp(m1 - sh) + s2 * tl.exp(m2 - sh)


@triton.jit
def _range_stats(x_ptr, start, n, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    """(max, sum of exp(x - max)) of the n floats at x_ptr + start (both multiples of ALIGN),
    by per-lane running values (online softmax). A lane that has seen only -inf shifts by 0, so
    that -inf - -inf never makes a NaN; n <= 0 or all -inf gives (-inf, 0)."""
    cols = tl.arange(0, BLOCK)
    m_vec = tl.full([BLOCK], -float("inf"), tl.float32)
    s_vec = tl.zeros([BLOCK], tl.float32)
    for off in range(0, n, BLOCK):
        mask = cols < tl.multiple_of(n - off, ALIGN)
        x = tl.load(x_ptr + tl.multiple_of(start + off, ALIGN) + cols, mask=mask, other=-float("inf"),
                    eviction_policy="evict_last")
        m_new = tl.maximum(m_vec, x)
        sh = tl.where(m_new == -float("inf"), 0.0, m_new)
        s_vec = s_vec * tl.exp(m_vec - sh) + tl.exp(x - sh)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    sh = tl.where(m == -float("inf"), 0.0, m)
    return m, tl.sum(s_vec * tl.exp(m_vec - sh), axis=0)


@triton.jit
def _write_range(x_ptr, y_ptr, x_start, y_start, n, m, s, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    """y[y_start + i] = exp(x[x_start + i] - m) / s for i < n (starts and n multiples of ALIGN).
    An all -inf row has s = 0: 0 / 0 = NaN, as torch."""
    cols = tl.arange(0, BLOCK)
    sh = tl.where(m == -float("inf"), 0.0, m)
    for off in range(0, n, BLOCK):
        mask = cols < tl.multiple_of(n - off, ALIGN)
        x = tl.load(x_ptr + tl.multiple_of(x_start + off, ALIGN) + cols, mask=mask, other=-float("inf"),
                    eviction_policy="evict_first")
        tl.store(y_ptr + tl.multiple_of(y_start + off, ALIGN) + cols, tl.exp(x - sh) / s, mask=mask,
                 eviction_policy="evict_first")


@triton.jit
def _edge_stats(x_ptr, x_start, edge, ok):
    """(max, sum of exp(x - max)) of the head and tail floats x[x_start + edge] where ok."""
    x = tl.load(x_ptr + x_start + edge, mask=ok, other=-float("inf"))
    m = tl.max(x, axis=0)
    return m, tl.sum(tl.exp(x - tl.where(m == -float("inf"), 0.0, m)), axis=0)


@triton.jit
def _edge_write(x_ptr, y_ptr, x_start, y_start, edge, ok, m, s):
    x = tl.load(x_ptr + x_start + edge, mask=ok, other=-float("inf"))
    tl.store(y_ptr + y_start + edge, tl.exp(x - tl.where(m == -float("inf"), 0.0, m)) / s, mask=ok)


@triton.jit
def _looped_kernel(x_ptr, y_ptr, B, V, stride_x, stride_y, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    # Rows pid, pid + programs, ...: with a grid of B programs, one row each; with a smaller
    # (persistent) grid, few enough rows are in flight that each row's second read still finds
    # it in L2 (132 rows of 200 KB fit the H200's 50 MB; 1024 rows in flight would not).
    # (The row index is int64 from the start, so row * stride cannot overflow 32 bits.)
    for row in range(tl.program_id(0).to(tl.int64), B, tl.num_programs(0)):
        xs = row * stride_x
        ys = row * stride_y
        h, body, edge, ok = _row_edges(xs, V, ALIGN)
        m, s = _range_stats(x_ptr, xs + h, body, BLOCK, ALIGN)
        me, se = _edge_stats(x_ptr, xs, edge, ok)
        m, s = _combine(m, s, me, se)
        _write_range(x_ptr, y_ptr, xs + h, ys + h, body, m, s, BLOCK, ALIGN)
        _edge_write(x_ptr, y_ptr, xs, ys, edge, ok, m, s)


@triton.jit
def _split_stats_kernel(x_ptr, m_ptr, s_ptr, V, stride_x, CHUNKS, CHUNK: tl.constexpr,
                        BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    # program (row, chunk): m_ptr/s_ptr (B, CHUNKS) get the chunk's max and sum of exp. Chunk c
    # is the body's floats [c * CHUNK, (c + 1) * CHUNK); chunk 0 also has the head and tail.
    tl.static_assert(CHUNK % ALIGN == 0)
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    xs = row * stride_x
    h, body, edge, ok = _row_edges(xs, V, ALIGN)
    begin = chunk * CHUNK
    m, s = _range_stats(x_ptr, xs + h + begin, tl.minimum(body - begin, CHUNK), BLOCK, ALIGN)
    me, se = _edge_stats(x_ptr, xs, edge, edge < tl.where(chunk == 0, V, 0))  # chunk 0's
    m, s = _combine(m, s, me, se)
    tl.store(m_ptr + row * CHUNKS + chunk, m)
    tl.store(s_ptr + row * CHUNKS + chunk, s)


@triton.jit
def _split_write_kernel(x_ptr, y_ptr, m_ptr, s_ptr, V, stride_x, stride_y, CHUNKS,
                        CHUNK: tl.constexpr, BLOCK: tl.constexpr, CHUNKS_P2: tl.constexpr,
                        ALIGN: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    # The row's partials combined: M = max m_c, S = sum s_c exp(m_c - M) (every program of the
    # row does this same small sum, in the same order, so all agree on (M, S)).
    p = tl.arange(0, CHUNKS_P2)
    pm = p < CHUNKS
    m_c = tl.load(m_ptr + row * CHUNKS + p, mask=pm, other=-float("inf"))
    s_c = tl.load(s_ptr + row * CHUNKS + p, mask=pm, other=0.0)
    m = tl.max(m_c, axis=0)
    sh = tl.where(m == -float("inf"), 0.0, m)
    s = tl.sum(tl.where(pm, s_c * tl.exp(m_c - sh), 0.0), axis=0)
    xs = row * stride_x
    ys = row * stride_y
    h, body, edge, ok = _row_edges(xs, V, ALIGN)
    begin = chunk * CHUNK
    _write_range(x_ptr, y_ptr, xs + h + begin, ys + h + begin, tl.minimum(body - begin, CHUNK), m, s, BLOCK, ALIGN)
    _edge_write(x_ptr, y_ptr, xs, ys, edge, edge < tl.where(chunk == 0, V, 0), m, s)


@triton.jit
def _pack(m, s):
    """A chunk's (max, sum of exp) as one int64: the max's fp32 bits high, the sum's low. Never 0:
    0 would be max +0.0 with sum 0, but a chunk whose max is finite holds exp(0) = 1 in its sum,
    and an empty or all -inf chunk has max -inf (bits 0xff800000)."""
    return (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | s.to(tl.uint32, bitcast=True).to(tl.int64)


@triton.jit
def _unpack(p):
    return (p >> 32).to(tl.int32).to(tl.float32, bitcast=True), p.to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _resident_kernel(x_ptr, y_ptr, part_ptr, B, V, stride_x, stride_y, CHUNKS,
                     CHUNK: tl.constexpr, CHUNKS_P2: tl.constexpr, ALIGN: tl.constexpr):
    # Task t = (row t // CHUNKS, chunk t % CHUNKS); program p takes t = p, p + P, ... (P, the
    # grid, is a multiple of CHUNKS: the programs of one round hold whole rows). Chunk c holds
    # the body's floats [c * CHUNK, (c + 1) * CHUNK) in registers, chunk 0 also the head and
    # tail. part_ptr (B, CHUNKS) int64, zeroed: each chunk's packed (max, sum of exp(x - max)).
    tl.static_assert(CHUNK % ALIGN == 0)
    cols = tl.arange(0, CHUNK)
    for t in range(tl.program_id(0), B * CHUNKS, tl.num_programs(0)):
        row = (t // CHUNKS).to(tl.int64)
        chunk = t % CHUNKS
        xs = row * stride_x
        ys = row * stride_y
        h, body, edge, ok = _row_edges(xs, V, ALIGN)
        ok = edge < tl.where(chunk == 0, V, 0)  # the head and tail are chunk 0's
        begin = chunk * CHUNK
        mask = cols < tl.multiple_of(body - begin, ALIGN)
        x = tl.load(x_ptr + tl.multiple_of(xs + h + begin, ALIGN) + cols, mask=mask, other=-float("inf"),
                    eviction_policy="evict_first")
        xe = tl.load(x_ptr + xs + edge, mask=ok, other=-float("inf"))
        m = tl.maximum(tl.max(x, axis=0), tl.max(xe, axis=0))
        sh = tl.where(m == -float("inf"), 0.0, m)  # an all -inf chunk: (-inf, 0), no -inf - -inf
        e = tl.exp(x - sh)  # NaN where x is NaN, and everywhere once x holds +inf (inf - inf)
        ee = tl.exp(xe - sh)
        s = tl.sum(e, axis=0) + tl.sum(ee, axis=0)
        if CHUNKS_P2 == 1:
            scale = 1.0 / s  # the chunk is the row: no one to wait for (all -inf: 0 * inf = NaN)
        else:
            # The row's barrier: each chunk's packed (max, sum) is its own flag (never 0), so one
            # relaxed 64-bit exchange publishes it and the waiters need no fence; a release
            # would first wait for this program's stores of the previous row to drain.
            part = part_ptr + row * CHUNKS
            tl.atomic_xchg(part + chunk, _pack(m, s), sem="relaxed")
            p = tl.arange(0, CHUNKS_P2)
            pm = p < CHUNKS
            got = tl.load(part + p, mask=pm, other=1, volatile=True)
            while tl.min(tl.where(got == 0, 0, 1), axis=0) == 0:
                got = tl.load(part + p, mask=pm, other=1, volatile=True)
            m_c, s_c = _unpack(got)
            # (M, S) of the row from its chunks, in chunk order in every program (all agree).
            m_c = tl.where(pm, m_c, -float("inf"))
            big_m = tl.max(m_c, axis=0)
            big_sh = tl.where(big_m == -float("inf"), 0.0, big_m)
            big_s = tl.sum(tl.where(m_c == -float("inf"), 0.0, s_c * tl.exp(m_c - big_sh)), axis=0)
            # This chunk's exp(x - sh) rescaled to the row's max; an all -inf chunk contributes 0
            # (and an all -inf row is 0 / 0 = NaN, as torch.softmax).
            scale = tl.where(m == -float("inf"), 0.0, tl.exp(m - big_sh)) / big_s
        tl.store(y_ptr + tl.multiple_of(ys + h + begin, ALIGN) + cols, e * scale, mask=mask,
                 eviction_policy="evict_first")
        tl.store(y_ptr + ys + edge, ee * scale, mask=ok)


def _resident_programs(b: int, chunks: int, sms: int, per_sm: int = 1, fit: int = 1) -> int:
    """The persistent grid of `resident`: a multiple of chunks, per_sm programs per SM, at most
    the tasks there are. All of them must be on the GPU at once, else a row's programs could
    wait for one that never starts: per_sm must not exceed `fit`, the programs of the compiled
    kernel that one SM holds at once (the driver's occupancy of its registers, threads and
    shared memory; _programs_per_sm). A whole row per program (chunks == 1) waits for no one:
    a program per row."""
    if chunks == 1:
        return b
    if per_sm > fit:
        raise ValueError(f"resident kernel: {per_sm} programs per SM asked, but only {fit} of the compiled "
                         "kernel fit on an SM at once (registers, threads, shared memory)")
    slots = sms * per_sm
    if chunks > slots:
        raise ValueError(f"resident kernel: {chunks} chunks per row exceed the {slots} programs that "
                         "fit on the GPU at once (a row's programs must all be resident together)")
    return min(b, slots // chunks) * chunks


def _programs_per_sm(kernel) -> int:
    """Programs of a compiled Triton kernel that fit on one SM at once: the driver's occupancy
    (cuOccupancyMaxActiveBlocksPerMultiprocessor) for its registers, threads and shared memory."""
    import ctypes

    kernel._init_handles()
    cuda = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_int(0)
    threads, smem = 32 * kernel.metadata.num_warps, kernel.metadata.shared  # smem: dynamic, as launched
    rc = cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), ctypes.c_void_p(kernel.function),
                                                          ctypes.c_int(threads), ctypes.c_size_t(smem))
    if rc != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor failed (CUresult {rc})")
    return n.value


_fit_memo: dict[tuple, int] = {}  # (argument specialization, meta) -> _programs_per_sm


def _specialization(a) -> tuple:
    """What Triton compiles a separate kernel for: a pointer's 16-byte alignment, an integer's
    being 1, a multiple of 16, or beyond int32."""
    if isinstance(a, torch.Tensor):
        return ("ptr", a.data_ptr() % 16 == 0)
    return ("int", a == 1, a % 16 == 0, a >= 2**31)


def _resident_fit(args: tuple, meta: dict) -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return 1  # the interpreter runs programs one after another (and has no occupancy)
    key = (tuple(_specialization(a) for a in args), tuple(sorted(meta.items())))
    if key not in _fit_memo:
        _fit_memo[key] = _programs_per_sm(_resident_kernel.warmup(*args, grid=(1,), **meta))
    return _fit_memo[key]


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _sm_count() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return 4  # the interpreter runs programs one after another: a small persistent grid
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _options(cfg: dict) -> dict:
    """Compile options of cfg: num_warps, and maxnreg (registers a thread may use, so that more
    programs fit on an SM) where given; the interpreter takes neither."""
    opts = {"num_warps": cfg["num_warps"]}
    if "maxnreg" in cfg and os.environ.get("TRITON_INTERPRET") != "1":
        opts["maxnreg"] = cfg["maxnreg"]
    return opts


def launch(x: torch.Tensor, y: torch.Tensor, cfg: dict) -> None:
    """y = softmax(x) rows with configuration cfg (x, y (B, V) fp32 CUDA, unit column stride)."""
    b, v = x.shape
    kind = cfg["kernel"]
    # The looped, split and resident kernels cut each row at 16-byte boundaries of x (see
    # _row_edges); y's rows must then be cut at the same columns: strides equal mod 4.
    align = 4 if (x.stride(0) - y.stride(0)) % 4 == 0 else 1
    if kind == "rows":
        if _next_pow2(v) > cfg["BLOCK"]:
            raise ValueError(f"rows kernel: BLOCK {cfg['BLOCK']} < V {v}")
        grid = (triton.cdiv(b, cfg["ROWS"]),)
        _rows_kernel[grid](x, y, b, v, x.stride(0), y.stride(0), ROWS=cfg["ROWS"], BLOCK=cfg["BLOCK"],
                           **_options(cfg))
    elif kind == "looped":
        grid = (min(b, cfg.get("PROGRAMS", b)),)
        _looped_kernel[grid](x, y, b, v, x.stride(0), y.stride(0), BLOCK=cfg["BLOCK"], ALIGN=align,
                             **_options(cfg))
    elif kind == "split":
        chunk = cfg["CHUNK"]
        chunks = triton.cdiv(v, chunk)
        part = torch.empty((2, b, chunks), dtype=torch.float32, device=x.device)
        _split_stats_kernel[(b, chunks)](x, part[0], part[1], v, x.stride(0), chunks, CHUNK=chunk,
                                         BLOCK=cfg["BLOCK"], ALIGN=align, **_options(cfg))
        _split_write_kernel[(b, chunks)](x, y, part[0], part[1], v, x.stride(0), y.stride(0), chunks,
                                         CHUNK=chunk, BLOCK=cfg["BLOCK"], CHUNKS_P2=_next_pow2(chunks),
                                         ALIGN=align, **_options(cfg))
    elif kind == "resident":
        chunk = cfg["CHUNK"]
        chunks = triton.cdiv(v, chunk)
        # (B, CHUNKS) packed partials, zeroed (0 = not yet written); unused for a whole row
        part = (torch.zeros((b, chunks), dtype=torch.int64, device=x.device) if chunks > 1
                else torch.empty((1,), dtype=torch.int64, device=x.device))
        args = (x, y, part, b, v, x.stride(0), y.stride(0), chunks)
        meta = dict(CHUNK=chunk, CHUNKS_P2=_next_pow2(chunks), ALIGN=align, **_options(cfg))
        fit = _resident_fit(args, meta) if chunks > 1 else 1
        # PER_SM: programs per SM, by default as many as fit (more loads in flight while
        # others wait at their rows' barriers)
        programs = _resident_programs(b, chunks, _sm_count(), cfg.get("PER_SM", fit), fit)
        _resident_kernel[(programs,)](*args, **meta)
    else:
        raise ValueError(f"unknown Triton softmax kernel {kind!r} (expected one of {KERNELS})")


def candidates(b: int, v: int, sms: int = 132) -> list[dict]:
    """The configurations `tune` measures for (b, v)."""
    out = []
    block = _next_pow2(v)
    if block <= MAX_ROW_BLOCK:
        for rows in (1, 2, 4, 8, 16, 32, 64):
            tile = rows * block
            if tile > MAX_ROW_BLOCK or (rows > 1 and rows > _next_pow2(b)):
                continue
            for warps in (1, 2, 4, 8, 16):
                per_thread = tile // (32 * warps)
                if 4 <= per_thread <= 64 or (tile < 128 and warps == 1):
                    out.append({"kernel": "rows", "ROWS": rows, "BLOCK": block, "num_warps": warps})
    if v > 2048:
        for blk, warps in ((1024, 4), (2048, 8), (4096, 8), (4096, 16)):
            if blk < block:
                out.append({"kernel": "looped", "BLOCK": blk, "num_warps": warps})
        if b > sms:  # persistent grids: fewer rows in flight, so the second read hits L2
            for programs in (sms, 2 * sms):
                for blk, warps in ((2048, 8), (4096, 16)):
                    if blk < block:
                        out.append({"kernel": "looped", "BLOCK": blk, "num_warps": warps, "PROGRAMS": programs})
        # x read once: a row's chunks in registers, 64 floats a thread (128 registers: 4096
        # floats in 2 warps fit 8 programs to an SM, 8192 in 4 warps 4) or 32 (maxnreg 64: two
        # programs of 16 warps); as many programs per SM as fit, so that some load while others
        # wait at their rows' barriers. A chunk may hold the whole row (no barrier at all) where
        # that wastes less than half of it.
        for chunk, warps, maxnreg in ((4096, 2, None), (8192, 4, None), (8192, 8, 64), (16384, 8, 128),
                                      (16384, 16, 64), (32768, 16, None)):
            if chunk < 2 * v and triton.cdiv(v, chunk) <= sms:
                cfg = {"kernel": "resident", "CHUNK": chunk, "num_warps": warps}
                out.append(cfg if maxnreg is None else dict(cfg, maxnreg=maxnreg))
        if b < 4 * sms:  # too few rows to fill the GPU with one program each
            for chunk in (8192, 32768, 131072):
                if chunk < v:
                    for blk, warps in ((2048, 8), (4096, 8)):
                        out.append({"kernel": "split", "CHUNK": chunk, "BLOCK": blk, "num_warps": warps})
    return out


def default_config(b: int, v: int, sms: int = 132) -> dict:
    """A rule of thumb, used without tuning (MINIGPT_TRITON_TUNE=0): a tile of about 4096
    floats for short rows; for long rows `resident` with chunks of 8192 floats in 4 warps (within
    9% of the tuned pick at each long-row shape tuned on the H200, within 1% from 100 MB), or `split`
    where a row has more chunks than the GPU has SMs (more than ~1M floats)."""
    block = _next_pow2(v)
    if block <= MAX_ROW_BLOCK:
        rows = max(1, min(4096 // block, _next_pow2(b)))
        warps = max(1, min(16, rows * block // (32 * 8)))
        return {"kernel": "rows", "ROWS": rows, "BLOCK": block, "num_warps": warps}
    if triton.cdiv(v, 8192) <= sms:  # one program per SM always fits: a row's chunks are resident
        return {"kernel": "resident", "CHUNK": 8192, "num_warps": 4}
    return {"kernel": "split", "CHUNK": 32768, "BLOCK": 4096, "num_warps": 8}


def _time_us(fn, calls: int) -> float:
    """GPU time per call: `calls` calls captured in one CUDA graph, median of 3 replays. The
    graph keeps Python's launch cost (10-20 us a call) out of the figure, which would otherwise
    decide every small shape's tuning by noise."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(3):
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        z.record()
        z.synchronize()
        times.append(a.elapsed_time(z) * 1e3 / calls)
    return statistics.median(times)


def tune_shape(b: int, v: int, cache: triton_autotune.Cache | None = None) -> dict:
    """Measures every candidate for (b, v) on random rows, stores the winner in the cache
    (keyed by the bucket) and returns it."""
    cache = cache or triton_autotune.Cache()
    key = triton_autotune.make_key(torch, triton, _SOURCE_SHA256, b, v)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    x = (torch.rand(b, v, generator=gen) * 16 - 8).cuda()
    y = torch.empty_like(x)
    calls = max(3, min(100, int(2e8 // max(1, x.numel() * 8))))  # ~0.2 GB moved per replay
    results = []
    for cfg in candidates(b, v, _sm_count()):
        try:
            launch(x, y, cfg)  # compiles
            torch.cuda.synchronize()
            results.append((_time_us(lambda: launch(x, y, cfg), calls), cfg))
        except Exception as e:  # e.g. out of registers or shared memory for this tile
            results.append((float("inf"), dict(cfg, error=f"{type(e).__name__}: {e}"[:200])))
    best_us, best = min(results, key=lambda r: r[0])
    if best_us == float("inf"):
        best = default_config(b, v, _sm_count())
    cache.put(key, best, best_us, [dict(c, us=us) for us, c in results])
    cache.save()
    return best


_picked: dict[tuple[int, int], dict] = {}  # (B bucket, V) -> config, for this process


def pick_config(b: int, v: int) -> dict:
    """The configuration for (b, v): this process's memo, else the disk cache, else tuned (or
    default_config under MINIGPT_TRITON_TUNE=0)."""
    memo = (_next_pow2(b), v)
    cfg = _picked.get(memo)
    if cfg is None:
        if os.environ.get("MINIGPT_TRITON_TUNE", "1") == "0":
            cfg = default_config(b, v, _sm_count())
        else:
            cache = triton_autotune.Cache()
            entry = cache.find(triton_autotune.make_key(torch, triton, _SOURCE_SHA256, b, v))
            cfg = entry["config"] if entry else tune_shape(b, v, cache)
        _picked[memo] = cfg
    return cfg


def softmax(x: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """Row softmax of a (B, V) float32 CUDA tensor; returns a new tensor."""
    if x.ndim != 2 or x.dtype != torch.float32:
        raise ValueError(f"softmax expects a (B, V) float32 tensor, got {tuple(x.shape)} {x.dtype}")
    if not x.is_cuda:
        raise ValueError("softmax expects a CUDA tensor (the Triton kernel runs on the GPU)")
    if x.shape[1] < 1:
        raise ValueError("softmax needs V >= 1")
    x = x.contiguous()
    y = torch.empty_like(x)
    b, v = x.shape
    if b == 0:
        return y
    launch(x, y, config or pick_config(b, v))
    return y


def picked_config(b: int, v: int) -> dict | None:
    """The configuration this process uses for (b, v); None if it has not run that shape."""
    return _picked.get((_next_pow2(b), v))


def tune(shapes=TUNED_SHAPES, seed: int = 42) -> dict:
    """Runs (and so tunes, once per bucket) the kernel per shape; returns {"BxV": config}."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for b, v in shapes:
        x = (torch.rand(b, v, generator=gen) * 16 - 8).cuda()
        softmax(x)
        out[f"{b}x{v}"] = picked_config(b, v)
    torch.cuda.synchronize()
    return out


def minigpt_fused():
    """minigpt's fused CUDA kernel (its autotuned config) as fn(x) -> y on torch CUDA tensors,
    through minigpt.core.softmax_cuda_into on the current stream (no copy), so that it is timed
    in the same process and the same CUDA graphs as torch.softmax and Triton. Returns (fn, None),
    or (None, reason) when the C++ module is not importable or was built without CUDA."""
    try:
        from minigpt import core
    except ImportError as e:
        return None, f"minigpt fused skipped: the C++ module is not importable ({e})"
    if not hasattr(core, "softmax_cuda_into") or "fused_tuned" not in core.softmax_kernels("cuda"):
        return None, "minigpt fused skipped: the C++ module was built without CUDA"

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        core.softmax_cuda_into(x, y, "fused_tuned", torch.cuda.current_stream().cuda_stream)
        return y

    return fn, None


def graph_times_us(fns: dict, x: torch.Tensor, launches: int = 100, reps: int = 7) -> dict:
    """Time per call of each fn(x) with `launches` calls captured in one CUDA graph per fn;
    median of `reps` replays. The replays alternate between the fns (round-robin, each waited
    for), so that every fn meets the same GPU state: on the H200 the time per launch of one
    tiny kernel drifted by ~12% between the start and the end of one process."""
    graphs = {}
    for name, fn in fns.items():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm up (and autotune) outside the capture
            for _ in range(3):
                fn(x)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(launches):
                fn(x)
        g.replay()
        graphs[name] = g
    torch.cuda.synchronize()
    times = {name: [] for name in graphs}
    for _ in range(reps):
        for name, g in graphs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times[name].append(a.elapsed_time(b) * 1e3 / launches)
    return {name: statistics.median(t) for name, t in times.items()}


def _graph_bench(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m minigpt.triton_softmax graph-bench")
    ap.add_argument("--shapes", default="64x600,512x600,4096x600")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="(default) print JSON")
    args = ap.parse_args(argv)
    out = {"torch_version": torch.__version__, "triton_version": triton.__version__,
           "autotune_cache": AUTOTUNE_CACHE, "results": [], "notes": [], "triton_autotune": {}}
    if not torch.cuda.is_available():
        out["notes"].append("torch sees no CUDA device; no graph-mode peer timings")
        print(json.dumps(out))
        return 0
    peers = {"torch.softmax graph": lambda t: torch.softmax(t, dim=-1), "triton graph": softmax}
    fused, reason = minigpt_fused()
    if fused is not None:
        peers["minigpt fused graph"] = fused
    else:
        out["notes"].append(reason)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    for b, v in _shapes(args.shapes):
        item = f"{b}x{v}"
        x = (torch.rand(b, v, generator=gen) * 16 - 8).cuda()
        working = {}
        for name, fn in peers.items():  # a peer that fails leaves its cells empty, with the reason
            try:
                fn(x)
                working[name] = fn
            except Exception as e:
                out["notes"].append(f"{name} at ({b}, {v}) failed: {type(e).__name__}: {e}")
        for name, us in graph_times_us(working, x, args.launches).items():
            out["results"].append({"peer": name, "B": b, "V": v, "time_us": us, "runs": args.launches})
        out["triton_autotune"][item] = picked_config(b, v)
    print(json.dumps(out))
    return 0


def compile_candidates(shapes, jobs: int = 1, part: tuple[int, int] = (0, 1)) -> None:
    """Runs every candidate configuration of every (b, v) in shapes once, untimed, which compiles
    it into Triton's on-disk cache; tuning, which must time the candidates one at a time, then
    only loads them. Triton compiles one kernel at a time in a process (about a second each, and
    a long-row shape has ~20 candidates), so jobs > 1 deals the candidates to that many child
    processes (candidate k to child k mod jobs). A candidate that fails is reported and skipped,
    as tuning does."""
    shapes = list(shapes)
    if jobs > 1:
        spec = ",".join(f"{b}x{v}" for b, v in shapes)
        children = [subprocess.Popen([sys.executable, "-m", "minigpt.triton_softmax", "compile", "--shapes", spec,
                                      "--part", f"{i}/{jobs}"]) for i in range(jobs)]
        for c in children:
            c.wait()
        return
    i, n = part
    work = [(b, v, cfg) for b, v in shapes for cfg in candidates(b, v, _sm_count())][i::n]
    ok, x, y = 0, None, None
    for b, v, cfg in work:
        if x is None or tuple(x.shape) != (b, v):  # work is in shape order: one shape's tensors at a time
            x = torch.rand(b, v, device="cuda") * 16 - 8
            y = torch.empty_like(x)
        try:
            launch(x, y, cfg)
            ok += 1
        except Exception as e:  # e.g. more programs per SM asked than fit
            print(f"compile ({b}, {v}) {cfg}: {type(e).__name__}: {e}"[:300], file=sys.stderr)
    torch.cuda.synchronize()
    print(f"compile part {i}/{n}: {ok} of {len(work)} candidates ran", file=sys.stderr)


def _shapes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(t) for t in item.split("x")) for item in filter(None, text.split(","))]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "graph-bench":
        return _graph_bench(argv[1:])
    if argv and argv[0] == "tune":
        print(json.dumps({"autotune_cache": AUTOTUNE_CACHE, "picked": tune()}))
        return 0
    if argv and argv[0] == "compile":
        ap = argparse.ArgumentParser(prog="python -m minigpt.triton_softmax compile",
                                     description="compile every tuning candidate of the shapes, in parallel")
        ap.add_argument("--shapes", required=True, help="e.g. 4096x32000,2048x50257")
        ap.add_argument("--jobs", type=int, default=1, help="child processes compiling at once")
        ap.add_argument("--part", default="0/1", help=argparse.SUPPRESS)  # a child's share: i/n
        args = ap.parse_args(argv[1:])
        compile_candidates(_shapes(args.shapes), args.jobs, tuple(int(t) for t in args.part.split("/")))
        return 0
    print("usage: python -m minigpt.triton_softmax graph-bench|tune|compile [options]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
