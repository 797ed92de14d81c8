// row_blocks.h: the row-block layouts of Q8 / Q4 weights that the CPU matmul tiles read
// (CodeLayout::Rows8 for AVX2, Rows16 for AVX-512; matmul_quant_impl.h), defined once:
// repack_lanes.cpp packs whole matrices with it when the CPU backend loads an engine, and the tiles
// pack one block's group with it when they are handed codes in the natural layout (so both give
// the same bits).
//
// Rows come in blocks of R (8 or 16; block b: rows Rb .. Rb + R - 1). For block b and group g
// (columns 32g .. 32g + 31), with word k of a row's group = its codes at columns 32g + 4k .. + 3:
//   V_k = [row Rb_k, row Rb+1_k, ..., row Rb+R-1_k]        R words (4R bytes), k = 0..7
//   Q8: V_0 .. V_7 in order (32R bytes; the codes as stored, q = w + 128);
//   Q4: 4 vectors, vector j = V_2j in the low nibbles and V_2j+1 in the high ones (16R bytes).
// So one integer dot of V_k with word k of an activation row broadcast to every lane adds 4
// columns to R rows' dots: lane i belongs to row Rb + i, and no lane ever mixes rows or groups.
// A block's groups follow each other (R row_bytes in all, where its rows sit in the natural
// layout). Scales (section 1) and Q4 offsets (section 2): row Rb + i's value for group g at index
// (b * groups + g) * R + i, the same bytes as [rows, groups] in the natural layout.
//
// A part header: included inside a namespace (repack_lanes.cpp's anonymous one, each ISA unit's
// through matmul_quant_impl.h), after <cstdint> and kernels/weight_format.h; its functions are
// static, so the translation units built with different -m flags never share a copy.
#pragma once

// Rows per block of a row-block layout (0: not one).
static inline int row_block_rows(CodeLayout layout) {
  return layout == CodeLayout::Rows8 ? 8 : (layout == CodeLayout::Rows16 ? 16 : 0);
}

// Code of column c of a natural row (one byte per column; Q4: group g = c / 32 sits in super-block
// g / 2, low nibbles for even g).
static inline uint8_t natural_code(WeightType t, const uint8_t* row, int64_t c) {
  if (t == WeightType::Q8) return row[c];
  const int64_t g = c / 32;
  const uint8_t b = row[(g / 2) * 32 + c % 32];
  return g % 2 == 0 ? (b & 0x0f) : (b >> 4);
}

// Bytes of one row's codes in the natural layout.
static constexpr int64_t natural_row_bytes(WeightType t, int64_t cols) {
  return t == WeightType::Q4 ? cols / 2 : cols;
}

// Bytes of one block's codes of one group, for blocks of R rows.
static constexpr int row_block_group_bytes(WeightType t, int R) {
  return t == WeightType::Q4 ? 16 * R : 32 * R;
}

// out [row_block_group_bytes(t, R)] = group g of the R natural rows row[0..R-1] in the row-block
// order; a null row (past the matrix's end) has codes 0.
static inline void row_block_pack_group(WeightType t, int R, const uint8_t* const* row, int64_t g,
                                        uint8_t* out) {
  for (int k = 0; k < 8; ++k)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < 4; ++j) {
        const uint8_t code = row[i] ? natural_code(t, row[i], 32 * g + 4 * k + j) : 0;
        if (t == WeightType::Q8) {
          out[(k * R + i) * 4 + j] = code;
        } else {
          uint8_t& o = out[((k / 2) * R + i) * 4 + j];
          o = k % 2 == 0 ? code : static_cast<uint8_t>(o | (code << 4));
        }
      }
}
