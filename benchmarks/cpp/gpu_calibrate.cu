// gpu_calibrate.cu: the constants of the GPU cost model (python/trt_spec/cost_model.py),
// measured by microbenchmarks and printed as one JSON object:
//   copy_gbps            device-to-device copy bandwidth (read + write bytes / time)
//   read_gbps            a streaming read kernel (every SM, 16-byte loads)
//   launch_us            an empty kernel's cost per node in a CUDA graph of 200 nodes
//   launch_pdl_us        the same with programmatic dependent launch between the nodes
//   launch_wave_us[b]    a graph node of b empty blocks (b = 1, SMs, 2 SMs, 4 SMs)
//   l2_load_ns           one dependent load hitting L2 (a pointer chase over 2 MiB)
//   dram_load_ns         one dependent load missing L2 (a pointer chase over 1 GiB, 4 KiB strides)
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

// One thread follows next[] `steps` times; the time per step is one dependent load.
__global__ void chase_kernel(const unsigned* __restrict__ next, int steps, unsigned* out) {
  unsigned j = 0;
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

template <class F>
static double median_ms(cudaStream_t st, F f, int reps = 5) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();  // warm-up
  CK(cudaStreamSynchronize(st));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, st));
    f();
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
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

// next[] of `bytes` / 4 entries: a random cycle over entries `stride` bytes apart.
static unsigned* make_chase(size_t bytes, size_t stride) {
  const size_t n = bytes / 4, step = stride / 4, m = n / step;
  std::vector<unsigned> order(m), next(n, 0);
  for (size_t i = 0; i < m; ++i) order[i] = static_cast<unsigned>(i * step);
  srand(12345);
  for (size_t i = m - 1; i > 0; --i) std::swap(order[i], order[rand() % (i + 1)]);
  for (size_t i = 0; i < m; ++i) next[order[i]] = order[(i + 1) % m];
  unsigned* d;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemcpy(d, next.data(), bytes, cudaMemcpyHostToDevice));
  return d;
}

static double chase_ns(cudaStream_t st, size_t bytes, size_t stride, int steps) {
  unsigned* next = make_chase(bytes, stride);
  unsigned* out;
  CK(cudaMalloc(&out, 4));
  const double ms0 = median_ms(st, [&] { chase_kernel<<<1, 1, 0, st>>>(next, 1, out); });
  const double ms = median_ms(st, [&] { chase_kernel<<<1, 1, 0, st>>>(next, steps, out); });
  CK(cudaFree(next));
  CK(cudaFree(out));
  return (ms - ms0) * 1e6 / steps;
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
  const double dram_ns = chase_ns(st, size_t(1) << 30, 4096, 20000);

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
  std::printf("  \"flag_hop_ns\": %.1f,\n", (pp_ms - pp0_ms) * 1e6 / (hops - 2));
  std::printf("  \"atomic_fence_ns\": %.1f\n}\n", (af_ms - af0_ms) * 1e6 / (fsteps - 1));
  return 0;
}
