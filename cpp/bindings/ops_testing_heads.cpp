// ops_testing_heads.cpp: the OpRunner bindings (ops_testing.h) of the draft heads' ops: Medusa's
// tree and kept state, EAGLE-3's absorbed rows, chain steps and dynamic trees.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings/ops_testing.h"

namespace trt_spec::op_testing {

using namespace nb::literals;

void bind_head_ops(nb::class_<OpRunner>& c) {
  using F2 = HostArray<float, 2>;
  using I2 = HostArray<int32_t, 2>;
  c.def(
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
          "spec_eagle3_tree",
          [](OpRunner& r, HostArray<float, 3> logits, int w, int max_seq,
             const std::vector<int32_t>& tokens, I2 seqs, const std::vector<int32_t>& slots) {
            std::vector<SeqState> s = seqs_from(seqs);
            check_slots(slots, s.size());
            const int k = static_cast<int>(logits.shape(0)), B = static_cast<int>(slots.size());
            const int Vd = static_cast<int>(logits.shape(2)), n = B * w;
            if (k < 1 || static_cast<int>(logits.shape(1)) != n ||
                static_cast<int>(tokens.size()) != Vd)
              throw InvalidArgument(
                  "spec_eagle3_tree: logits [k, B w, draft_vocab] (step 0: rows [0, B)), tokens "
                  "[draft_vocab]");
            SpecArgs a = spec_args(r, s, {}, {}, {}, 1);
            BackendBuffer lb = r.put(logits.data(), logits.size() * 4), slb = r.put(slots),
                          tb = r.put(tokens);
            BackendBuffer trees(r.be(), static_cast<size_t>(B) * sizeof(Eagle3Tree));
            std::vector<BackendBuffer> meta;
            for (int i = 0; i < 6; ++i) meta.emplace_back(r.be(), static_cast<size_t>(n) * 4);
            BackendBuffer bits(r.be(), static_cast<size_t>(n) * 8);
            const Eagle3TreeRows rows{
                {meta[0].as<int32_t>(), meta[1].as<int32_t>(), meta[2].as<int32_t>(),
                 meta[3].as<int32_t>(), meta[4].as<int32_t>(), bits.as<uint64_t>()},
                meta[5].as<int32_t>()};
            Eagle3Ops& ops = r.eagle3_ops(static_cast<int>(s.size()));
            std::vector<int32_t> out;        // [k - 1, 6, B w]
            std::vector<uint64_t> out_bits;  // [k - 1, B w]
            for (int j = 0; j < k; ++j) {
              ops.tree_step(a.st, slb.as<int32_t>(), B, j, w, j + 1 < k, max_seq,
                            lb.as<float>() + static_cast<size_t>(j) * n * Vd, Vd, tb.as<int32_t>(),
                            trees.as<Eagle3Tree>(), rows);
              if (j + 1 == k) break;
              for (const BackendBuffer& m : meta) {
                const std::vector<int32_t> v = r.get<int32_t>(m, n);
                out.insert(out.end(), v.begin(), v.end());
              }
              const std::vector<uint64_t> v = r.get<uint64_t>(bits, n);
              out_bits.insert(out_bits.end(), v.begin(), v.end());
            }
            ops.tree_select(a.st, slb.as<int32_t>(), B, k, trees.as<Eagle3Tree>());
            const size_t steps = static_cast<size_t>(k - 1);
            return nb::make_tuple(
                seqs_to(r.get<SeqState>(a.seqs, s.size())),
                to_numpy<int32_t>(std::move(out), {steps, 6, static_cast<size_t>(n)}),
                to_numpy<uint64_t>(std::move(out_bits), {steps, static_cast<size_t>(n)}));
          },
          "logits"_a, "w"_a, "max_seq"_a, "tokens"_a, "seqs"_a, "slots"_a,
          "A dynamic tree of k = logits.shape[0] steps of width w (eagle3_tree.h), each step's "
          "head logits given: (seqs with their trees, the rows of steps 1 .. k - 1 [k - 1, 6, B "
          "w]: "
          "tokens, pos, slot, kv_idx, tree_base, src; their tree_bits [k - 1, B w])");
}

}  // namespace trt_spec::op_testing
