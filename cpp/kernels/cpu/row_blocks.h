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
// through matmul_quant_impl.h), after <cstdint>, <cstring> and kernels/weight_format.h; its
// functions are static, so the translation units built with different -m flags never share a copy.
#pragma once

// Rows per block of a row-block layout (0: not one).
static inline int row_block_rows(CodeLayout layout) {
  return layout == CodeLayout::Rows8 ? 8 : (layout == CodeLayout::Rows16 ? 16 : 0);
}

// The natural layout (weight_format.h): one byte per column for Q8; for Q4 the codes of group
// g = c / 32 sit in the 32 bytes of super-block g / 2, in the low nibbles for even g (column c's
// at byte 32 (g / 2) + c % 32).

// Bytes of one row's codes in the natural layout.
static constexpr int64_t natural_row_bytes(WeightType t, int64_t cols) {
  return t == WeightType::Q4 ? cols / 2 : cols;
}

// Bytes of one block's codes of one group, for blocks of R rows.
static constexpr int row_block_group_bytes(WeightType t, int R) {
  return t == WeightType::Q4 ? 16 * R : 32 * R;
}

// The 4 bytes at p as one word (memcpy: unaligned, and the same bytes on store).
static inline uint32_t row_block_load_word(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// out [row_block_group_bytes(t, R)] = group g of the R natural rows row[0..R-1] in the row-block
// order; a null row (past the matrix's end) has codes 0. Whole 4-code words at a time: Q8 word k
// of a row is its bytes 32g + 4k .. + 3; Q4 words 2j and 2j + 1 are the nibbles (low for even g)
// of its bytes 32 (g / 2) + 8j .. + 3 and + 4 .. + 7, packed low and high.
static inline void row_block_pack_group(WeightType t, int R, const uint8_t* const* row, int64_t g,
                                        uint8_t* out) {
  for (int i = 0; i < R; ++i) {
    if (t == WeightType::Q8) {
      for (int k = 0; k < 8; ++k) {
        const uint32_t v = row[i] ? row_block_load_word(row[i] + 32 * g + 4 * k) : 0;
        std::memcpy(out + (k * R + i) * 4, &v, 4);
      }
    } else {
      const int shift = g % 2 == 0 ? 0 : 4;
      for (int j = 0; j < 4; ++j) {
        uint32_t v = 0;
        if (row[i]) {
          const uint8_t* p = row[i] + (g / 2) * 32 + 8 * j;
          const uint32_t lo = (row_block_load_word(p) >> shift) & 0x0f0f0f0fu;
          const uint32_t hi = (row_block_load_word(p + 4) >> shift) & 0x0f0f0f0fu;
          v = lo | (hi << 4);
        }
        std::memcpy(out + (j * R + i) * 4, &v, 4);
      }
    }
  }
}
