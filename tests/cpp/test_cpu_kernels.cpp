// test_cpu_kernels.cpp: standalone test driver for the CPU kernels (cpp/kernels/cpu).
//
// Checks, for every ISA this CPU runs: f16/bf16 conversions (exact), quantize/dequantize error
// bounds, quantize_acts against a scalar reference (bit-exact), and matmul_float / matmul_quant
// against double-precision references on the dequantized weights, over weight types, shapes,
// M and row sub-ranges (rows outside [r0, r1) must stay untouched), and that a row's output bits
// do not depend on M or on the other rows of the call; the SwiGLU activation against a double
// reference, with its bits independent of a value's column. Ends with "N passed, N failed".
//
// Build and run (from the repo root; the ISA files need their own flags, as in the cmake file):
//   g++ -std=c++17 -O3 -Icpp -c cpp/kernels/cpu/quantize.cpp cpp/kernels/cpu/matmul_dispatch.cpp
//   g++ -std=c++17 -O3 -Icpp -mavx2 -mfma -mf16c -c cpp/kernels/cpu/matmul_avx2.cpp \
//       cpp/kernels/cpu/activation.cpp
//   g++ -std=c++17 -O3 -Icpp -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mavx2
//       -mfma -mf16c -c cpp/kernels/cpu/matmul_avx512.cpp
//   g++ -std=c++17 -O2 -Icpp tests/cpp/test_cpu_kernels.cpp *.o -lpthread -o test_cpu_kernels
//   ./test_cpu_kernels
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/repack_lanes.h"

using namespace trt_spec;
using namespace trt_spec::cpu;

namespace {

int g_pass = 0, g_fail = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_pass;
  } else {
    ++g_fail;
    std::printf("FAIL %s\n", what.c_str());
  }
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 reference: the nearest of the two bf16 neighbours (ties to the even one), in double.
uint16_t bf16_ref(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t u = bits(f);
  const uint16_t t = static_cast<uint16_t>(u >> 16);  // truncation: towards zero
  if ((u & 0xffff) == 0) return t;
  const double lo = bf16_to_f32(t);
  const uint16_t up = static_cast<uint16_t>(t + 1);  // away from zero (may become inf)
  const double hi = (up & 0x7fff) == 0x7f80 ? std::ldexp(std::copysign(1.0, f), 128)
                                            : static_cast<double>(bf16_to_f32(up));
  const double dl = std::fabs(f - lo), dh = std::fabs(hi - f);
  if (dl < dh) return t;
  if (dh < dl) return up;
  return (t & 1) ? up : t;
}

