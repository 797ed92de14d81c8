// ops_testing.cpp: test and benchmark bindings of trt_spec._core (bind_ops_testing, called from
// core.cpp).
//
//   OpRunner(device)    runs single Backend ops on host arrays on a chosen backend ("cpu",
//                       "cuda"), so tests compare every op of the CUDA backend with the CPU's
//   time_forward        seconds per Model::forward of a number of rows (in a graph or not)
//   time_iterations     seconds per speculative iteration of a Decoder's current sequences,
//                       each with its SeqState read back (the decode loop minus bookkeeping)
//   cuda_device_info, cuda_bandwidth_gbps   the GPU and its measured copy bandwidth
//   cpu_attention       the CPU attention kernel (kernels/cpu/attention.h) on host arrays
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <tuple>

#include "kernels/cpu/attention.h"
#include "runtime/backend.h"
#include "runtime/decoder.h"
#include "runtime/errors.h"
#include "runtime/request.h"
#include "runtime/runtime.h"

#ifdef TRT_SPEC_WITH_CUDA
#include "cuda/cuda_api.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;
using namespace trt_spec;

namespace {

template <typename T, int D>
using HostArray = nb::ndarray<const T, nb::ndim<D>, nb::c_contig, nb::device::cpu>;

constexpr int kSeqInts = sizeof(SeqState) / sizeof(int32_t);
static_assert(sizeof(SeqState) % sizeof(int32_t) == 0, "SeqState is int32 fields");

template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape, owner);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Single backend ops on host arrays: inputs are copied to backend memory, outputs back.
class OpRunner {
 public:
  explicit OpRunner(const std::string& device) : be_(make_backend(device, 2)) {}
  Backend& be() { return *be_; }

