// emu_forward.cpp: a tiny transformer's forward on the emulated CUDA kernels (cuda_emu.h), once as
// the per-operation launches the CUDA backend makes and once as the persistent forward program
// (cpp/kernels/cuda/forward_program.cuh) run in a chosen instruction order, behind a C interface
// for tests/test_cuda_emulated_forward.py (ctypes), on host memory.
//
// The model: random weights of one type (kernels/random_fill.h), Model::forward's op sequence
// (embed; per layer the qkv projection with RoPE and the cache write, attention, x += o, the
// normed gate / up, x += down(swiglu); a tap of the residual stream entering layer 1; the head
// over the selected rows), an f16 KV cache holding a random context.
//
// The shared library target emu_forward of CMakeLists.txt (TRT_SPEC_BUILD_TESTS=ON).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/forward_build.cuh"
#include "kernels/cuda/layer_args.cuh"
#include "kernels/cuda/matmul_launch.cuh"
#include "kernels/cuda/norm_rope.cuh"
#include "kernels/half_float.h"
#include "kernels/random_fill.h"

using namespace trt_spec;
using namespace trt_spec::cuda;
using cuda_emu::launch;

namespace {

struct Shape {
  int32_t wtype, layers, dim, heads, kv_heads, head_dim, ffn, vocab, max_seq, sm_count;
};

// 64-byte aligned host memory of floats / bytes.
struct Buf {
  std::vector<uint8_t> bytes;
  void* p = nullptr;
  explicit Buf(size_t n = 0) : bytes(n + 64) {
    p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(bytes.data()) + 63) / 64 * 64);
  }
  float* f() { return static_cast<float*>(p); }
  int32_t* i() { return static_cast<int32_t*>(p); }
};

struct Weight {
  Buf blob;
  WeightView view;
};

void fill_weight(Weight& w, WeightType t, int64_t rows, int64_t cols, uint64_t key, float scale) {
  w.blob = Buf(weight_blob_bytes(t, rows, cols));
  const RandomFill f{key, 0.0f, scale};
  SectionFill sections[3];
  const int n = random_fill_sections(t, rows, cols, f, sections);
  for (int s = 0; s < n; ++s)
    random_fill_host(f, sections[s], static_cast<uint32_t>(s), 0, (sections[s].bytes + 15) / 16,
                     static_cast<uint8_t*>(w.blob.p));
  w.view = WeightView{t, rows, cols, static_cast<const uint8_t*>(w.blob.p)};
}

void fill_floats(Buf& b, size_t n, std::mt19937_64& rng, float base, float spread) {
  b = Buf(n * sizeof(float));
  std::uniform_real_distribution<float> u(-spread, spread);
  for (size_t i = 0; i < n; ++i) b.f()[i] = base + u(rng);
}

struct Model {
  Shape s;
  Weight embd, out_w;
  std::vector<Weight> qkv, o, gu, down;
  std::vector<Buf> attn_norm, ffn_norm, qkv_bias;
  Buf out_norm, cos_t, sin_t, k, v;
  KvView kv{};