void test_conversions() {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {  // every half: to float and back
    _Float16 hf;
    const uint16_t h16 = static_cast<uint16_t>(h);
    std::memcpy(&hf, &h16, 2);
    const float ref = static_cast<float>(hf), got = f16_to_f32(h16);
    if (std::isnan(ref) ? !std::isnan(got) : bits(ref) != bits(got)) ++bad;
    if (!std::isnan(ref) && f32_to_f16(got) != h16) ++bad;
  }
  check(bad == 0, "f16 <-> f32 over all 65536 halves: " + std::to_string(bad) + " bad");

  std::mt19937 rng(1);
  bad = 0;
  int bad_bf = 0;
  std::vector<uint32_t> cases = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                 0x477fefffu, 0x477ff000u, 0x477fe000u, 0x33000000u, 0x33000001u,
                                 0x337fffffu, 0x387fc000u, 0x387fe000u, 0x38800000u, 0x7f7fffffu,
                                 0x7f7f8000u, 0x7f7f7fffu, 0x00000001u, 0x3f808000u, 0x3f818000u};
  for (int i = 0; i < 2000000; ++i) cases.push_back(rng());
  for (int i = 0; i < 200000; ++i) {  // dense around the f16 range and its subnormals
    cases.push_back(0x33000000u + rng() % 0x15000000u);
  }
  for (uint32_t u : cases) {
    const float f = from_bits(u);
    const _Float16 hf = static_cast<_Float16>(f);
    uint16_t ref;
    std::memcpy(&ref, &hf, 2);
    const uint16_t got = f32_to_f16(f);
    if (std::isnan(f) ? (got & 0x7fff) <= 0x7c00 : got != ref) ++bad;
    const uint16_t bref = bf16_ref(f), bgot = f32_to_bf16(f);
    if (std::isnan(f) ? (bgot & 0x7fff) <= 0x7f80 : bgot != bref) ++bad_bf;
  }
  check(bad == 0, "f32_to_f16 RNE vs _Float16: " + std::to_string(bad) + " bad");
  // quantize_weight(F16) (vectorised fast path) and BF16 agree with the scalar conversions.
  std::vector<float> fc(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) fc[i] = from_bits(cases[i]);
  const int64_t n = static_cast<int64_t>(fc.size());
  for (WeightType t : {WeightType::F16, WeightType::BF16}) {
    std::vector<uint8_t> blob(weight_blob_bytes(t, 1, n));
    quantize_weight(fc.data(), 1, n, t, blob.data());
    const auto* h = reinterpret_cast<const uint16_t*>(blob.data());
    int bad_q = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t ref = t == WeightType::F16 ? f32_to_f16(fc[i]) : f32_to_bf16(fc[i]);
      bad_q += std::isnan(fc[i]) ? (h[i] & 0x7fff) <= (t == WeightType::F16 ? 0x7c00 : 0x7f80)
                                 : h[i] != ref;
    }
    check(bad_q == 0, std::string("quantize_weight ") + weight_type_name(t) +
                          " == scalar conversion: " + std::to_string(bad_q) + " bad");
  }
  check(bad_bf == 0, "f32_to_bf16 RNE vs reference: " + std::to_string(bad_bf) + " bad");
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> w(rows * cols);
  for (auto& v : w) v = nd(rng);
  if (rows * cols > 40) {  // a few outliers and a constant group, like real weights
    w[3] = 8 * scale;
    w[rows * cols / 2] = -10 * scale;
    if (cols >= 64 && rows >= 2)
      for (int i = 0; i < 32; ++i) w[cols + i] = 0.25f;
  }
  return w;
}

std::vector<uint8_t> quantize(const std::vector<float>& w, int64_t rows, int64_t cols,
                              WeightType t) {
  std::vector<uint8_t> blob(weight_blob_bytes(t, rows, cols) + 64);
  // 64-byte aligned start, as the runtime's mmap guarantees.
  const size_t off = (64 - reinterpret_cast<uintptr_t>(blob.data()) % 64) % 64;
  std::vector<uint8_t> aligned(blob.size());
  std::memset(blob.data(), 0xAB, blob.size());
  quantize_weight(w.data(), rows, cols, t, blob.data() + off);
  std::vector<uint8_t> out(blob.begin() + off,
                           blob.begin() + off + weight_blob_bytes(t, rows, cols));
  return out;
}

