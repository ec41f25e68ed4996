"""The mutation check behind scripts/mutation-check.sh: does the test suite catch a wrong kernel?

Each mutation is a small, realistic bug (a dropped last column, a skipped max subtraction, a
wrong tail mask, outputs below 1e-6 zeroed, an off-by-one in a GEMM's K loop) written as an
exact text replacement in one source file, on the code path of one ISA (core/isa.h). For every
mutation and every ISA this CPU runs that executes the mutated code, the script patches a copy
of the tree (build/mutation/tree, never the working tree), rebuilds only the test binary that
covers the kernel, runs it with MINIGPT_ISA set, and records whether it failed ("caught").
It prints a table and exits 1 if any mutation survives (or does not apply: the table then says
the mutation list is stale).

Not part of `make test` (a rebuild per mutation: minutes). Run: scripts/mutation-check.sh
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "build" / "mutation"
TREE = WORK / "tree"
BUILD = WORK / "build"


@dataclass
class Mutation:
    name: str
    isas: tuple[str, ...]  # the ISAs whose code path runs the mutated line
    path: str              # file, relative to the repo
    old: str               # exact text, must occur `count` times
    new: str
    target: str            # the test binary that covers the kernel
    gtest_filter: str
    count: int = 1


SOFTMAX = ("softmax_cpu_test", "SoftmaxCpu.*")
LINEAR = ("layers_test", "Linear.*")
GELU = ("layers_test", "Gelu.*")
LAYERNORM = ("layers_test", "LayerNorm.*")
XENT = ("layers_test", "CrossEntropy.*")

MUTATIONS = [
    # --- softmax, AVX-512 pipeline (softmax_avx512.cpp) ---
    Mutation("softmax: drop the last column (stage 3 tail mask n-1)", ("avx512",),
             "src/kernels/cpu/softmax_avx512.cpp",
             "const __mmask16 k = first_lanes(p.np - j);", "const __mmask16 k = first_lanes(p.np - j - 1);", *SOFTMAX),
    Mutation("softmax: wrong tail mask in the exp sum (stage 2, n-1)", ("avx512",),
             "src/kernels/cpu/softmax_avx512.cpp",
             "const __mmask16 k = first_lanes(std::min<int64_t>(p.n - j, kLanes));",
             "const __mmask16 k = first_lanes(std::min<int64_t>(p.n - j - 1, kLanes));", *SOFTMAX),
    Mutation("softmax: skip the max subtraction", ("avx512",), "src/kernels/cpu/softmax_avx512.cpp",
             "const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.x + i), vm));",
             "const __m512 e0 = exp16(_mm512_loadu_ps(p.x + i));", *SOFTMAX),
    Mutation("softmax: zero the outputs below 1e-6", ("avx512",), "src/kernels/cpu/softmax_avx512.cpp",
             "        _mm512_storeu_ps(y + i, w0);",
             "        _mm512_storeu_ps(y + i, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(w0, _mm512_set1_ps(1e-6f), _CMP_GE_OQ), w0));",
             *SOFTMAX),
    # --- softmax, AVX2 pipeline (softmax_avx2.cpp) ---
    Mutation("softmax: drop the last column (stage 3 tail mask n-1)", ("avx2",), "src/kernels/cpu/softmax_avx2.cpp",
             "const __m256i k = first_lanes(p.np - j);", "const __m256i k = first_lanes(p.np - j - 1);", *SOFTMAX),
    Mutation("softmax: wrong tail mask in the exp sum (stage 2, n-1)", ("avx2",), "src/kernels/cpu/softmax_avx2.cpp",
             "const __m256i k = first_lanes(std::min<int64_t>(p.n - j, kLanes));",
             "const __m256i k = first_lanes(std::min<int64_t>(p.n - j - 1, kLanes));", *SOFTMAX),
    Mutation("softmax: skip the max subtraction", ("avx2",), "src/kernels/cpu/softmax_avx2.cpp",
             "const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.x + i), vm));",
             "const __m256 e0 = exp8(_mm256_loadu_ps(p.x + i));", *SOFTMAX),
    Mutation("softmax: zero the outputs below 1e-6", ("avx2",), "src/kernels/cpu/softmax_avx2.cpp",
             "        _mm256_storeu_ps(y + i, w0);",
             "        _mm256_storeu_ps(y + i, _mm256_and_ps(w0, _mm256_cmp_ps(w0, _mm256_set1_ps(1e-6f), _CMP_GE_OQ)));",
             *SOFTMAX),
    # --- softmax, scalar two-pass (softmax_simd.cpp) ---
    Mutation("softmax: drop the last column", ("scalar",), "src/kernels/cpu/softmax_simd.cpp",
             "for (int64_t i = 0; i < n; ++i) y[i] = exp_scalar(x[i] - m) * scale;",
             "for (int64_t i = 0; i < n - 1; ++i) y[i] = exp_scalar(x[i] - m) * scale;", *SOFTMAX),
    Mutation("softmax: wrong chunk tail (last element not summed)", ("scalar",), "src/kernels/cpu/softmax_simd.cpp",
             "const int64_t n = std::min(kSimdChunk, cols - c0);",
             "const int64_t n = std::min(kSimdChunk, cols - c0 - 1);", *SOFTMAX),
    Mutation("softmax: skip the max subtraction", ("scalar",), "src/kernels/cpu/softmax_simd.cpp",
             "exp_scalar(x[i] - m)", "exp_scalar(x[i])", *SOFTMAX, count=2),
    Mutation("softmax: zero the outputs below 1e-6", ("scalar",), "src/kernels/cpu/softmax_simd.cpp",
             "for (int64_t i = 0; i < n; ++i) y[i] = exp_scalar(x[i] - m) * scale;",
             "for (int64_t i = 0; i < n; ++i) { const float v = exp_scalar(x[i] - m) * scale; y[i] = v < 1e-6f ? 0.0f : v; }",
             *SOFTMAX),
    # --- linear ---
    Mutation("linear: off-by-one in the GEMM's K loop", ("avx512",), "src/kernels/cpu/gemm_avx512.cpp",
             "for (int64_t k = 0; k < K; ++k) {\n    const __m512 b0",
             "for (int64_t k = 0; k < K - 1; ++k) {\n    const __m512 b0", *LINEAR),
    Mutation("linear: drop the last column (panel tail mask)", ("avx512",), "src/kernels/cpu/gemm_avx512.cpp",
             "reused by every row tile\n    const __mmask16 m0 = lanes(N - j), m1 = lanes(N - j - 16);",
             "reused by every row tile\n    const __mmask16 m0 = lanes(N - j), m1 = lanes(N - j - 17);", *LINEAR),
    Mutation("linear: off-by-one in sgemm's K", ("avx2",), "src/kernels/cpu/linear.cpp",
             "static_cast<int>(rows), static_cast<int>(out), static_cast<int>(in), 1.0f,",
             "static_cast<int>(rows), static_cast<int>(out), static_cast<int>(in) - 1, 1.0f,", *LINEAR),
    Mutation("linear: off-by-one in the K loop", ("scalar",), "src/kernels/cpu/linear.cpp",
             "for (int64_t i = 0; i < in; ++i) s += xr[i] * W[o * in + i];",
             "for (int64_t i = 0; i < in - 1; ++i) s += xr[i] * W[o * in + i];", *LINEAR),
    Mutation("linear: drop the last column", ("scalar",), "src/kernels/cpu/linear.cpp",
             "for (int64_t o = 0; o < out; ++o) {  // residual may be y: read before the store",
             "for (int64_t o = 0; o < out - 1; ++o) {  // residual may be y: read before the store", *LINEAR),
    # --- GELU, layernorm, cross-entropy ---
    Mutation("gelu: wrong tail mask (n-1)", ("avx512",), "src/kernels/cpu/gelu.cpp",
             "const __mmask16 m = avx512::lanes(i1 - i);", "const __mmask16 m = avx512::lanes(i1 - i - 1);", *GELU),
    Mutation("gelu: drop the last element", ("scalar", "avx2"), "src/kernels/cpu/gelu.cpp",
             "for (int64_t i = i0; i < i1; ++i) y[i] = gelu_scalar(x[i]);",
             "for (int64_t i = i0; i < i1 - 1; ++i) y[i] = gelu_scalar(x[i]);", *GELU),
    Mutation("layernorm: drop the last column of the mean", ("scalar", "avx2"), "src/kernels/cpu/layernorm.cpp",
             "for (int64_t c = 0; c < C; ++c) sum += xr[c];", "for (int64_t c = 0; c < C - 1; ++c) sum += xr[c];",
             *LAYERNORM),
    Mutation("cross-entropy: skip the max subtraction", ("avx512",), "src/kernels/cpu/cross_entropy.cpp",
             "avx512::exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + v), mv))",
             "avx512::exp_ps(_mm512_maskz_loadu_ps(k, x + v))", *XENT),
    Mutation("cross-entropy: drop the last column", ("scalar", "avx2"), "src/kernels/cpu/cross_entropy.cpp",
             "for (int64_t v = 0; v < V; ++v) {\n    const float ev", "for (int64_t v = 0; v < V - 1; ++v) {\n    const float ev",
             *XENT),
]


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def supported_isas() -> list[str]:
    probe = BUILD / "tests" / "isa_probe"
    # The same probe the tests' CMakeLists uses; its result is in the cache.
    cache = (BUILD / "CMakeCache.txt").read_text()
    for line in cache.splitlines():
        if line.startswith("MINIGPT_TEST_ISAS:"):
            return line.split("=", 1)[1].split(";")
    sys.exit(f"mutation-check: MINIGPT_TEST_ISAS not found in {BUILD}/CMakeCache.txt ({probe})")


def copy_tree() -> None:
    files = run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, check=True).stdout.split()
    for rel in files:
        src, dst = REPO / rel, TREE / rel
        if not src.is_file():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)


def configure() -> None:
    if (BUILD / "build.ninja").exists():
        return
    r = run(["cmake", "-S", str(TREE), "-B", str(BUILD), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             "-DMINIGPT_CUDA=OFF", "-DMINIGPT_PYTHON=OFF", "-DMINIGPT_BENCH=OFF"])
    if r.returncode:
        sys.exit(f"mutation-check: configure failed:\n{r.stdout}\n{r.stderr}")


def build(target: str) -> subprocess.CompletedProcess:
    return run(["cmake", "--build", str(BUILD), "-j", str(os.cpu_count() or 2), "--target", target])


def main() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    copy_tree()
    configure()
    targets = sorted({m.target for m in MUTATIONS})
    for t in targets:  # the unmutated tree must build and pass first
        r = build(t)
        if r.returncode:
            sys.exit(f"mutation-check: the unmutated {t} does not build:\n{r.stdout[-3000:]}")
    isas = supported_isas()
    for t in targets:
        for isa in isas:
            r = run([str(BUILD / "tests" / t)], env=dict(os.environ, MINIGPT_ISA=isa))
            if r.returncode:
                sys.exit(f"mutation-check: the unmutated {t} fails under {isa}:\n{r.stdout[-3000:]}")
    rows = []
    for m in MUTATIONS:
        path = TREE / m.path
        original = path.read_text()
        found = original.count(m.old)
        run_isas = [i for i in m.isas if i in isas]
        if found != m.count:
            rows.append((m.name, ",".join(m.isas), m.path, f"STALE (text found {found}x, expected {m.count}x)"))
            continue
        try:
            path.write_text(original.replace(m.old, m.new))
            r = build(m.target)
            if r.returncode:
                rows.append((m.name, ",".join(m.isas), m.path, "DOES NOT BUILD (fix the mutation)"))
                continue
            for isa in run_isas:
                t = run([str(BUILD / "tests" / m.target), f"--gtest_filter={m.gtest_filter}"],
                        env=dict(os.environ, MINIGPT_ISA=isa), timeout=600)
                failed = [l.split("]", 1)[1].split(" (")[0].strip() for l in t.stdout.splitlines()
                          if l.startswith("[  FAILED  ]") and " ms)" in l]
                caught = "yes" if t.returncode != 0 else "NO"
                detail = f" ({len(failed)} failed: {', '.join(failed[:2])}{'...' if len(failed) > 2 else ''})" if failed else ""
                rows.append((m.name, isa, m.path, caught + detail))
        finally:
            path.write_text(original)
            os.utime(path)  # newer than the mutated object: the next build recompiles it
    for t in targets:
        build(t)  # leave the copy's binaries unmutated
    w = [max(len(r[i]) for r in rows + [("mutation", "isa", "file", "caught")]) for i in range(4)]
    header = ("mutation", "isa", "file", "caught")
    print(f"| {' | '.join(h.ljust(w[i]) for i, h in enumerate(header))} |")
    print(f"| {' | '.join('-' * w[i] for i in range(4))} |")
    for r in rows:
        print(f"| {' | '.join(c.ljust(w[i]) for i, c in enumerate(r))} |")
    survivors = [r for r in rows if not r[3].startswith("yes")]
    print(f"\nmutation-check: {len(rows) - len(survivors)} of {len(rows)} caught on ISAs {', '.join(isas)}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