  Model(const Shape& sh, uint64_t seed) : s(sh) {
    const auto t = static_cast<WeightType>(s.wtype);
    std::mt19937_64 rng(seed);
    const int64_t D = s.dim, Q = static_cast<int64_t>(s.heads + 2 * s.kv_heads) * s.head_dim;
    fill_weight(embd, WeightType::F32, s.vocab, D, seed * 31 + 1, 1.0f);
    fill_weight(out_w, t, s.vocab, D, seed * 31 + 2, 0.05f);
    fill_floats(out_norm, D, rng, 1.0f, 0.1f);
    qkv.resize(s.layers), o.resize(s.layers), gu.resize(s.layers), down.resize(s.layers);
    attn_norm.resize(s.layers), ffn_norm.resize(s.layers), qkv_bias.resize(s.layers);
    for (int l = 0; l < s.layers; ++l) {
      const uint64_t key = seed * 31 + 10 * (l + 1);
      fill_weight(qkv[l], t, Q, D, key + 1, 0.05f);
      fill_weight(o[l], t, D, static_cast<int64_t>(s.heads) * s.head_dim, key + 2, 0.05f);
      fill_weight(gu[l], t, 2 * static_cast<int64_t>(s.ffn), D, key + 3, 0.05f);
      fill_weight(down[l], t, D, s.ffn, key + 4, 0.05f);
      fill_floats(attn_norm[l], D, rng, 1.0f, 0.1f);
      fill_floats(ffn_norm[l], D, rng, 1.0f, 0.1f);
      fill_floats(qkv_bias[l], Q, rng, 0.0f, 0.1f);
    }
    const int half = s.head_dim / 2;
    cos_t = Buf(sizeof(float) * s.max_seq * half);
    sin_t = Buf(sizeof(float) * s.max_seq * half);
    for (int p = 0; p < s.max_seq; ++p)
      for (int i = 0; i < half; ++i) {
        const double a = p * std::pow(10000.0, -2.0 * i / s.head_dim);
        cos_t.f()[p * half + i] = static_cast<float>(std::cos(a));
        sin_t.f()[p * half + i] = static_cast<float>(std::sin(a));
      }
    const size_t kv_bytes = 2ull * s.layers * s.kv_heads * s.max_seq * s.head_dim;  // f16, 1 slot
    k = Buf(kv_bytes);
    v = Buf(kv_bytes);
    kv = KvView{k.p, v.p, KvType::F16, s.layers, s.kv_heads, s.max_seq, s.head_dim};
  }
};

// The forward's buffers, with unwritten scratch filled with NaN.
struct Pass {
  int n, n_logits;
  Buf tokens, pos, slot, logit_rows, x, qkv, att, gate_up, tap, logits, partial, counters;
  Buf att_partial, att_counters;
  Pass(const Shape& s, int n_, int n_logits_, int p0, uint64_t seed)
      : n(n_),
        n_logits(n_logits_),
        tokens(4 * n),
        pos(4 * n),
        slot(4 * n),
        logit_rows(4 * n),
        x(4ull * n * s.dim),
        qkv(4ull * n * (s.heads + 2 * s.kv_heads) * s.head_dim),
        att(4ull * n * s.heads * s.head_dim),
        gate_up(8ull * n * s.ffn),
        tap(4ull * n * s.dim),
        logits(4ull * n * s.vocab),
        partial(4ull * 64 * n * (s.vocab > 2 * s.ffn ? s.vocab : 2 * s.ffn)),
        counters(4 * 4096),
        att_partial(4ull * n * s.heads * 64 * (s.head_dim + 2)),
        att_counters(4 * 4096) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < n; ++i) {
      tokens.i()[i] = static_cast<int32_t>(rng() % s.vocab);
      pos.i()[i] = p0 + i;
      slot.i()[i] = 0;
    }
    for (int i = 0; i < n_logits; ++i) logit_rows.i()[i] = n - n_logits + i;
    for (Buf* b : {&x, &qkv, &att, &gate_up, &tap, &logits, &partial, &att_partial}) {
      float* f = b->f();
      for (size_t i = 0; i < (b->bytes.size() - 64) / 4; ++i) f[i] = NAN;
    }
    std::memset(counters.p, 0, 4 * 4096);
    std::memset(att_counters.p, 0, 4 * 4096);
  }
};

// The model's matmul weights in forward order (per layer qkv, o, gate / up, down; the head).
std::vector<DevWeight> matmul_weights(const Model& m) {
  std::vector<DevWeight> w;
  for (int l = 0; l < m.s.layers; ++l)
    for (const Weight* x : {&m.qkv[l], &m.o[l], &m.gu[l], &m.down[l]})
      w.push_back(dev_weight(x->view));
  w.push_back(dev_weight(m.out_w.view));
  return w;
}

