// forward_build.cuh: the host side of the persistent forward (forward_program.cuh): which
// instruction waits for what (build_forward_program) and the static check that no order of
// resident blocks can deadlock (check_forward_program). Plain C++ on FwdOps; CudaBackend
// (cuda_forward.cu) and the emulated tests (tests/cpp/emu_forward.cpp) call it.
//
// Counters: one per op, counting its instructions, and where an op's blocks split its output in
// parts, one per part (a segment: a matmul's row block, all its splits and tiles; an attention's
// kv group chunk, all its rows and splits, when each block serves one work item). An instruction
// adds 1 to its segment's counter, then to its op's.
//
// Waits of op j: the whole op j - 1 (one wait on its op counter), except
//   - attention after the qkv projection: the row blocks that write its heads' q, k and v (and
//     their cache entries), so a kv group starts as soon as its own rows are done;
//   - a matmul after attention (the o projection): the kv group chunks whose heads its split reads,
//     and the whole op j - 2 (the qkv projection reads x, which this one accumulates into, and
//     shares its split scratch).
// Every other boundary reads whole rows (RMSNorm) or shares scratch: whole ops. The reset, last,
// waits for every counter's final value and zeroes them all.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/forward_program.cuh"

namespace trt_spec::cuda {

struct FwdProgram {
  std::vector<FwdOp> ops;  // the forward's ops, then the reset
  std::vector<FwdInstr> instrs;
  std::vector<FwdWait> waits;
  int n_counters = 0;
};

inline int64_t fwd_op_blocks(const FwdOp& op) {
  return op.grid_x * op.grid_y;
}

// An op's segments: how many, and which one block (bx, by) belongs to. One segment: the op.
struct FwdSegments {
  int64_t count = 1;
  int64_t per = 1;  // instructions per segment

