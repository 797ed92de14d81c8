// ops_testing.h: OpRunner of the test module (ops_testing.cpp, ops_testing_heads.cpp): single
// backend ops on host arrays, on a chosen backend, and the helpers its bindings share.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "bindings/common.h"
#include "common/errors.h"
#include "engine/request.h"
#include "engine/runtime.h"
#include "spec/draft_model_ops.h"
#include "spec/eagle3_ops.h"
#include "spec/lookup_ops.h"
#include "spec/medusa_ops.h"
#include "spec/spec_ops.h"

namespace trt_spec::op_testing {

namespace nb = nanobind;

using bindings::HostArray;

inline constexpr int kSeqInts = sizeof(SeqState) / sizeof(int32_t);
static_assert(sizeof(SeqState) % sizeof(int32_t) == 0, "SeqState is int32 fields");

template <typename T>
inline nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& v, std::initializer_list<size_t> shape) {
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

inline KvType kv_type_arg(const std::string& name, const KvArray& k, const KvArray& v,
                          size_t elements) {
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
inline nb::object cache_array(OpRunner& r, const BackendBuffer& b, size_t elements, KvType t) {
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

inline std::vector<SeqState> seqs_from(const HostArray<int32_t, 2>& a) {
  if (a.shape(1) != static_cast<size_t>(kSeqInts))
    throw InvalidArgument("seqs must be int32 [slots, SEQ_STATE_INTS]");
  std::vector<SeqState> s(a.shape(0));
  std::memcpy(s.data(), a.data(), s.size() * sizeof(SeqState));
  return s;
}

inline nb::ndarray<nb::numpy, int32_t> seqs_to(std::vector<SeqState>&& s) {
  std::vector<int32_t> v(s.size() * kSeqInts);
  std::memcpy(v.data(), s.data(), s.size() * sizeof(SeqState));
  return to_numpy<int32_t>(std::move(v), {s.size(), static_cast<size_t>(kSeqInts)});
}

inline void check_slots(const std::vector<int32_t>& slots, size_t n_states) {
  for (int32_t s : slots)
    if (s < 0 || static_cast<size_t>(s) >= n_states) throw InvalidArgument("slot out of range");
}

inline SpecArgs spec_args(OpRunner& r, const std::vector<SeqState>& seqs,
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

// The OpRunner bindings of the draft heads' ops (Medusa, EAGLE-3): ops_testing_heads.cpp.
void bind_head_ops(nb::class_<OpRunner>& c);

}  // namespace trt_spec::op_testing
