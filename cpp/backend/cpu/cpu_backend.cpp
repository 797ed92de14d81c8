// cpu_backend.cpp: CpuBackend ops (cpu_backend.h). Compiled with the AVX2 floor flags.
#include "backend/cpu/cpu_backend.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <thread>

#include "common/errors.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/repack_lanes.h"

namespace trt_spec {

namespace {

// Threads to use when the caller does not say: TRT_SPEC_THREADS, else one per core. (On a
// machine whose cores are busy with other work, fewer threads run faster: pass n_threads.)
int default_threads() {
  if (const char* env = std::getenv("TRT_SPEC_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

const cpu::MatmulKernels& checked_kernels() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
      !__builtin_cpu_supports("f16c"))
    throw Error("the CPU backend needs AVX2, FMA and F16C, which this processor lacks");
  return cpu::matmul_kernels();
}

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// sum a[i] * b[i]
inline float dot(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The faster products this CPU runs: bf16 where it has AVX512_BF16, else int16.
cpu::PromptMath fast_prompt_math() {
  return cpu::attention_bf16_supported() ? cpu::PromptMath::Bf16 : cpu::PromptMath::Int16;
}

// TRT_SPEC_CPU_PROMPT_ATTENTION: true for auto (unset: by the engine's weights, follow_weights);
// else *math is the mode asked for: bf16, int16 or f32 (none).
bool prompt_math_from_env(std::optional<cpu::PromptMath>* math) {
  using cpu::PromptMath;
  const char* env = std::getenv("TRT_SPEC_CPU_PROMPT_ATTENTION");
  const std::string mode = env != nullptr && env[0] != '\0' ? env : "auto";
  const std::string bf16 = cpu::prompt_math_name(PromptMath::Bf16);
  const std::string int16 = cpu::prompt_math_name(PromptMath::Int16);
  *math = std::nullopt;
  if (mode == "auto") return true;
  if (mode == "f32") return false;
  if (mode == int16) {
    *math = PromptMath::Int16;
    return false;
  }
  if (mode == bf16) {
    if (!cpu::attention_bf16_supported())
      throw Error(
          "TRT_SPEC_CPU_PROMPT_ATTENTION=bf16: this CPU (or TRT_SPEC_CPU_ISA) has no "
          "AVX512_BF16 attention");
    *math = PromptMath::Bf16;
    return false;
  }
  throw Error("TRT_SPEC_CPU_PROMPT_ATTENTION=" + mode + ": use auto, " + bf16 + ", " + int16 +
              " or f32");
}

}  // namespace

CpuBackend::CpuBackend(int n_threads)
    : pool_(n_threads > 0 ? n_threads : default_threads()), kernels_(checked_kernels()) {
  prompt_auto_ = prompt_math_from_env(&prompt_math_);
}

CpuBackend::~CpuBackend() {
  release(qscratch_);
}

void CpuBackend::follow_weights(bool quantized) {
  if (prompt_auto_) prompt_math_ = quantized ? std::optional(fast_prompt_math()) : std::nullopt;
}

std::string CpuBackend::prompt_attention() const {
  return prompt_math_ ? cpu::prompt_math_name(*prompt_math_) : "f32";
}

std::string CpuBackend::name() const {
  std::string name = std::string("cpu-") + kernels_.isa;
  if (prompt_math_) name += std::string(" +") + cpu::prompt_math_name(*prompt_math_) + "-prompt";
  return name;
}

// Large buffers (KV caches, logits) come zeroed from the kernel page by page as they are first
// touched, so a big max_seq_len costs no start-up time; small ones from the heap.
constexpr size_t kMapThreshold = size_t{1} << 21;

void* CpuBackend::alloc(size_t bytes) {
  size_t n = align_up(bytes == 0 ? 64 : bytes, 64);
  if (n >= kMapThreshold) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    std::lock_guard<std::mutex> lock(map_mu_);
    mapped_[p] = n;
    return p;
  }
  void* p = std::aligned_alloc(64, n);
  if (!p) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, n);
  return p;
}

void CpuBackend::release(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    auto it = mapped_.find(p);
    if (it != mapped_.end()) {
      munmap(p, it->second);
      mapped_.erase(it);
      return;
    }
  }
  std::free(p);
}
void CpuBackend::upload(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::download(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

cpu::QuantActs CpuBackend::quant_scratch(int n, int cols) {
  size_t need = cpu::quant_acts_bytes(n, cols);
  if (need > qscratch_bytes_) {
    release(qscratch_);
    qscratch_ = alloc(need);
    qscratch_bytes_ = need;
  }
  return cpu::quant_acts_view(qscratch_, n, cols);
}

WeightView CpuBackend::import_matmul_weight(const WeightView& host) {
  // Into the row-block layout of the kernel table in use (MatmulKernels::lanes; rows a multiple
  // of its block). TRT_SPEC_CPU_LANES=0 keeps the file's layout (the matmul then packs each group
  // as it goes, slowly): for comparing the two in one run; the results are the same bits.
  static const bool lanes = [] {
    const char* env = std::getenv("TRT_SPEC_CPU_LANES");
    return !(env && std::string(env) == "0");
  }();
  if (!lanes || !cpu::lanes_apply(host, kernels_.lanes)) return host;
  const size_t bytes = weight_blob_bytes(host.type, host.rows, host.cols);
  std::unique_ptr<uint8_t, void (*)(void*)> blob(
      static_cast<uint8_t*>(std::aligned_alloc(kSectionAlign, align_up(bytes, kSectionAlign))),
      std::free);
  if (!blob)
    throw Error("out of host memory repacking a weight of " + std::to_string(bytes) + " bytes");
  const CodeLayout layout = kernels_.lanes;
  cpu::repack_lanes(host, blob.get(), layout);
  WeightView w = host;
  w.data = blob.get();
  w.layout = layout;
  repacked_.push_back(std::move(blob));
  return w;
}

WeightView CpuBackend::random_weight(WeightType t, int64_t rows, int64_t cols,
                                     const RandomFill& fill, bool matmul) {
  const size_t bytes = weight_blob_bytes(t, rows, cols);
  std::unique_ptr<uint8_t, void (*)(void*)> blob(
      static_cast<uint8_t*>(std::aligned_alloc(kSectionAlign, align_up(bytes, kSectionAlign))),
      std::free);
  if (!blob)
    throw Error("out of host memory making a random weight of " + std::to_string(bytes) + " bytes");
  SectionFill sections[3];
  const int n = random_fill_sections(t, rows, cols, fill, sections);
  for (int s = 0; s < n; ++s) {
    const int64_t blocks = static_cast<int64_t>((sections[s].bytes + 15) / 16);
    pool_.parallel_for(blocks, 4096, [&](int64_t b, int64_t e) {
      random_fill_host(fill, sections[s], static_cast<uint32_t>(s), b, e, blob.get());
    });
  }
  const WeightView host{t, rows, cols, blob.get()};
  WeightView w = matmul ? import_matmul_weight(host) : host;
  if (w.data == host.data) repacked_.push_back(std::move(blob));  // else the repacked copy is kept
  return w;
}

void CpuBackend::embed(WeightView table, const int32_t* tokens, int n, float* out) {
  pool_.parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      // An id outside the table (a target token the draft's smaller vocabulary lacks) reads
      // nothing: its row is zeros.
      if (tokens[i] < 0 || tokens[i] >= table.rows)
        std::memset(out + i * table.cols, 0, table.cols * sizeof(float));
      else
        cpu::dequantize_rows(table, tokens[i], tokens[i] + 1, out + i * table.cols);
    }
  });
}

