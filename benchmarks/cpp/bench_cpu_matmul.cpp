// bench_cpu_matmul.cpp: CPU matmul throughput at the default pair's shapes (target and draft).
//
// For every ISA this CPU runs, weight type, shape (rows x cols of the real matrices), M (activation
// rows: 1 and 5 unless --m lists others, e.g. --m 1,5,9,64) and 1 / 2 threads (rows split over a
// persistent std::thread pool), prints the time per matmul and the effective GB/s (weight bytes /
// time) next to the streaming-read and memcpy GB/s measured in the same run. Weights rotate over
// enough copies (>= 256 MiB) to miss the caches, as in a real forward pass (--hot: one copy, to see
// the kernels' in-cache speed); activations are quantized outside the timed loop (Q8/Q4), and Q8/Q4
// weights are repacked to each ISA's row-block layout as the CPU backend does at load
// (repack_lanes.h).
// GB/s is from the median time, "best" from the fastest run (the machine may be shared), "%read"
// compares the median with the streaming read.
//
// Build (from the repo root; the ISA files need their flags, see cpp/kernels/cpu/CMakeLists.txt):
//   g++ -std=c++17 -O3 -Icpp -c cpp/kernels/cpu/quantize.cpp cpp/kernels/cpu/matmul_dispatch.cpp
//   g++ -std=c++17 -O3 -Icpp -mavx2 -mfma -mf16c -c cpp/kernels/cpu/matmul_avx2.cpp
//   g++ -std=c++17 -O3 -Icpp -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mavx2
//       -mfma -mf16c -c cpp/kernels/cpu/matmul_avx512.cpp
//   g++ -std=c++17 -O3 -Icpp benchmarks/cpp/bench_cpu_matmul.cpp *.o -lpthread -o bench_cpu_matmul
// Run: ./bench_cpu_matmul [--quick] [--hot] [--m LIST] [type ...]   (types: f32 f16 bf16 q8 q4;
// default all)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/repack_lanes.h"

using namespace trt_spec;
using namespace trt_spec::cpu;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct AlignedBuf {
  std::unique_ptr<uint8_t[]> raw;
  uint8_t* p = nullptr;
  explicit AlignedBuf(size_t n) : raw(new uint8_t[n + 64]) {
    p = raw.get() + (64 - reinterpret_cast<uintptr_t>(raw.get()) % 64) % 64;
  }
};

// Runs fn(thread_index) on n threads, `iters` times, all threads released together per
// iteration; returns the median seconds per iteration (and the fastest in *best).
double time_parallel(int n, int iters, const std::function<void(int, int)>& fn,
                     double* best = nullptr) {
  std::atomic<int> arrived{0}, generation{0};
  std::vector<double> times;
  auto barrier = [&](int gen) {
    if (arrived.fetch_add(1) + 1 == n) {
      arrived.store(0);
      generation.store(gen + 1);
    } else {
      while (generation.load() == gen) std::this_thread::yield();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < iters; ++i) {
        barrier(2 * i);
        fn(t, i);
        barrier(2 * i + 1);
      }
    });
  for (int i = 0; i < iters; ++i) {
    barrier(2 * i);
    const auto t0 = Clock::now();
    fn(0, i);
    barrier(2 * i + 1);
    times.push_back(seconds_since(t0));
  }
  for (auto& th : pool) th.join();
  std::sort(times.begin(), times.end());
  if (best != nullptr) *best = times[0];
  return times[times.size() / 2];
}

// Streaming read (sum of 64-bit words) and memcpy bandwidth over 512 MiB, per thread count.
void measure_memory(double* read_gbs, double* copy_gbs) {
  const size_t n = size_t{512} << 20;
  AlignedBuf a(n), b(n);
  std::memset(a.p, 1, n);
  std::memset(b.p, 2, n);
  for (int threads = 1; threads <= 2; ++threads) {
    std::vector<uint64_t> sink(threads * 8);
    const double tr = time_parallel(threads, 5, [&](int t, int) {
      const auto* p = reinterpret_cast<const uint64_t*>(a.p + n / threads * t);
      uint64_t s[8] = {};
      for (size_t i = 0; i < n / threads / 8; i += 8) {
        __builtin_prefetch(p + i + 256);  // 2 KiB ahead, as the kernels do
        for (int k = 0; k < 8; ++k) s[k] += p[i + k];
      }
      for (int k = 0; k < 8; ++k) sink[t * 8] += s[k];
    });
    const double tc = time_parallel(threads, 5, [&](int t, int) {
      std::memcpy(b.p + n / threads * t, a.p + n / threads * t, n / threads);
    });
    read_gbs[threads - 1] = n / tr / 1e9;
    copy_gbs[threads - 1] = n / tc / 1e9;  // bytes copied (each read once and written once)
    if (sink[0] == 42) std::printf(" ");
  }
}