  static FwdSegments of(const FwdOp& op) {
    FwdSegments s;
    if (op.kind == FwdKind::kMatmul) {
      s.count = op.geom.tile_loop ? op.grid_x : op.grid_x / op.geom.tiles;
    } else if (op.kind == FwdKind::kAttention && op.grid_x == int64_t{op.att.n} * op.att.gy_total) {
      s.count = op.att.gy_total / op.att.splits;  // one work item per block: its kv group chunk
    }
    s.per = fwd_op_blocks(op) / s.count;
    return s;
  }
  int64_t at(const FwdOp& op, int64_t bx) const {
    if (count == 1) return 0;
    if (op.kind == FwdKind::kMatmul) return op.geom.tile_loop ? bx : bx / op.geom.tiles;
    return (bx % op.att.gy_total) / op.att.splits;  // attention: item bx's kv group chunk
  }
};

// The matmul row block that writes output row r.
inline int64_t fwd_row_block(const FwdOp& mm, int64_t r) {
  const int64_t half = mm.geom.half, pair = r / (2 * half) * half + r % (2 * half) % half;
  return pair / (static_cast<int64_t>(mm.geom.reps) * kMatmulWarps);
}

// Attention work item `item`: its first query head, query heads and kv head.
inline void fwd_attention_heads(const FwdOp& at, int64_t item, int& h0, int& nhb, int& g) {
  const int kvh = at.att.kv.kv_heads, group = at.att.n_heads / kvh;
  const int n_chunks = at.att.gy_total / at.att.splits / kvh;
  const int gy = static_cast<int>(item % at.att.gy_total) / at.att.splits;
  g = gy / n_chunks;
  h0 = g * group + (gy % n_chunks) * at.att.head_chunk;
  nhb = std::min(at.att.head_chunk, (g + 1) * group - h0);
}

inline FwdProgram build_forward_program(std::vector<FwdOp> ops) {
  FwdProgram p;
  FwdOp reset;
  reset.kind = FwdKind::kReset;
  ops.push_back(reset);
  p.ops = std::move(ops);
  const int n_ops = static_cast<int>(p.ops.size());
  // Counters: op j's at op_counter[j]; its segments' from seg_base[j] (where it has several).
  std::vector<int> op_counter(n_ops), seg_base(n_ops, -1);
  std::vector<FwdSegments> seg(n_ops);
  int c = 0;
  for (int j = 0; j + 1 < n_ops; ++j) {
    seg[j] = FwdSegments::of(p.ops[j]);
    op_counter[j] = c++;
    if (seg[j].count > 1) {
      seg_base[j] = c;
      c += static_cast<int>(seg[j].count);
    }
  }
  p.n_counters = c;
  auto whole = [&](int j, std::vector<FwdWait>& w) {
    w.push_back(FwdWait{op_counter[j], static_cast<int32_t>(fwd_op_blocks(p.ops[j]))});
  };
  auto part = [&](int j, int64_t s, std::vector<FwdWait>& w) {
    w.push_back(FwdWait{seg_base[j] + static_cast<int>(s), static_cast<int32_t>(seg[j].per)});
  };
  std::vector<FwdWait> w;
  size_t last_begin = 0;  // the waits last added: [last_begin, end) (consecutive blocks share)
  for (int j = 0; j < n_ops; ++j) {
    const FwdOp& op = p.ops[j];
    const FwdOp* prev = j > 0 ? &p.ops[j - 1] : nullptr;
    const bool after_qkv = op.kind == FwdKind::kAttention && prev &&
                           prev->kind == FwdKind::kMatmul && prev->mm.epi == MatmulOut::kRopeKv &&
                           seg[j - 1].count > 1 && seg[j].count > 1;
    const bool after_attention = op.kind == FwdKind::kMatmul && prev &&
                                 prev->kind == FwdKind::kAttention && seg[j - 1].count > 1 &&
                                 op.mm.x == prev->att.out && j >= 2;
    for (int32_t by = 0; by < op.grid_y; ++by) {
      for (int64_t bx = 0; bx < op.grid_x; ++bx) {
        w.clear();
        if (op.kind == FwdKind::kReset) {
          for (int k = 0; k < j; ++k) {
            whole(k, w);
            for (int64_t s = 0; seg[k].count > 1 && s < seg[k].count; ++s) part(k, s, w);
          }
        } else if (after_qkv) {  // the row blocks of this item's q, k and v rows
          int h0, nhb, g;
          fwd_attention_heads(op, bx, h0, nhb, g);
          const int64_t hd = op.att.kv.head_dim, H = op.att.n_heads, G = op.att.kv.kv_heads;
          std::set<int64_t> blocks;
          auto rows = [&](int64_t r0) {
            for (int64_t r = r0; r < r0 + hd; ++r) blocks.insert(fwd_row_block(*prev, r));
          };
          for (int h = h0; h < h0 + nhb; ++h) rows(h * hd);
          rows((H + g) * hd);
          rows((H + G + g) * hd);
          for (int64_t b : blocks) part(j - 1, b, w);
        } else if (after_attention) {  // the heads of this split's columns, and op j - 2
          const int64_t uc = matmul_unit_cols(op.mm.W.type), hd = prev->att.kv.head_dim;
          const int64_t c0 = by * op.geom.split_units * uc;
          const int64_t c1 = std::min(c0 + op.geom.split_units * uc, op.mm.W.cols);
          std::set<int64_t> gys;
          for (int64_t h = c0 / hd; h <= (c1 - 1) / hd; ++h) {
            int h0, nhb, g;
            for (int64_t item = 0; item < prev->att.gy_total; item += prev->att.splits) {
              fwd_attention_heads(*prev, item, h0, nhb, g);
              if (h >= h0 && h < h0 + nhb) gys.insert(item / prev->att.splits);
            }
          }
          for (int64_t s : gys) part(j - 1, s, w);
          whole(j - 2, w);
        } else if (j > 0) {
          whole(j - 1, w);
        }
        if (p.instrs.empty() || p.waits.size() - last_begin != w.size() ||
            !std::equal(w.begin(), w.end(), p.waits.begin() + last_begin)) {
          last_begin = p.waits.size();
          p.waits.insert(p.waits.end(), w.begin(), w.end());
        }
        FwdInstr in;
        in.op = j;
        in.by = by;
        in.bx = bx;
        in.wait_begin = static_cast<int32_t>(last_begin);
        in.wait_count = static_cast<int32_t>(w.size());
        if (op.kind != FwdKind::kReset) {
          if (seg[j].count > 1) {
            in.signal[0] = seg_base[j] + static_cast<int>(seg[j].at(op, bx));
            in.signal[1] = op_counter[j];
          } else {
            in.signal[0] = op_counter[j];
          }
        }
        p.instrs.push_back(in);
      }
    }
  }
  return p;
}

// The static check: "" when the program cannot deadlock on `grid` blocks of which `resident` fit
// the device at once, else what is wrong. Every op's blocks appear exactly once; every wait
// (c, t) of instruction i has at least t signallers of c before i in the global order (so the
// earliest unfinished instruction can always run); the grid fits the resident blocks (so every
// block runs); the reset comes last and waits for every signal of every counter.
inline std::string check_forward_program(const FwdProgram& p, int64_t grid, int64_t resident) {
  auto fail = [](const std::string& s) { return "forward program: " + s; };
  if (grid < 1) return fail("empty grid");
  if (grid > resident)
    return fail("grid of " + std::to_string(grid) + " blocks over the " + std::to_string(resident) +
                " resident ones: blocks could wait for unstarted ones");
  const int n_ops = static_cast<int>(p.ops.size());
  std::vector<int64_t> seen(n_ops, 0), signalled(p.n_counters, 0);
  std::vector<std::vector<char>> hit(n_ops);
  for (int j = 0; j < n_ops; ++j) hit[j].assign(fwd_op_blocks(p.ops[j]), 0);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const FwdInstr& in = p.instrs[i];
    const std::string at = "instruction " + std::to_string(i);
    if (in.op < 0 || in.op >= n_ops) return fail(at + " names no op");
    const FwdOp& op = p.ops[in.op];
    if (in.bx < 0 || in.bx >= op.grid_x || in.by < 0 || in.by >= op.grid_y)
      return fail(at + " is outside its op's grid");
    char& h = hit[in.op][in.by * op.grid_x + in.bx];
    if (h) return fail(at + " repeats a block of op " + std::to_string(in.op));
    h = 1;
    ++seen[in.op];
    if (in.wait_begin < 0 || in.wait_count < 0 ||
        in.wait_begin + in.wait_count > static_cast<int>(p.waits.size()))
      return fail(at + " has waits outside the list");
    for (int w = in.wait_begin; w < in.wait_begin + in.wait_count; ++w) {
      const FwdWait& wt = p.waits[w];
      if (wt.counter < 0 || wt.counter >= p.n_counters) return fail(at + " waits on no counter");
      if (signalled[wt.counter] < wt.target)
        return fail(at + " waits for " + std::to_string(wt.target) + " signals of counter " +
                    std::to_string(wt.counter) + " with only " +
                    std::to_string(signalled[wt.counter]) + " before it");
    }
    if (op.kind == FwdKind::kReset) {
      if (i + 1 != p.instrs.size()) return fail("the reset is not the last instruction");
      for (int c = 0; c < p.n_counters; ++c) {
        bool waited = false;
        for (int w = in.wait_begin; w < in.wait_begin + in.wait_count; ++w)
          waited |= p.waits[w].counter == c && p.waits[w].target == signalled[c];
        if (!waited)
          return fail("the reset does not wait for every signal of counter " + std::to_string(c));
      }
    }
    for (int32_t c : in.signal) {
      if (c >= p.n_counters) return fail(at + " signals no counter");
      if (c >= 0) ++signalled[c];
    }
  }
  for (int j = 0; j < n_ops; ++j)
    if (seen[j] != fwd_op_blocks(p.ops[j])) return fail("op " + std::to_string(j) + " incomplete");
  if (p.instrs.empty() || p.ops[p.instrs.back().op].kind != FwdKind::kReset)
    return fail("no reset at the end");
  return "";
}

}  // namespace trt_spec::cuda
