// matmul_tiling.h: how the CPU matmul kernels walk a weight matrix (part of matmul_impl.h).
//
// Included by matmul_impl.h inside the anonymous namespace of an ISA translation unit (see there
// for why nothing here may have external linkage). A tile computes R output rows x MT activation
// rows over a column range [c0, c1), holding R * MT vector accumulators in registers and loading
// (and decoding) each weight vector once for its MT rows. drive() orders the tiles:
//
//   for each block of at most mb activation rows        (the block's activations stay in L2)
//     for each panel of kPanelRows weight rows          (re-read from L1/L2 by every m tile)
//       for each column block [c0, c1) of kc columns    (one m tile's activations stay in L1)
//         for each m tile of the block: tile(...) over the panel's rows
//
// A kernel family walks the panel's rows itself: the float kernels in row tiles of R rows
// (for_row_tiles), the quantized ones block of rows after block inside one call (not a call per
// row: the call, its Spill argument and the accumulators' set-up once per panel).
//
// Exactness. Every tile computes a (row, activation row) output with the same sequence of float
// operations: one vector accumulator, zeroed, updated column step by column step in ascending
// order, reduced to a float after the last column. Between column blocks the accumulator is
// spilled to a buffer and reloaded, which changes no bit. So a row's output never depends on M,
// on which rows share its tile, on the blocking or on the threads' row ranges: a K+1-row verify
// pass, a batch, a prefill chunk and a single decode step give bit-identical results (greedy
// speculation is exact), for every M.
#pragma once

constexpr int kPanelRows = 16;  // weight rows whose accumulators one column block spills
constexpr int kMaxBlockM = 64;  // activation rows per block, at most (sizes the spill buffer)
constexpr int kSpillFloats = kPanelRows * kMaxBlockM * 16;  // 16: the widest vector, in floats

template <class V>
inline V imin(V a, V b) {
  return a < b ? a : b;
}
template <class V>
inline V imax(V a, V b) {
  return a < b ? b : a;
}

// Software prefetch (the hardware prefetcher alone lets the kernels alternate between computing
// and waiting for DRAM). Prefetching past the matrix end is harmless. Into L2 (T1), not L1: the
// weights are read once, a few KB after the prefetch (the likely reason T0 loses: it holds one of
// the L1's few miss buffers for a whole DRAM round trip, which demand loads then wait for). T1
// against T0, measured: benchmarks/results/HISTORY.md.
inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
}

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Start of section s of w: the layout of kernels/weight_format.h (sections padded to
// kSectionAlign), for the Q8 / Q4 sections the kernels read.
inline const uint8_t* section_ptr(const WeightView& w, int s) {
  const size_t n = static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols);
  const size_t a = kSectionAlign;
  const size_t codes = ((w.type == WeightType::Q4 ? n / 2 : n) + a - 1) / a * a;
  const size_t scales = (n / kQuantGroup * 2 + a - 1) / a * a;
  return w.data + (s == 0 ? 0 : (s == 1 ? codes : codes + scales));
}

// Tile shapes of one kernel family: a block of M <= small_max activation rows is one m tile;
// a larger block is cut into ceil(M / big_mt) m tiles of balanced sizes. For the kernels that
// walk a panel in row tiles (for_row_tiles), an m tile of MT rows runs with rows_for[MT] weight
// rows per tile; the quantized kernels walk one row at a time and leave rows_for empty.
struct TilePolicy {
  int small_max, big_mt;
  int rows_for[10];  // indexed by MT
};

// The (R, MT) tile shapes instantiated, as an X-macro: tile_fn() dispatches over them and the
// static_asserts in the kernels check that they cover every shape drive() can ask for.
// clang-format off
#define TRT_SPEC_TILES(X) \
  X(4, 1) X(4, 2) X(3, 3) X(2, 1) X(2, 2) X(2, 3) X(2, 4) X(2, 5) X(2, 6) \
  X(1, 1) X(1, 2) X(1, 3) X(1, 4) X(1, 5) X(1, 6) X(1, 7) X(1, 8) X(1, 9)
