// ops_testing.cpp: OpRunner of the test module (testing.cpp): single backend ops and speculative
// ops (spec_ops.h) on host arrays, on a chosen backend ("cpu", "cuda"), so that tests compare
// every op of the CUDA backend with the CPU's.
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

#include "backend/backend.h"
#include "bindings/common.h"
#include "common/errors.h"
#include "engine/request.h"
#include "engine/runtime.h"
#include "spec/draft_model_ops.h"
#include "spec/eagle3_ops.h"
#include "spec/lookup_ops.h"
#include "spec/medusa_ops.h"
#include "spec/pard_ops.h"
#include "spec/spec_ops.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace trt_spec;

namespace {

using bindings::HostArray;

constexpr int kSeqInts = sizeof(SeqState) / sizeof(int32_t);
static_assert(sizeof(SeqState) % sizeof(int32_t) == 0, "SeqState is int32 fields");

template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape, owner);
}

// Single backend ops on host arrays: inputs are copied to backend memory, outputs back.
class OpRunner {
 public:
  explicit OpRunner(const std::string& device) : be_(make_backend(device, 2)) {}
  Backend& be() { return *be_; }
  // The backend's speculative ops, with scratch for B sequences, k nodes, vocab V.
  SpecOps& spec(int B, int k, int V) {
    if (!spec_ || B > spec_B_ || k > spec_k_ || V > spec_V_) {
      spec_B_ = std::max(B, spec_B_);
      spec_k_ = std::max(k, spec_k_);
      spec_V_ = std::max(V, spec_V_);
      spec_ = make_spec_ops(*be_, spec_B_, spec_k_, spec_V_);
    }
    return *spec_;
  }
  // The draft model proposer's ops, for B sequences over rows of V ids.
  DraftModelOps& draft_ops(int B, int V) {
    if (!draft_ || B > draft_B_ || V > draft_V_) {
      draft_B_ = std::max(B, draft_B_);
      draft_V_ = std::max(V, draft_V_);
      draft_ = make_draft_model_ops(*be_, draft_B_, draft_V_);
    }
    return *draft_;
  }
  MedusaOps& medusa_ops(int B) {
    if (!medusa_ || B > medusa_B_) {
      medusa_B_ = std::max(B, medusa_B_);
      medusa_ = make_medusa_ops(*be_, medusa_B_);
    }
    return *medusa_;
  }
  Eagle3Ops& eagle3_ops(int B) {
    if (!eagle3_ || B > eagle3_B_) {
      eagle3_B_ = std::max(B, eagle3_B_);
      eagle3_ = make_eagle3_ops(*be_, eagle3_B_);
    }
    return *eagle3_;
  }
  LookupOps& lookup_ops() {
    if (!lookup_) lookup_ = make_lookup_ops(*be_);
    return *lookup_;
  }

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
      SamplingParams sp{t, k, p, -1, seed};
      validate_sampling(sp);
      st.push_back(SamplingState{sp, step});
    }
    return st;
  }

 private:
  std::unique_ptr<Backend> be_;
  std::unique_ptr<SpecOps> spec_;
  int spec_B_ = 0, spec_k_ = 0, spec_V_ = 0;
  std::unique_ptr<DraftModelOps> draft_;
  int draft_B_ = 0, draft_V_ = 0;
  std::unique_ptr<LookupOps> lookup_;
  std::unique_ptr<MedusaOps> medusa_;
  int medusa_B_ = 0;
  std::unique_ptr<Eagle3Ops> eagle3_;
  int eagle3_B_ = 0;
  std::vector<std::shared_ptr<uint8_t>> keep_;
};

// A KV cache array of any element type: float32 (f32) or uint16 bits (f16, bf16).
using KvArray = nb::ndarray<nb::ndim<1>, nb::c_contig, nb::device::cpu, nb::ro>;