// Model::forward's ops. program: appended as FwdOps planned with tile; else launched one by one,
// each matmul block prefetching up to `prefetch` bytes of its weights, and with hint > 0 each
// launch streaming up to that many bytes of the next matmuls' weights (as the CUDA backend's
// captures do: a matmul the next one's, attention the next two).
void forward_ops(Model& m, Pass& ps, std::vector<FwdOp>* program, int tile, int prefetch = 0,
                 int64_t hint = 0) {
  const Shape& s = m.s;
  const int n = ps.n, sm = s.sm_count;
  float* x = ps.x.f();
  const std::vector<DevWeight> order = matmul_weights(m);
  size_t issued = 0;  // matmuls so far
  auto next = [&](int k) {
    if (hint <= 0 || issued >= order.size()) return WeightHint{};
    const int left = static_cast<int>(order.size() - issued);
    return weight_hint(order.data() + issued, k < left ? k : left, hint);
  };
  auto matmul = [&](const MatmulArgs& a) {
    const MatmulPlan p = plan_matmul(a, sm, kImmaRowsDefault, true, program ? tile : 0);
    ++issued;
    if (program)
      program->push_back(fwd_matmul_op(a, p, ps.partial.f(), ps.counters.i()));
    else
      launch_matmul(nullptr, a, p, ps.partial.f(), ps.counters.i(), false, prefetch, next(1));
  };
  const DevWeight table = dev_weight(m.embd.view);
  if (program)
    program->push_back(fwd_embed_op(table, ps.tokens.i(), n, x));
  else
    launch_embed(nullptr, table, ps.tokens.i(), n, x);
  const RowsView rows{ps.pos.i(), ps.slot.i(), nullptr, nullptr, nullptr};
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (int l = 0; l < s.layers; ++l) {
    if (l == 1) {  // a tap: the residual stream entering layer 1
      if (program)
        program->push_back(fwd_gather_op(x, ps.logit_rows.i(), ps.n_logits, s.dim, ps.tap.f()));
      else
        launch_gather_rows(nullptr, x, ps.logit_rows.i(), ps.n_logits, s.dim, ps.tap.f());
    }
    matmul(qkv_args(x, m.attn_norm[l].f(), 1e-6f, m.qkv[l].view, m.qkv_bias[l].f(), ps.pos.i(),
                    ps.slot.i(), nullptr, n, s.heads, s.kv_heads, s.head_dim, m.cos_t.f(),
                    m.sin_t.f(), m.kv, l, ps.qkv.f()));
    const AttentionPlan ap = plan_attention(n, s.heads, s.kv_heads, s.head_dim, s.max_seq, sm);
    if (program)
      program->push_back(fwd_attention_op(ap, ps.qkv.f(), rows, n, s.heads, scale, m.kv, l,
                                          ps.att.f(), ps.att_partial.f(),
                                          reinterpret_cast<unsigned*>(ps.att_counters.p)));
    else
      launch_attention(nullptr, ap, ps.qkv.f(), rows, n, s.heads, scale, m.kv, l, ps.att.f(),
                       ps.att_partial.f(), reinterpret_cast<unsigned*>(ps.att_counters.p), false,
                       next(2));
    matmul(residual_args(m.o[l].view, ps.att.f(), n, x));
    matmul(norm_linear_args(x, nullptr, m.ffn_norm[l].f(), 1e-6f, m.gu[l].view, nullptr, n,
                            ps.gate_up.f()));
    matmul(swiglu_residual_args(m.down[l].view, ps.gate_up.f(), n, x));
  }
  matmul(norm_linear_args(x, ps.logit_rows.i(), m.out_norm.f(), 1e-6f, m.out_w.view, nullptr,
                          ps.n_logits, ps.logits.f()));
}