  // Backend memory holding a copy of host data.
  BackendBuffer put(const void* data, size_t bytes) {
    BackendBuffer b(*be_, bytes);
    if (bytes) be_->upload(b.as<void>(), data, bytes);
    return b;
  }
  template <typename T>
  BackendBuffer put(const std::vector<T>& v) {
    return put(v.data(), v.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> get(const BackendBuffer& b, size_t count) {
    std::vector<T> out(count);
    if (count) be_->download(out.data(), b.as<void>(), count * sizeof(T));
    be_->synchronize();
    return out;
  }
  // A weight blob in backend memory (as import_weight sees an engine tensor).
  WeightView weight(const HostArray<uint8_t, 1>& blob, WeightType t, int64_t rows, int64_t cols) {
    if (blob.shape(0) != weight_blob_bytes(t, rows, cols))
      throw InvalidArgument("blob size does not match the weight type and shape");
    // 64-byte aligned host copy, then import (the CPU backend keeps the pointer: keep it alive).
    auto host = std::shared_ptr<uint8_t>(
        static_cast<uint8_t*>(std::aligned_alloc(64, align_up(blob.shape(0), 64))), std::free);
    std::memcpy(host.get(), blob.data(), blob.shape(0));
    keep_.push_back(host);
    return be_->import_weight(WeightView{t, rows, cols, host.get()});
  }

  std::vector<SamplingState> states(
      const std::vector<std::tuple<float, int, float, uint64_t, uint64_t>>& params) {
    std::vector<SamplingState> st;
    for (const auto& [t, k, p, seed, step] : params) {
      SamplingParams sp{t, k, p, seed};
      validate_sampling(sp);
      st.push_back(SamplingState{sp, step});
    }
    return st;
  }

 private:
  std::unique_ptr<Backend> be_;
  std::vector<std::shared_ptr<uint8_t>> keep_;
};

std::vector<SeqState> seqs_from(const HostArray<int32_t, 2>& a) {
  if (a.shape(1) != static_cast<size_t>(kSeqInts))
    throw InvalidArgument("seqs must be int32 [slots, SEQ_STATE_INTS]");
  std::vector<SeqState> s(a.shape(0));
  std::memcpy(s.data(), a.data(), s.size() * sizeof(SeqState));
  return s;
}

nb::ndarray<nb::numpy, int32_t> seqs_to(std::vector<SeqState>&& s) {
  std::vector<int32_t> v(s.size() * kSeqInts);
  std::memcpy(v.data(), s.data(), s.size() * sizeof(SeqState));
  return to_numpy<int32_t>(std::move(v), {s.size(), static_cast<size_t>(kSeqInts)});
}

void check_slots(const std::vector<int32_t>& slots, size_t n_states) {
  for (int32_t s : slots)
    if (s < 0 || static_cast<size_t>(s) >= n_states) throw InvalidArgument("slot out of range");
}

}  // namespace

void bind_ops_testing(nb::module_& m) {
  m.attr("SEQ_STATE_INTS") = kSeqInts;

  using F2 = HostArray<float, 2>;
  using F1 = HostArray<float, 1>;
  using I2 = HostArray<int32_t, 2>;
  using Params = std::vector<std::tuple<float, int, float, uint64_t, uint64_t>>;

  nb::class_<OpRunner>(m, "OpRunner",
                       "Single backend ops on host arrays, on a chosen device (for tests)")
      .def(nb::init<const std::string&>(), "device"_a)
      .def_prop_ro("name", [](OpRunner& r) { return r.be().name(); })
      .def(
          "linear",
          [](OpRunner& r, HostArray<uint8_t, 1> blob, WeightType t, int64_t rows, int64_t cols,
             F2 x, std::optional<F1> bias) {
            const int n = static_cast<int>(x.shape(0));
            if (static_cast<int64_t>(x.shape(1)) != cols) throw InvalidArgument("x columns");
            WeightView w = r.weight(blob, t, rows, cols), b{};
            BackendBuffer bias_buf;
            if (bias) {
              if (static_cast<int64_t>(bias->shape(0)) != rows) throw InvalidArgument("bias");
              bias_buf = r.put(bias->data(), rows * 4);
              b = WeightView{WeightType::F32, 1, rows, bias_buf.as<uint8_t>()};
            }
            BackendBuffer xb = r.put(x.data(), x.size() * 4), out(r.be(), n * rows * 4);
            r.be().linear(w, b, xb.as<float>(), n, out.as<float>());
            return to_numpy(r.get<float>(out, n * rows),
                            {static_cast<size_t>(n), static_cast<size_t>(rows)});
          },
          "blob"_a, "t"_a, "rows"_a, "cols"_a, "x"_a, "bias"_a = nb::none(),
          "out [n, rows] = x @ W^T (+ bias)")
      .def(
          "embed",
          [](OpRunner& r, HostArray<uint8_t, 1> blob, WeightType t, int64_t rows, int64_t cols,
             const std::vector<int32_t>& tokens) {
            check_token_ids(tokens, static_cast<int>(rows), "tokens");
            const int n = static_cast<int>(tokens.size());
            WeightView w = r.weight(blob, t, rows, cols);
            BackendBuffer tb = r.put(tokens), out(r.be(), n * cols * 4);
            r.be().embed(w, tb.as<int32_t>(), n, out.as<float>());
            return to_numpy(r.get<float>(out, n * cols),
                            {static_cast<size_t>(n), static_cast<size_t>(cols)});
          },
          "blob"_a, "t"_a, "rows"_a, "cols"_a, "tokens"_a)
      .def(
          "rmsnorm",
          [](OpRunner& r, F2 x, F1 w, float eps) {
            const int n = static_cast<int>(x.shape(0)), dim = static_cast<int>(x.shape(1));
            if (static_cast<int>(w.shape(0)) != dim) throw InvalidArgument("w size");
            BackendBuffer xb = r.put(x.data(), x.size() * 4), wb = r.put(w.data(), dim * 4);
            BackendBuffer out(r.be(), x.size() * 4);
            r.be().rmsnorm(xb.as<float>(), WeightView{WeightType::F32, 1, dim, wb.as<uint8_t>()},
                           eps, n, dim, out.as<float>());
            return to_numpy(r.get<float>(out, x.size()),
                            {static_cast<size_t>(n), static_cast<size_t>(dim)});
          },
          "x"_a, "w"_a, "eps"_a)
      .def(
          "rope",
          [](OpRunner& r, F2 qkv, const std::vector<int32_t>& pos, int n_heads, int n_kv_heads,
             int head_dim, F2 cos_t, F2 sin_t) {
            const int n = static_cast<int>(qkv.shape(0));
            if (static_cast<int>(pos.size()) != n ||
                static_cast<int>(qkv.shape(1)) != (n_heads + 2 * n_kv_heads) * head_dim ||
                static_cast<int>(cos_t.shape(1)) != head_dim / 2 || cos_t.size() != sin_t.size())
              throw InvalidArgument("rope shapes");
            for (int32_t p : pos)
              if (p < 0 || p >= static_cast<int>(cos_t.shape(0))) throw InvalidArgument("pos");
            BackendBuffer qb = r.put(qkv.data(), qkv.size() * 4), pb = r.put(pos);
            BackendBuffer cb = r.put(cos_t.data(), cos_t.size() * 4);
            BackendBuffer sb = r.put(sin_t.data(), sin_t.size() * 4);
            AttentionShape s{n_heads, n_kv_heads, head_dim, 0.0f};
            r.be().rope(qb.as<float>(), pb.as<int32_t>(), n, s, cb.as<float>(), sb.as<float>());
            return to_numpy(r.get<float>(qb, qkv.size()), {qkv.shape(0), qkv.shape(1)});
          },
          "qkv"_a, "pos"_a, "n_heads"_a, "n_kv_heads"_a, "head_dim"_a, "cos"_a, "sin"_a)
      .def(
          "attention",
          [](OpRunner& r, F2 qkv, const std::vector<int32_t>& pos, const std::vector<int32_t>& slot,
             int n_heads, int n_kv_heads, int head_dim, float scale, F1 k_cache, F1 v_cache,
             int slots, int layers, int max_seq, int layer) {
            const int n = static_cast<int>(qkv.shape(0));
            const size_t cache =
                static_cast<size_t>(slots) * layers * n_kv_heads * max_seq * head_dim;
            if (static_cast<int>(pos.size()) != n || static_cast<int>(slot.size()) != n ||
                k_cache.shape(0) != cache || v_cache.shape(0) != cache || layer < 0 ||
                layer >= layers ||
                static_cast<int>(qkv.shape(1)) != (n_heads + 2 * n_kv_heads) * head_dim)
              throw InvalidArgument("attention shapes");
            for (int i = 0; i < n; ++i)
              if (pos[i] < 0 || pos[i] >= max_seq || slot[i] < 0 || slot[i] >= slots)
                throw InvalidArgument("attention: pos or slot out of range");
            BackendBuffer qb = r.put(qkv.data(), qkv.size() * 4), pb = r.put(pos), sb = r.put(slot);
            BackendBuffer kb = r.put(k_cache.data(), cache * 4),
                          vb = r.put(v_cache.data(), cache * 4);
            KvCache kv{kb.as<float>(), vb.as<float>(), slots,   layers,
                       n_kv_heads,     max_seq,        head_dim};
            const size_t out_n = static_cast<size_t>(n) * n_heads * head_dim;
            BackendBuffer out(r.be(), out_n * 4);
            r.be().attention(qb.as<float>(), pb.as<int32_t>(), sb.as<int32_t>(), n,
                             AttentionShape{n_heads, n_kv_heads, head_dim, scale}, kv, layer,
                             out.as<float>());
            return std::make_tuple(
                to_numpy(r.get<float>(out, out_n),
                         {static_cast<size_t>(n), static_cast<size_t>(n_heads) * head_dim}),
                to_numpy(r.get<float>(kb, cache), {cache}),
                to_numpy(r.get<float>(vb, cache), {cache}));
          },
          "qkv"_a, "pos"_a, "slot"_a, "n_heads"_a, "n_kv_heads"_a, "head_dim"_a, "scale"_a,
          "k_cache"_a, "v_cache"_a, "slots"_a, "layers"_a, "max_seq"_a, "layer"_a,
          "(out [n, n_heads head_dim], k_cache, v_cache); caches flat [slots, layers, kv_heads, "
          "max_seq, head_dim]")
      .def(
          "swiglu",
          [](OpRunner& r, F2 gate_up) {
            const int n = static_cast<int>(gate_up.shape(0));
            const int ffn = static_cast<int>(gate_up.shape(1) / 2);
            BackendBuffer g = r.put(gate_up.data(), gate_up.size() * 4), out(r.be(), n * ffn * 4);
            r.be().swiglu(g.as<float>(), n, ffn, out.as<float>());
            return to_numpy(r.get<float>(out, static_cast<size_t>(n) * ffn),
                            {static_cast<size_t>(n), static_cast<size_t>(ffn)});
          },
          "gate_up"_a)
      .def(
          "add",
          [](OpRunner& r, F1 x, F1 y) {
            if (x.shape(0) != y.shape(0)) throw InvalidArgument("add: sizes differ");
            BackendBuffer xb = r.put(x.data(), x.size() * 4), yb = r.put(y.data(), y.size() * 4);
            r.be().add(xb.as<float>(), yb.as<float>(), x.size());
            return to_numpy(r.get<float>(xb, x.size()), {x.size()});
          },
          "x"_a, "y"_a)
      .def(
          "gather_rows",
          [](OpRunner& r, F2 src, const std::vector<int32_t>& rows) {
            check_token_ids(rows, static_cast<int>(src.shape(0)), "rows");
            const int n = static_cast<int>(rows.size()), dim = static_cast<int>(src.shape(1));
            BackendBuffer sb = r.put(src.data(), src.size() * 4), rb = r.put(rows);
            BackendBuffer out(r.be(), static_cast<size_t>(n) * dim * 4);
            r.be().gather_rows(sb.as<float>(), rb.as<int32_t>(), n, dim, out.as<float>());
            return to_numpy(r.get<float>(out, static_cast<size_t>(n) * dim),
                            {static_cast<size_t>(n), static_cast<size_t>(dim)});
          },
          "src"_a, "rows"_a)
      .def(
          "sample",
          [](OpRunner& r, F2 logits, const std::vector<int32_t>& slots, const Params& params) {
            const int n = static_cast<int>(logits.shape(0)), V = static_cast<int>(logits.shape(1));
            if (static_cast<int>(slots.size()) != n) throw InvalidArgument("one slot per row");
            std::vector<SamplingState> st = r.states(params);
            check_slots(slots, st.size());
            BackendBuffer lb = r.put(logits.data(), logits.size() * 4), sb = r.put(slots),
                          stb = r.put(st), out(r.be(), n * 4);
            r.be().sample(lb.as<float>(), n, V, sb.as<int32_t>(), stb.as<SamplingState>(),
                          out.as<int32_t>());
            std::vector<SamplingState> after = r.get<SamplingState>(stb, st.size());
            std::vector<uint64_t> steps;
            for (const SamplingState& s : after) steps.push_back(s.step);
            return std::make_tuple(r.get<int32_t>(out, n), steps);
          },
          "logits"_a, "slots"_a, "params"_a,
          "(tokens, steps per slot); params per slot: (temperature, top_k, top_p, seed, step)")
      .def(
          "spec_rows",
          [](OpRunner& r, I2 seqs, const std::vector<int32_t>& slots, int first, int count) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            const int B = static_cast<int>(slots.size()), rows = B * count;
            BackendBuffer sb = r.put(s), slb = r.put(slots), tok(r.be(), rows * 4),
                          pos(r.be(), rows * 4), rs(r.be(), rows * 4);
            r.be().spec_rows(sb.as<SeqState>(), slb.as<int32_t>(), B, first, count,
                             tok.as<int32_t>(), pos.as<int32_t>(), rs.as<int32_t>());
            return std::make_tuple(r.get<int32_t>(tok, rows), r.get<int32_t>(pos, rows),
                                   r.get<int32_t>(rs, rows));
          },
          "seqs"_a, "slots"_a, "first"_a, "count"_a, "(tokens, pos, row_slots)")
      .def(
          "spec_draft_sample",
          [](OpRunner& r, F2 logits, int vocab_common, int j, I2 seqs,
             const std::vector<int32_t>& slots, const Params& params) {
            std::vector<SeqState> s = seqs_from(seqs);
            std::vector<SamplingState> st = r.states(params);
            check_slots(slots, std::min(s.size(), st.size()));
            const int B = static_cast<int>(logits.shape(0)), V = static_cast<int>(logits.shape(1));
            if (static_cast<int>(slots.size()) != B || j < 0 || j >= kMaxDraftLen ||
                vocab_common < 1 || vocab_common > V)
              throw InvalidArgument("spec_draft_sample arguments");
            BackendBuffer lb = r.put(logits.data(), logits.size() * 4), sb = r.put(s),
                          slb = r.put(slots), stb = r.put(st);
            r.be().spec_draft_sample(lb.as<float>(), B, V, vocab_common, j, sb.as<SeqState>(),
                                     slb.as<int32_t>(), stb.as<SamplingState>());
            return std::make_tuple(
                to_numpy(r.get<float>(lb, logits.size()), {logits.shape(0), logits.shape(1)}),
                seqs_to(r.get<SeqState>(sb, s.size())));
          },
          "logits"_a, "vocab_common"_a, "j"_a, "seqs"_a, "slots"_a, "params"_a,
          "(logits turned into q rows where sampling, seqs with draft[j] set)")
      .def(
          "spec_accept",
          [](OpRunner& r, F2 logits, F2 q, int k, I2 seqs, const std::vector<int32_t>& slots,
             const Params& params) {
            std::vector<SeqState> s = seqs_from(seqs);
            std::vector<SamplingState> st = r.states(params);
            check_slots(slots, std::min(s.size(), st.size()));
            const int B = static_cast<int>(slots.size()), V = static_cast<int>(logits.shape(1));
            const int Vd = static_cast<int>(q.shape(1));
            if (k < 0 || k > kMaxDraftLen || static_cast<int>(logits.shape(0)) != B * (k + 1) ||
                static_cast<int>(q.shape(0)) != B * k || (k > 0 && Vd < 1))
              throw InvalidArgument("spec_accept: logits [B (k+1), V], q [k B, Vd]");
            BackendBuffer lb = r.put(logits.data(), logits.size() * 4),
                          qb = r.put(q.data(), q.size() * 4), sb = r.put(s), slb = r.put(slots),
                          stb = r.put(st);
            r.be().spec_accept(lb.as<float>(), k > 0 ? qb.as<float>() : nullptr, B, k, V, Vd,
                               sb.as<SeqState>(), slb.as<int32_t>(), stb.as<SamplingState>());
            return seqs_to(r.get<SeqState>(sb, s.size()));
          },
          "logits"_a, "q"_a, "k"_a, "seqs"_a, "slots"_a, "params"_a,
          "seqs after acceptance, output and rollback");

