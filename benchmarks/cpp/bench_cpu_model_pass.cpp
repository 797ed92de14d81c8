// bench_cpu_model_pass.cpp: the CPU cost of one `linear` pass over all of a model's weight
// matrices, per number of activation rows M (a decode step: M = 1; a verify pass: K + 1; a
// prefill chunk: 256).
//
// The matrices are those of the default target (Qwen2.5-Coder-1.5B, q4 engine of the default
// pair): 28 layers of qkv 2048x1536, o 1536x1536, gate_up 17920x1536 and down 1536x8960 with the
// engine's types (qkv and down q4 in half the layers and q8 in the other half, o and gate_up q4)
// plus the q8 output head 151936x1536. Every layer has its own copy of the weights (1.3 GB in
// all), so a pass streams them from DRAM as a forward does. Per matrix the pass quantizes the M
// activation rows and runs the matmul over a pool of threads in dynamic row chunks, as
// CpuBackend::linear does, on weights repacked into the ISA's layout as the CPU backend loads them
// (repack_lanes.h). Only the kernels are timed (no attention, norms or activations).
//
// Prints per M: the median ms per pass (layers, head, total), ms per activation row, GFLOP/s
// (2 x multiply-adds / time), the total relative to M = 1, and the fastest pass ("best", with its
// ratio to the fastest M = 1 pass: on a shared machine the least disturbed). The passes of the
// different M are interleaved (round r runs every M once) so that load from other processes
// spreads over all of them.
//
// Build (from the repo root; the ISA files need their flags, see cpp/kernels/cpu/CMakeLists.txt):
//   g++ -std=c++17 -O3 -Icpp -c cpp/kernels/cpu/quantize.cpp cpp/kernels/cpu/matmul_dispatch.cpp
//       cpp/kernels/cpu/repack_lanes.cpp
//   g++ -std=c++17 -O3 -Icpp -mavx2 -mfma -mf16c -c cpp/kernels/cpu/matmul_avx2.cpp
//   g++ -std=c++17 -O3 -Icpp -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mavx2
//       -mfma -mf16c -c cpp/kernels/cpu/matmul_avx512.cpp
//   g++ -std=c++17 -O3 -Icpp benchmarks/cpp/bench_cpu_model_pass.cpp *.o -lpthread \
//       -o bench_cpu_model_pass
// Run: ./bench_cpu_model_pass [--threads 2] [--ms 1-16,64,256,512] [--rounds 5] [--no-head]
//                             [--layers 28] [--isa avx2]
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

// A fixed pool: run(n, fn) calls fn(i) for i in [0, n), handed out dynamically to all threads
// (the caller included), and returns when all are done. Workers spin (yielding) between runs.
class Pool {
 public:
  explicit Pool(int n) {
    for (int t = 1; t < n; ++t) threads_.emplace_back([this] { worker(); });
  }
  ~Pool() {
    stop_.store(true);
    gen_.fetch_add(1);
    for (auto& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()) + 1; }
  void run(int64_t n, const std::function<void(int64_t)>& fn) {
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    busy_.store(static_cast<int>(threads_.size()));
    gen_.fetch_add(1);
    work();
    while (busy_.load() != 0) std::this_thread::yield();
  }

 private:
  void work() {
    for (int64_t i; (i = next_.fetch_add(1)) < n_;) (*fn_)(i);
  }
  void worker() {
    uint64_t seen = 0;
    for (;;) {
      while (gen_.load() == seen) std::this_thread::yield();
      seen = gen_.load();
      if (stop_.load()) return;
      work();
      busy_.fetch_sub(1);
    }
  }
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int> busy_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
};

struct AlignedBuf {
  std::unique_ptr<uint8_t[]> raw;
  uint8_t* p = nullptr;
  explicit AlignedBuf(size_t n) : raw(new uint8_t[n + 64]) {
    p = raw.get() + (64 - reinterpret_cast<uintptr_t>(raw.get()) % 64) % 64;
  }
};

struct Matrix {
  WeightView w;
  bool head;
};

// The model's matrices, each in its own memory.
class Model {
 public:
  Model(int layers, bool head, const MatmulKernels& kernels) {
    struct Kind {
      int64_t rows, cols;
      WeightType t;
      int count;
    };
    const int h = layers / 2;
    const std::vector<Kind> kinds = {{2048, 1536, WeightType::Q4, h},
                                     {2048, 1536, WeightType::Q8, layers - h},
                                     {1536, 1536, WeightType::Q4, layers},
                                     {17920, 1536, WeightType::Q4, layers},
                                     {1536, 8960, WeightType::Q4, h},
                                     {1536, 8960, WeightType::Q8, layers - h},
                                     {151936, 1536, WeightType::Q8, head ? 1 : 0}};
    std::mt19937 rng(0);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    for (const Kind& k : kinds) {
      if (k.count == 0) continue;
      const size_t bytes = weight_blob_bytes(k.t, k.rows, k.cols);
      bufs_.emplace_back(new AlignedBuf(bytes * k.count));
      uint8_t* p = bufs_.back()->p;
      std::vector<float> wf(static_cast<size_t>(k.rows) * k.cols);
      for (auto& v : wf) v = nd(rng);
      const AlignedBuf natural(bytes);
      uint8_t* nat = natural.p;
      quantize_weight(wf.data(), k.rows, k.cols, k.t, nat);
      const WeightView nv{k.t, k.rows, k.cols, nat};
      const bool packed = lanes_apply(nv, kernels.lanes);  // as the CPU backend loads it
      if (packed)
        repack_lanes(nv, p, kernels.lanes);
      else
        std::memcpy(p, nat, bytes);
      for (int c = 0; c < k.count; ++c) {
        if (c > 0) std::memcpy(p + c * bytes, p, bytes);
        WeightView v{k.t, k.rows, k.cols, p + c * bytes};
        if (packed) v.layout = kernels.lanes;
        mats_.push_back({v, k.rows == 151936});
        macs_per_row_[mats_.back().head] += static_cast<double>(k.rows) * k.cols;
      }
    }
  }
  const std::vector<Matrix>& matrices() const { return mats_; }
  double macs_per_row(bool head) const { return macs_per_row_[head]; }

