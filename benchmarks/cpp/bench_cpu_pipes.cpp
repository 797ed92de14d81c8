// bench_cpu_pipes.cpp: how many of the quantized matmul tile's instructions this CPU core issues
// per cycle, alone and mixed: the ceiling a Q8 / Q4 tile (cpp/kernels/cpu/matmul_quant_impl.h)
// can reach on this host, measured rather than read from a table.
//
// Each line times an inline-asm block (registers only, or L1-resident loads) repeated many times,
// and prints cycles per block. Cycles come from a calibration loop of dependent scalar adds
// (one per cycle on every x86 core we run on), so they follow the clock the core actually runs
// at. Blocks use independent destination registers: they measure throughput, not latency.
//
// The last lines time the AVX2 Q4 tile's work for one activation row and one group of 32 columns
// of a block of 8 weight rows (256 products): 8 activation-word broadcasts, 8 vpmaddubsw and 8
// vpaddw (the integer dot), then the float update (vpmaddwd, vcvtdq2ps, two vbroadcastss, vmulps
// and two FMAs). A tile cannot beat that block's cycles x 2 per 512 products. AVX-512 VNNI lines
// run where the CPU has it (vpdpbusd alone and with the float update's FMAs).
//
// Build: g++ -std=c++17 -O2 benchmarks/cpp/bench_cpu_pipes.cpp -o bench_cpu_pipes
// Run:   ./bench_cpu_pipes   (pin it with taskset -c N on a shared machine; take the lower of two
// runs)
#include <chrono>
#include <cstdio>

