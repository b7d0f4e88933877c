//===- Quantize.cpp - FP8 quantisation per row, 1x128 block or MX block ---===//
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
#include <fmt/format.h>

using namespace tessel;

double tessel::kernels::fp8Max(DType t) {
  if (t == DType::f8e4m3) return rt::kE4M3Max;
  if (t == DType::f8e5m2) return rt::kE5M2Max;
  throw Error(std::string("quantize: ") + name(t) + " is not an FP8 type (use f8e4m3 or f8e5m2)");
}

int64_t tessel::kernels::quantizeGroupWidth(QuantizeGranularity granularity) {
  return granularity == QuantizeGranularity::mx ? kMxBlock : kQuantizeBlock;
}

namespace {
/// Row r's scale of group g in cuBLAS's blocked MX layout, [ceil(M / 128),
/// ceil(cols / 128), 32, 16]: 128-row x 4-group atoms of 512 bytes, each
/// row's four scales together, the four 32-row quarters side by side.
void storeBlockedScale(const Buffer &scales, Expr r, Expr g, Expr value) {
  scales(r / 128, g / 4, r % 32, (r % 128) / 32 * 4 + g % 4) = value;
}

/// The MX scales of a tile's groups (amax in, ue8m0 codes out) and the
/// reciprocals the elements are multiplied by: exact, since each scale is
/// a power of two.
void mxScales(const Buffer &amax, const Buffer &codes, const Buffer &inverse, double fmax) {
  parallel(amax.shape(), [&](std::vector<Expr> g) {
    Expr code = cast(amax.at(g) / Expr(fmax), DType::ue8m0);
    codes.at(g) = code;
    inverse.at(g) = Expr(1.0) / cast(code, DType::f32);
  });
}
} // namespace

Program tessel::kernels::quantize(const QuantizeConfig &c) {
  const double fmax = fp8Max(c.out);
  // The amax floor: FP8_MAX * 2^-126, so that the scale is never below the
  // smallest normal float. Exact in f32 (448 and 57344 are 7 * 2^k).
  const double floor = std::ldexp(fmax, -126);
  const bool mx = c.granularity == QuantizeGranularity::mx;
  const bool grouped = c.granularity != QuantizeGranularity::row;
  const int64_t width = quantizeGroupWidth(c.granularity);
  if (grouped && c.cols % width)
    throw Error(fmt::format("quantize: cols={} is not a multiple of {}, the {} granularity's width",
                            c.cols, width, mx ? "mx" : "block"));
  if (c.kMajorScales && c.granularity != QuantizeGranularity::block)
    throw Error("quantize: k_major_scales lays out 1x128 block scales (granularity=block)");
  if (c.blockedScales && !mx)
    throw Error("quantize: blocked_scales lays out MX scales (granularity=mx)");
  const int64_t groups = c.cols / width;
  Program p("quantize");
  Expr m = p.sym("M");
  // At a grouped granularity each row is [cols / width, width]: the tile
  // then has a dimension per group to reduce along.
  std::vector<Expr> shape =
      grouped ? std::vector<Expr>{m, groups, width} : std::vector<Expr>{m, c.cols};
  std::vector<int64_t> tileShape = grouped ? std::vector<int64_t>{c.rows, groups, width}
                                           : std::vector<int64_t>{c.rows, c.cols};
  Tensor x = p.tensor("x", shape, c.dtype);
  Tensor q = p.tensor("q", shape, c.out);
  DType scaleType = mx ? DType::ue8m0 : DType::f32;
  Tensor scale = !grouped         ? p.tensor("scale", {m}, scaleType)
                 : c.blockedScales ? p.tensor("scale",
                                              {ceil_div(m, 128), Expr((groups + 3) / 4), 32, 16},
                                              scaleType)
                 : c.kMajorScales ? p.tensor("scale", {Expr(groups), m}, scaleType)
                                  : p.tensor("scale", {m, groups}, scaleType);
  p.kernel({ceil_div(m, c.rows)}, c.threads, [&](Expr bx) {
    std::vector<Expr> at = grouped ? std::vector<Expr>{bx * c.rows, 0, 0}
                                   : std::vector<Expr>{bx * c.rows, 0};
    std::vector<int64_t> scaleShape = grouped ? std::vector<int64_t>{c.rows, groups}
                                              : std::vector<int64_t>{c.rows};
    std::vector<Expr> scaleAt = grouped ? std::vector<Expr>{bx * c.rows, 0}
                                        : std::vector<Expr>{bx * c.rows};
    Buffer tile = alloc_fragment(tileShape, DType::f32, "tile");
    Buffer codes = alloc_fragment(tileShape, c.out, "codes");
    Buffer amax = alloc_fragment(scaleShape, DType::f32, "amax");
    Buffer inverse = alloc_fragment(scaleShape, DType::f32, "inverse");
    // Rows past M read as zeros (their scale is the floor's) and are not
    // stored.
    copy(x.tile(at, tileShape), tile);
    reduce_absmax(tile, amax, static_cast<int>(tileShape.size()) - 1);
    Buffer scales = amax; // what is stored: amax becomes the scale
    if (mx) {
      scales = alloc_fragment(scaleShape, DType::ue8m0, "scale_codes");
      mxScales(amax, scales, inverse, fmax);
    } else {
      parallel(scaleShape, [&](std::vector<Expr> g) {
        Expr floored = max(amax.at(g), Expr(floor));
        inverse.at(g) = Expr(fmax) / floored;
        amax.at(g) = floored / Expr(fmax); // the scale
      });
    }
    // One multiplication an element: an IEEE division is a dozen
    // instructions and a slow path, in a kernel that has few to spare per
    // byte moved.
    parallel(tileShape, [&](std::vector<Expr> e) {
      std::vector<Expr> g(e.begin(), e.end() - 1);
      codes.at(e) = cast(tile.at(e) * inverse.at(g), c.out);
    });
    copy(codes, q.tile(at, tileShape));
    if (c.blockedScales) {
      // Rows past M are not stored: a block of more than 128 rows may reach
      // past the last atom.
      parallel(scaleShape, [&](std::vector<Expr> g) {
        Expr r = bx * c.rows + g[0];
        if_(r < m, [&] { storeBlockedScale(scale, r, g[1], scales.at(g)); });
      });
      return;
    }
    if (!c.kMajorScales) {
      copy(scales, scale.tile(scaleAt, scaleShape));
      return;
    }
    // Transposed through element code: rows past M fall outside the window.
    Buffer column = scale.tile({0, bx * c.rows}, {groups, c.rows});
    parallel(scaleShape, [&](std::vector<Expr> g) { column(g[1], g[0]) = scales.at(g); });
  });
  return p;
}
