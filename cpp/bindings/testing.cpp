// testing.cpp: the test-only nanobind module _trt_spec_testing (never shipped in the wheel;
// tests/conftest.py finds it in the build folder). Separate from the public trt_spec._core, with
// its own nanobind domain: it exchanges only plain values with Python, never _core's objects.
//
//   kernels      cpu_isas, cpu_matmul (one ISA's matmul), cpu_attention (the tiled attention
//                kernel, the process's ISA or a chosen one), on host arrays
//   sampling     philox_uniform, sample_row
//   speculation  spec_trials / tree_trials (the acceptance rule alone on fixed logits),
//                lookup_propose (the lookup rule on host arrays), the controllers
//   OpRunner     single backend and speculative ops on a chosen device (ops_testing.cpp)
//   Session      an engine's runtime and scheduler, with the hooks tests and benchmarks need:
//                KV caches, sequence state, timed forwards and iterations (session_testing.cpp)
//   devices      cuda_device_info, cuda_bandwidth_gbps
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "bindings/common.h"
#include "common/errors.h"
#include "engine/request.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/repack_lanes.h"
#include "kernels/philox.h"
#include "spec/acceptance.h"
#include "spec/draft_controller.h"
#include "spec/draft_model_ops.h"
#include "spec/lookup.h"
#include "spec/lookup_controller.h"
#include "spec/spec_ops.h"

#ifdef TRT_SPEC_WITH_CUDA
#include "backend/cuda/cuda_api.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;
using namespace trt_spec;
using namespace trt_spec::bindings;

void bind_op_runner(nb::module_& m);  // ops_testing.cpp
void bind_session(nb::module_& m);    // session_testing.cpp

namespace {

using F32Matrix = HostArray<float, 2>;
using F32Vector = HostArray<float, 1>;
// A KV cache array of any element type (float32, or uint16 bits of f16 / bf16).
using KvArray = nb::ndarray<nb::ndim<4>, nb::c_contig, nb::device::cpu, nb::ro>;

// One sequence on the CPU's speculative ops, for acceptance trials on fixed logits.
struct Trial {
  explicit Trial(int k, int V)
      : be(1), ops(make_spec_ops(be, 1, k, V)), draft_ops(make_draft_model_ops(be, 1, V)), k_(k) {
    hist.assign(kMaxDraftNodes + 4, 0);
    pred.assign(hist.size(), 0);
    st = SpecState{&seq, &sampling, hist.data(), pred.data(), static_cast<int>(hist.size())};
    rows.resize(6 * (k + 1));
    bits.resize(k + 1);
    out = RowBuffers{rows.data(),
                     rows.data() + (k + 1),
                     rows.data() + 2 * (k + 1),
                     rows.data() + 3 * (k + 1),
                     rows.data() + 4 * (k + 1),
                     bits.data()};
    moves.resize(3 * kMaxDraftNodes);
  }
  // Fixes the tree for source with k nodes, then accepts against logits [k + 1, V].
  void accept(DraftSource source, const float* logits, int V, const float* q, int Vd) {
    const int32_t slot = 0;
    ops->verify_rows(st, &slot, 1, k_, source, out);
    ops->accept(
        st, &slot, 1, k_, logits, V, q, Vd,
        KvMoves{moves.data(), moves.data() + kMaxDraftNodes, moves.data() + 2 * kMaxDraftNodes});
  }
  CpuBackend be;
  std::unique_ptr<SpecOps> ops;
  std::unique_ptr<DraftModelOps> draft_ops;
  int k_;
  SeqState seq;
  SamplingState sampling;
  std::vector<int32_t> hist, pred, rows, moves;
  std::vector<uint64_t> bits;
  SpecState st;
  RowBuffers out;
};

}  // namespace