  m.def(
      "time_forward",
      [](Runtime& rt, const std::string& role, int rows, int n_logits, int context, int iters,
         bool graph) {
        Model* mdl = role == "target" ? &rt.target() : (role == "draft" ? rt.draft() : nullptr);
        if (!mdl) throw InvalidArgument("no model '" + role + "' in this engine");
        if (rows < 1 || rows > mdl->limits().max_rows || n_logits < 0 || n_logits > rows ||
            context < 0 || context + rows > rt.max_seq_len() || iters < 1)
          throw InvalidArgument("time_forward: rows, context or iters out of range");
        nb::gil_scoped_release release;
        Backend& be = rt.backend();
        const int V = mdl->config().vocab_size;
        std::vector<int32_t> tok(rows), pos(rows), slot(rows, 0), lr(rows);
        for (int i = 0; i < rows; ++i) tok[i] = (i * 7919 + 13) % V;
        std::iota(pos.begin(), pos.end(), context);
        std::iota(lr.begin(), lr.end(), 0);
        BackendBuffer tb(be, rows * 4), pb(be, rows * 4), sb(be, rows * 4), lb(be, rows * 4);
        BackendBuffer logits(be, static_cast<size_t>(std::max(n_logits, 1)) * V * 4);
        be.upload(tb.as<void>(), tok.data(), rows * 4);
        be.upload(pb.as<void>(), pos.data(), rows * 4);
        be.upload(sb.as<void>(), slot.data(), rows * 4);
        be.upload(lb.as<void>(), lr.data(), rows * 4);
        auto issue = [&] {
          mdl->forward(tb.as<int32_t>(), pb.as<int32_t>(), sb.as<int32_t>(), rows, lb.as<int32_t>(),
                       n_logits, logits.as<float>());
        };
        std::unique_ptr<BackendGraph> g = graph ? be.capture(issue) : nullptr;
        auto once = [&] { g ? g->launch() : issue(); };
        once();
        be.synchronize();
        const double t0 = now_s();
        for (int i = 0; i < iters; ++i) once();
        be.synchronize();
        return (now_s() - t0) / iters;
      },
      "runtime"_a, "role"_a, "rows"_a, "n_logits"_a, "context"_a, "iters"_a, "graph"_a = true,
      "Seconds per forward of `rows` rows at positions context.. of KV slot 0 (overwritten)");