// Quantize/dequantize error bounds and the zeroed padding.
void test_quantize(WeightType t, int64_t rows, int64_t cols) {
  const std::string name =
      std::string(weight_type_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
  const auto w = random_matrix(rows, cols, 7, 0.02f);
  const auto blob = quantize(w, rows, cols, t);
  std::vector<float> deq(rows * cols);
  const WeightView v{t, rows, cols, blob.data()};
  dequantize_weight(v, deq.data());
  bool pad_ok = true;
  for (int s = 0; s < weight_section_count(t); ++s) {
    const size_t o = weight_section_offset(t, rows, cols, s),
                 n = weight_section_bytes(t, rows, cols, s);
    for (size_t i = o + n; i < align_up(o + n, kSectionAlign); ++i) pad_ok &= blob[i] == 0;
  }
  check(pad_ok, "padding zero " + name);
  int bad = 0;
  double err2 = 0, minmax_err2 = 0;
  const int64_t groups = cols / kQuantGroup;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = w[r * cols + c], y = deq[r * cols + c];
      const double e = std::fabs(static_cast<double>(x) - y);
      err2 += e * e;
      switch (t) {
        case WeightType::F32: bad += x != y; break;
        case WeightType::F16: bad += y != f16_to_f32(f32_to_f16(x)); break;
        case WeightType::BF16: bad += y != bf16_to_f32(f32_to_bf16(x)); break;
        case WeightType::Q8: {
          const float d =
              f16_to_f32(reinterpret_cast<const uint16_t*>(v.section(1))[r * groups + c / 32]);
          bad += e > d * 0.5 * (1 + 1e-3) + 1e-12;  // |w| <= 127 d up to the f16 rounding of d
          break;
        }
        case WeightType::Q4: {
          const float d =
              f16_to_f32(reinterpret_cast<const uint16_t*>(v.section(1))[r * groups + c / 32]);
          const float m =
              f16_to_f32(reinterpret_cast<const uint16_t*>(v.section(2))[r * groups + c / 32]);
          const bool inside = x >= m - d / 2 && x <= m + 15.5f * d;  // not clipped
          if (inside) bad += e > d * 0.5 * (1 + 1e-3) + 1e-6 * std::fabs(m) + 1e-12;
          break;
        }
      }
    }
  }
  check(bad == 0, "quantize error bound " + name + ": " + std::to_string(bad) + " bad");
  if (t == WeightType::Q4) {  // the search must beat plain min/max per tensor
    for (int64_t i = 0; i < rows * cols; i += 32) {
      float lo = w[i], hi = w[i];
      for (int j = 1; j < 32; ++j) lo = std::fmin(lo, w[i + j]), hi = std::fmax(hi, w[i + j]);
      const float d = f16_to_f32(f32_to_f16((hi - lo) / 15)), m = f16_to_f32(f32_to_f16(lo));
      for (int j = 0; j < 32; ++j) {
        const float code =
            d > 0 ? std::fmin(15.f, std::fmax(0.f, std::nearbyint((w[i + j] - m) / d))) : 0;
        const double e = d * code + m - w[i + j];
        minmax_err2 += e * e;
      }
    }
    std::printf("  q4 %s rms error %.4g (min/max: %.4g)\n", name.c_str(),
                std::sqrt(err2 / (rows * cols)), std::sqrt(minmax_err2 / (rows * cols)));
    check(err2 <= minmax_err2, "q4 search beats min/max " + name + ": rms " +
                                   std::to_string(std::sqrt(err2 / (rows * cols))) + " vs " +
                                   std::to_string(std::sqrt(minmax_err2 / (rows * cols))));
  }
}

// Scalar reference of quantize_acts (q in column order).
void ref_quant_acts(const float* x, int M, int cols, std::vector<int8_t>& q, std::vector<float>& d,
                    std::vector<float>& ds) {
  const int groups = cols / 32;
  q.assign(static_cast<size_t>(M) * cols, 0);
  d.assign(static_cast<size_t>(M) * groups, 0);
  ds.assign(static_cast<size_t>(M) * groups, 0);
  for (int m = 0; m < M; ++m)
    for (int g = 0; g < groups; ++g) {
      const float* p = x + static_cast<size_t>(m) * cols + g * 32;
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(p[i]));
      const float dd = amax / 127.0f, id = dd > 0 ? 1.0f / dd : 0.0f;
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int v = static_cast<int>(std::nearbyint(p[i] * id));
        q[static_cast<size_t>(m) * cols + g * 32 + i] = static_cast<int8_t>(v);
        sum += v;
      }
      d[m * groups + g] = dd;
      ds[m * groups + g] = dd * static_cast<float>(sum);
    }
}

struct Aligned {
  std::vector<uint8_t> buf;
  void* p;
  explicit Aligned(size_t n) : buf(n + 64) {
    p = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  }
};