// The persistent program of a forward (forward_ops planned with tile) in host memory, its
// counters zeroed, and the view the kernels read (prefetch: FwdProgramView::prefetch).
struct HostProgram {
  FwdProgram prog;
  Buf counters;
  FwdProgramView view;
  HostProgram(Model& m, Pass& ps, int tile, int prefetch) {
    std::vector<FwdOp> ops;
    forward_ops(m, ps, &ops, tile);
    prog = build_forward_program(std::move(ops));
    counters = Buf(4 * (prog.n_counters + 1));
    std::memset(counters.p, 0, 4 * (prog.n_counters + 1));
    view = FwdProgramView{prog.ops.data(),
                          prog.instrs.data(),
                          prog.waits.data(),
                          counters.i(),
                          static_cast<int>(prog.instrs.size()),
                          prog.n_counters,
                          prefetch};
  }
};

thread_local std::string g_error;

// The weight arrays of a model (each section of each matrix) as [begin, end) addresses.
std::vector<std::pair<uintptr_t, uintptr_t>> weight_arrays(const Model& m) {
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  auto add = [&](const Weight& w) {
    const WeightView& v = w.view;
    for (int sec = 0; sec < weight_section_count(v.type); ++sec) {
      const auto at = reinterpret_cast<uintptr_t>(v.section(sec));
      out.emplace_back(at, at + weight_section_bytes(v.type, v.rows, v.cols, sec));
    }
  };
  for (const auto* ws : {&m.qkv, &m.o, &m.gu, &m.down})
    for (const Weight& w : *ws) add(w);
  add(m.out_w);
  return out;
}

// What the observers saw (cuda_emu.h's on_prefetch / on_weight_read).
struct Seen {
  std::vector<std::pair<uintptr_t, uintptr_t>> arrays;  // where a prefetch may point
  int64_t outside = 0, bytes = 0;                       // prefetches elsewhere; bytes asked
  std::vector<uintptr_t> prefetched, read;              // 16-byte lines
};
thread_local Seen* g_seen = nullptr;

void lines(std::vector<uintptr_t>& to, const void* p, size_t n) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t l = b / 16; l < (b + n + 15) / 16; ++l) to.push_back(l);
}
void seen_prefetch(const void* p, size_t n) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  bool in = b % 16 == 0 && n % 16 == 0 && n > 0;
  bool inside = false;
  for (const auto& [lo, hi] : g_seen->arrays) inside |= b >= lo && b + n <= hi;
  if (!in || !inside) ++g_seen->outside;
  g_seen->bytes += static_cast<int64_t>(n);
  lines(g_seen->prefetched, p, n);
}
void seen_read(const void* p, size_t n) {
  lines(g_seen->read, p, n);
}
void sorted_unique(std::vector<uintptr_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}
// Whether every element of `a` is in `b` (both sorted, unique).
bool subset(const std::vector<uintptr_t>& a, const std::vector<uintptr_t>& b) {
  return std::includes(b.begin(), b.end(), a.begin(), a.end());
}

// The blocks of a launch each streaming their share of a hint.
__global__ void hint_kernel(WeightHint h) {
  prefetch_hint(h, blockIdx.x, gridDim.x);
}

// One instruction's weight prefetch, as a block of the persistent forward issues it.
__global__ void prefetch_instruction_kernel(FwdProgramView p, int64_t i) {
  fwd_prefetch(p, i);
}

}  // namespace

