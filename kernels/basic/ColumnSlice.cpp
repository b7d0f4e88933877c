//===- ColumnSlice.cpp - a column slice of rows, copied -------------------===//
#include "tessel/kernels/basic/Basic.h"

#include <fmt/format.h>

using namespace tessel;
using kernels::ColumnSliceConfig;

Program tessel::kernels::columnSlice(const ColumnSliceConfig &c) {
  if (c.blockCols <= 0 || c.blockRows <= 0)
    throw Error(fmt::format("column_slice: blocks of {} rows and {} columns", c.blockRows,
                            c.blockCols));
  Program p("column_slice");
  Expr rows = p.sym("rows"), pitch = p.sym("pitch"), first = p.sym("first"),
       cols = p.sym("cols");
  Tensor src = p.tensor("src", {rows, pitch}, c.dtype);
  Tensor dst = p.tensor("dst", {rows, cols}, c.dtype);
  // One block per [blockRows, blockCols] tile of the slice; `cols` is a
  // whole number of blocks (checked by the caller), rows need not be.
  p.kernel({ceil_div(rows, c.blockRows), ceil_div(cols, c.blockCols)}, c.threads,
           [&](Expr bx, Expr by) {
             Buffer tile = alloc_shared({c.blockRows, c.blockCols}, c.dtype, "tile");
             copy(src.tile({bx * c.blockRows, first + by * c.blockCols}, {c.blockRows, c.blockCols}),
                  tile);
             copy(tile, dst.tile({bx * c.blockRows, by * c.blockCols}, {c.blockRows, c.blockCols}));
           });
  return p;
}