namespace {

alignas(64) int g_mem[1024];  // L1-resident operands of the load forms

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Cycles per second of this core, from a chain of dependent adds (1 per cycle).
double clock_hz() {
  const long n = 100000000;
  long x = 0;
  const double t = now_s();
  for (long i = 0; i < n; ++i)
    asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  return 4.0 * n / (now_s() - t);
}

constexpr long kIters = 20000000;

#define CLOBBERS                                                                           \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory"

// Prints the fewest cycles per block over 5 tries.
#define TIME(name, body)                                                           \
  do {                                                                             \
    double best = 1e30;                                                            \
    for (int r = 0; r < 5; ++r) {                                                  \
      const double t = now_s();                                                    \
      for (long i = 0; i < kIters; ++i) asm volatile(body::"r"(g_mem) : CLOBBERS); \
      const double c = (now_s() - t) * hz / kIters;                                \
      best = c < best ? c : best;                                                  \
    }                                                                              \
    std::printf("  %-58s %7.2f\n", name, best);                                    \
  } while (0)

// 8 independent destinations (ymm0..7) from sources ymm14 / ymm15.
#define X8(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7)
// 8 destinations among ymm8..13 (second instruction kind of a mix).
#define Y8(op) op(8) op(9) op(10) op(11) op(12) op(13) op(8) op(9)
#define MADDUBS(i) "vpmaddubsw %%ymm15, %%ymm14, %%ymm" #i "\n\t"
#define PADDW(i) "vpaddw %%ymm15, %%ymm14, %%ymm" #i "\n\t"
#define MADDWD(i) "vpmaddwd %%ymm15, %%ymm14, %%ymm" #i "\n\t"
#define FMA(i) "vfmadd231ps %%ymm15, %%ymm14, %%ymm" #i "\n\t"
#define MULPS(i) "vmulps %%ymm15, %%ymm14, %%ymm" #i "\n\t"
#define CVT(i) "vcvtdq2ps %%ymm14, %%ymm" #i "\n\t"
#define BCAST(i) "vpbroadcastd " #i "*4(%0), %%ymm" #i "\n\t"

// The AVX2 Q4 tile's work for one (activation row, group): weights in ymm8..11, activation words
// broadcast into ymm12, int16 sum in ymm A, float accumulator ymm F, ones in ymm15.
// clang-format off
#define W(k) "vpbroadcastd " #k "*4(%0), %%ymm12\n\t"
#define DOT0(w, A) "vpmaddubsw %%ymm12, %%ymm" #w ", %%ymm" #A "\n\t"
#define DOT(w, A) \
  "vpmaddubsw %%ymm12, %%ymm" #w ", %%ymm13\n\tvpaddw %%ymm13, %%ymm" #A ", %%ymm" #A "\n\t"
#define Q4_DOT(A) \
  W(0) DOT0(8, A) W(1) DOT(9, A) W(2) DOT(10, A) W(3) DOT(11, A) \
  W(4) DOT(8, A) W(5) DOT(9, A) W(6) DOT(10, A) W(7) DOT(11, A)
#define Q4_FLOAT(A, F) \
  "vpmaddwd %%ymm15, %%ymm" #A ", %%ymm13\n\tvcvtdq2ps %%ymm13, %%ymm13\n\t" \
  "vbroadcastss 64(%0), %%ymm12\n\tvmulps %%ymm15, %%ymm12, %%ymm12\n\t" \
  "vfmadd231ps %%ymm13, %%ymm12, %%ymm" #F "\n\tvbroadcastss 68(%0), %%ymm12\n\t" \
  "vfmadd231ps %%ymm15, %%ymm12, %%ymm" #F "\n\t"
// clang-format on

#define VNNI(i) "vpdpbusd %%zmm15, %%zmm14, %%zmm" #i "\n\t"
#define FMA512(i) "vfmadd231ps %%zmm15, %%zmm14, %%zmm" #i "\n\t"

void avx2(double hz) {
  std::printf("AVX2, cycles per block\n");
  TIME("16 vpmaddubsw", X8(MADDUBS) X8(MADDUBS));
  TIME("16 vpaddw", X8(PADDW) X8(PADDW));
  TIME("16 vpmaddwd", X8(MADDWD) X8(MADDWD));
  TIME("16 vfmadd231ps", X8(FMA) X8(FMA));
  TIME("16 vmulps", X8(MULPS) X8(MULPS));
  TIME("16 vcvtdq2ps", X8(CVT) X8(CVT));
  TIME("16 vpbroadcastd from memory", X8(BCAST) X8(BCAST));
  TIME("16 vpmaddubsw + 8 vpaddw", X8(MADDUBS) X8(MADDUBS) Y8(PADDW));
  TIME("16 vpmaddubsw + 8 vpmaddwd", X8(MADDUBS) X8(MADDUBS) Y8(MADDWD));
  TIME("16 vpmaddubsw + 8 vfmadd231ps", X8(MADDUBS) X8(MADDUBS) Y8(FMA));
  TIME("16 vpmaddubsw + 8 vcvtdq2ps", X8(MADDUBS) X8(MADDUBS) Y8(CVT));
  TIME("Q4 tile, integer dot, 4 x (act row, group)", Q4_DOT(0) Q4_DOT(1) Q4_DOT(2) Q4_DOT(3));
  TIME("Q4 tile, dot + float update, 4 x (act row, group)",
       Q4_DOT(0) Q4_FLOAT(0, 4) Q4_DOT(1) Q4_FLOAT(1, 5) Q4_DOT(2) Q4_FLOAT(2, 6) Q4_DOT(3)
           Q4_FLOAT(3, 7));
  std::printf("  (the Q4 tile mix in cycles per 512 products: the last line / 2)\n");
}

__attribute__((target("avx512f,avx512vnni"))) void avx512(double hz) {
  std::printf("AVX-512 VNNI, cycles per block\n");
  TIME("16 vpdpbusd zmm", X8(VNNI) X8(VNNI));
  TIME("16 vfmadd231ps zmm", X8(FMA512) X8(FMA512));
  TIME("16 vpdpbusd + 8 vfmadd231ps zmm", X8(VNNI) X8(VNNI) Y8(FMA512));
}

}  // namespace

int main() {
  const double hz = clock_hz();
  std::printf("core clock %.2f GHz (dependent-add calibration)\n", hz / 1e9);
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::printf("no AVX2 + FMA: nothing to time\n");
    return 0;
  }
  avx2(hz);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni")) avx512(hz);
  return 0;
}