extern "C" {

const char* emu_forward_error() {
  return g_error.c_str();
}

// A forward of n rows (positions n_ctx ..) after a context of n_ctx rows, on a model of shape
// `shape` (Shape's 10 ints) from `seed`. mode 0: the per-operation launches; 1: the persistent
// kernel with a grid of one block (global order); 2: the program's instructions one by one in a
// random order the counters allow (order_seed); 3: the same, always the latest instruction the
// counters allow (each consumer as early as possible). Writes logits [n_logits, vocab] (the last
// n_logits rows), tap [n_logits, dim], and info[0] = instructions, info[1] = ops, info[2] = the
// static check's verdict on the grid of resident blocks (0: sound), info[3] = counters, info[4]
// (modes 2, 3) = instructions run before the op before theirs was complete (finer waits),
// info[5] = weight prefetches (prefetch > 0: bytes per block, matmul_prefetch) not inside a
// weight array or not 16-byte lines, info[6] = bytes prefetched.
// Returns 0, or -1 (see emu_forward_error).
int emu_forward(const int32_t* shape, int n_ctx, int n, int n_logits, int mode, uint64_t seed,
                uint64_t order_seed, int prefetch, int64_t hint, float* logits, float* tap,
                int64_t* info) {
  try {
    Shape s;
    std::memcpy(&s, shape, sizeof(Shape));
    Model m(s, seed);
    Seen seen;
    seen.arrays = weight_arrays(m);
    g_seen = &seen;
    cuda_emu::on_prefetch = prefetch > 0 || hint > 0 ? &seen_prefetch : nullptr;
    struct Quiet {  // the observer off again, however this returns
      ~Quiet() { cuda_emu::on_prefetch = nullptr; }
    } quiet;
    {  // the context: random k and v at positions [0, n_ctx) of every layer and kv head
      std::mt19937_64 rng(seed + 7);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (void* c : {m.k.p, m.v.p})
        for (int l = 0; l < s.layers * s.kv_heads; ++l)
          for (int64_t e = 0; e < static_cast<int64_t>(n_ctx) * s.head_dim; ++e)
            static_cast<uint16_t*>(c)[l * s.max_seq * s.head_dim + e] = f32_to_f16(u(rng));
    }
    Pass ps(s, n, n_logits, n_ctx, seed + 11);
    if (mode == 0) {
      forward_ops(m, ps, nullptr, 0, prefetch, hint);
    } else {
      const int tile = fwd_tile(n);
      HostProgram hp(m, ps, tile, prefetch);
      const FwdProgram& prog = hp.prog;
      const FwdProgramView& view = hp.view;
      Buf& counters = hp.counters;
      const int64_t resident = static_cast<int64_t>(fwd_blocks_per_sm(tile)) * s.sm_count;
      info[0] = static_cast<int64_t>(prog.instrs.size());
      info[1] = static_cast<int64_t>(prog.ops.size());
      info[2] = check_forward_program(prog, resident, resident).empty() ? 0 : 1;
      info[3] = prog.n_counters;
      info[4] = 0;
      if (mode == 1) {
        if (tile == 1)
          launch(dim3(1), dim3(kMatmulThreads), persistent_forward_kernel<1>, view);
        else
          launch(dim3(1), dim3(kMatmulThreads), persistent_forward_kernel<8>, view);
      } else {
        std::mt19937_64 rng(order_seed);
        std::vector<char> done(prog.instrs.size(), 0);
        std::vector<int64_t> ran(prog.ops.size(), 0);
        for (size_t step = 0; step < prog.instrs.size(); ++step) {
          std::vector<int64_t> ready;
          for (size_t i = 0; i < prog.instrs.size(); ++i) {
            if (done[i]) continue;
            const FwdInstr& in = prog.instrs[i];
            bool ok = true;
            for (int w = in.wait_begin; w < in.wait_begin + in.wait_count; ++w)
              ok &= counters.i()[prog.waits[w].counter] >= prog.waits[w].target;
            if (ok) ready.push_back(static_cast<int64_t>(i));
          }
          if (ready.empty()) {
            g_error = "no instruction ready: the counters deadlock";
            return -1;
          }
          const int64_t i = mode == 3 ? ready.back() : ready[rng() % ready.size()];
          done[i] = 1;
          const int op = prog.instrs[i].op;  // ran before the op before it was complete?
          if (op > 0 && ran[op - 1] < fwd_op_blocks(prog.ops[op - 1])) ++info[4];
          ++ran[op];
          if (tile == 1)
            launch(dim3(1), dim3(kMatmulThreads), forward_instruction_kernel<1>, view, i, i + 1);
          else
            launch(dim3(1), dim3(kMatmulThreads), forward_instruction_kernel<8>, view, i, i + 1);
        }
      }
      for (int c = 0; c < prog.n_counters; ++c)
        if (counters.i()[c] != 0) {
          g_error = "the program left counter " + std::to_string(c) + " set";
          return -1;
        }
    }
    std::memcpy(logits, ps.logits.f(), sizeof(float) * n_logits * s.vocab);
    std::memcpy(tap, ps.tap.f(), sizeof(float) * n_logits * s.dim);
    info[5] = seen.outside;
    info[6] = seen.bytes;
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return -1;
  }
}

// What the persistent forward's prefetch of each matmul instruction (fwd_prefetch, at most
// `budget` bytes) asks for, against the weight bytes that instruction's block then reads, as
// 16-byte lines, on the program of a forward of n rows on `shape` run in global order. Writes
// out[0] = matmul instructions, out[1] = those that prefetch a line they do not read, out[2] =
// those that read a line they did not prefetch, out[3] / out[4] = lines read / prefetched (all
// instructions), out[5] = the most bytes one instruction prefetched, out[6] = prefetches outside
// the weight arrays. Returns 0, or -1.
int emu_forward_prefetch_cover(const int32_t* shape, int n, int budget, int64_t* out) {
  try {
    Shape s;
    std::memcpy(&s, shape, sizeof(Shape));
    Model m(s, 3);
    Pass ps(s, n, n, 9, 4);
    const int tile = fwd_tile(n);
    HostProgram hp(m, ps, tile, budget);
    const FwdProgram& prog = hp.prog;
    const FwdProgramView& view = hp.view;
    const int n_instrs = view.n_instrs;
    Seen seen;
    seen.arrays = weight_arrays(m);
    g_seen = &seen;
    struct Quiet {
      ~Quiet() { cuda_emu::on_prefetch = cuda_emu::on_weight_read = nullptr; }
    } quiet;
    std::fill(out, out + 7, 0);
    for (int64_t i = 0; i < n_instrs; ++i) {
      const bool mm = prog.ops[prog.instrs[i].op].kind == FwdKind::kMatmul;
      seen.prefetched.clear();
      seen.read.clear();
      const int64_t before = seen.bytes;
      cuda_emu::on_prefetch = &seen_prefetch;
      launch(dim3(1), dim3(kMatmulThreads), prefetch_instruction_kernel, view, i);
      cuda_emu::on_prefetch = nullptr;
      cuda_emu::on_weight_read = &seen_read;
      if (tile == 1)
        launch(dim3(1), dim3(kMatmulThreads), forward_instruction_kernel<1>, view, i,
               int64_t{n_instrs});
      else
        launch(dim3(1), dim3(kMatmulThreads), forward_instruction_kernel<8>, view, i,
               int64_t{n_instrs});
      cuda_emu::on_weight_read = nullptr;
      if (!mm) continue;
      sorted_unique(seen.prefetched);
      sorted_unique(seen.read);
      out[0] += 1;
      out[1] += subset(seen.prefetched, seen.read) ? 0 : 1;
      out[2] += subset(seen.read, seen.prefetched) ? 0 : 1;
      out[3] += static_cast<int64_t>(seen.read.size());
      out[4] += static_cast<int64_t>(seen.prefetched.size());
      out[5] = std::max(out[5], seen.bytes - before);
    }
    out[6] = seen.outside;
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return -1;
  }
}

// A launch of `grid` blocks streaming the hint of the model's matmul weights [first, first + k)
// within `budget` bytes (weight_hint, prefetch_hint), as 16-byte lines: out[0] = the hint's,
// out[1] = those prefetched, out[2] = lines prefetched more than once, out[3] = hint lines not
// prefetched, out[4] = prefetched lines outside the hint, out[5] = prefetches outside the weight
// arrays, out[6] = the hint's bytes. Returns 0, or -1.
int emu_hint_cover(const int32_t* shape, int first, int k, int64_t budget, int grid, int64_t* out) {
  try {
    Shape s;
    std::memcpy(&s, shape, sizeof(Shape));
    Model m(s, 5);
    const std::vector<DevWeight> order = matmul_weights(m);
    if (first < 0 || k < 1 || first + k > static_cast<int>(order.size()))
      throw std::invalid_argument("weights out of range");
    const WeightHint h = weight_hint(order.data() + first, k, budget);
    std::vector<uintptr_t> want;
    out[6] = 0;
    for (int r = 0; r < kHintRanges; ++r) {
      if (h.bytes[r] > 0) lines(want, h.p[r], static_cast<size_t>(h.bytes[r]));
      out[6] += h.bytes[r];
    }
    sorted_unique(want);
    Seen seen;
    seen.arrays = weight_arrays(m);
    g_seen = &seen;
    cuda_emu::on_prefetch = &seen_prefetch;
    launch(dim3(grid), dim3(kMatmulThreads), hint_kernel, h);
    cuda_emu::on_prefetch = nullptr;
    std::vector<uintptr_t> got = seen.prefetched;
    std::sort(got.begin(), got.end());
    const size_t all = got.size();
    got.erase(std::unique(got.begin(), got.end()), got.end());
    std::vector<uintptr_t> missing, extra;
    std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                        std::back_inserter(missing));
    std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                        std::back_inserter(extra));
    out[0] = static_cast<int64_t>(want.size());
    out[1] = static_cast<int64_t>(got.size());
    out[2] = static_cast<int64_t>(all - got.size());
    out[3] = static_cast<int64_t>(missing.size());
    out[4] = static_cast<int64_t>(extra.size());
    out[5] = seen.outside;
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return -1;
  }
}