void CpuBackend::rmsnorm(const float* x, WeightView w, float eps, int n, int dim, float* out) {
  const float* g = static_cast<const float*>(w.section(0));
  pool_.parallel_for(n, 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* xi = x + i * dim;
      float* yi = out + i * dim;
      float ss = dot(xi, xi, dim) / static_cast<float>(dim);
      float r = 1.0f / std::sqrt(ss + eps);
      for (int c = 0; c < dim; ++c) yi[c] = g[c] * (xi[c] * r);
    }
  });
}

void CpuBackend::linear(WeightView w, WeightView bias, const float* x, int n, float* out) {
  const int64_t rows = w.rows;
  // Chunks of rows handed out dynamically: about 8 per thread, a multiple of 16 rows.
  int64_t grain = std::max<int64_t>(16, (rows / (8 * pool_.size()) + 15) / 16 * 16);
  if (weight_type_needs_groups(w.type)) {
    cpu::QuantActs qa = quant_scratch(n, static_cast<int>(w.cols));
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t e) {
      kernels_.quantize_acts(x, static_cast<int>(b), static_cast<int>(e), qa);
    });
    pool_.parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
      kernels_.matmul_quant(w, qa, n, out, rows, r0, r1);
    });
  } else {
    pool_.parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
      kernels_.matmul_float(w, x, n, out, rows, r0, r1);
    });
  }
  if (bias.data != nullptr) {
    const float* bv = static_cast<const float*>(bias.section(0));
    for (int i = 0; i < n; ++i) {
      float* yi = out + static_cast<int64_t>(i) * rows;
      for (int64_t r = 0; r < rows; ++r) yi[r] += bv[r];
    }
  }
}