NB_MODULE(_trt_spec_testing, m) {
  m.doc() = "trt-spec test-only bindings (not part of the wheel)";
  static nb::exception<EngineFileError> engine_file_error(m, "EngineFileError", PyExc_ValueError);
  register_value_errors();
  m.attr("SEQ_STATE_INTS") = static_cast<int>(sizeof(SeqState) / sizeof(int32_t));
  {
    // SeqState's layout, from the struct itself: name -> (byte offset, numpy type, count).
    nb::dict f;
    auto add = [&](const char* name, size_t off, const char* type, int count) {
      f[name] = nb::make_tuple(off, type, count);
    };
    const size_t tree = offsetof(SeqState, tree);
#define SEQ_FIELD(name) add(#name, offsetof(SeqState, name), "<i4", 1)
    SEQ_FIELD(sources);
    SEQ_FIELD(max_nodes);
    SEQ_FIELD(pred_len);
    SEQ_FIELD(draft_off);
    SEQ_FIELD(n_past);
    SEQ_FIELD(last);
    SEQ_FIELD(prev);
    SEQ_FIELD(n_gen);
    SEQ_FIELD(source);
    SEQ_FIELD(n_new);
    SEQ_FIELD(n_acc);
    SEQ_FIELD(n_drafted);
    SEQ_FIELD(depth);
    SEQ_FIELD(pred_acc);
    SEQ_FIELD(pred_rej);
    SEQ_FIELD(ready_n);
    SEQ_FIELD(last_tag);
#undef SEQ_FIELD
    add("tree_n", tree + offsetof(DraftTree, n), "<i4", 1);
    add("tree_tag", tree + offsetof(DraftTree, tag), "<i4", 1);
    add("tree_token", tree + offsetof(DraftTree, token), "<i4", kMaxDraftNodes);
    add("tree_parent", tree + offsetof(DraftTree, parent), "i1", kMaxDraftNodes);
    add("tree_depth", tree + offsetof(DraftTree, depth), "u1", kMaxDraftNodes);
    add("tree_flags", tree + offsetof(DraftTree, flags), "u1", kMaxDraftNodes);
    add("out", offsetof(SeqState, out), "<i4", kMaxDraftNodes + 1);
    add("path", offsetof(SeqState, path), "<i4", kMaxDraftNodes);
    m.attr("SEQ_STATE_FIELDS") = f;
    m.attr("SEQ_STATE_BYTES") = static_cast<int>(sizeof(SeqState));
  }
  m.attr("MAX_DRAFT_NODES") = kMaxDraftNodes;
  m.attr("NGRAM_MIN") = kNgramMin;
  m.attr("NGRAM_MAX") = kNgramMax;
  m.attr("MAX_MATCHES") = kMaxMatches;

  // ---- CPU kernels -------------------------------------------------------------------------
  m.def("cpu_isas", &cpu::supported_isas, "Instruction sets this CPU runs kernels for");
  m.def(
      "cpu_matmul",
      [](U8Array blob, int type, int64_t rows, int64_t cols, F32Matrix x, const std::string& isa,
         int64_t r0, int64_t r1, bool lanes, int layout) {
        const WeightType t = static_cast<WeightType>(type);
        check_blob(blob, t, rows, cols);
        if (static_cast<int64_t>(x.shape(1)) != cols)
          throw InvalidArgument("x must have cols columns");
        const cpu::MatmulKernels* k = cpu::matmul_kernels_for(isa.c_str());
        if (!k) throw InvalidArgument("this CPU cannot run ISA '" + isa + "'");
        if (r1 < 0) r1 = rows;
        if (r0 < 0 || r0 > r1 || r1 > rows) throw InvalidArgument("bad row range");
        const int M = static_cast<int>(x.shape(0));
        auto aligned = aligned_copy(blob);
        WeightView w{t, rows, cols, aligned.get()};
        // lanes: the CPU backend's copy, repacked into this ISA's layout where that applies
        // (repack_lanes.h; e.g. Rows16 needs rows % 16 == 0), else natural as the backend keeps it;
        // layout (a CodeLayout value, 1 or 2): into that layout instead (another ISA's is refused).
        if (lanes && !weight_type_needs_groups(t))
          throw InvalidArgument("lanes: a Q8 / Q4 weight only");
        if (layout != -1 && (!lanes || layout < 1 || layout > 2))
          throw InvalidArgument("layout: 1 (Rows8) or 2 (Rows16), with lanes");
        const CodeLayout want = layout == -1 ? k->lanes : static_cast<CodeLayout>(layout);
        if (lanes && cpu::lanes_apply(w, want)) {
          auto packed = aligned_copy(blob);
          cpu::repack_lanes(w, packed.get(), want);
          aligned = std::move(packed);
          w.data = aligned.get();
          w.layout = want;
        }
        std::vector<float> y(static_cast<size_t>(M) * rows, 0.0f);
        {
          nb::gil_scoped_release release;
          if (weight_type_needs_groups(t)) {
            std::shared_ptr<void> buf(
                std::aligned_alloc(64, align_up(cpu::quant_acts_bytes(M, cols), 64)), std::free);
            cpu::QuantActs qa = cpu::quant_acts_view(buf.get(), M, static_cast<int>(cols));
            k->quantize_acts(x.data(), 0, M, qa);
            k->matmul_quant(w, qa, M, y.data(), rows, r0, r1);
          } else {
            k->matmul_float(w, x.data(), M, y.data(), rows, r0, r1);
          }
        }
        return owned_array<float>(std::move(y),
                                  {static_cast<size_t>(M), static_cast<size_t>(rows)});
      },
      "blob"_a, "t"_a, "rows"_a, "cols"_a, "x"_a, "isa"_a, "r0"_a = 0, "r1"_a = -1,
      "lanes"_a = false, "layout"_a = -1,
      "y [M, rows] = x @ W^T with one ISA's kernel (rows outside [r0, r1) stay 0); t: the "
      "WeightType's integer value");
  m.def(
      "cpu_quantize_acts",
      [](F32Matrix x, const std::string& isa) {
        const cpu::MatmulKernels* k = cpu::matmul_kernels_for(isa.c_str());
        if (!k) throw InvalidArgument("this CPU cannot run ISA '" + isa + "'");
        const int M = static_cast<int>(x.shape(0)), cols = static_cast<int>(x.shape(1));
        if (cols % 32 != 0) throw InvalidArgument("x: cols must be a multiple of 32");
        std::shared_ptr<void> buf(
            std::aligned_alloc(64, align_up(cpu::quant_acts_bytes(M, cols), 64)), std::free);
        const cpu::QuantActs qa = cpu::quant_acts_view(buf.get(), M, cols);
        k->quantize_acts(x.data(), 0, M, qa);
        const size_t rows = static_cast<size_t>(M), n = rows * cols, groups = n / 32;
        return nb::make_tuple(
            owned_array<int8_t>(std::vector<int8_t>(qa.q, qa.q + n), {rows, size_t(cols)}),
            owned_array<float>(std::vector<float>(qa.d, qa.d + groups), {rows, size_t(cols / 32)}),
            owned_array<float>(std::vector<float>(qa.ds, qa.ds + groups),
                               {rows, size_t(cols / 32)}));
      },
      "x"_a, "isa"_a,
      "One ISA's quantize_acts of x [M, cols]: (q int8 [M, cols], d, ds float32 [M, cols / 32])");

  m.def(
      "cpu_attention",
      [](HostArray<float, 3> q, KvArray k, KvArray v, HostArray<int32_t, 1> slot,
         HostArray<int32_t, 1> len, float scale, std::optional<HostArray<int32_t, 1>> tree_base,
         std::optional<HostArray<uint64_t, 1>> tree_bits, int64_t task_chunk,
         const std::string& kv_type, const std::string& isa, int bf16_from, int workers,
         int int16_from) {
        // q [n, heads, hd]; k, v [slots, kv_heads, max_seq, hd] (one layer of the cache):
        // float32 for kv_type f32, uint16 bits for f16 / bf16.
        KvType t;
        if (!parse_kv_type(kv_type, &t)) throw InvalidArgument("cpu_attention: kv_type");
        const cpu::AttentionRunFn run =
            isa.empty() ? &cpu::attention_run : cpu::attention_run_for(isa.c_str());
        if (run == nullptr) throw InvalidArgument("cpu_attention: ISA not supported here: " + isa);
        if (bf16_from >= 0 && int16_from >= 0)
          throw InvalidArgument("cpu_attention: bf16_from or int16_from, not both");
        if (bf16_from >= 0 && bf16_from < static_cast<int>(q.shape(0)) &&
            !cpu::attention_bf16_supported(isa.empty() ? nullptr : isa.c_str()))
          throw InvalidArgument("cpu_attention: bf16 rows need the avx512 build and AVX512_BF16");
        const int n = static_cast<int>(q.shape(0)), hd = static_cast<int>(q.shape(2));
        const int slots = static_cast<int>(k.shape(0)), max_seq = static_cast<int>(k.shape(2));
        const nb::dlpack::dtype want =
            t == KvType::F32 ? nb::dtype<float>() : nb::dtype<uint16_t>();
        bool ok = k.shape(3) == q.shape(2) && slot.shape(0) == q.shape(0) &&
                  len.shape(0) == q.shape(0) && tree_base.has_value() == tree_bits.has_value() &&
                  k.dtype() == want && v.dtype() == want;
        for (int d = 0; d < 4; ++d) ok = ok && k.shape(d) == v.shape(d);
        if (tree_base)
          ok = ok && tree_base->shape(0) == q.shape(0) && tree_bits->shape(0) == q.shape(0);
        for (int i = 0; ok && i < n; ++i)
          ok = slot.data()[i] >= 0 && slot.data()[i] < slots && len.data()[i] >= 1 &&
               len.data()[i] <= max_seq;
        if (!ok) throw InvalidArgument("cpu_attention: shapes, types, slots or lens out of range");
        cpu::AttentionArgs a;
        a.n_rows = n;
        a.n_heads = static_cast<int>(q.shape(1));
        a.n_kv_heads = static_cast<int>(k.shape(1));
        a.head_dim = hd;
        a.scale = scale;
        a.q = q.data();
        a.q_stride = static_cast<int64_t>(a.n_heads) * hd;
        a.kv_type = t;
        std::vector<const void*> kp(n), vp(n);
        const size_t slice = static_cast<size_t>(a.n_kv_heads) * max_seq * hd * kv_type_bytes(t);
        for (int i = 0; i < n; ++i) {
          kp[i] = static_cast<const uint8_t*>(k.data()) + slot.data()[i] * slice;
          vp[i] = static_cast<const uint8_t*>(v.data()) + slot.data()[i] * slice;
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
        if (bf16_from >= 0) a.prompt_from = bf16_from;
        if (int16_from >= 0) {
          a.prompt_from = int16_from;
          a.prompt_math = cpu::PromptMath::Int16;
        }
        if (workers < 0) throw InvalidArgument("cpu_attention: workers must be >= 0");
        a.workers = workers;
        std::vector<float> out(static_cast<size_t>(n) * a.n_heads * hd);
        a.out = out.data();
        a.out_stride = a.q_stride;
        {
          nb::gil_scoped_release release;
          const int64_t tasks = cpu::attention_tasks(a);
          if (task_chunk <= 0) {
            run(a, 0, tasks);
          } else {  // chunks of task_chunk tasks, last chunk first (another split and order)
            for (int64_t e = tasks; e > 0; e -= task_chunk)
              run(a, std::max<int64_t>(0, e - task_chunk), e);
          }
        }
        return owned_array<float>(
            std::move(out),
            {static_cast<size_t>(n), static_cast<size_t>(a.n_heads), static_cast<size_t>(hd)});
      },
      "q"_a, "k"_a, "v"_a, "slot"_a, "len"_a, "scale"_a, "tree_base"_a = nb::none(),
      "tree_bits"_a = nb::none(), "task_chunk"_a = 0, "kv_type"_a = "f32", "isa"_a = "",
      "bf16_from"_a = -1, "workers"_a = 0, "int16_from"_a = -1,
      "The CPU attention kernel on host arrays: out [n, heads, hd]; task_chunk > 0 runs its tasks "
      "in chunks of that many, last chunk first; k, v float32 (kv_type f32) or uint16 bits (f16, "
      "bf16); isa: one ISA's build (cpu_isas()), '' the one the process runs; rows >= bf16_from "
      "(>= 0) attend in bf16 (cpu_attention_bf16(isa)), rows >= int16_from in int16 (any build); "
      "workers: AttentionArgs::workers (the block size)");
  m.def(
      "cpu_attention_tasks",
      [](HostArray<int32_t, 1> len, int n_heads, int n_kv_heads, int head_dim, int bf16_from,
         int workers) {
        cpu::AttentionArgs a;
        const int n_rows = static_cast<int>(len.shape(0));
        a.n_rows = n_rows;
        a.len = len.data();
        a.n_heads = n_heads;
        a.n_kv_heads = n_kv_heads;
        a.head_dim = head_dim;
        if (bf16_from >= 0) a.prompt_from = bf16_from;  // (bf16 or int16: the same blocks)
        a.workers = workers;
        return cpu::attention_tasks(a);  // (std::invalid_argument: ValueError)
      },
      "len"_a, "n_heads"_a, "n_kv_heads"_a, "head_dim"_a, "bf16_from"_a = -1, "workers"_a = 0,
      "The number of tasks cpu_attention splits a call of rows with these lengths into");
  m.def(
      "cpu_attention_bf16",
      [](const std::string& isa) {
        return cpu::attention_bf16_supported(isa.empty() ? nullptr : isa.c_str());
      },
      "isa"_a = "", "Whether that ISA's attention build runs bf16 (prompt) rows on this CPU");

  // ---- sampling ------------------------------------------------------------------------------
  m.def("philox_uniform", &philox_uniform, "seed"_a, "step"_a, "lane"_a, "stream"_a,
        "The uniform number in [0, 1) every backend draws for (seed, step, lane, stream)");
  m.def(
      "sample_row",
      [](F32Vector logits, float temperature, int top_k, float top_p, uint64_t seed, uint64_t step,
         uint32_t lane) {
        SamplingParams p{temperature, top_k, top_p, -1, seed};
        validate_sampling(p);
        return sample_row(logits.data(), static_cast<int>(logits.shape(0)), p, step, lane);
      },
      "logits"_a, "temperature"_a, "top_k"_a, "top_p"_a, "seed"_a, "step"_a, "lane"_a = 0,
      "Draw one token from a logits row by the rule of kernels/sampling.h");

  // ---- the acceptance rule alone -------------------------------------------------------------
  m.def(
      "spec_trials",
      [](F32Matrix target_logits, F32Matrix draft_logits, float temperature, int top_k, float top_p,
         int n_trials, uint64_t first_seed) {
        // target_logits [k+1, V], draft_logits [k, Vd]: fixed per position (no model). Each trial
        // draws a chain d_0..d_{k-1} with the draft rule and runs the acceptance step, with seed
        // first_seed + trial. Returns [n_trials, k + 2]: the emitted tokens (-1 padded), then the
        // number of accepted draft tokens.
        const int k = static_cast<int>(draft_logits.shape(0));
        const int V = static_cast<int>(target_logits.shape(1));
        const int Vd = static_cast<int>(draft_logits.shape(1));
        if (static_cast<int>(target_logits.shape(0)) != k + 1 || k < 1 || k > kMaxDraftLen)
          throw InvalidArgument("need target_logits [k+1, V] and draft_logits [k, Vd], k >= 1");
        SamplingParams p{temperature, top_k, top_p, -1, 0};
        validate_sampling(p);
        std::vector<int32_t> out(static_cast<size_t>(n_trials) * (k + 2), -1);
        {
          nb::gil_scoped_release release;
          Trial tr(k, std::max(V, Vd));  // (the draft's rows may be wider: padding ids)
          std::vector<float> q(static_cast<size_t>(k) * Vd);
          const int32_t slot = 0;
          for (int t = 0; t < n_trials; ++t) {
            tr.sampling = SamplingState{p, 0};
            tr.sampling.params.seed = first_seed + static_cast<uint64_t>(t);
            tr.seq = SeqState{};
            tr.seq.sources = draft_source_bit(DraftSource::kModel);
            tr.seq.max_nodes = k;
            tr.seq.n_past = 1;
            std::memcpy(q.data(), draft_logits.data(), q.size() * 4);
            for (int j = 0; j < k; ++j)
              tr.draft_ops->draft_sample(tr.st, &slot, 1, j, q.data() + static_cast<size_t>(j) * Vd,
                                         Vd, std::min(V, Vd));
            tr.accept(DraftSource::kModel, target_logits.data(), V, q.data(), Vd);
            int32_t* row = out.data() + static_cast<size_t>(t) * (k + 2);
            for (int i = 0; i < tr.seq.n_new; ++i) row[i] = tr.seq.out[i];
            row[k + 1] = tr.seq.n_acc;
          }
        }
        return owned_array<int32_t>(std::move(out),
                                    {static_cast<size_t>(n_trials), static_cast<size_t>(k + 2)});
      },
      "target_logits"_a, "draft_logits"_a, "temperature"_a, "top_k"_a, "top_p"_a, "n_trials"_a,
      "first_seed"_a = 0, "Runs draft sampling and the acceptance step of a chain on fixed logits");
  m.def(
      "tree_trials",
      [](F32Matrix row_logits, const std::vector<int32_t>& tokens,
         const std::vector<int32_t>& parents, float temperature, int top_k, float top_p,
         int n_trials, uint64_t first_seed) {
        // A deterministic (one-hot) tree of n nodes (tokens, parents: -1 root, else a lower
        // index) and fixed target logits per verify row [n + 1, V] (row 0: the root, 1 + i: node
        // i). Returns [n_trials, depth + 2]: the emitted tokens (-1 padded), then the accepted
        // count.
        const int n = static_cast<int>(tokens.size()), V = static_cast<int>(row_logits.shape(1));
        if (n < 1 || n > kMaxDraftNodes || static_cast<int>(parents.size()) != n ||
            static_cast<int>(row_logits.shape(0)) != n + 1)
          throw InvalidArgument("need tokens/parents [n] and row_logits [n + 1, V], 1 <= n <= 16");
        DraftTree tree;
        tree.n = n;
        int depth = 0;
        for (int i = 0; i < n; ++i) {
          if (parents[i] < -1 || parents[i] >= i || tokens[i] < 0 || tokens[i] >= V)
            throw InvalidArgument("parents must be -1 or a lower index; tokens in [0, V)");
          for (int j = 0; j < i; ++j)
            if (parents[j] == parents[i] && tokens[j] == tokens[i])
              throw InvalidArgument("siblings must have distinct tokens");
          tree.token[i] = tokens[i];
          tree.parent[i] = static_cast<int8_t>(parents[i]);
          tree.depth[i] = static_cast<uint8_t>(parents[i] < 0 ? 1 : tree.depth[parents[i]] + 1);
          tree.flags[i] = 0;
          depth = std::max<int>(depth, tree.depth[i]);
        }
        SamplingParams p{temperature, top_k, top_p, -1, 0};
        validate_sampling(p);
        std::vector<int32_t> out(static_cast<size_t>(n_trials) * (depth + 2), -1);
        {
          nb::gil_scoped_release release;
          Trial tr(n, V);
          for (int t = 0; t < n_trials; ++t) {
            tr.sampling = SamplingState{p, 0};
            tr.sampling.params.seed = first_seed + static_cast<uint64_t>(t);
            tr.seq = SeqState{};
            tr.seq.sources = draft_source_bit(DraftSource::kLookup);
            tr.seq.max_nodes = n;
            tr.seq.ready_n = n;
            tr.seq.n_past = 1;
            tr.seq.tree = tree;
            tr.accept(DraftSource::kLookup, row_logits.data(), V, nullptr, 0);
            int32_t* row = out.data() + static_cast<size_t>(t) * (depth + 2);
            for (int i = 0; i < tr.seq.n_new; ++i) row[i] = tr.seq.out[i];
            row[depth + 1] = tr.seq.n_acc;
          }
        }
        return owned_array<int32_t>(
            std::move(out), {static_cast<size_t>(n_trials), static_cast<size_t>(depth + 2)});
      },
      "row_logits"_a, "tokens"_a, "parents"_a, "temperature"_a, "top_k"_a, "top_p"_a, "n_trials"_a,
      "first_seed"_a = 0, "Runs the acceptance step of a one-hot (lookup) tree on fixed logits");
  m.def(
      "lookup_propose",
      [](const std::vector<int32_t>& history, const std::vector<int32_t>& prediction,
         int max_nodes) {
        DraftTree t;
        const int ngram = lookup_propose_serial(history.data(), static_cast<int>(history.size()),
                                                prediction.data(),
                                                static_cast<int>(prediction.size()), max_nodes, t);
        std::vector<int32_t> tok(t.token, t.token + t.n), par(t.n), depth(t.n), flags(t.n);
        for (int i = 0; i < t.n; ++i) {
          par[i] = t.parent[i];
          depth[i] = t.depth[i];
          flags[i] = t.flags[i];
        }
        return std::make_tuple(tok, par, depth, flags, ngram);
      },
      "history"_a, "prediction"_a, "max_nodes"_a,
      "(tokens, parents, depths, flags, n-gram length) of prompt lookup's tree for a text "
      "(lookup.h)");

  // ---- controllers ---------------------------------------------------------------------------
  nb::class_<DraftController>(m, "DraftController",
                              "The draft model's cost model for draft_len='auto'")
      .def(nb::init<int, int>(), "max_batch"_a, "max_k"_a)
      .def("choose", &DraftController::choose, "batch"_a, "alphas"_a, "k_limit"_a, "lag"_a = 0)
      .def("observe", &DraftController::observe, "batch"_a, "k"_a, "total_s"_a, "draft_s"_a = -1.0,
           "verify_s"_a = -1.0, "rows"_a = -1)
      .def("observe_acceptance", &DraftController::observe_acceptance, "n_accepted"_a, "k"_a)
      .def("observe_catch_up", &DraftController::observe_catch_up, "tokens"_a, "seconds"_a)
      .def("observe_verify", &DraftController::observe_verify, "batch"_a, "rows"_a, "seconds"_a,
           "computed"_a = -1)
      .def("observe_read", &DraftController::observe_read, "rows"_a, "seconds"_a)
      .def(
          "reads_prompt",
          [](DraftController& c, int B, int rows, int new_tokens) {
            return c.reads_prompt(B, rows, new_tokens) != DraftController::PromptRead::kSkip;
          },
          "batch"_a, "prompt_rows"_a, "new_tokens"_a,
          "Whether the draft reads (paying or measuring)")
      .def("read_pays", &DraftController::read_pays, "batch"_a, "prompt_rows"_a, "new_tokens"_a)
      .def("catch_up_pays", &DraftController::catch_up_pays, "batch"_a, "rows"_a, "saving"_a)
      .def_ro_static("join_margin", &DraftController::kJoinMargin)
      .def("per_token", &DraftController::per_token, "batch"_a)
      .def("defers", &DraftController::defers, "batch"_a, "prompt_rows"_a, "defer_tokens"_a)
      .def("observe_deferral", &DraftController::observe_deferral, "joined"_a)
      .def_prop_ro("join_rate", &DraftController::join_rate)
      .def("join_saving", &DraftController::join_saving, "batch"_a, "plain_s"_a, "plain_tokens"_a,
           "lookup_s"_a, "lookup_tokens"_a)
      .def("saving_per_token", &DraftController::saving_per_token, "batch"_a)
      .def_prop_ro("read_per_row", &DraftController::read_per_row)
      .def("prior", &DraftController::prior)
      .def("drafting_pays", &DraftController::drafting_pays, "batch"_a)
      .def_prop_ro("long_run_alpha", &DraftController::long_run_alpha)
      .def_prop_ro("catch_up_per_token", &DraftController::catch_up_per_token)
      .def("catch_up_time", &DraftController::catch_up_time, "tokens"_a)
      .def("predicted_time", &DraftController::predicted_time, "batch"_a, "k"_a, "prior"_a = true)
      .def("verify_time", &DraftController::verify_time, "batch"_a, "rows"_a, "prior"_a = true)
      .def("pass_prior", &DraftController::pass_prior, "rows"_a)
      .def("step_prior", &DraftController::step_prior, "batch"_a)
      .def("rate", &DraftController::rate, "batch"_a, "k"_a, "tokens"_a);
  nb::class_<AcceptanceEstimate>(m, "AcceptanceEstimate",
                                 "A sequence's running per-token acceptance (acceptance.h)")
      .def(nb::init<>())
      .def_rw("accepted", &AcceptanceEstimate::accepted)
      .def_rw("rejected", &AcceptanceEstimate::rejected)
      .def("observe", &AcceptanceEstimate::observe, "n_accepted"_a, "k"_a,
           "decay"_a = AcceptanceEstimate::kDecay)
      .def("relax", &AcceptanceEstimate::relax, "mean"_a)
      .def_prop_ro("alpha", &AcceptanceEstimate::alpha);
  m.def("expected_tokens", &expected_tokens, "alpha"_a, "k"_a,
        "Mean tokens an iteration drafting k emits at per-token acceptance alpha");
  nb::class_<LookupController>(m, "LookupController", "Prompt lookup's cost model")
      .def(nb::init<int, int, const DraftController*>(), "max_batch"_a, "max_k"_a,
           "model"_a = nb::none(), nb::keep_alive<1, 4>())
      .def(
          "offer",
          [](LookupController& c, int B, const std::vector<double>& alphas,
             const std::vector<int>& available, int k_limit, bool compact) {
            const LookupController::Offer o = c.offer(B, alphas, available, k_limit, compact);
            return std::make_tuple(o.k, o.tokens, o.seconds);
          },
          "batch"_a, "alphas"_a, "available"_a, "k_limit"_a, "compact"_a = false,
          "(k, expected tokens, seconds)")
      .def("observe", &LookupController::observe, "batch"_a, "k"_a, "total_s"_a, "rows"_a = -1)
      .def("pass_time", &LookupController::pass_time, "rows"_a)
      .def("observe_acceptance", &LookupController::observe_acceptance, "ngram"_a, "n_accepted"_a,
           "depth"_a)
      .def("predicted_time", &LookupController::predicted_time, "batch"_a, "k"_a, "prior"_a = true)
      .def("long_run_alpha", &LookupController::long_run_alpha, "ngram"_a);

  bind_op_runner(m);
  bind_session(m);

  // ---- devices -------------------------------------------------------------------------------
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
}