 private:
  std::vector<std::unique_ptr<AlignedBuf>> bufs_;
  std::vector<Matrix> mats_;
  double macs_per_row_[2] = {0, 0};
};

// Buffers for passes of up to max_m rows.
struct Acts {
  std::vector<float> x, y;
  std::unique_ptr<AlignedBuf> qbuf;
  Acts(int max_m, int64_t max_cols, int64_t max_rows)
      : x(static_cast<size_t>(max_m) * max_cols), y(static_cast<size_t>(max_m) * max_rows) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = nd(rng);
    qbuf.reset(new AlignedBuf(quant_acts_bytes(max_m, static_cast<int>(max_cols))));
  }
};

// One pass of M rows; returns {seconds in the layers, seconds in the head}.
std::pair<double, double> run_pass(const MatmulKernels& k, const Model& model, Acts& a, Pool& pool,
                                   int M) {
  double sec[2] = {0, 0};
  for (const Matrix& mat : model.matrices()) {
    const WeightView& w = mat.w;
    const auto t0 = Clock::now();
    const QuantActs qa = quant_acts_view(a.qbuf->p, M, static_cast<int>(w.cols));
    pool.run((M + 15) / 16, [&](int64_t c) {
      k.quantize_acts(a.x.data(), static_cast<int>(16 * c),
                      std::min(M, static_cast<int>(16 * c + 16)), qa);
    });
    const int64_t grain = std::max<int64_t>(16, (w.rows / (8 * pool.size()) + 15) / 16 * 16);
    pool.run((w.rows + grain - 1) / grain, [&](int64_t c) {
      k.matmul_quant(w, qa, M, a.y.data(), w.rows, c * grain, std::min(w.rows, (c + 1) * grain));
    });
    sec[mat.head] += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return {sec[0], sec[1]};
}

std::vector<int> parse_ms(const std::string& s) {
  std::vector<int> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string part = s.substr(i, j - i);
    const size_t dash = part.find('-');
    if (dash == std::string::npos) {
      out.push_back(std::atoi(part.c_str()));
    } else {
      for (int m = std::atoi(part.substr(0, dash).c_str()); m <= std::atoi(part.c_str() + dash + 1);
           ++m)
        out.push_back(m);
    }
    i = j + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 5, layers = 28;
  bool head = true;
  std::string ms_arg = "1-16,64,256,512", isa;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--threads") threads = std::atoi(next().c_str());
    if (a == "--rounds") rounds = std::atoi(next().c_str());
    if (a == "--layers") layers = std::atoi(next().c_str());
    if (a == "--ms") ms_arg = next();
    if (a == "--isa") isa = next();
    if (a == "--no-head") head = false;
  }
  const std::vector<int> ms = parse_ms(ms_arg);
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const MatmulKernels& k = isa.empty() ? matmul_kernels() : *matmul_kernels_for(isa.c_str());
  std::printf("isa %s, %d threads, %d layers%s, %d rounds (median)\n", k.isa, threads, layers,
              head ? " + q8 head" : "", rounds);
  const Model model(layers, head, k);
  Acts acts(max_m, 8960, head ? 151936 : 17920);
  Pool pool(threads);
  std::vector<std::vector<double>> layer_s(ms.size()), head_s(ms.size());
  for (size_t i = 0; i < ms.size(); ++i) run_pass(k, model, acts, pool, ms[i]);  // warm up
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < ms.size(); ++i) {
      const auto [l, h] = run_pass(k, model, acts, pool, ms[i]);
      layer_s[i].push_back(l);
      head_s[i].push_back(h);
    }
  std::printf("%4s %10s %9s %10s %10s %8s %8s %9s %8s\n", "M", "layers_ms", "head_ms", "total_ms",
              "ms/row", "GFLOP/s", "x(M=1)", "best_ms", "best_x");
  double base = 0, best_base = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    std::vector<double> tot(layer_s[i].size());
    for (size_t j = 0; j < tot.size(); ++j) tot[j] = layer_s[i][j] + head_s[i][j];
    const double t = median(tot), best = *std::min_element(tot.begin(), tot.end());
    const double macs = ms[i] * (model.macs_per_row(false) + model.macs_per_row(true));
    if (ms[i] == 1) base = t, best_base = best;
    std::printf("%4d %10.1f %9.1f %10.1f %10.2f %8.1f %8.2f %9.1f %8.2f\n", ms[i],
                1e3 * median(layer_s[i]), 1e3 * median(head_s[i]), 1e3 * t, 1e3 * t / ms[i],
                2 * macs / t / 1e9, base > 0 ? t / base : 0.0, 1e3 * best,
                best_base > 0 ? best / best_base : 0.0);
  }
  return 0;
}
