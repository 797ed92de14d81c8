// gpu_calibrate.cu: the constants of the GPU cost model (python/trt_spec/cost_model.py),
// measured by microbenchmarks and printed as one JSON object:
//   copy_gbps            device-to-device copy bandwidth (read + write bytes / time)
//   read_gbps            a streaming read kernel (every SM, 16-byte loads)
//   launch_us            an empty kernel's cost per node in a CUDA graph of 200 nodes
//   launch_pdl_us        the same with programmatic dependent launch between the nodes
//   launch_wave_us[b]    a graph node of b empty blocks (b = 1, SMs, 2 SMs, 4 SMs)
//   l2_load_ns           one dependent load hitting L2 (a pointer chase over 2 MiB)
//   dram_load_ns         one dependent load missing L2 (a chase over 4 Mi lines 256 bytes apart in
//                        1 GiB: 512 MiB of lines, far over L2; 4 KiB strides over 1 GiB touch 32
//                        MiB of lines, which L2 holds)
//   dram_tlb_load_ns     the same over 16 GiB, 2 MiB + 256 bytes apart: every load a new page
//   icache               one block per SM running S KB of straight-line code (kernels of 8 to 128
//                        KB) once or twice in one launch, after other code evicted the SMs'
//                        instruction caches: first_pass_us (a launch of one pass: the launch
//                        and a cold pass, its code fetched from L2) and second_pass_us (what a
//                        second pass adds: warm while S fits the SM's instruction cache) per S;
//                        icache_cold_ns_per_kb (the least-squares slope of the first over all
//                        sizes: the launch's own cost drops out) and icache_warm_ns_per_kb (of
//                        the second over 8-32 KB)
//   flag_hop_ns          one cross-SM flag hop (two blocks ping-pong on a global flag)
//   atomic_fence_ns      __threadfence + atomicAdd on one counter, dependent, one thread
// Build: nvcc -O3 -arch=sm_90 -o gpu_calibrate benchmarks/cpp/gpu_calibrate.cu
// (run_gpu_checks.sh calibrate builds and runs it). Median of 5 repeats for every figure.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

__global__ void empty_kernel() {}

__global__ void empty_pdl_kernel() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__global__ void read_kernel(const int4* __restrict__ p, size_t n, int* sink) {
  int4 acc = make_int4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const int4 v = __ldcs(p + i);
    acc.x ^= v.x;
    acc.y ^= v.y;
    acc.z ^= v.z;
    acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678) *sink = 1;
}

// A straight-line body of kSteps dependent steps x = (x ^ c_i) * d_i (two instructions, 32 bytes
// of code each), run `reps` times: the first pass fetches every instruction, a second one finds
// them cached while the body fits the SM's instruction cache.
template <int kSteps, unsigned kSalt>
__global__ void code_kernel(unsigned* out, int reps) {
  unsigned x = threadIdx.x + kSalt;
#pragma unroll 1
  for (int r = 0; r < reps; ++r) {
#pragma unroll
    for (int i = 0; i < kSteps; ++i) x = (x ^ (0x9E3779B9u * (i + kSalt))) * (2u * i + 3u);
  }
  if (x == 0x12345u) *out = x;
}

// next[at[i]] = at[(i + 1) % m]: a cycle through the m entries at[] (the rest is never read).
__global__ void chase_link_kernel(unsigned long long* next, const unsigned long long* at,
                                  size_t m) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < m) next[at[i]] = at[(i + 1) % m];
}

// One thread follows next[] `steps` times; the time per step is one dependent load.
__global__ void chase_kernel(const unsigned long long* __restrict__ next, unsigned long long j,
                             int steps, unsigned long long* out) {
  for (int s = 0; s < steps; ++s) j = __ldcg(next + j);
  *out = j;
}

// Two blocks (on two SMs) pass a token `hops` times through one global flag.
__global__ void pingpong_kernel(volatile int* flag, int hops) {
  if (threadIdx.x != 0) return;
  const int me = blockIdx.x;
  for (int h = me; h < hops; h += 2) {
    while (*flag != h) {
    }
    __threadfence();
    *flag = h + 1;
  }
}

__global__ void atomic_fence_kernel(int* counter, int steps, int* out) {
  int v = 0;
  for (int s = 0; s < steps; ++s) {
    __threadfence();
    v = atomicAdd(counter, v & 1);
  }
  *out = v;
}

// One call of f between two events, no warm-up (a cold instruction cache stays cold).
template <class F>
static double once_ms(cudaStream_t st, F f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, st));
  f();
  CK(cudaEventRecord(b, st));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms;
}