void test_matmul(const MatmulKernels& k, WeightType t, int64_t rows, int64_t cols, int M,
                 int64_t r0, int64_t r1) {
  char name[160];
  std::snprintf(name, sizeof(name), "%s %s %lldx%lld M=%d rows[%lld,%lld)", k.isa,
                weight_type_name(t), static_cast<long long>(rows), static_cast<long long>(cols), M,
                static_cast<long long>(r0), static_cast<long long>(r1));
  const auto w = random_matrix(rows, cols, static_cast<uint32_t>(rows * 31 + cols), 0.05f);
  const auto blob = quantize(w, rows, cols, t);
  Aligned wb(blob.size());
  std::memcpy(wb.p, blob.data(), blob.size());
  const WeightView v{t, rows, cols, static_cast<const uint8_t*>(wb.p)};
  std::vector<float> deq(rows * cols);
  dequantize_weight(v, deq.data());
  auto x = random_matrix(M, cols, static_cast<uint32_t>(M * 7 + 3), 1.0f);
  const float kSentinel = -12345.0f;
  std::vector<float> y(static_cast<size_t>(M) * rows, kSentinel);
  const bool quant = weight_type_needs_groups(t);
  std::vector<float> xr = x;  // activations the kernel effectively multiplies
  std::vector<float> dx;      // per-group activation scale (quant only)
  if (quant) {
    Aligned qb(quant_acts_bytes(M, static_cast<int>(cols)));
    const QuantActs qa = quant_acts_view(qb.p, M, static_cast<int>(cols));
    std::vector<int8_t> rq;
    std::vector<float> rd, rds;
    ref_quant_acts(x.data(), M, static_cast<int>(cols), rq, rd, rds);
    k.quantize_acts(x.data(), 0, M, qa);
    const size_t ng = static_cast<size_t>(M) * cols / 32;
    check(std::memcmp(qa.q, rq.data(), rq.size()) == 0 &&
              std::memcmp(qa.d, rd.data(), ng * 4) == 0 &&
              std::memcmp(qa.ds, rds.data(), ng * 4) == 0,
          std::string("quantize_acts exact ") + name);
    for (size_t i = 0; i < xr.size(); ++i) xr[i] = rd[i / 32] * rq[i];
    dx = rd;
    k.matmul_quant(v, qa, M, y.data(), rows, r0, r1);
    // The CPU backend's repacked copy: the same bits; another ISA's: refused.
    for (CodeLayout layout : {CodeLayout::Rows8, CodeLayout::Rows16}) {
      if (lanes_apply(v, layout)) {
        Aligned pb(blob.size());
        repack_lanes(v, static_cast<uint8_t*>(pb.p), layout);
        WeightView pv = v;
        pv.data = static_cast<const uint8_t*>(pb.p);
        pv.layout = layout;
        std::vector<float> yp(y.size(), kSentinel);
        bool threw = false;
        try {
          k.matmul_quant(pv, qa, M, yp.data(), rows, r0, r1);
        } catch (const std::invalid_argument&) {
          threw = true;
        }
        if (layout == k.lanes)
          check(!threw && std::memcmp(yp.data(), y.data(), y.size() * 4) == 0,
                std::string("repacked weights give the same bits ") + name);
        else
          check(threw, std::string("another ISA's layout is refused ") + name);
      }
    }
  } else {
    k.matmul_float(v, x.data(), M, y.data(), rows, r0, r1);
  }
  int bad = 0, bad_loose = 0, touched = 0;
  for (int m = 0; m < M; ++m)
    for (int64_t r = 0; r < rows; ++r) {
      const float got = y[m * rows + r];
      if (r < r0 || r >= r1) {
        touched += got != kSentinel;
        continue;
      }
      double ref = 0, mag = 0, exact = 0, qbound = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double wv = deq[r * cols + c];
        ref += wv * xr[m * cols + c];
        exact += wv * x[m * cols + c];
        mag += std::fabs(wv) * std::fabs(xr[m * cols + c]);
        if (quant) qbound += std::fabs(wv) * dx[(m * cols + c) / 32] * 0.5;
      }
      if (t == WeightType::Q4) {  // the kernel sums d*code and m terms separately
        const auto* mo = reinterpret_cast<const uint16_t*>(v.section(2));
        for (int64_t c = 0; c < cols; ++c)
          mag +=
              std::fabs(f16_to_f32(mo[r * (cols / 32) + c / 32])) * std::fabs(xr[m * cols + c]) * 2;
      }
      if (!(std::fabs(got - ref) <= 2e-5 * mag + 1e-30)) {
        if (bad < 3)
          std::printf("  %s: y[%d,%lld] = %.8g, ref %.8g (mag %.3g)\n", name, m,
                      static_cast<long long>(r), got, ref, mag);
        ++bad;
      }
      if (quant && !(std::fabs(got - exact) <= qbound * 1.001 + 2e-5 * mag + 1e-30)) ++bad_loose;
    }
  check(bad == 0 && touched == 0, std::string("matmul ") + name + " (" + std::to_string(bad) +
                                      " bad, " + std::to_string(touched) + " touched outside)");
  if (quant) check(bad_loose == 0, std::string("matmul vs exact acts ") + name);
}

