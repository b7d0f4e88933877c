//===- Quantize.cpp - FP8 quantisation per row or per 1x128 block ---------===//
//
// One pass over x: each thread block copies its rows into registers (16
// bytes a thread per access), reduces |x| per group, multiplies by the
// group's reciprocal scale, converts to FP8 and stores q and the scales.
// The arithmetic is spelled out in Basic.h, where host references read it.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/basic/Basic.h"
#include "tessel/runtime/LowPrecision.h"

#include <cmath>

using namespace tessel;

double tessel::kernels::fp8Max(DType t) {
  if (t == DType::f8e4m3) return rt::kE4M3Max;
  if (t == DType::f8e5m2) return rt::kE5M2Max;
  throw Error(std::string("quantize: ") + name(t) + " is not an FP8 type (use f8e4m3 or f8e5m2)");
}

Program tessel::kernels::quantize(const QuantizeConfig &c) {
  const double fmax = fp8Max(c.out);
  // The amax floor: FP8_MAX * 2^-126, so that the scale is never below the
  // smallest normal float. Exact in f32 (448 and 57344 are 7 * 2^k).
  const double floor = std::ldexp(fmax, -126);
  const bool blocks = c.granularity == QuantizeGranularity::block;
  if (blocks && c.cols % kQuantizeBlock)
    throw Error("quantize: cols=" + std::to_string(c.cols) +
                " is not a multiple of 128, the block granularity's width");
  const int64_t groups = c.cols / kQuantizeBlock;
  if (c.kMajorScales && !blocks)
    throw Error("quantize: k_major_scales lays out block scales; a row's scale is one number");
  Program p("quantize");
  Expr m = p.sym("M");
  // At block granularity each row is [cols / 128, 128]: the tile then has
  // a dimension per block to reduce along.
  std::vector<Expr> shape = blocks ? std::vector<Expr>{m, groups, kQuantizeBlock}
                                   : std::vector<Expr>{m, c.cols};
  std::vector<int64_t> tileShape = blocks ? std::vector<int64_t>{c.rows, groups, kQuantizeBlock}
                                          : std::vector<int64_t>{c.rows, c.cols};
  Tensor x = p.tensor("x", shape, c.dtype);
  Tensor q = p.tensor("q", shape, c.out);
  Tensor scale = !blocks         ? p.tensor("scale", {m}, DType::f32)
                 : c.kMajorScales ? p.tensor("scale", {Expr(groups), m}, DType::f32)
                                  : p.tensor("scale", {m, groups}, DType::f32);
  p.kernel({ceil_div(m, c.rows)}, c.threads, [&](Expr bx) {
    std::vector<Expr> at = blocks ? std::vector<Expr>{bx * c.rows, 0, 0}
                                  : std::vector<Expr>{bx * c.rows, 0};
    std::vector<int64_t> scaleShape = blocks ? std::vector<int64_t>{c.rows, groups}
                                             : std::vector<int64_t>{c.rows};
    std::vector<Expr> scaleAt = blocks ? std::vector<Expr>{bx * c.rows, 0}
                                       : std::vector<Expr>{bx * c.rows};
    Buffer tile = alloc_fragment(tileShape, DType::f32, "tile");
    Buffer codes = alloc_fragment(tileShape, c.out, "codes");
    Buffer amax = alloc_fragment(scaleShape, DType::f32, "amax");
    Buffer inverse = alloc_fragment(scaleShape, DType::f32, "inverse");
    // Rows past M read as zeros (their scale is the floor's) and are not
    // stored.
    copy(x.tile(at, tileShape), tile);
    reduce_absmax(tile, amax, static_cast<int>(tileShape.size()) - 1);
    parallel(scaleShape, [&](std::vector<Expr> g) {
      Expr floored = max(amax.at(g), Expr(floor));
      inverse.at(g) = Expr(fmax) / floored;
      amax.at(g) = floored / Expr(fmax); // the scale
    });
    // One multiplication an element: an IEEE division is a dozen
    // instructions and a slow path, in a kernel that has few to spare per
    // byte moved.
    parallel(tileShape, [&](std::vector<Expr> e) {
      std::vector<Expr> g(e.begin(), e.end() - 1);
      codes.at(e) = cast(tile.at(e) * inverse.at(g), c.out);
    });
    copy(codes, q.tile(at, tileShape));
    if (!c.kMajorScales) {
      copy(amax, scale.tile(scaleAt, scaleShape));
      return;
    }
    // Transposed through element code: rows past M fall outside the window.
    Buffer column = scale.tile({0, bx * c.rows}, {groups, c.rows});
    parallel(scaleShape, [&](std::vector<Expr> g) { column(g[1], g[0]) = amax.at(g); });
  });
  return p;
}