// The static check of the program of a forward of n rows on `shape`, run on `grid` blocks of
// `resident` after `tamper`: 0 none; 1 the reset moved before the last op; 2 a wait's target
// raised by one; 3 the first instruction of op 1 moved before op 0's; 4 a block of op 2 repeated.
// Writes the verdict ("" when sound) to out (cap bytes). Returns 0, or -1.
int emu_forward_check(const int32_t* shape, int n, int tamper, int64_t grid, int64_t resident,
                      char* out, int cap) {
  try {
    Shape s;
    std::memcpy(&s, shape, sizeof(Shape));
    Model m(s, 1);
    Pass ps(s, n, 1, 0, 2);
    const int tile = fwd_tile(n);
    std::vector<FwdOp> ops;
    forward_ops(m, ps, &ops, tile);
    FwdProgram p = build_forward_program(std::move(ops));
    auto first_of = [&](int op) {
      size_t i = 0;
      while (p.instrs[i].op != op) ++i;
      return i;
    };
    if (tamper == 1) {
      const FwdInstr r = p.instrs.back();
      p.instrs.pop_back();
      p.instrs.insert(p.instrs.begin() + first_of(static_cast<int>(p.ops.size()) - 2), r);
    } else if (tamper == 2) {
      p.waits[p.instrs[first_of(1)].wait_begin].target += 1;
    } else if (tamper == 3) {
      const size_t i = first_of(1);
      const FwdInstr r = p.instrs[i];
      p.instrs.erase(p.instrs.begin() + i);
      p.instrs.insert(p.instrs.begin(), r);
    } else if (tamper == 4) {
      p.instrs[first_of(2) + 1] = p.instrs[first_of(2)];
    }
    const std::string v = check_forward_program(p, grid, resident);
    std::snprintf(out, cap, "%s", v.c_str());
    return 0;
  } catch (const std::exception& e) {
    g_error = e.what();
    return -1;
  }
}

}  // extern "C"