// A row's output bits do not depend on M or on the other rows of the call (any M: the kernels
// block columns and activation rows, exactly): rows computed one at a time == the same rows inside
// calls of M rows, in order and reversed.
void test_rows_bit_identical(const MatmulKernels& k, WeightType t) {
  const int64_t rows = 75, cols = 4864;
  const int max_m = 200;
  const auto w = random_matrix(rows, cols, 11, 0.05f);
  const auto blob = quantize(w, rows, cols, t);
  Aligned wb(blob.size());
  std::memcpy(wb.p, blob.data(), blob.size());
  const WeightView v{t, rows, cols, static_cast<const uint8_t*>(wb.p)};
  const auto x = random_matrix(max_m, cols, 12, 1.0f);
  auto run = [&](const float* xs, int M) {
    std::vector<float> y(static_cast<size_t>(M) * rows);
    if (weight_type_needs_groups(t)) {
      Aligned qb(quant_acts_bytes(M, static_cast<int>(cols)));
      const QuantActs qa = quant_acts_view(qb.p, M, static_cast<int>(cols));
      k.quantize_acts(xs, 0, M, qa);
      k.matmul_quant(v, qa, M, y.data(), rows, 0, rows);
    } else {
      k.matmul_float(v, xs, M, y.data(), rows, 0, rows);
    }
    return y;
  };
  std::vector<float> single(static_cast<size_t>(max_m) * rows);
  for (int m = 0; m < max_m; ++m) {
    const auto y = run(x.data() + m * cols, 1);
    std::memcpy(single.data() + m * rows, y.data(), rows * sizeof(float));
  }
  std::vector<float> rev(x.size());
  for (int m = 0; m < max_m; ++m)
    std::memcpy(rev.data() + m * cols, x.data() + (max_m - 1 - m) * cols, cols * sizeof(float));
  for (int M : {2, 5, 9, 16, 64, 65, 128, 200}) {
    const auto y = run(x.data(), M);
    const auto yr = run(rev.data() + (max_m - M) * cols, M);  // rows M-1 .. 0
    bool same = std::memcmp(y.data(), single.data(), y.size() * sizeof(float)) == 0;
    for (int m = 0; m < M; ++m)
      same = same && std::memcmp(yr.data() + (M - 1 - m) * rows, single.data() + m * rows,
                                 rows * sizeof(float)) == 0;
    check(same, std::string("bit-identical rows ") + k.isa + " " + weight_type_name(t) +
                    " M=" + std::to_string(M));
  }
}

// swiglu_rows against silu(g) * u in double, over ordinary values, the exp clamps (|g| near and
// past 88) and widths with a partial last vector; a value's bits do not depend on its column.
void test_swiglu() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int ffn : {8, 13, 64, 8960 + 3}) {
    const int rows = 3;
    std::vector<float> gu(static_cast<size_t>(rows) * 2 * ffn),
        out(static_cast<size_t>(rows) * ffn);
    for (float& v : gu) v = nd(rng);
    const float special[] = {0.0f, -0.0f, 1e-30f, -87.0f, -88.5f, -100.0f, 87.0f, 89.0f, 100.0f};
    for (int i = 0; i < 9 && i < ffn; ++i) gu[i] = special[i];
    swiglu_rows(gu.data(), 0, rows, ffn, out.data());
    int bad = 0;
    for (int i = 0; i < rows; ++i)
      for (int c = 0; c < ffn; ++c) {
        const double g = gu[static_cast<size_t>(i) * 2 * ffn + c];
        const double u = gu[static_cast<size_t>(i) * 2 * ffn + ffn + c];
        const double want = g / (1.0 + std::exp(-g)) * u;
        const double got = out[static_cast<size_t>(i) * ffn + c];
        if (!(std::fabs(got - want) <= 2e-6 * std::fabs(want) + 1e-30)) ++bad;
      }
    check(bad == 0,
          "swiglu vs double, ffn " + std::to_string(ffn) + ": " + std::to_string(bad) + " bad");
    // Row 1 shifted by one column (gate and up): every value lands in another lane.
    std::vector<float> shifted(2 * static_cast<size_t>(ffn + 1)), so(ffn + 1);
    const float* g1 = gu.data() + 2 * ffn;
    shifted[0] = 0.5f;
    shifted[ffn + 1] = 0.5f;
    std::memcpy(shifted.data() + 1, g1, ffn * 4);
    std::memcpy(shifted.data() + ffn + 2, g1 + ffn, ffn * 4);
    swiglu_rows(shifted.data(), 0, 1, ffn + 1, so.data());
    check(std::memcmp(so.data() + 1, out.data() + ffn, ffn * 4) == 0,
          "swiglu bits independent of the column, ffn " + std::to_string(ffn));
  }
}