  m.def(
      "time_iterations",
      [](Runtime& rt, Decoder& dec, int k, int iters) {
        // The decoder must have run an iteration of sequences in slots [0, B) (requests added
        // to a fresh decoder). Stops before any could run out of positions.
        if (k < 0 || k > rt.draft_len() || dec.last_batch() < 1)
          throw InvalidArgument("time_iterations: bad k, or the decoder has not iterated yet");
        nb::gil_scoped_release release;
        Backend& be = rt.backend();
        SpecProgram& prog = dec.program();
        const int B = dec.last_batch();
        std::vector<SeqState> seqs(rt.max_batch());
        auto room = [&] {
          for (int b = 0; b < B; ++b)
            if (seqs[b].n_past + k + 1 >= rt.max_seq_len()) return false;
          return true;
        };
        be.download(seqs.data(), prog.seqs(), sizeof(SeqState) * seqs.size());
        int done = 0;
        const double t0 = now_s();
        while (done < iters && room()) {
          prog.run(k);
          be.download(seqs.data(), prog.seqs(), sizeof(SeqState) * seqs.size());
          ++done;
        }
        const double dt = now_s() - t0;
        return std::make_tuple(done ? dt / done : 0.0, done);
      },
      "runtime"_a, "decoder"_a, "k"_a, "iters"_a,
      "(seconds per iteration, iterations run) of the decoder's current sequences (their state "
      "advances; the decoder's host bookkeeping does not)");