struct Shape {
  int64_t rows, cols;
  const char* what;
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, hot = false;
  std::vector<WeightType> types;
  std::vector<int> ms = {1, 5};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    if (a == "--hot") hot = true;
    if (a == "--m" && i + 1 < argc) {
      ms.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long m = std::strtol(p, &end, 10);
        if (end == p || m < 1 || m > 256) {
          std::fprintf(stderr, "--m: a comma-separated list of 1..256\n");
          return 2;
        }
        ms.push_back(static_cast<int>(m));
        p = *end == ',' ? end + 1 : end;
      }
    }
    for (WeightType t :
         {WeightType::F32, WeightType::F16, WeightType::BF16, WeightType::Q8, WeightType::Q4})
      if (a == weight_type_name(t)) types.push_back(t);
  }
  if (types.empty())
    types = {WeightType::F32, WeightType::F16, WeightType::BF16, WeightType::Q8, WeightType::Q4};

  double read_gbs[2], copy_gbs[2];
  measure_memory(read_gbs, copy_gbs);
  std::printf(
      "memory: streaming read %.1f GB/s (1 thread) %.1f GB/s (2 threads); "
      "memcpy %.1f / %.1f GB/s\n",
      read_gbs[0], read_gbs[1], copy_gbs[0], copy_gbs[1]);
  std::printf("%-7s %-5s %-22s %2s %2s %10s %8s %8s %7s\n", "isa", "type", "shape", "M", "th",
              "us/matmul", "GB/s", "best", "%read");

  // The target (Qwen2.5-Coder-1.5B) and the draft (0.5B: 896 columns, 28 groups of 32, so each
  // row ends in a block of 4 groups, not 8).
  const Shape shapes[] = {{1536, 1536, "q/o"},       {256, 1536, "k/v"},
                          {8960, 1536, "gate/up"},   {1536, 8960, "down"},
                          {151936, 1536, "lm_head"}, {1152, 896, "draft qkv"},
                          {896, 896, "draft o"},     {9728, 896, "draft gate_up"},
                          {896, 4864, "draft down"}, {151936, 896, "draft head"}};
  std::mt19937 rng(0);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const int max_m = *std::max_element(ms.begin(), ms.end());
  for (WeightType t : types) {
    for (const Shape& s : shapes) {
      if (quick && s.rows == 151936) continue;
      const size_t bytes = weight_blob_bytes(t, s.rows, s.cols);
      // One quantized matrix, copied so that the copies together miss the caches.
      const int copies =
          hot ? 1 : static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / bytes + 1));
      AlignedBuf w(bytes * copies);
      {
        std::vector<float> wf(s.rows * s.cols);
        for (auto& v : wf) v = nd(rng);
        quantize_weight(wf.data(), s.rows, s.cols, t, w.p);
      }
      AlignedBuf natural(bytes);  // copy 0 in the file's layout, repacked per ISA below
      std::memcpy(natural.p, w.p, bytes);
      std::vector<float> x(max_m * s.cols);
      for (auto& v : x) v = nd(rng) * 50;
      std::vector<float> y(max_m * s.rows);
      for (const std::string& isa : supported_isas()) {
        const MatmulKernels& k = *matmul_kernels_for(isa.c_str());
        const WeightView nat{t, s.rows, s.cols, natural.p};
        const bool packed = lanes_apply(nat, k.lanes);  // what the CPU backend runs
        if (packed) repack_lanes(nat, w.p, k.lanes);
        if (!packed) std::memcpy(w.p, natural.p, bytes);
        for (int c = 1; c < copies; ++c) std::memcpy(w.p + c * bytes, w.p, bytes);
        AlignedBuf qbuf(quant_acts_bytes(max_m, static_cast<int>(s.cols)));
        const QuantActs qa = quant_acts_view(qbuf.p, max_m, static_cast<int>(s.cols));
        if (weight_type_needs_groups(t)) k.quantize_acts(x.data(), 0, max_m, qa);
        for (int M : ms) {
          for (int threads : {1, 2}) {
            const double target = quick ? 0.1 : 0.25;
            auto run = [&](int th, int i) {
              WeightView v{t, s.rows, s.cols, w.p + (i % copies) * bytes};
              if (packed) v.layout = k.lanes;
              const int64_t r0 = s.rows * th / threads, r1 = s.rows * (th + 1) / threads;
              if (weight_type_needs_groups(t)) {
                k.matmul_quant(v, qa, M, y.data(), s.rows, r0, r1);
              } else {
                k.matmul_float(v, x.data(), M, y.data(), s.rows, r0, r1);
              }
            };
            const double first = time_parallel(threads, 2, run);  // warm up + estimate
            const int iters = std::max(3, std::min(2000, static_cast<int>(target / first)));
            double best = 0;
            const double sec = time_parallel(threads, iters, run, &best);
            const double gbs = bytes / sec / 1e9;
            char shape[40];
            std::snprintf(shape, sizeof(shape), "%lldx%lld %s", static_cast<long long>(s.rows),
                          static_cast<long long>(s.cols), s.what);
            std::printf("%-7s %-5s %-22s %2d %2d %10.1f %8.1f %8.1f %6.0f%%\n", isa.c_str(),
                        weight_type_name(t), shape, M, threads, sec * 1e6, gbs, bytes / best / 1e9,
                        100 * gbs / read_gbs[threads - 1]);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return 0;
}