// The median of `reps` timed calls of f (once_ms) after one untimed call.
template <class F>
static double median_ms(cudaStream_t st, F f, int reps = 5) {
  f();  // warm-up
  CK(cudaStreamSynchronize(st));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(once_ms(st, f));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A graph of `nodes` launches of `blocks` x 32 empty threads (PDL edges when pdl).
static cudaGraphExec_t empty_graph(cudaStream_t st, int nodes, int blocks, bool pdl) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < nodes; ++i) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(32);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    if (pdl)
      CK(cudaLaunchKernelEx(&cfg, empty_pdl_kernel));
    else
      CK(cudaLaunchKernelEx(&cfg, empty_kernel));
  }
  CK(cudaStreamEndCapture(st, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphDestroy(g));
  return ge;
}

static double graph_node_us(cudaStream_t st, int blocks, bool pdl) {
  const int nodes = 200;
  cudaGraphExec_t ge = empty_graph(st, nodes, blocks, pdl);
  const double ms = median_ms(st, [&] { CK(cudaGraphLaunch(ge, st)); });
  CK(cudaGraphExecDestroy(ge));
  return ms * 1e3 / nodes;
}

// A random cycle over the entries of a `bytes` buffer `stride` bytes apart (8-byte entries), built
// on the device (only the m linked entries are written): the buffer and its first entry.
static unsigned long long* make_chase(size_t bytes, size_t stride, unsigned long long& first) {
  const size_t step = stride / 8, m = bytes / stride;
  std::vector<unsigned long long> order(m);
  for (size_t i = 0; i < m; ++i) order[i] = i * step;
  srand(12345);
  for (size_t i = m - 1; i > 0; --i) std::swap(order[i], order[(size_t)rand() % (i + 1)]);
  unsigned long long *next, *at;
  CK(cudaMalloc(&next, bytes));
  CK(cudaMalloc(&at, m * 8));
  CK(cudaMemcpy(at, order.data(), m * 8, cudaMemcpyHostToDevice));
  chase_link_kernel<<<(unsigned)((m + 255) / 256), 256>>>(next, at, m);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(at));
  first = order[0];
  return next;
}

static double chase_ns(cudaStream_t st, size_t bytes, size_t stride, int steps) {
  unsigned long long first = 0;
  unsigned long long* next = make_chase(bytes, stride, first);
  unsigned long long* out;
  CK(cudaMalloc(&out, 8));
  const double ms0 = median_ms(st, [&] { chase_kernel<<<1, 1, 0, st>>>(next, first, 1, out); });
  const double ms = median_ms(st, [&] { chase_kernel<<<1, 1, 0, st>>>(next, first, steps, out); });
  CK(cudaFree(next));
  CK(cudaFree(out));
  return (ms - ms0) * 1e6 / steps;
}

// The instruction-cache figures: for each body size, the median time of a launch of one pass and
// of two passes (one 32-thread block per SM), each after the eviction kernels ran other code on
// every SM: t1 (the launch and a cold pass) and t2 - t1 (a second, warm pass).
struct CodeRun {
  int kb;
  void (*launch)(cudaStream_t, int, unsigned*, int);
};
template <int kSteps, unsigned kSalt>
static void code_launch(cudaStream_t st, int sms, unsigned* out, int reps) {
  code_kernel<kSteps, kSalt><<<sms, 32, 0, st>>>(out, reps);
}