KvType kv_type_arg(const std::string& name, const KvArray& k, const KvArray& v, size_t elements) {
  KvType t;
  if (!parse_kv_type(name, &t)) throw InvalidArgument("kv_type must be f32, f16 or bf16");
  const nb::dlpack::dtype want = t == KvType::F32 ? nb::dtype<float>() : nb::dtype<uint16_t>();
  if (k.dtype() != want || v.dtype() != want || k.shape(0) != elements || v.shape(0) != elements)
    throw InvalidArgument(
        "KV cache arrays: float32 for f32, uint16 for f16 / bf16, flat "
        "[slots, layers, kv_heads, max_seq, head_dim]");
  return t;
}

// A cache buffer back as a numpy array of its element type.
nb::object cache_array(OpRunner& r, const BackendBuffer& b, size_t elements, KvType t) {
  if (t == KvType::F32) return nb::cast(to_numpy(r.get<float>(b, elements), {elements}));
  return nb::cast(to_numpy(r.get<uint16_t>(b, elements), {elements}));
}

// Host state of a speculative op call: sequences, sampling states, history and prediction
// ([slots, max_seq] each), in backend memory.
struct SpecArgs {
  BackendBuffer seqs, states, history, prediction, slots;
  SpecState st;
  int n_seqs = 0, max_seq = 0;
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

SpecArgs spec_args(OpRunner& r, const std::vector<SeqState>& seqs,
                   std::vector<SamplingState> states, std::vector<int32_t> history,
                   std::vector<int32_t> prediction, int max_seq) {
  SpecArgs a;
  a.n_seqs = static_cast<int>(seqs.size());
  a.max_seq = max_seq;
  states.resize(seqs.size());
  history.resize(seqs.size() * max_seq);
  prediction.resize(seqs.size() * max_seq);
  a.seqs = r.put(seqs);
  a.states = r.put(states);
  a.history = r.put(history);
  a.prediction = r.put(prediction);
  a.st = SpecState{a.seqs.as<SeqState>(), a.states.as<SamplingState>(), a.history.as<int32_t>(),
                   a.prediction.as<int32_t>(), max_seq};
  return a;
}

}  // namespace