void CpuBackend::rope(float* qkv, const int32_t* pos, int n, const AttentionShape& s,
                      const float* cos_table, const float* sin_table) {
  const int hd = s.head_dim, half = hd / 2;
  const int heads = s.n_heads + s.n_kv_heads;  // q heads then k heads are rotated
  const int64_t stride = static_cast<int64_t>(s.n_heads + 2 * s.n_kv_heads) * hd;
  pool_.parallel_for(n, 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* c = cos_table + static_cast<int64_t>(pos[i]) * half;
      const float* sn = sin_table + static_cast<int64_t>(pos[i]) * half;
      for (int h = 0; h < heads; ++h) {
        float* v = qkv + i * stride + static_cast<int64_t>(h) * hd;
        for (int j = 0; j < half; ++j) {
          float x0 = v[j], x1 = v[j + half];
          v[j] = x0 * c[j] - x1 * sn[j];
          v[j + half] = x1 * c[j] + x0 * sn[j];
        }
      }
    }
  });
}

void CpuBackend::kv_write(const float* qkv, const Rows& rows, int n, const AttentionShape& s,
                          KvCache& cache, int layer) {
  const int hd = s.head_dim, nh = s.n_heads, nkv = s.n_kv_heads;
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * hd;
  const size_t seq_stride = static_cast<size_t>(cache.max_seq) * hd;
  const int32_t* idx = rows.kv_idx ? rows.kv_idx : rows.pos;
  // Row i's k and v heads go to its slot at its cache index, rounded to the cache's type.
  for (int i = 0; i < n; ++i) {
    const size_t base = cache.slot_layer_offset(rows.slot[i], layer);
    for (int g = 0; g < nkv; ++g) {
      const size_t dst = base + g * seq_stride + static_cast<size_t>(idx[i]) * hd;
      const float* k = qkv + i * stride + static_cast<int64_t>(nh + g) * hd;
      const float* v = qkv + i * stride + static_cast<int64_t>(nh + nkv + g) * hd;
      switch (cache.type) {
        case KvType::F32:
          std::memcpy(static_cast<float*>(cache.k) + dst, k, hd * sizeof(float));
          std::memcpy(static_cast<float*>(cache.v) + dst, v, hd * sizeof(float));
          break;
        default:
          for (int d = 0; d < hd; ++d) {
            kv_store_f32(cache.k, cache.type, dst + d, k[d]);
            kv_store_f32(cache.v, cache.type, dst + d, v[d]);
          }
          break;
      }
    }
  }
}

void CpuBackend::attention(const float* qkv, const Rows& rows, int n, const AttentionShape& s,
                           KvCache& cache, int layer, float* out) {
  const int hd = s.head_dim, nh = s.n_heads, nkv = s.n_kv_heads;
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * hd;
  const size_t seq_stride = static_cast<size_t>(cache.max_seq) * hd;
  const int32_t* idx = rows.kv_idx ? rows.kv_idx : rows.pos;
  // Row i attends entries [0, kv_idx[i]] of its slot (less those a tree mask hides): the tiled
  // kernel (kernels/cpu/attention.h), its tasks spread over the pool (the result does not
  // depend on the split).
  thread_local std::vector<const void*> kv_ptr;
  thread_local std::vector<int32_t> len;
  kv_ptr.resize(2 * static_cast<size_t>(n));
  len.resize(n);
  const size_t eb = cache.elem_bytes();
  for (int i = 0; i < n; ++i) {
    const size_t base = cache.slot_layer_offset(rows.slot[i], layer) * eb;
    kv_ptr[i] = static_cast<const uint8_t*>(cache.k) + base;
    kv_ptr[n + i] = static_cast<const uint8_t*>(cache.v) + base;
    len[i] = idx[i] + 1;
  }
  cpu::AttentionArgs a;
  a.n_rows = n;
  a.n_heads = nh;
  a.n_kv_heads = nkv;
  a.head_dim = hd;
  a.scale = s.scale;
  a.q = qkv;  // row i, head h at i * stride + h * hd
  a.q_stride = stride;
  a.kv_type = cache.type;
  a.k = kv_ptr.data();
  a.v = kv_ptr.data() + n;
  a.kv_head_stride = static_cast<int64_t>(seq_stride);
  a.max_seq = cache.max_seq;
  a.len = len.data();
  a.tree_base = rows.tree_bits ? rows.tree_base : nullptr;
  a.tree_bits = rows.tree_bits;
  // (bf16 / int16 tiles need head_dim % 16 == 0: other models' prompts stay f32)
  if (prompt_math_ && hd % 16 == 0) {
    a.prompt_from = rows.prompt_from;
    a.prompt_math = *prompt_math_;
  }
  a.out = out;
  a.out_stride = static_cast<int64_t>(nh) * hd;
  a.workers = pool_.size();
  pool_.parallel_for(cpu::attention_tasks(a), 1,
                     [&](int64_t b, int64_t e) { cpu::attention_run(a, b, e); });
}