// clang-format on

constexpr bool tile_listed(int R, int MT) {
#define TRT_SPEC_TILE_EQ(r, mt) || (R == r && MT == mt)
  return false TRT_SPEC_TILES(TRT_SPEC_TILE_EQ);
#undef TRT_SPEC_TILE_EQ
}

// Every (rows_for[MT], MT) and (1, MT) drive() can ask for is instantiated.
constexpr bool policy_covered(const TilePolicy& p) {
  for (int mt = 1; mt <= (p.small_max > p.big_mt ? p.small_max : p.big_mt); ++mt)
    if (!tile_listed(p.rows_for[mt], mt) || !tile_listed(1, mt)) return false;
  return p.small_max <= 9 && p.big_mt <= 9;
}

template <template <int, int> class K, class Fn>
Fn tile_fn(int R, int MT) {
#define TRT_SPEC_TILE_FN(r, mt) \
  if (R == r && MT == mt) return &K<r, mt>::run;
  TRT_SPEC_TILES(TRT_SPEC_TILE_FN)
#undef TRT_SPEC_TILE_FN
  return nullptr;  // unreachable: see policy_covered()
}

// Where a tile keeps its accumulators between column blocks. `whole`: the tile covers all
// columns (nothing to keep). Else accumulator (i, j) of the tile (weight row i, activation row j)
// lives at at(i, j, width), width being the kernel's vector width in floats.
struct Spill {
  float* base;
  int64_t slot;  // the tile's (0, 0) accumulator
  int64_t ld;    // slots between weight rows
  bool whole;
  float* at(int i, int j, int width) const { return base + (slot + i * ld + j) * width; }
  Spill row(int64_t i) const { return Spill{base, slot + i * ld, ld, whole}; }  // from row i
};

// Calls tile(R, r, spill) for the row tiles of rows [r0, r1) of an m tile of MT rows: R =
// p.rows_for[MT] rows at a time, then single rows.
template <class Tile>
void for_row_tiles(const TilePolicy& p, int MT, int64_t r0, int64_t r1, const Spill& sp,
                   const Tile& tile) {
  const int R = p.rows_for[MT];
  int64_t r = r0;
  for (; r + R <= r1; r += R) tile(R, r, sp.row(r - r0));
  for (; r < r1; ++r) tile(1, r, sp.row(r - r0));
}

// Calls tile(MT, ra, rb, m, c0, c1, spill) over weight rows [r0, r1) (panels [ra, rb); spill.at(i,
// j, width) is row ra + i's), activation rows [0, M) and all columns, in the order described at
// the top of this file. kc: column block (a multiple of the kernel's column step, so column
// blocks end on whole steps); mb: activation rows per block.
template <class Tile>
void drive(const TilePolicy& p, int M, int64_t r0, int64_t r1, int64_t cols, int64_t kc, int mb,
           const Tile& tile) {
  alignas(64) float spill[kSpillFloats];
  mb = imax(1, imin(mb, kMaxBlockM));
  for (int mb0 = 0; mb0 < M; mb0 += mb) {
    const int bm = imin(mb, M - mb0);
    const int n_tiles = bm <= p.small_max ? 1 : (bm + p.big_mt - 1) / p.big_mt;
    for (int64_t rp0 = r0; rp0 < r1; rp0 += kPanelRows) {
      const int64_t rp1 = imin(r1, rp0 + kPanelRows);
      for (int64_t c0 = 0; c0 < cols; c0 += kc) {
        const int64_t c1 = imin(cols, c0 + kc);
        const bool whole = c0 == 0 && c1 == cols;
        int m = mb0;
        for (int t = 0; t < n_tiles; ++t) {
          const int MT = bm / n_tiles + (t < bm % n_tiles ? 1 : 0);
          tile(MT, rp0, rp1, m, c0, c1, Spill{spill, m - mb0, mb, whole});
          m += MT;
        }
      }
    }
  }
}
