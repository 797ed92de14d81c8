// ops_testing.cpp: the bindings of OpRunner (ops_testing.h), the test module's (testing.cpp) single
// backend ops and speculative ops (spec_ops.h) on host arrays, on a chosen backend ("cpu",
// "cuda"), so that tests compare every op of the CUDA backend with the CPU's (the draft heads'
// ops: ops_testing_heads.cpp).
#include "bindings/ops_testing.h"

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

#include "spec/pard_ops.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace trt_spec;
using namespace trt_spec::op_testing;

void bind_op_runner(nb::module_& m) {
  m.attr("SEQ_STATE_INTS") = kSeqInts;
  m.attr("EAGLE3_TREE_BYTES") = sizeof(Eagle3Tree);

  using F2 = HostArray<float, 2>;
  using F1 = HostArray<float, 1>;
  using I2 = HostArray<int32_t, 2>;
  using Params = std::vector<std::tuple<float, int, float, uint64_t, uint64_t>>;

  auto c =
      nb::class_<OpRunner>(m, "OpRunner",
                           "Single backend ops on host arrays, on a chosen device (for tests)")
          .def(nb::init<const std::string&>(), "device"_a)
          .def_prop_ro("name", [](OpRunner& r) { return r.be().name(); })
          .def(
              "linear",
              [](OpRunner& r, HostArray<uint8_t, 1> blob, int type, int64_t rows, int64_t cols,
                 F2 x, std::optional<F1> bias) {
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
                r.be().rmsnorm(xb.as<float>(),
                               WeightView{WeightType::F32, 1, dim, wb.as<uint8_t>()}, eps, n, dim,
                               out.as<float>());
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
                    static_cast<int>(cos_t.shape(1)) != head_dim / 2 ||
                    cos_t.size() != sin_t.size())
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
              [](OpRunner& r, F2 qkv, const std::vector<int32_t>& pos,
                 const std::vector<int32_t>& slot, int n_heads, int n_kv_heads, int head_dim,
                 float scale, KvArray k_cache, KvArray v_cache, int slots, int layers, int max_seq,
                 int layer, const std::vector<int32_t>& kv_idx,
                 const std::vector<int32_t>& tree_base, const std::vector<uint64_t>& tree_bits,
                 const std::string& kv_type) {
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
                BackendBuffer qb = r.put(qkv.data(), qkv.size() * 4), pb = r.put(pos),
                              sb = r.put(slot);
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
                KvCache kv{kb.as<void>(), vb.as<void>(), t,       slots,
                           layers,        kv_heads,      max_seq, head_dim};
                r.be().kv_copy(kv, sb.as<int32_t>(), srb.as<int32_t>(), db.as<int32_t>(), n);
                return std::make_tuple(cache_array(r, kb, cache, t), cache_array(r, vb, cache, t));
              },
              "k_cache"_a, "v_cache"_a, "slots"_a, "layers"_a, "kv_heads"_a, "max_seq"_a,
              "head_dim"_a, "slot"_a, "src"_a, "dst"_a, "kv_type"_a = "f32",
              "(k_cache, v_cache) after the copies (arrays as attention takes them)")
          .def(
              "swiglu",
              [](OpRunner& r, F2 gate_up) {
                const int n = static_cast<int>(gate_up.shape(0));
                const int ffn = static_cast<int>(gate_up.shape(1) / 2);
                BackendBuffer g = r.put(gate_up.data(), gate_up.size() * 4),
                              out(r.be(), n * ffn * 4);
                r.be().swiglu(g.as<float>(), n, ffn, out.as<float>());
                return to_numpy(r.get<float>(out, static_cast<size_t>(n) * ffn),
                                {static_cast<size_t>(n), static_cast<size_t>(ffn)});
              },
              "gate_up"_a)
          .def(
              "add",
              [](OpRunner& r, F1 x, F1 y) {
                if (x.shape(0) != y.shape(0)) throw InvalidArgument("add: sizes differ");
                BackendBuffer xb = r.put(x.data(), x.size() * 4),
                              yb = r.put(y.data(), y.size() * 4);
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
                  if (j < -1 || j >= cols)
                    throw InvalidArgument("index entries must be in [-1, cols)");
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
                const int n = static_cast<int>(logits.shape(0)),
                          V = static_cast<int>(logits.shape(1));
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
                const int B = static_cast<int>(logits.shape(0)),
                          V = static_cast<int>(logits.shape(1));
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
                    a.st, slb.as<int32_t>(), B, k, lb.as<float>(), V,
                    k > 0 ? qb.as<float>() : nullptr, Vd,
                    KvMoves{ms.as<int32_t>(), msrc.as<int32_t>(), mdst.as<int32_t>()});
                std::vector<int32_t> hout = r.get<int32_t>(a.history, h.size());
                return std::make_tuple(
                    seqs_to(r.get<SeqState>(a.seqs, s.size())),
                    to_numpy(std::move(hout), {history.shape(0), history.shape(1)}),
                    std::make_tuple(r.get<int32_t>(ms, M), r.get<int32_t>(msrc, M),
                                    r.get<int32_t>(mdst, M)));
              },
              "logits"_a, "q"_a, "k"_a, "seqs"_a, "slots"_a, "params"_a, "history"_a,
              "(seqs, history, (move slot, src, dst)) after acceptance, commit and history append")
          .def(
              "spec_lookup",
              [](OpRunner& r, I2 seqs, const std::vector<int32_t>& slots, I2 history,
                 I2 prediction) {
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
  bind_head_ops(c);
}