void CpuBackend::kv_copy(KvCache& cache, const int32_t* slot, const int32_t* src,
                         const int32_t* dst, int n) {
  // Element bytes, whatever the type: an entry moves bit for bit.
  const size_t eb = cache.elem_bytes(), hd = cache.head_dim;
  const size_t seq_stride = static_cast<size_t>(cache.max_seq) * hd;
  auto* k = static_cast<uint8_t*>(cache.k);
  auto* v = static_cast<uint8_t*>(cache.v);
  for (int i = 0; i < n; ++i) {
    if (src[i] < 0 || src[i] == dst[i]) continue;
    for (int l = 0; l < cache.layers; ++l)
      for (int g = 0; g < cache.kv_heads; ++g) {
        const size_t base = cache.slot_layer_offset(slot[i], l) + g * seq_stride;
        const size_t to = (base + dst[i] * hd) * eb, from = (base + src[i] * hd) * eb;
        std::memcpy(k + to, k + from, hd * eb);
        std::memcpy(v + to, v + from, hd * eb);
      }
  }
}

void CpuBackend::kv_copy_prefix(KvCache& cache, int src_slot, int dst_slot, int n) {
  if (n <= 0 || src_slot == dst_slot) return;
  const size_t eb = cache.elem_bytes(), hd = cache.head_dim;
  const size_t seq_stride = static_cast<size_t>(cache.max_seq) * hd;
  auto* k = static_cast<uint8_t*>(cache.k);
  auto* v = static_cast<uint8_t*>(cache.v);
  for (int l = 0; l < cache.layers; ++l)
    for (int g = 0; g < cache.kv_heads; ++g) {
      const size_t to = (cache.slot_layer_offset(dst_slot, l) + g * seq_stride) * eb;
      const size_t from = (cache.slot_layer_offset(src_slot, l) + g * seq_stride) * eb;
      std::memcpy(k + to, k + from, n * hd * eb);
      std::memcpy(v + to, v + from, n * hd * eb);
    }
}

void CpuBackend::swiglu(const float* gate_up, int n, int ffn, float* out) {
  pool_.parallel_for(n, 4,
                     [&](int64_t b, int64_t e) { cpu::swiglu_rows(gate_up, b, e, ffn, out); });
}

void CpuBackend::add(float* x, const float* y, size_t count) {
  for (size_t i = 0; i < count; ++i) x[i] += y[i];
}

void CpuBackend::expand_columns(const float* src, int src_cols, const int32_t* index, int n,
                                int width, float* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  pool_.parallel_for(width, 16384, [&](int64_t c0, int64_t c1) {
    for (int i = 0; i < n; ++i) {
      const float* s = src + static_cast<int64_t>(i) * src_cols;
      float* o = out + static_cast<int64_t>(i) * width;
      for (int64_t c = c0; c < c1; ++c) o[c] = index[c] >= 0 ? s[index[c]] : kNegInf;
    }
  });
}

void CpuBackend::gather_rows(const float* src, const int32_t* rows, int n, int dim, float* dst) {
  for (int i = 0; i < n; ++i)
    std::memcpy(dst + static_cast<int64_t>(i) * dim, src + static_cast<int64_t>(rows[i]) * dim,
                dim * sizeof(float));
}

}  // namespace trt_spec