  m.def(
      "cuda_device_info",
      [](int device) {
#ifdef TRT_SPEC_WITH_CUDA
        if (cuda_device_count() <= device) throw InvalidArgument("no such CUDA device");
        CudaDeviceInfo i = cuda_device_info(device);
        nb::dict d;
        d["name"] = i.name;
        d["compute_capability"] = std::to_string(i.cc_major) + "." + std::to_string(i.cc_minor);
        d["sm_count"] = i.sm_count;
        d["total_bytes"] = i.total_bytes;
        d["free_bytes"] = i.free_bytes;
        d["peak_bandwidth_gbps"] = i.peak_bandwidth_gbps;
        return d;
#else
        throw Error("this build has no CUDA backend");
        return nb::dict();
#endif
      },
      "device"_a = 0, "Name, compute capability, SMs, memory and peak bandwidth of a GPU");
  m.def(
      "cuda_bandwidth_gbps",
      [](int device, size_t bytes, int iters) {
#ifdef TRT_SPEC_WITH_CUDA
        if (cuda_device_count() <= device) throw InvalidArgument("no such CUDA device");
        nb::gil_scoped_release release;
        return cuda_copy_bandwidth_gbps(device, bytes, iters);
#else
        throw Error("this build has no CUDA backend");
        return 0.0;
#endif
      },
      "device"_a = 0, "bytes"_a = size_t{1} << 30, "iters"_a = 20,
      "Measured device-to-device copy bandwidth, GB/s (bytes read + written)");
  m.def(
      "cpu_attention",
      [](HostArray<float, 3> q, HostArray<float, 4> k, HostArray<float, 4> v,
         HostArray<int32_t, 1> slot, HostArray<int32_t, 1> len, float scale,
         std::optional<HostArray<int32_t, 1>> tree_base,
         std::optional<HostArray<uint64_t, 1>> tree_bits, int64_t task_chunk) {
        // q [n, heads, hd]; k, v [slots, kv_heads, max_seq, hd] (one layer of the cache).
        const int n = static_cast<int>(q.shape(0)), hd = static_cast<int>(q.shape(2));
        const int slots = static_cast<int>(k.shape(0)), max_seq = static_cast<int>(k.shape(2));
        bool ok = k.shape(3) == q.shape(2) && slot.shape(0) == q.shape(0) &&
                  len.shape(0) == q.shape(0) && tree_base.has_value() == tree_bits.has_value();
        for (int d = 0; d < 4; ++d) ok = ok && k.shape(d) == v.shape(d);
        if (tree_base)
          ok = ok && tree_base->shape(0) == q.shape(0) && tree_bits->shape(0) == q.shape(0);
        for (int i = 0; ok && i < n; ++i)
          ok = slot.data()[i] >= 0 && slot.data()[i] < slots && len.data()[i] >= 1 &&
               len.data()[i] <= max_seq;
        if (!ok) throw InvalidArgument("cpu_attention: shapes, slots or lens out of range");
        cpu::AttentionArgs a;
        a.n_rows = n;
        a.n_heads = static_cast<int>(q.shape(1));
        a.n_kv_heads = static_cast<int>(k.shape(1));
        a.head_dim = hd;
        a.scale = scale;
        a.q = q.data();
        a.q_stride = static_cast<int64_t>(a.n_heads) * hd;
        std::vector<const float*> kp(n), vp(n);
        const size_t slice = static_cast<size_t>(a.n_kv_heads) * max_seq * hd;
        for (int i = 0; i < n; ++i) {
          kp[i] = k.data() + slot.data()[i] * slice;
          vp[i] = v.data() + slot.data()[i] * slice;
        }
        a.k = kp.data();
        a.v = vp.data();
        a.kv_head_stride = static_cast<int64_t>(max_seq) * hd;
        a.max_seq = max_seq;
        a.len = len.data();
        if (tree_base) {
          a.tree_base = tree_base->data();
          a.tree_bits = tree_bits->data();
        }
        std::vector<float> out(static_cast<size_t>(n) * a.n_heads * hd);
        a.out = out.data();
        a.out_stride = a.q_stride;
        {
          nb::gil_scoped_release release;
          const int64_t tasks = cpu::attention_tasks(a);
          if (task_chunk <= 0) {
            cpu::attention_run(a, 0, tasks);
          } else {  // chunks of task_chunk tasks, last chunk first (another split and order)
            for (int64_t e = tasks; e > 0; e -= task_chunk)
              cpu::attention_run(a, std::max<int64_t>(0, e - task_chunk), e);
          }
        }
        return to_numpy(std::move(out), {static_cast<size_t>(n), static_cast<size_t>(a.n_heads),
                                         static_cast<size_t>(hd)});
      },
      "q"_a, "k"_a, "v"_a, "slot"_a, "len"_a, "scale"_a, "tree_base"_a = nb::none(),
      "tree_bits"_a = nb::none(), "task_chunk"_a = 0,
      "The CPU attention kernel on host arrays: out [n, heads, hd]; task_chunk > 0 runs its tasks "
      "in chunks of that many, last chunk first");
}