// The least-squares slope of y over x, points [0, n).
static double slope(const std::vector<double>& x, const std::vector<double>& y, size_t n) {
  double mx = 0, my = 0, sxy = 0, sxx = 0;
  for (size_t i = 0; i < n; ++i) mx += x[i] / n, my += y[i] / n;
  for (size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  return sxx > 0 ? sxy / sxx : 0.0;
}

int main() {
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const int sms = prop.multiProcessorCount;
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  // Bandwidth: 2 GiB buffers.
  const size_t big = size_t(2) << 30;
  void *src, *dst;
  CK(cudaMalloc(&src, big));
  CK(cudaMalloc(&dst, big));
  CK(cudaMemset(src, 1, big));
  int* sink;
  CK(cudaMalloc(&sink, 4));
  const double copy_ms =
      median_ms(st, [&] { CK(cudaMemcpyAsync(dst, src, big, cudaMemcpyDeviceToDevice, st)); });
  const double read_ms = median_ms(st, [&] {
    read_kernel<<<sms * 8, 512, 0, st>>>(static_cast<const int4*>(src), big / 16, sink);
  });
  CK(cudaFree(dst));
  CK(cudaFree(src));

  const double launch_us = graph_node_us(st, 1, false);
  const double launch_pdl_us = graph_node_us(st, 1, true);
  const int wave_blocks[4] = {1, sms, 2 * sms, 4 * sms};
  double wave_us[4];
  for (int i = 0; i < 4; ++i) wave_us[i] = graph_node_us(st, wave_blocks[i], true);

  const double l2_ns = chase_ns(st, size_t(2) << 20, 128, 20000);
  const double dram_ns = chase_ns(st, size_t(1) << 30, 256, 20000);
  const double tlb_ns = chase_ns(st, size_t(16) << 30, (size_t(2) << 20) + 256, 4000);

  unsigned* code_out;
  CK(cudaMalloc(&code_out, 4));
  const CodeRun runs[] = {{8, code_launch<256, 1>},
                          {16, code_launch<512, 1>},
                          {32, code_launch<1024, 1>},
                          {64, code_launch<2048, 1>},
                          {128, code_launch<4096, 1>}};
  auto evict = [&] {  // 384 KB of other code on every SM
    code_launch<4096, 2>(st, sms, code_out, 1);
    code_launch<4096, 3>(st, sms, code_out, 1);
    code_launch<4096, 4>(st, sms, code_out, 1);
  };
  std::vector<double> kbs, first_us, second_us;
  for (const CodeRun& r : runs) {
    double t[2];
    for (int reps = 1; reps <= 2; ++reps) {
      std::vector<double> v;
      for (int k = 0; k < 5; ++k) {
        evict();
        v.push_back(once_ms(st, [&] { r.launch(st, sms, code_out, reps); }));
      }
      std::sort(v.begin(), v.end());
      t[reps - 1] = v[v.size() / 2] * 1e3;
    }
    kbs.push_back(r.kb);
    first_us.push_back(t[0]);
    second_us.push_back(t[1] - t[0]);
  }

  int* flag;
  CK(cudaMalloc(&flag, 4));
  const int hops = 20000;
  const double pp_ms = median_ms(st, [&] {
    CK(cudaMemsetAsync(flag, 0, 4, st));
    pingpong_kernel<<<2, 32, 0, st>>>(flag, hops);
  });
  const double pp0_ms = median_ms(st, [&] {
    CK(cudaMemsetAsync(flag, 0, 4, st));
    pingpong_kernel<<<2, 32, 0, st>>>(flag, 2);
  });
  int *counter, *out;
  CK(cudaMalloc(&counter, 4));
  CK(cudaMalloc(&out, 4));
  CK(cudaMemset(counter, 0, 4));
  const int fsteps = 20000;
  const double af_ms =
      median_ms(st, [&] { atomic_fence_kernel<<<1, 1, 0, st>>>(counter, fsteps, out); });
  const double af0_ms =
      median_ms(st, [&] { atomic_fence_kernel<<<1, 1, 0, st>>>(counter, 1, out); });

  int clock_khz = 0, mem_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev);
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev);
  std::printf("{\n  \"device\": \"%s\",\n  \"sms\": %d,\n  \"l2_bytes\": %d,\n", prop.name, sms,
              prop.l2CacheSize);
  std::printf("  \"sm_clock_khz\": %d,\n  \"mem_clock_khz\": %d,\n", clock_khz, mem_khz);
  std::printf("  \"copy_gbps\": %.1f,\n", 2.0 * big / (copy_ms * 1e-3) / 1e9);
  std::printf("  \"read_gbps\": %.1f,\n", 1.0 * big / (read_ms * 1e-3) / 1e9);
  std::printf("  \"launch_us\": %.3f,\n  \"launch_pdl_us\": %.3f,\n", launch_us, launch_pdl_us);
  std::printf("  \"launch_wave_us\": {");
  for (int i = 0; i < 4; ++i)
    std::printf("%s\"%d\": %.3f", i ? ", " : "", wave_blocks[i], wave_us[i]);
  std::printf("},\n");
  std::printf("  \"l2_load_ns\": %.1f,\n  \"dram_load_ns\": %.1f,\n", l2_ns, dram_ns);
  std::printf("  \"dram_tlb_load_ns\": %.1f,\n", tlb_ns);
  std::printf("  \"icache\": {\"kb\": [");
  for (size_t i = 0; i < kbs.size(); ++i) std::printf("%s%.0f", i ? ", " : "", kbs[i]);
  std::printf("], \"first_pass_us\": [");
  for (size_t i = 0; i < kbs.size(); ++i) std::printf("%s%.3f", i ? ", " : "", first_us[i]);
  std::printf("], \"second_pass_us\": [");
  for (size_t i = 0; i < kbs.size(); ++i) std::printf("%s%.3f", i ? ", " : "", second_us[i]);
  std::printf("]},\n");
  std::printf("  \"icache_cold_ns_per_kb\": %.1f,\n", 1e3 * slope(kbs, first_us, kbs.size()));
  std::printf("  \"icache_warm_ns_per_kb\": %.1f,\n", 1e3 * slope(kbs, second_us, 3));
  std::printf("  \"flag_hop_ns\": %.1f,\n", (pp_ms - pp0_ms) * 1e6 / (hops - 2));
  std::printf("  \"atomic_fence_ns\": %.1f\n}\n", (af_ms - af0_ms) * 1e6 / (fsteps - 1));
  return 0;
}
