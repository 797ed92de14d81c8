// bench_cpu_attention.cpp: the CPU attention kernel on a prompt chunk at the default target's
// shape (12 query heads, 2 kv heads, head_dim 128), f32, bf16 and int16 prompt rows.
//
// For each context (entries already in the cache before the chunk), row precision (f32; bf16
// where attention_bf16_supported; int16) and thread count, prints the time of one call over a chunk
// of --rows rows (a layer's attention in a prefill chunk), twice in the same rounds: with the
// smallest row blocks (AttentionArgs::workers = 0) and with the blocks sized for the threads
// (workers = threads, what the CPU backend passes), on the backend's ThreadPool; rounds alternate
// the two, and the figure is the median (the host may be shared). The two give the same bits;
// the run checks it.
//
// Build (from the repo root; the ISA files need their flags, see cpp/kernels/cpu/CMakeLists.txt):
//   g++ -std=c++17 -O3 -Icpp -c cpp/kernels/cpu/quantize.cpp cpp/kernels/cpu/matmul_dispatch.cpp
//       cpp/kernels/cpu/repack_lanes.cpp cpp/backend/cpu/thread_pool.cpp
//   g++ -std=c++17 -O3 -Icpp -mavx2 -mfma -mf16c -c cpp/kernels/cpu/matmul_avx2.cpp
//       cpp/kernels/cpu/attention.cpp
//   g++ -std=c++17 -O3 -Icpp -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mavx2
//       -mfma -mf16c -c cpp/kernels/cpu/matmul_avx512.cpp cpp/kernels/cpu/attention_avx512.cpp
//   g++ -std=c++17 -O3 -Icpp benchmarks/cpp/bench_cpu_attention.cpp *.o -lpthread
//       -o bench_cpu_attention
// Run: ./bench_cpu_attention [--rows N] [--ctx LIST] [--rounds R]   (defaults 256, 0,1024,3840, 7)
// TRT_SPEC_CPU_ISA=avx2 runs the AVX2 build (f32 and int16 rows).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"

using namespace trt_spec;
using namespace trt_spec::cpu;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kHeads = 12, kKvHeads = 2, kHeadDim = 128;

struct Case {
  std::vector<float> q, k, v, out;
  std::vector<const void*> kp, vp;
  std::vector<int32_t> len;
  AttentionArgs a;
};

// rows prompt rows of one sequence at positions ctx .. ctx + rows - 1 (causal), f32 cache.
// prompt: none (f32 rows), or the prompt rows' precision.
void make_case(Case& c, int rows, int ctx, std::optional<PromptMath> prompt) {
  const int max_seq = ctx + rows;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  c.q.resize(size_t(rows) * kHeads * kHeadDim);
  c.k.resize(size_t(kKvHeads) * max_seq * kHeadDim);
  c.v.resize(c.k.size());
  for (auto* x : {&c.q, &c.k, &c.v})
    for (float& f : *x) f = nd(rng);
  c.out.assign(c.q.size(), 0.0f);
  c.kp.assign(rows, c.k.data());
  c.vp.assign(rows, c.v.data());
  c.len.resize(rows);
  for (int i = 0; i < rows; ++i) c.len[i] = ctx + i + 1;
  AttentionArgs& a = c.a;
  a.n_rows = rows;
  a.n_heads = kHeads;
  a.n_kv_heads = kKvHeads;
  a.head_dim = kHeadDim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  a.q = c.q.data();
  a.q_stride = kHeads * kHeadDim;
  a.kv_type = KvType::F32;
  a.k = c.kp.data();
  a.v = c.vp.data();
  a.kv_head_stride = int64_t{max_seq} * kHeadDim;
  a.max_seq = max_seq;
  a.len = c.len.data();
  a.prompt_from = prompt ? 0 : INT_MAX;
  if (prompt) a.prompt_math = *prompt;
  a.out = c.out.data();
  a.out_stride = a.q_stride;
}

// One call, its tasks spread over the pool as the CPU backend does (parallel_for, grain 1).
double run(ThreadPool& pool, AttentionArgs a, int workers) {
  a.workers = workers;
  const auto t0 = Clock::now();
  pool.parallel_for(attention_tasks(a), 1, [&](int64_t b, int64_t e) { attention_run(a, b, e); });
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 256, rounds = 7;
  std::vector<int> ctxs = {0, 1024, 3840};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) rows = std::atoi(argv[++i]);
    if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    if (a == "--ctx" && i + 1 < argc) {
      ctxs.clear();
      for (char* s = std::strtok(argv[++i], ","); s != nullptr; s = std::strtok(nullptr, ","))
        ctxs.push_back(std::atoi(s));
    }
  }
  if (rows < 1 || ctxs.empty()) {
    std::fprintf(stderr, "--rows >= 1, --ctx a comma-separated list\n");
    return 2;
  }
  const bool bf16_ok = attention_bf16_supported();
  std::printf(
      "attention build: %s; %d rows, %d query / %d kv heads, head_dim %d, f32 cache; "
      "medians of %d alternating rounds\n",
      matmul_kernels().isa, rows, kHeads, kKvHeads, kHeadDim, rounds);
  std::printf("%-5s %6s %3s %8s %14s %14s %8s\n", "rows", "ctx", "th", "tasks", "workers=0 ms",
              "workers=th ms", "ratio");
  const std::optional<PromptMath> modes[] = {std::nullopt, PromptMath::Bf16, PromptMath::Int16};
  for (const std::optional<PromptMath> mode : modes) {
    if (mode == PromptMath::Bf16 && !bf16_ok) continue;
    for (const int ctx : ctxs) {
      Case c;
      make_case(c, rows, ctx, mode);
      for (const int threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<double> base, sized;
        run(pool, c.a, threads);  // warm-up (scratch, caches)
        std::vector<float> ref;
        for (int r = 0; r < rounds; ++r) {
          const bool sized_first = r % 2 == 1;
          for (int k = 0; k < 2; ++k) {
            const bool s = (k == 0) == sized_first;
            (s ? sized : base).push_back(run(pool, c.a, s ? threads : 0));
            if (ref.empty()) {
              ref = c.out;
            } else if (std::memcmp(ref.data(), c.out.data(), ref.size() * sizeof(float)) != 0) {
              std::fprintf(stderr, "outputs differ between blockings\n");
              return 1;
            }
          }
        }
        AttentionArgs a0 = c.a, a1 = c.a;
        a0.workers = 0;
        a1.workers = threads;
        const double mb = median(base) * 1e3, ms = median(sized) * 1e3;
        const std::string tasks =
            std::to_string(attention_tasks(a0)) + "/" + std::to_string(attention_tasks(a1));
        std::printf("%-5s %6d %3d %8s %14.2f %14.2f %8.3f\n",
                    mode ? prompt_math_name(*mode) : "f32", ctx, threads, tasks.c_str(), mb, ms,
                    ms / mb);
      }
    }
  }
  return 0;
}