// matmul_kernels(): TRT_SPEC_CPU_ISA forces a table, an unknown or unsupported one throws (the
// choice is cached only once it succeeds).
void test_dispatch() {
  const auto isas = supported_isas();
  check(!isas.empty() && isas[0] == "avx2", "supported_isas starts with avx2");
  check(matmul_kernels_for("sse9") == nullptr, "unknown isa -> nullptr");
  for (const std::string& isa : {std::string("avx2"), std::string("avx512")}) {
    const MatmulKernels* k = matmul_kernels_for(isa.c_str());
    const bool listed = std::find(isas.begin(), isas.end(), isa) != isas.end();
    check((k != nullptr) == listed && (k == nullptr || isa == k->isa), "matmul_kernels_for " + isa);
  }
  setenv("TRT_SPEC_CPU_ISA", "bogus", 1);
  bool threw = false;
  try {
    matmul_kernels();
  } catch (const std::runtime_error&) {
    threw = true;
  }
  check(threw, "TRT_SPEC_CPU_ISA=bogus throws");
  setenv("TRT_SPEC_CPU_ISA", "avx2", 1);
  check(std::string(matmul_kernels().isa) == "avx2", "TRT_SPEC_CPU_ISA=avx2 picks avx2");
  unsetenv("TRT_SPEC_CPU_ISA");
}

}  // namespace

int main() {
  test_dispatch();
  test_swiglu();
  test_conversions();
  const WeightType types[] = {WeightType::F32, WeightType::F16, WeightType::BF16, WeightType::Q8,
                              WeightType::Q4};
  for (WeightType t : types) {
    test_quantize(t, 3, 64);
    test_quantize(t, 40, 896);
    test_quantize(t, 9, 4864);
  }
  struct Shape {
    int64_t rows, cols;
  };
  // cols: 64-column tails (64, 192, 320, 448), whole 128-column chunks, column blocks (4864);
  // rows: partial and whole blocks of 16 (the AVX-512 tile's Rows16 layout needs whole ones)
  const Shape shapes[] = {{1, 64},   {7, 64},    {3, 192},    {9, 320},   {6, 384},
                          {5, 448},  {33, 896},  {130, 1536}, {17, 4864}, {16, 64},
                          {32, 896}, {48, 1536}, {32, 4864}};
  const Shape float_only[] = {{5, 100}, {3, 7}, {9, 33}};
  const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 33};
  for (const std::string& isa : supported_isas()) {
    const MatmulKernels* k = matmul_kernels_for(isa.c_str());
    std::printf("isa %s\n", isa.c_str());
    for (WeightType t : types) {
      for (const Shape& s : shapes)
        for (int M : Ms) {
          test_matmul(*k, t, s.rows, s.cols, M, 0, s.rows);
          if (s.rows > 3) test_matmul(*k, t, s.rows, s.cols, M, 1, s.rows - 2);
        }
      test_matmul(*k, t, 5, 4864, 100, 0, 5);  // M > 9 with several column blocks
      test_matmul(*k, t, 6, 1536, 77, 1, 6);
      test_matmul(*k, t, 40, 8960, 70, 3, 37);  // column blocks, activation-row blocks
      test_matmul(*k, t, 48, 8960, 30, 5, 43);  // the same over whole blocks of 16 rows
      test_rows_bit_identical(*k, t);
      if (!weight_type_needs_groups(t))
        for (const Shape& s : float_only)
          for (int M : {1, 3, 5, 9, 12}) test_matmul(*k, t, s.rows, s.cols, M, 0, s.rows);
    }
  }
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