void bind_op_runner(nb::module_& m) {
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
          [](OpRunner& r, HostArray<uint8_t, 1> blob, int type, int64_t rows, int64_t cols, F2 x,
             std::optional<F1> bias) {
            const WeightType t = static_cast<WeightType>(type);
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
          [](OpRunner& r, HostArray<uint8_t, 1> blob, int type, int64_t rows, int64_t cols,
             const std::vector<int32_t>& tokens) {
            // (ids outside [0, rows) are not refused: the backends' guard turns them into zero
            // rows, the draft's reading of a target id its vocabulary lacks)
            const WeightType t = static_cast<WeightType>(type);
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
             int n_heads, int n_kv_heads, int head_dim, float scale, KvArray k_cache,
             KvArray v_cache, int slots, int layers, int max_seq, int layer,
             const std::vector<int32_t>& kv_idx, const std::vector<int32_t>& tree_base,
             const std::vector<uint64_t>& tree_bits, const std::string& kv_type) {
            const int n = static_cast<int>(qkv.shape(0));
            const size_t cache =
                static_cast<size_t>(slots) * layers * n_kv_heads * max_seq * head_dim;
            const KvType t = kv_type_arg(kv_type, k_cache, v_cache, cache);
            const size_t eb = kv_type_bytes(t);
            if (static_cast<int>(pos.size()) != n || static_cast<int>(slot.size()) != n ||
                layer < 0 || layer >= layers ||
                static_cast<int>(qkv.shape(1)) != (n_heads + 2 * n_kv_heads) * head_dim)
              throw InvalidArgument("attention shapes");
            const bool tree = !tree_bits.empty();
            if ((!kv_idx.empty() && static_cast<int>(kv_idx.size()) != n) ||
                (tree && (static_cast<int>(tree_bits.size()) != n ||
                          static_cast<int>(tree_base.size()) != n)))
              throw InvalidArgument("attention: kv_idx / tree arrays need one entry per row");
            for (int i = 0; i < n; ++i) {
              const int idx = kv_idx.empty() ? pos[i] : kv_idx[i];
              if (pos[i] < 0 || pos[i] >= max_seq || idx < 0 || idx >= max_seq || slot[i] < 0 ||
                  slot[i] >= slots)
                throw InvalidArgument("attention: pos, kv_idx or slot out of range");
            }
            BackendBuffer qb = r.put(qkv.data(), qkv.size() * 4), pb = r.put(pos), sb = r.put(slot);
            BackendBuffer ib = kv_idx.empty() ? BackendBuffer() : r.put(kv_idx);
            BackendBuffer tbase = tree ? r.put(tree_base) : BackendBuffer();
            BackendBuffer tbits = tree ? r.put(tree_bits) : BackendBuffer();
            Rows rows{nullptr,
                      pb.as<int32_t>(),
                      sb.as<int32_t>(),
                      kv_idx.empty() ? nullptr : ib.as<int32_t>(),
                      tree ? tbase.as<int32_t>() : nullptr,
                      tree ? tbits.as<uint64_t>() : nullptr};
            BackendBuffer kb = r.put(k_cache.data(), cache * eb),
                          vb = r.put(v_cache.data(), cache * eb);
            KvCache kv{kb.as<void>(), vb.as<void>(), t,       slots,
                       layers,        n_kv_heads,    max_seq, head_dim};
            const size_t out_n = static_cast<size_t>(n) * n_heads * head_dim;
            BackendBuffer out(r.be(), out_n * 4);
            const AttentionShape shape{n_heads, n_kv_heads, head_dim, scale};
            r.be().kv_write(qb.as<float>(), rows, n, shape, kv, layer);
            r.be().attention(qb.as<float>(), rows, n, shape, kv, layer, out.as<float>());
            return std::make_tuple(
                to_numpy(r.get<float>(out, out_n),
                         {static_cast<size_t>(n), static_cast<size_t>(n_heads) * head_dim}),
                cache_array(r, kb, cache, t), cache_array(r, vb, cache, t));
          },
          "qkv"_a, "pos"_a, "slot"_a, "n_heads"_a, "n_kv_heads"_a, "head_dim"_a, "scale"_a,
          "k_cache"_a, "v_cache"_a, "slots"_a, "layers"_a, "max_seq"_a, "layer"_a,
          "kv_idx"_a = std::vector<int32_t>{}, "tree_base"_a = std::vector<int32_t>{},
          "tree_bits"_a = std::vector<uint64_t>{}, "kv_type"_a = "f32",
          "kv_write then attention: (out [n, n_heads head_dim], k_cache, v_cache); caches flat "
          "[slots, layers, kv_heads, max_seq, head_dim], float32 (kv_type f32) or uint16 bits "
          "(f16, bf16)")
      .def(
          "kv_copy",
          [](OpRunner& r, KvArray k_cache, KvArray v_cache, int slots, int layers, int kv_heads,
             int max_seq, int head_dim, const std::vector<int32_t>& slot,
             const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
             const std::string& kv_type) {
            const size_t cache =
                static_cast<size_t>(slots) * layers * kv_heads * max_seq * head_dim;
            const KvType t = kv_type_arg(kv_type, k_cache, v_cache, cache);
            const size_t eb = kv_type_bytes(t);
            const int n = static_cast<int>(slot.size());
            if (static_cast<int>(src.size()) != n || static_cast<int>(dst.size()) != n)
              throw InvalidArgument("kv_copy shapes");
            for (int i = 0; i < n; ++i)
              if (slot[i] < 0 || slot[i] >= slots || src[i] >= max_seq || dst[i] < 0 ||
                  dst[i] >= max_seq)
                throw InvalidArgument("kv_copy: slot or index out of range");
            BackendBuffer kb = r.put(k_cache.data(), cache * eb),
                          vb = r.put(v_cache.data(), cache * eb);
            BackendBuffer sb = r.put(slot), srb = r.put(src), db = r.put(dst);
            KvCache kv{kb.as<void>(), vb.as<void>(), t, slots, layers, kv_heads, max_seq, head_dim};
            r.be().kv_copy(kv, sb.as<int32_t>(), srb.as<int32_t>(), db.as<int32_t>(), n);
            return std::make_tuple(cache_array(r, kb, cache, t), cache_array(r, vb, cache, t));
          },
          "k_cache"_a, "v_cache"_a, "slots"_a, "layers"_a, "kv_heads"_a, "max_seq"_a, "head_dim"_a,
          "slot"_a, "src"_a, "dst"_a, "kv_type"_a = "f32",
          "(k_cache, v_cache) after the copies (arrays as attention takes them)")
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
          "expand_columns",
          [](OpRunner& r, F2 src, const std::vector<int32_t>& index) {
            const int n = static_cast<int>(src.shape(0)), cols = static_cast<int>(src.shape(1));
            const int width = static_cast<int>(index.size());
            for (int32_t j : index)
              if (j < -1 || j >= cols) throw InvalidArgument("index entries must be in [-1, cols)");
            BackendBuffer sb = r.put(src.data(), src.size() * 4), ib = r.put(index);
            BackendBuffer out(r.be(), static_cast<size_t>(n) * width * 4);
            r.be().expand_columns(sb.as<float>(), cols, ib.as<int32_t>(), n, width,
                                  out.as<float>());
            return to_numpy(r.get<float>(out, static_cast<size_t>(n) * width),
                            {static_cast<size_t>(n), static_cast<size_t>(width)});
          },
          "src"_a, "index"_a)
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
            SpecArgs a = spec_args(r, s, st, {}, {}, 1);
            BackendBuffer lb = r.put(logits.data(), logits.size() * 4), slb = r.put(slots);
            r.draft_ops(B, V).draft_sample(a.st, slb.as<int32_t>(), B, j, lb.as<float>(), V,
                                           vocab_common);
            return std::make_tuple(
                to_numpy(r.get<float>(lb, logits.size()), {logits.shape(0), logits.shape(1)}),
                seqs_to(r.get<SeqState>(a.seqs, s.size())));
          },
          "logits"_a, "vocab_common"_a, "j"_a, "seqs"_a, "slots"_a, "params"_a,
          "(logits turned into q rows where sampling, seqs with chain node j set)")
      .def(
          "spec_draft_rows",
          [](OpRunner& r, I2 seqs, const std::vector<int32_t>& slots, int j) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            if (j < 0 || j >= kMaxDraftLen) throw InvalidArgument("spec_draft_rows arguments");
            const int B = static_cast<int>(slots.size()), rows = B * (j == 0 ? 2 : 1);
            SpecArgs a = spec_args(r, s, {}, {}, {}, 1);
            BackendBuffer slb = r.put(slots), tok(r.be(), rows * 4), pos(r.be(), rows * 4),
                          rs(r.be(), rows * 4);
            RowBuffers out{tok.as<int32_t>(), pos.as<int32_t>(), rs.as<int32_t>()};
            r.draft_ops(B, 1).draft_rows(a.st, slb.as<int32_t>(), B, j, out);
            return std::make_tuple(r.get<int32_t>(tok, rows), r.get<int32_t>(pos, rows),
                                   r.get<int32_t>(rs, rows));
          },
          "seqs"_a, "slots"_a, "j"_a, "(tokens, positions, slots) of draft step j's rows")
      .def(
          "spec_verify_rows",
          [](OpRunner& r, I2 seqs, const std::vector<int32_t>& slots, int k, int source) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            if (k < 0 || k > kMaxDraftLen || source < 0 || source >= kDraftSourceCount)
              throw InvalidArgument("spec_verify_rows arguments");
            const int B = static_cast<int>(slots.size()), rows = B * (k + 1);
            SpecArgs a = spec_args(r, s, {}, {}, {}, 1);
            BackendBuffer slb = r.put(slots), tok(r.be(), rows * 4), pos(r.be(), rows * 4),
                          rs(r.be(), rows * 4), idx(r.be(), rows * 4), base(r.be(), rows * 4),
                          bits(r.be(), rows * 8);
            RowBuffers out{tok.as<int32_t>(), pos.as<int32_t>(),  rs.as<int32_t>(),
                           idx.as<int32_t>(), base.as<int32_t>(), bits.as<uint64_t>()};
            r.spec(B, k, 1).verify_rows(a.st, slb.as<int32_t>(), B, k,
                                        static_cast<DraftSource>(source), out);
            return std::make_tuple(r.get<int32_t>(tok, rows), r.get<int32_t>(pos, rows),
                                   r.get<int32_t>(rs, rows), r.get<int32_t>(idx, rows),
                                   r.get<int32_t>(base, rows), r.get<uint64_t>(bits, rows),
                                   seqs_to(r.get<SeqState>(a.seqs, s.size())));
          },
          "seqs"_a, "slots"_a, "k"_a, "source"_a,
          "(tokens, pos, row_slots, kv_idx, tree_base, tree_bits, seqs) of the verify rows")
      .def(
          "spec_pard_rows",
          [](OpRunner& r, I2 seqs, const std::vector<int32_t>& slots, int k, int32_t mask) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            if (k < 1 || k > kMaxDraftLen) throw InvalidArgument("spec_pard_rows arguments");
            const int B = static_cast<int>(slots.size()), rows = B * (k + 1);
            SpecArgs a = spec_args(r, s, {}, {}, {}, 1);
            BackendBuffer slb = r.put(slots), tok(r.be(), rows * 4), pos(r.be(), rows * 4),
                          rs(r.be(), rows * 4);
            RowBuffers out{tok.as<int32_t>(), pos.as<int32_t>(), rs.as<int32_t>()};
            make_pard_ops(r.be())->rows(a.st, slb.as<int32_t>(), B, k, mask, out);
            return std::make_tuple(r.get<int32_t>(tok, rows), r.get<int32_t>(pos, rows),
                                   r.get<int32_t>(rs, rows));
          },
          "seqs"_a, "slots"_a, "k"_a, "mask"_a,
          "(tokens, positions, slots) of a parallel draft's [B, k + 1] rows")
      .def(
          "spec_medusa_tree",
          [](OpRunner& r, HostArray<float, 3> logits, int k, I2 seqs,
             const std::vector<int32_t>& slots) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            const int H = static_cast<int>(logits.shape(0)), B = static_cast<int>(logits.shape(1));
            const int V = static_cast<int>(logits.shape(2));
            if (static_cast<int>(slots.size()) != B)
              throw InvalidArgument("spec_medusa_tree: logits [heads, B, vocab]");
            SpecArgs a = spec_args(r, s, {}, {}, {}, 1);
            BackendBuffer lb = r.put(logits.data(), logits.size() * 4), slb = r.put(slots);
            r.medusa_ops(static_cast<int>(s.size()))
                .tree(a.st, slb.as<int32_t>(), B, k, lb.as<float>(), H, V);
            return seqs_to(r.get<SeqState>(a.seqs, s.size()));
          },
          "logits"_a, "k"_a, "seqs"_a, "slots"_a,
          "seqs with each sequence's Medusa tree from the heads' logits [heads, B, vocab]")
      .def(
          "spec_medusa_keep",
          [](OpRunner& r, F2 hidden, int k, I2 seqs, const std::vector<int32_t>& slots) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            const int B = static_cast<int>(slots.size()), D = static_cast<int>(hidden.shape(1));
            if (static_cast<int>(hidden.shape(0)) != B * (k + 1))
              throw InvalidArgument("spec_medusa_keep: hidden [B (k + 1), dim]");
            SpecArgs a = spec_args(r, s, {}, {}, {}, 1);
            BackendBuffer hb = r.put(hidden.data(), hidden.size() * 4), slb = r.put(slots);
            BackendBuffer kept(r.be(), s.size() * D * 4);
            r.medusa_ops(static_cast<int>(s.size()))
                .keep(a.st, slb.as<int32_t>(), B, k, hb.as<float>(), D, kept.as<float>());
            return to_numpy<float>(r.get<float>(kept, s.size() * D),
                                   {s.size(), static_cast<size_t>(D)});
          },
          "hidden"_a, "k"_a, "seqs"_a, "slots"_a,
          "kept [slots, dim]: each listed slot's stop-row hidden state (others zero)")
      .def(
          "spec_eagle3_absorb",
          [](OpRunner& r, int k, int max_seq, I2 seqs, const std::vector<int32_t>& slots) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            const int B = static_cast<int>(slots.size()), R = B * (k + 1);
            SpecArgs a = spec_args(r, s, {}, {}, {}, 1);
            BackendBuffer slb = r.put(slots);
            BackendBuffer tok(r.be(), R * 4), pos(r.be(), R * 4), sl(r.be(), R * 4),
                src(r.be(), R * 4), last(r.be(), B * 4);
            r.eagle3_ops(static_cast<int>(s.size()))
                .absorb_rows(a.st, slb.as<int32_t>(), B, k, max_seq,
                             Eagle3Rows{tok.as<int32_t>(), pos.as<int32_t>(), sl.as<int32_t>(),
                                        src.as<int32_t>()},
                             last.as<int32_t>());
            std::vector<int32_t> out;
            for (const BackendBuffer* b : {&tok, &pos, &sl, &src}) {
              const std::vector<int32_t> v = r.get<int32_t>(*b, R);
              out.insert(out.end(), v.begin(), v.end());
            }
            return nb::make_tuple(to_numpy<int32_t>(std::move(out), {4, static_cast<size_t>(R)}),
                                  to_numpy<int32_t>(r.get<int32_t>(last, B), {size_t(B)}));
          },
          "k"_a, "max_seq"_a, "seqs"_a, "slots"_a,
          "The EAGLE-3 head's absorbed rows after acceptance: ([tokens, pos, slot, src] "
          "[4, B (k + 1)], last [B])")
      .def(
          "spec_eagle3_chain",
          [](OpRunner& r, HostArray<float, 2> logits, int j, int max_seq,
             const std::vector<int32_t>& tokens, I2 seqs, const std::vector<int32_t>& slots) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            const int B = static_cast<int>(logits.shape(0)), Vd = static_cast<int>(logits.shape(1));
            if (static_cast<int>(slots.size()) != B || static_cast<int>(tokens.size()) != Vd)
              throw InvalidArgument(
                  "spec_eagle3_chain: logits [B, draft_vocab], tokens [draft_vocab]");
            SpecArgs a = spec_args(r, s, {}, {}, {}, 1);
            BackendBuffer lb = r.put(logits.data(), logits.size() * 4), slb = r.put(slots),
                          tb = r.put(tokens);
            BackendBuffer tok(r.be(), B * 4), pos(r.be(), B * 4), sl(r.be(), B * 4);
            r.eagle3_ops(static_cast<int>(s.size()))
                .chain_step(a.st, slb.as<int32_t>(), B, j, max_seq, lb.as<float>(), Vd,
                            tb.as<int32_t>(),
                            Eagle3Rows{tok.as<int32_t>(), pos.as<int32_t>(), sl.as<int32_t>()});
            std::vector<int32_t> next;
            for (const BackendBuffer* b : {&tok, &pos, &sl}) {
              const std::vector<int32_t> v = r.get<int32_t>(*b, B);
              next.insert(next.end(), v.begin(), v.end());
            }
            return nb::make_tuple(seqs_to(r.get<SeqState>(a.seqs, s.size())),
                                  to_numpy<int32_t>(std::move(next), {3, static_cast<size_t>(B)}));
          },
          "logits"_a, "j"_a, "max_seq"_a, "tokens"_a, "seqs"_a, "slots"_a,
          "(seqs with node j of each tree from the head's logits [B, draft_vocab], the next rows "
          "[tokens, pos, slot] [3, B])")
      .def(
          "spec_accept",
          [](OpRunner& r, F2 logits, F2 q, int k, I2 seqs, const std::vector<int32_t>& slots,
             const Params& params, I2 history) {
            std::vector<SeqState> s = seqs_from(seqs);
            std::vector<SamplingState> st = r.states(params);
            check_slots(slots, std::min(s.size(), st.size()));
            const int B = static_cast<int>(slots.size()), V = static_cast<int>(logits.shape(1));
            const int Vd = static_cast<int>(q.shape(1));
            if (k < 0 || k > kMaxDraftLen || static_cast<int>(logits.shape(0)) != B * (k + 1) ||
                static_cast<int>(q.shape(0)) != B * k || history.shape(0) != s.size() ||
                history.shape(1) < 1)
              throw InvalidArgument(
                  "spec_accept: logits [B (k+1), V], q [k B, Vd], history [slots, max_seq]");
            std::vector<int32_t> h(history.data(), history.data() + history.size());
            SpecArgs a = spec_args(r, s, st, h, {}, static_cast<int>(history.shape(1)));
            BackendBuffer lb = r.put(logits.data(), logits.size() * 4),
                          qb = r.put(q.data(), std::max<size_t>(q.size(), 1) * 4),
                          slb = r.put(slots);
            const int M = B * kMaxDraftNodes;
            BackendBuffer ms(r.be(), M * 4), msrc(r.be(), M * 4), mdst(r.be(), M * 4);
            r.spec(B, k, V).accept(
                a.st, slb.as<int32_t>(), B, k, lb.as<float>(), V, k > 0 ? qb.as<float>() : nullptr,
                Vd, KvMoves{ms.as<int32_t>(), msrc.as<int32_t>(), mdst.as<int32_t>()});
            std::vector<int32_t> hout = r.get<int32_t>(a.history, h.size());
            return std::make_tuple(seqs_to(r.get<SeqState>(a.seqs, s.size())),
                                   to_numpy(std::move(hout), {history.shape(0), history.shape(1)}),
                                   std::make_tuple(r.get<int32_t>(ms, M), r.get<int32_t>(msrc, M),
                                                   r.get<int32_t>(mdst, M)));
          },
          "logits"_a, "q"_a, "k"_a, "seqs"_a, "slots"_a, "params"_a, "history"_a,
          "(seqs, history, (move slot, src, dst)) after acceptance, commit and history append")
      .def(
          "spec_lookup",
          [](OpRunner& r, I2 seqs, const std::vector<int32_t>& slots, I2 history, I2 prediction) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            if (history.shape(0) != s.size() || prediction.shape(0) != s.size() ||
                history.shape(1) != prediction.shape(1))
              throw InvalidArgument("spec_lookup: history and prediction [slots, max_seq]");
            const int B = static_cast<int>(slots.size());
            std::vector<int32_t> h(history.data(), history.data() + history.size());
            std::vector<int32_t> p(prediction.data(), prediction.data() + prediction.size());
            SpecArgs a = spec_args(r, s, {}, h, p, static_cast<int>(history.shape(1)));
            BackendBuffer slb = r.put(slots);
            r.lookup_ops().lookup(a.st, slb.as<int32_t>(), B);
            return seqs_to(r.get<SeqState>(a.seqs, s.size()));
          },
          "seqs"_a, "slots"_a, "history"_a, "prediction"_a,
          "seqs with each sequence's lookup tree and ready_n");
}
